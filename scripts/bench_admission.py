"""Benchmark of the placement replay's admission by predicted peak: wall and CPU time of a
replay per admission, against the same replay admitting by requests, and the Python engine's
admission against the scan-every-host reference on the same input.

    .venv/bin/python scripts/bench_admission.py            # 1,000 hosts, 200k arrivals, 2 days
    .venv/bin/python scripts/bench_admission.py --quick    # 200 hosts, 20k arrivals

The pool of scripts/bench_placement.py (hosts of 48 cores, Azure-like VM shapes, heavy-tailed
lifetimes, ~80 % of the CPU requested), each VM with a 5-minute CPU usage series (a level of
10-90 % of its request per VM, with noise), replayed by Best-Fit with oracle lifetimes:
admitting by requests without usage (the compiled engine, what a run without admission does),
by requests with the usage replay, and by borg-default, RC-like, N-sigma, max(N-sigma,
RC-like) and a 1-day oracle; every replay with admission also scores the usage against a
1-day oracle. The least of `--repeats` interleaved rounds. The reference replays the first
`--reference_arrivals` with N-sigma.
"""

import argparse
import functools
import pathlib
import sys
import time

import numpy as np

# Runnable as a plain script from anywhere: the repository root holds the packages.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from bench_placement import HOST_SHAPE, synthetic_trace  # noqa: E402

from fleetcast_testing.reference.admission import BruteForceAdmission  # noqa: E402
from fleetcast_testing.reference.placement_simulator import simulate_reference  # noqa: E402
from policies.best_fit import BestFit  # noqa: E402
from policies.replay.admission import (  # noqa: E402
    Admission,
    CombinedPeaks,
    HistoryPeaks,
    OraclePeaks,
    TaskSharePeaks,
)
from policies.replay.lifetime_source import OracleLifetimes  # noqa: E402
from policies.replay.pool import PoolSpec  # noqa: E402
from policies.replay.simulator import PlacementTrace, simulate  # noqa: E402
from policies.replay.usage import VmUsage  # noqa: E402
from predictors.peak.borg_default import BorgDefaultPredictor  # noqa: E402
from predictors.peak.n_sigma import NSigmaPredictor  # noqa: E402
from predictors.peak.rc_like import RcLikePredictor  # noqa: E402

STEP_US = 300_000_000
DAY_STEPS = 288


def usage_series(trace: PlacementTrace, end_us: int, seed: int) -> VmUsage:
    """Each VM's 5-minute CPU usage up to a day past `end_us`: a level of 10-90 % of its
    request per VM, and noise of a tenth of the request per window, in [0, 1.2 x request]."""
    rng = np.random.default_rng(seed)
    first = trace.arrival_us // STEP_US
    last = np.minimum(trace.exit_us - 1, end_us + DAY_STEPS * STEP_US) // STEP_US
    count = np.maximum(last - first + 1, 0)
    vm = np.repeat(np.arange(len(trace)), count)
    step = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count) + first[vm]
    request = trace.demand[vm, 0]
    level = rng.uniform(0.1, 0.9, len(trace))[vm]
    usage = request * np.clip(level + 0.1 * rng.standard_normal(len(vm)), 0.0, 1.2)
    return VmUsage.from_samples(vm, step * STEP_US, usage, request, len(trace), STEP_US)


def tellers(usage: VmUsage) -> dict:
    """The admitting tellers, as the placement stage builds them."""
    n_sigma = NSigmaPredictor(5, 120, 24, cap_to_limit=True)
    rc_like = RcLikePredictor(99, 120, 24, cap_to_limit=True)
    return {"borg_default": TaskSharePeaks(BorgDefaultPredictor(0.9), usage),
            "rc_like": TaskSharePeaks(rc_like, usage),
            "n_sigma": HistoryPeaks(n_sigma, usage),
            "max_n_sigma_rc_like": CombinedPeaks(np.max, [HistoryPeaks(n_sigma, usage),
                                                          TaskSharePeaks(rc_like, usage)]),
            "oracle": OraclePeaks(usage, DAY_STEPS, cap_to_limit=True, partial=True)}


def timed(function):
    """(result, wall seconds, CPU seconds) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--arrivals", type=int, default=200_000)
    parser.add_argument("--reference_arrivals", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="200 hosts, 20k arrivals")
    args = parser.parse_args()
    if args.quick:
        args.hosts, args.arrivals, args.reference_arrivals = 200, 20_000, 1_000
    trace, _ = synthetic_trace(args.arrivals, args.hosts, 0.8, args.seed)
    pool = PoolSpec.from_shape(HOST_SHAPE, args.hosts)
    end_us = int(trace.arrival_us.max())
    built = timed(lambda: usage_series(trace, end_us, args.seed))
    usage = built[0]
    peaks = timed(lambda: tellers(usage))
    lifetimes = OracleLifetimes(trace.lifetime_s())
    scoring = OraclePeaks(usage, DAY_STEPS, cap_to_limit=True)
    request = trace.demand[:, 0]
    windows = (end_us - int(trace.arrival_us.min())) // STEP_US
    print(f"{args.hosts} hosts, {len(trace):,} arrivals over {windows:,} windows, "
          f"{usage.offsets[-1]:,} usage samples (built in {built[1]:.1f} s; the tellers' "
          f"per-pool work {peaks[1]:.1f} s)")

    def run(name):
        if name == "none":
            return simulate(trace, pool, BestFit(), lifetimes, warmup_s=0)
        admission = Admission(usage, request, scoring,
                              None if name == "requests" else peaks[0][name], name)
        return simulate(trace, pool, BestFit(), lifetimes, warmup_s=0, admission=admission)

    names = ["none", "requests", *peaks[0]]
    best = {}
    for _ in range(args.repeats):
        for name in names:
            result, wall, cpu = timed(functools.partial(run, name))
            if name not in best or wall < best[name][1]:
                best[name] = (result, wall, cpu)
    print(f"{'admission':20} {'wall s':>8} {'CPU s':>8} {'vs none':>8} {'vs requests':>11} "
          f"{'empty %':>8} {'violations %':>12} {'savings %':>9}")
    for name in names:
        result, wall, cpu = best[name]
        summary = result.summary
        print(f"{name:20} {wall:8.1f} {cpu:8.1f} {wall / best['none'][1]:7.1f}x "
              f"{wall / best['requests'][1]:10.1f}x {summary['empty_hosts_pct']:8.2f} "
              f"{summary.get('violation_rate_pct', float('nan')):12.2f} "
              f"{summary.get('savings_pct', float('nan')):9.1f}")
    reference_end = int(trace.arrival_us[min(args.reference_arrivals, len(trace)) - 1])
    n_sigma = NSigmaPredictor(5, 120, 24, cap_to_limit=True)
    fast = timed(lambda: simulate(
        trace, pool, BestFit(), lifetimes, end_us=reference_end, warmup_s=0,
        refresh_interval_s=0, admission=Admission(usage, request, scoring,
                                                  peaks[0]["n_sigma"], "n_sigma")))
    slow = timed(lambda: simulate_reference(
        trace, pool, "best_fit", lifetimes, end_us=reference_end,
        admission=BruteForceAdmission(usage, request, n_sigma)))
    replayed = fast[0].host_of_vm >= -1
    same = np.array_equal(fast[0].host_of_vm[replayed], slow[0][replayed])
    print(f"n_sigma on the first {args.reference_arrivals:,} arrivals: {fast[1]:.2f} s, the "
          f"scan-every-host reference {slow[1]:.1f} s ({slow[1] / fast[1]:.0f}x), same "
          f"decisions: {same}")


if __name__ == "__main__":
    main()
