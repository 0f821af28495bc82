"""Benchmark: usage rows joined per second.

    python scripts/bench_join.py [--machines 200 --days 7] [--trace DIR] [--quick]

1. Generates a synthetic Google v3 trace (timed: the generator's own goal is one week of 200
   machines in under two minutes) unless --trace names an existing one.
2. Parses it into Arrow tables (not timed) and times the as-of join of every usage window
   (pipelines.sources.google_v3.join_usage: factorize + sort + binary search) on the whole input.
3. Times the brute-force quadratic join (fleetcast_testing/reference/join.py: every window scans
   every event) and the fast join on the same sample of instances, and prints the ratio.
4. Times the whole Beam pipeline (read, parse, shard, build instances, join, write Parquet)
   on the DirectRunner.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from apache_beam.io.filesystems import FileSystems  # noqa: E402

import synthetic
from fleetcast_testing.reference import join as reference  # noqa: E402
from pipelines.io.readers import (  # noqa: E402
    BLOCK_BYTES,
    CHUNK_ROWS,
    iter_lines,
    json_chunks,
)
from pipelines.sources import google_v3, join  # noqa: E402


def parse_table(trace_dir: str, table: str, parser) -> pa.Table:
    tables = []
    for match in FileSystems.match([os.path.join(trace_dir, table, "*")])[0].metadata_list:
        with FileSystems.open(match.path) as handle:
            for chunk in json_chunks(iter_lines(iter(lambda: handle.read(BLOCK_BYTES), b"")),
                                     CHUNK_ROWS):
                parsed, _ = parser.parse(chunk)
                tables.append(parsed)
    return pa.concat_tables(tables)


def sample_instances(events: pa.Table, usage: pa.Table, num_instances: int, seed: int = 0):
    """The events and windows of `num_instances` random instances that have windows."""
    keys = np.unique(np.stack([usage.column("collection_id").to_numpy(),
                               usage.column("instance_index").to_numpy()], axis=1), axis=0)
    rng = np.random.default_rng(seed)
    chosen = keys[rng.choice(len(keys), size=min(num_instances, len(keys)), replace=False)]
    chosen_set = {tuple(k) for k in chosen.tolist()}

    def rows_of(table):
        pairs = zip(table.column("collection_id").to_pylist(),
                    table.column("instance_index").to_pylist())
        return table.take(pa.array([i for i, p in enumerate(pairs) if p in chosen_set]))

    return rows_of(events), rows_of(usage)


def brute_force_join(events: pa.Table, usage: pa.Table) -> np.ndarray:
    """The quadratic reference on the same inputs join_usage sees (valid requests only)."""
    ev = {n: events.column(n).to_numpy(zero_copy_only=False) for n in (
        "time", "type", "collection_id", "instance_index", "cpus", "memory")}
    valid = np.flatnonzero((np.nan_to_num(ev["cpus"]) > 0) & (np.nan_to_num(ev["memory"]) > 0))
    code, _ = join.factorize(
        np.concatenate([ev["collection_id"], usage.column("collection_id").to_numpy()]),
        np.concatenate([ev["instance_index"], usage.column("instance_index").to_numpy()]))
    n_events = len(ev["time"])
    return reference.latest_at_or_before(
        code[:n_events][valid], ev["time"][valid], code[n_events:],
        usage.column("start_time").to_numpy(),
        (ev["type"][valid], ev["cpus"][valid], ev["memory"][valid]))


def timed(function, *args, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        result = function(*args)
        best = min(best, time.perf_counter() - started)
    return best, result


def run_beam(trace_dir: str, out_dir: str) -> float:
    from pipelines import config as run_config
    from pipelines import run as run_pipeline
    tables = "\n".join(f'  {t} {{ path: "{trace_dir}/{t}/*" }}'
                       for t in ("instance_events", "instance_usage", "machine_events",
                                 "collection_events"))
    config = run_config.parse_config(f"google_v3 {{\n{tables}\n}}")
    started = time.perf_counter()
    run_pipeline.run(config, out_dir, ["--runner=DirectRunner"])
    return time.perf_counter() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=200)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--trace", help="an existing synthetic trace directory")
    parser.add_argument("--sample_instances", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="20 machines × 1 day, no Beam run")
    args = parser.parse_args(argv)
    if args.quick:
        args.machines, args.days = 20, 1.0

    with tempfile.TemporaryDirectory(prefix="fleetcast-bench-join-") as tmp:
        trace_dir = args.trace or os.path.join(tmp, "trace")
        if not args.trace:
            started = time.perf_counter()
            synthetic.generate(trace_dir, machines=args.machines, days=args.days, seed=0)
            print(f"synthetic trace, {args.machines} machines × {args.days:g} days: "
                  f"{time.perf_counter() - started:.1f} s")
        events = parse_table(trace_dir, "instance_events", google_v3.InstanceEventParser())
        usage = parse_table(trace_dir, "instance_usage", google_v3.InstanceUsageParser())
        print(f"input: {usage.num_rows:,} usage windows, {events.num_rows:,} instance events")

        seconds, (joined, dead) = timed(google_v3.join_usage, events, usage)
        print(f"fast join, whole input: {usage.num_rows / seconds:,.0f} usage rows/s "
              f"({seconds:.2f} s; {joined.num_rows:,} joined, {dead.num_rows:,} dead letters)")

        sample_events, sample_usage = sample_instances(events, usage, args.sample_instances)
        fast_s, (sample_joined, _) = timed(google_v3.join_usage, sample_events, sample_usage)
        slow_s, slow = timed(brute_force_join, sample_events, sample_usage, repeat=1)
        assert int((slow >= 0).sum()) == sample_joined.num_rows, "fast and brute force differ"
        print(f"sample of {args.sample_instances} instances ({sample_usage.num_rows:,} windows, "
              f"{sample_events.num_rows:,} events): fast {sample_usage.num_rows / fast_s:,.0f} "
              f"rows/s, brute force {sample_usage.num_rows / slow_s:,.0f} rows/s, "
              f"ratio {slow_s / fast_s:,.0f}x")

        if not args.quick:
            beam_s = run_beam(trace_dir, os.path.join(tmp, "out"))
            print(f"Beam DirectRunner end to end (parse JSON, build instances, join, write "
                  f"Parquet): {usage.num_rows / beam_s:,.0f} usage rows/s ({beam_s:.1f} s)")


if __name__ == "__main__":
    main()
