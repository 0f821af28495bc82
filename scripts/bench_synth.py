"""Benchmark of the synthetic Google cluster trace v3 generator (the synthetic/ package).

Generates a trace (default: 200 machines x 7 days, JSON) into a temporary directory on
--processes processes and prints the wall time, rows/s and instance_usage windows/s (wall,
and per CPU-second of all processes: the rate on a quiet machine). Then encodes the same
instance_usage rows (the first --sample-rows of the trace) two ways and prints both rates
and their ratio: the generator's compiled encoder, and a simple reference that builds one
dict per row and calls json.dumps on it.

    python scripts/bench_synth.py [--machines 200] [--days 7] [--file-format json]
        [--processes 2] [--request-scale 1]
"""

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import synthetic  # noqa: E402


def reference_json_lines(columns: list[synthetic.Column], n_rows: int) -> bytes:
    """JSON lines the simple way: a nested dict per row, json.dumps per row."""
    values = [c.values.tolist() if c.values is not None else None for c in columns]
    lines = []
    for i in range(n_rows):
        row = {}
        for column, column_values in zip(columns, values):
            record, _, field = column.name.rpartition(".")
            target = row.setdefault(record, {}) if record else row
            if column.kind == "null":
                target[field] = None
            elif column.kind in ("empty_int_list", "empty_constraint_list"):
                target[field] = []
            elif column.kind == "optional_int":
                target[field] = column_values[i] if column_values[i] >= 0 else None
            else:
                target[field] = column_values[i]
        lines.append(json.dumps(row, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode()


def cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children."""
    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def rate(n_rows: int, seconds: float) -> str:
    return f"{n_rows / seconds:,.0f} rows/s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=200)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--file-format", choices=sorted(synthetic.FILE_SUFFIXES), default="json")
    parser.add_argument("--sample-rows", type=int, default=50_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--request-scale", type=float, default=1.0)
    args = parser.parse_args()

    out_dir = tempfile.mkdtemp(prefix="bench_synth_")
    try:
        clock, cpu = time.perf_counter(), cpu_seconds()
        summary = synthetic.generate(out_dir, machines=args.machines, days=args.days,
                                     seed=args.seed, file_format=args.file_format,
                                     request_scale=args.request_scale,
                                     processes=args.processes)
        wall_s, cpu_s = time.perf_counter() - clock, cpu_seconds() - cpu
        total_rows = sum(summary["rows"].values())
        size_mb = sum(p.stat().st_size for p in Path(out_dir).rglob("*") if p.is_file()) / 1e6
    finally:
        shutil.rmtree(out_dir)
    print(f"generate {args.machines} machines x {args.days:g} days ({args.file_format}): "
          f"{total_rows:,} rows, {size_mb:,.0f} MB in {wall_s:.1f} s = {rate(total_rows, wall_s)} "
          f"({', '.join(f'{stage} {s:.1f} s' for stage, s in summary['seconds'].items())})")
    print("  rows: " + ", ".join(f"{table} {n:,}" for table, n in summary["rows"].items()))
    windows = summary["rows"]["instance_usage"]
    print(f"  {args.processes} processes: {windows / wall_s:,.0f} windows/s wall, "
          f"{windows / cpu_s:,.0f} windows per CPU-second ({cpu_s:.1f} CPU-s)")

    trace = synthetic.sample_trace(machines=args.machines, days=args.days, seed=args.seed)
    usage = trace.usage_model()
    windows_per_step = max(1, args.sample_rows * trace.horizon_us // synthetic.WINDOW_US
                           // max(usage.n_windows, 1))
    columns, n_rows = usage.columns(0, windows_per_step)
    synthetic.encode_lines(columns, "json")  # compiles (or loads) the encoder first
    clock = time.perf_counter()
    fast = bytes(synthetic.encode_lines(columns, "json"))
    fast_s = time.perf_counter() - clock
    clock = time.perf_counter()
    reference = reference_json_lines(columns, n_rows)
    reference_s = time.perf_counter() - clock
    assert [json.loads(line) for line in fast.splitlines()] == \
        [json.loads(line) for line in reference.splitlines()]
    clock = time.perf_counter()
    zlib.compress(fast, 1)
    gzip_s = time.perf_counter() - clock
    print(f"JSON encoding of {n_rows:,} instance_usage rows: compiled {rate(n_rows, fast_s)}, "
          f"reference (dict + json.dumps per row) {rate(n_rows, reference_s)}: "
          f"{reference_s / fast_s:.1f}x faster; gzip level 1 of them {rate(n_rows, gzip_s)}")


if __name__ == "__main__":
    main()
