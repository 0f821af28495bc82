"""Benchmark: trace ingestion, columnar readers vs the per-row reader.

    python scripts/bench_ingest.py [--machines 200 --days 7] [--quick] [--no_dask]
                                    [--no_multi_processing] [--formats json,csv,parquet]
    python scripts/bench_ingest.py --google_2011 ../shared/data/google_2011 [--machines ...]

Per input format, a synthetic Google v3 trace (generated untimed) goes through a whole run
(source → canonical tables → Parquet, DirectRunner in memory) with the columnar readers and
with the per-row reader (`ReadGoogleV3(columnar_readers=False)`), each in its own child
process. Prints usage rows/s (usage windows read / wall seconds), their ratio and the peak
RSS growth per usage window (KB); then the columnar run with 2 worker processes
(multi_processing) against the in-memory one. The last line reads
`ingest: json_gz_rows_per_s=N parquet_rows_per_s=N ratio_vs_per_row=R kb_per_window=K
dask_speedup=S` (JSON.gz, columnar; dask_speedup: on Beam's DaskRunner, 1 worker process vs
2 with --dask_npartitions=DASK_PARTITIONS, or nan with --no_dask).

With `--google_2011 DIR` (the trace's job_events/ and task_events/ parts, headerless CSV.gz),
it runs the google_2011 source (unit TASKS, columnar and per-row) on DIR and the google_v3
source on the synthetic trace as CSV.gz (columnar) in the same invocation, each a whole run
as above, and prints rows/s of both: every source row read per wall second, and v3's usage
windows per second. The last line reads `ingest_2011: google_2011_rows_per_s=N
google_v3_csv_gz_rows_per_s=N google_v3_csv_gz_windows_per_s=N ratio_vs_v3=R
ratio_vs_per_row=R`.
"""

import argparse
import contextlib
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import pyarrow.parquet as pq  # noqa: E402

import synthetic  # noqa: E402

TABLES = ("instance_events", "instance_usage", "machine_events", "collection_events")
GOOGLE_2011_TABLES = ("job_events", "task_events")
# Dask bags of created collections (the matched files) are split into this many partitions,
# the units the DaskRunner runs in parallel: one per worker of the larger cluster (more cost
# more than they balance: 3,818 Dask tasks with 4 partitions, 1,358 with 2, at 50 machines).
DASK_PARTITIONS = 2


def _config_text(trace_dir: str, fmt: str) -> str:
    """The source-only config of a trace: the synthetic v3 trace in format `fmt`, or the
    Google 2011 parts in `trace_dir` if `fmt` is "google_2011"."""
    if fmt == "google_2011":
        tables = " ".join(f'{t}: "{trace_dir}/{t}/part-*.csv.gz"' for t in GOOGLE_2011_TABLES)
        return f"google_2011 {{ unit: TASKS {tables} }}"
    tables = "\n".join(f'  {t} {{ path: "{trace_dir}/{t}/*" format: {fmt.upper()} }}'
                       for t in TABLES)
    return f"google_v3 {{\n{tables}\n}}"


def one_run(trace_dir: str, fmt: str, out_dir: str, columnar_readers: bool,
            dask_workers: int, multi_processing: bool = False) -> dict:
    """Runs the source-only config on `trace_dir` (files of format `fmt`, or the Google 2011
    parts) on the DirectRunner in memory (or with 2 worker processes if `multi_processing`),
    or on the DaskRunner over a LocalCluster of `dask_workers` processes (1 thread each) if
    > 0; {seconds, windows, rows (every source row read), kb_per_window} (the RSS is this
    process's only)."""
    from pipelines import config as run_config
    from pipelines import run as run_pipeline
    from pipelines.sources import google_2011, google_v3

    for module, name in ((google_v3, "ReadGoogleV3"), (google_2011, "ReadGoogle2011")):
        setattr(module, name, functools.partial(getattr(module, name),
                                                columnar_readers=columnar_readers))
    config = run_config.parse_config(_config_text(trace_dir, fmt))
    with contextlib.ExitStack() as stack:
        args = (["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                 "--direct_num_workers=2"] if multi_processing else
                ["--runner=DirectRunner", "--direct_running_mode=in_memory"])
        if dask_workers:
            import distributed
            cluster = stack.enter_context(distributed.LocalCluster(
                n_workers=dask_workers, threads_per_worker=1, processes=True,
                dashboard_address=None))
            stack.enter_context(distributed.Client(cluster))
            args = ["--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                    f"--dask_client_address={cluster.scheduler_address}",
                    f"--dask_npartitions={DASK_PARTITIONS}"]
        before = _rss_bytes()
        counters = {}
        started = time.perf_counter()
        run_pipeline.run(config, out_dir, args, counters=counters)
        seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KB
    windows = _rows_read(out_dir, ("instance_usage", "task_usage")) if fmt == "google_2011" \
        or dask_workers or multi_processing else int(
            counters["google_v3.instance_usage.rows_read"])
    return {"seconds": seconds, "windows": windows, "rows": _rows_read(out_dir),
            "kb_per_window": max(peak - before, 0) / 1024 / max(windows, 1)}


def _rss_bytes() -> int:
    """This process's resident set size now (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _rows_read(out_dir: str, tables=None) -> int:
    """Rows read of the source `tables` (all but the usage join's, if None), from the run's
    source_counts table (runners without counters)."""
    counts = pq.read_table(os.path.join(out_dir, "source_counts")).to_pylist()
    return sum(r["read"] for r in counts
               if (r["table"] in tables if tables else r["table"] != "usage_join"))


def child(trace_dir: str, fmt: str, columnar_readers: bool, dask_workers: int = 0,
          multi_processing: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="fleetcast-bench-ingest-out-") as out:
        result = subprocess.run(
            [sys.executable, __file__, "--child", trace_dir, fmt, out,
             "1" if columnar_readers else "0", str(dask_workers),
             "1" if multi_processing else "0"],
            check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=200)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--quick", action="store_true", help="20 machines × 2 days")
    parser.add_argument("--formats", default="json,csv,parquet")
    parser.add_argument("--no_dask", action="store_true",
                        help="skip the DaskRunner 1-vs-2-worker runs (dask_speedup=nan)")
    parser.add_argument("--no_multi_processing", action="store_true",
                        help="skip the DirectRunner multi_processing (2 workers) run")
    parser.add_argument("--google_2011", metavar="DIR",
                        help="the Google 2011 source on DIR's parts vs google_v3 on CSV.gz")
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        trace_dir, fmt, out_dir, flag, workers, multi = args.child
        print(json.dumps(one_run(trace_dir, fmt, out_dir, flag == "1", int(workers),
                                 multi == "1")))
        return
    if args.quick:
        args.machines, args.days = 20, 2.0
    if args.google_2011:
        compare_google_2011(os.path.abspath(args.google_2011), args.machines, args.days)
        return

    results, dask_speedup = {}, float("nan")
    with tempfile.TemporaryDirectory(prefix="fleetcast-bench-ingest-") as tmp:
        for fmt in args.formats.split(","):
            trace_dir = os.path.join(tmp, fmt)
            synthetic.generate(trace_dir, machines=args.machines, days=args.days, seed=0,
                               file_format=fmt)
            fast, slow = child(trace_dir, fmt, True), child(trace_dir, fmt, False)
            results[fmt] = fast, slow
            print(f"{NAMES[fmt]}, {args.machines} machines × {args.days:g} days, "
                  f"{fast['windows']:,} usage windows: columnar {_rate(fast):,.0f} rows/s "
                  f"({fast['seconds']:.1f} s, {fast['kb_per_window']:.2f} KB/window), per-row "
                  f"{_rate(slow):,.0f} rows/s ({slow['seconds']:.1f} s, "
                  f"{slow['kb_per_window']:.2f} KB/window), ratio "
                  f"{slow['seconds'] / fast['seconds']:.2f}x", flush=True)
            if not args.no_multi_processing:
                multi = child(trace_dir, fmt, True, multi_processing=True)
                print(f"{NAMES[fmt]}, DirectRunner multi_processing, 2 workers: "
                      f"{multi['seconds']:.1f} s vs {fast['seconds']:.1f} s in memory: "
                      f"{fast['seconds'] / multi['seconds']:.2f}x", flush=True)
            if fmt == "json" and not args.no_dask:
                one, two = (child(trace_dir, fmt, True, workers) for workers in (1, 2))
                dask_speedup = one["seconds"] / two["seconds"]
                print(f"DaskRunner, LocalCluster, JSON.gz columnar: 1 worker {one['seconds']:.1f} "
                      f"s, 2 workers {two['seconds']:.1f} s: {dask_speedup:.2f}x", flush=True)

    nan = {"seconds": float("nan"), "windows": float("nan"), "kb_per_window": float("nan")}
    json_fast, json_slow = results.get("json", (nan, nan))
    print(f"ingest: json_gz_rows_per_s={_rate(json_fast):.0f} "
          f"parquet_rows_per_s={_rate(results.get('parquet', (nan,))[0]):.0f} "
          f"ratio_vs_per_row={json_slow['seconds'] / json_fast['seconds']:.2f} "
          f"kb_per_window={json_fast['kb_per_window']:.2f} dask_speedup={dask_speedup:.2f}")


NAMES = {"json": "JSON.gz", "csv": "CSV.gz", "parquet": "Parquet"}


def compare_google_2011(data_dir: str, machines: int, days: float):
    """The google_2011 source on `data_dir` (columnar, then per-row) and google_v3 on the
    synthetic trace as CSV.gz (columnar), one after the other; prints their rates."""
    fast, slow = child(data_dir, "google_2011", True), child(data_dir, "google_2011", False)
    print(f"google_2011, {data_dir} ({', '.join(GOOGLE_2011_TABLES)}), {fast['rows']:,} rows: "
          f"columnar {_rate(fast, 'rows'):,.0f} rows/s ({fast['seconds']:.1f} s), per-row "
          f"{_rate(slow, 'rows'):,.0f} rows/s ({slow['seconds']:.1f} s), ratio "
          f"{slow['seconds'] / fast['seconds']:.2f}x", flush=True)
    with tempfile.TemporaryDirectory(prefix="fleetcast-bench-ingest-") as tmp:
        synthetic.generate(tmp, machines=machines, days=days, seed=0, file_format="csv")
        v3 = child(tmp, "csv", True)
    print(f"google_v3, CSV.gz, {machines} machines × {days:g} days, {v3['rows']:,} rows "
          f"({v3['windows']:,} usage windows): columnar {_rate(v3, 'rows'):,.0f} rows/s, "
          f"{_rate(v3):,.0f} usage windows/s ({v3['seconds']:.1f} s)", flush=True)
    print(f"ingest_2011: google_2011_rows_per_s={_rate(fast, 'rows'):.0f} "
          f"google_v3_csv_gz_rows_per_s={_rate(v3, 'rows'):.0f} "
          f"google_v3_csv_gz_windows_per_s={_rate(v3):.0f} "
          f"ratio_vs_v3={_rate(fast, 'rows') / _rate(v3, 'rows'):.2f} "
          f"ratio_vs_per_row={slow['seconds'] / fast['seconds']:.2f}")


def _rate(result: dict, what: str = "windows") -> float:
    return result[what] / result["seconds"]


if __name__ == "__main__":
    main()
