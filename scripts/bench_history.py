"""Benchmark of the customer-history sweep: arrivals/s on one core, vs the brute-force reference.

    .venv/bin/python scripts/bench_history.py            # 100k, 1M and 3M arrivals
    .venv/bin/python scripts/bench_history.py --quick    # 10k and 100k arrivals

Synthetic instances (predictors/lifetime/history.py on each size): `--keys` customers with
Zipf-like weights (the k-th one ∝ k^-1.1), arrivals uniform over 30 days, lifetimes
log-uniform from 1 s to 10 days, 5 % censored at random; θ = `--long_lived_threshold_s` and a
two-month look-back ([Barbalho23] App. B.1), and at the middle size also no look-back and a
one-day one (an expiry for nearly every lifetime). The brute-force reference
(fleetcast_testing/reference/history.py) and the sweep run on `--reference_arrivals` other
instances drawn the same way, for the ratio; their answers must agree. Then the jobs of the
Google 2011 trace in `--google_2011` (key: the user; a job from its first SCHEDULE to its last
end event; one scheduled before the trace window has no known lifetime), when present. CPU
seconds, the least of `--repeats`; the first call, which loads numba's cached kernel (compiles
it, the first time on a machine), is timed apart.
"""

import argparse
import glob
import os
import pathlib
import sys

import numpy as np

# Runnable as a plain script from anywhere: the repository root holds the packages.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import pandas as pd

from configs.units import DAY_S, US_PER_S
from fleetcast_testing.reference.history import history_statistics as reference_statistics
from fleetcast_testing.timing import cpu_timed
from predictors.lifetime.history import HISTORY_STATISTICS, history_statistics

TWO_MONTHS_S = 60 * DAY_S
SHARED_DATA = pathlib.Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def synthetic_instances(num_instances: int, num_keys: int, seed: int):
    """(key, start_us, end_us, ended, lifetime_known) of the synthetic instances."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, num_keys + 1) ** 1.1
    key = rng.choice(num_keys, num_instances, p=weights / weights.sum())
    start_us = rng.integers(0, 30 * DAY_S * US_PER_S, num_instances)
    lifetime_s = 10.0 ** rng.uniform(0.0, np.log10(10 * DAY_S), num_instances)
    ended = rng.random(num_instances) >= 0.05
    end_us = np.where(ended, start_us + (lifetime_s * US_PER_S).astype(np.int64), 0)
    return key, start_us, end_us, ended, np.ones(num_instances, bool)


def google_2011_jobs(directory: str):
    """The jobs of the Google 2011 job_events parts in `directory` as (key, start_us, end_us,
    ended, lifetime_known), or None when there are none."""
    paths = sorted(glob.glob(os.path.join(directory, "*.csv.gz")))
    if not paths:
        return None
    events = pd.concat([pd.read_csv(path, header=None, usecols=[0, 2, 3, 4],
                                    names=["time", "job_id", "event_type", "user"])
                        for path in paths], ignore_index=True)
    scheduled = events[events.event_type == 1].groupby("job_id").agg(
        start_us=("time", "min"), user=("user", "first"))
    ends = events[events.event_type.between(2, 6)].groupby("job_id")["time"].max()
    jobs = scheduled.join(ends.rename("end_us"), how="left")
    ended = jobs.end_us.notna().to_numpy()
    return (pd.factorize(jobs.user)[0], jobs.start_us.to_numpy(),
            jobs.end_us.fillna(0).to_numpy(np.int64), ended, jobs.start_us.to_numpy() > 0)


def assert_same(got: dict, expected: dict) -> None:
    """Counts and percentiles exactly, the log10 mean and std within 1e-9."""
    for name in HISTORY_STATISTICS:
        if name.startswith("log10"):
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-9, atol=1e-12)
        else:
            np.testing.assert_array_equal(got[name], expected[name])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 3_000_000])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--long_lived_threshold_s", type=float, default=7200.0,
                        help="θ; LA's 2-hour threshold by default")
    parser.add_argument("--reference_arrivals", type=int, default=5000)
    parser.add_argument("--google_2011", default=str(SHARED_DATA / "google_2011" / "job_events"),
                        help="a directory of the trace's job_events/*.csv.gz parts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="10k and 100k arrivals, reference on 1k, no Google 2011 jobs")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.reference_arrivals, args.google_2011 = [10_000, 100_000], 1000, ""

    def sweep(instances, lookback_s=TWO_MONTHS_S):
        return lambda: history_statistics(
            *instances, long_lived_threshold_s=args.long_lived_threshold_s,
            lookback_s=lookback_s)

    _, first_s = cpu_timed(sweep(synthetic_instances(100, 10, args.seed)), 1)
    print(f"first call (numba loads the cached kernel, or compiles it): {first_s:.2f} s")
    print(f"synthetic: {args.keys:,} keys, 30 days, θ = {args.long_lived_threshold_s:g} s; "
          "CPU seconds, one thread")
    middle = args.sizes[len(args.sizes) // 2]
    for size in args.sizes:
        instances = synthetic_instances(size, args.keys, args.seed)
        lookbacks = ((TWO_MONTHS_S, "2 months"), (0, "none"), (DAY_S, "1 day")) if (
            size == middle) else ((TWO_MONTHS_S, "2 months"),)
        for lookback_s, name in lookbacks:
            _, seconds = cpu_timed(sweep(instances, lookback_s), args.repeats)
            print(f"  {size:>10,} arrivals, look-back {name:8}: {size / seconds:12,.0f} "
                  f"arrivals/s ({seconds:.3f} s)")

    instances = synthetic_instances(args.reference_arrivals, args.keys, args.seed + 1)
    fast, fast_s = cpu_timed(sweep(instances), args.repeats)
    slow, slow_s = cpu_timed(lambda: reference_statistics(
        *instances, long_lived_threshold_s=args.long_lived_threshold_s,
        lookback_s=TWO_MONTHS_S), 1)
    assert_same(fast, slow)
    size = args.reference_arrivals
    print(f"{size:,} arrivals: sweep {size / fast_s:,.0f} arrivals/s, brute-force reference "
          f"{size / slow_s:,.0f} arrivals/s, ratio {slow_s / fast_s:,.0f}x (same answers)")

    jobs = google_2011_jobs(args.google_2011) if args.google_2011 else None
    if jobs is None:
        print(f"Google 2011: no job_events parts in {args.google_2011!r}, skipped")
        return
    got, seconds = cpu_timed(sweep(jobs), args.repeats)
    num_jobs = len(jobs[0])
    print(f"Google 2011 jobs ({num_jobs:,} jobs, {jobs[0].max() + 1:,} users, "
          f"{1 - jobs[3].mean():.1%} censored, {1 - jobs[4].mean():.1%} before the trace), "
          f"look-back 2 months: {num_jobs / seconds:,.0f} arrivals/s ({seconds:.3f} s); "
          f"{np.mean(got['prior_ended'] >= 5):.1%} of the jobs see >= 5 ended jobs of their "
          "user")


if __name__ == "__main__":
    main()
