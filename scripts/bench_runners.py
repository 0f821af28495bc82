"""Benchmark: a config on the DirectRunner, then several times in a row on the Flink and Spark
clusters of scripts/engines.sh, every run's tables compared with the DirectRunner's.

    python scripts/bench_runners.py [--config configs/demo.textproto] [--runs 10]
        [--engines flink,spark] [--environment loopback|external] [--out_dir DIR]

Each run is `fleetcast run CONFIG --output_dir DIR/ENGINE -q OPTIONS`, OPTIONS as
`scripts/engines.sh options ENGINE ENVIRONMENT` prints them (EXTERNAL: a `fleetcast
worker-pool` started here, in a folder of its own); an engine's runs go into one output
root, one after the other, as a user reruns a config. Each run prints its wall time and
whether `scripts/compare_results.py` finds it identical to the DirectRunner's; each engine
ends with a line `ENGINE: runs=N identical=K failed=F wall_s min/median/max ... vs_direct=X`.
Exit status 1 when a run failed or differed.
"""

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fleetcast_testing import engines  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLEETCAST = os.path.join(os.path.dirname(sys.executable), "fleetcast")
COMPARE = os.path.join(REPO, "scripts", "compare_results.py")


def timed_run(config: str, output_dir: str, options) -> tuple:
    """(wall seconds, exit code, stderr's last line) of one `fleetcast run`."""
    started = time.monotonic()
    done = subprocess.run([FLEETCAST, "run", config, "--output_dir", output_dir, "-q",
                           *options], cwd=REPO, capture_output=True, text=True, check=False)
    last = (done.stderr.strip().splitlines() or [""])[-1]
    return time.monotonic() - started, done.returncode, last


def identical(reference: str, output_dir: str) -> bool:
    """Every table and model file the same, but for the run's own folder in
    lifetime_models.path (compare_results' `differs (metadata)`)."""
    return subprocess.run([sys.executable, COMPARE, reference, output_dir],
                          capture_output=True, check=False).returncode == 0


def bench_engine(engine: str, args, reference: str, direct_s: float) -> bool:
    """Runs the config --runs times on `engine`; prints each run and a summary line; True
    when every run succeeded with the DirectRunner's tables."""
    why = engines.why_not_up(engine)
    if why:
        print(f"{engine}: skipped: {why}")
        return False
    output_dir = os.path.join(args.out_dir, engine)
    walls, same, failed = [], 0, 0
    with _workers(args, engine) as pool_port:
        options = engines.run_options(engine, args.environment, pool_port)
        for i in range(1, args.runs + 1):
            wall_s, code, last = timed_run(args.config, output_dir, options)
            ok = code == 0 and identical(reference, output_dir)
            walls.append(wall_s)
            same += ok
            failed += code != 0
            print(f"{engine} run {i}: wall_s={wall_s:.1f} "
                  + ("identical" if ok else f"FAILED: {last}" if code else "DIFFERS"),
                  flush=True)
    print(f"{engine}: runs={args.runs} identical={same} failed={failed} wall_s "
          f"min={min(walls):.1f} median={statistics.median(walls):.1f} max={max(walls):.1f} "
          f"vs_direct={statistics.median(walls) / direct_s:.2f}x ({args.environment})",
          flush=True)
    return same == args.runs


def _workers(args, engine: str):
    """A worker pool for EXTERNAL runs (yields its port), or nothing (yields None)."""
    if args.environment != "external":
        return contextlib.nullcontext()
    pool_dir = tempfile.mkdtemp(prefix=f"pool_{engine}_", dir=args.out_dir)
    return engines.worker_pool(pool_dir, log_path=os.path.join(pool_dir, "pool.log"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=os.path.join(REPO, "configs", "demo.textproto"))
    parser.add_argument("--runs", type=int, default=10, help="runs on each engine")
    parser.add_argument("--engines", default="flink,spark",
                        help="comma-separated: flink, spark")
    parser.add_argument("--environment", choices=("loopback", "external"), default="loopback")
    parser.add_argument("--out_dir", help="the runs' results (default: a new temporary "
                        "directory)")
    args = parser.parse_args()
    args.config = os.path.abspath(args.config)
    args.out_dir = os.path.abspath(args.out_dir or tempfile.mkdtemp(prefix="bench_runners_"))
    os.makedirs(args.out_dir, exist_ok=True)
    reference = os.path.join(args.out_dir, "direct")
    direct_s, code, last = timed_run(args.config, reference, [])
    if code != 0:
        sys.exit(f"bench_runners: the DirectRunner's run failed: {last}")
    print(f"direct: wall_s={direct_s:.1f}", flush=True)
    results = [bench_engine(engine, args, reference, direct_s)
               for engine in args.engines.split(",")]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
