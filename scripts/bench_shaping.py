"""Benchmark of the shaping simulator: simulated component-steps per second per core for
each policy with oracle forecasts on [Pace18] §IV-A's cluster (250 hosts x 32 cores / 128 GB)
with >= 10,000 applications, and the ratio against the per-component reference step
(fleetcast_testing/reference/shaping_simulator.py) on the same input in the same run.
Forecaster fits are timed separately, per fit, on a sample of the usage series.

    .venv/bin/python scripts/bench_shaping.py [--apps 10000] [--reference_steps 300]

The reference is run on the first `--reference_steps` steps only (max_steps), and the fast
simulator is timed on that same prefix for the ratio, then on the whole run.
"""

import argparse
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from fleetcast_testing.reference.shaping_simulator import simulate_reference  # noqa: E402
from fleetcast_testing.shaping_workloads import random_workload  # noqa: E402
from policies.shaping.cluster.cluster import Cluster  # noqa: E402
from policies.shaping.cluster.simulator import simulate  # noqa: E402
from policies.shaping.forecasters import (  # noqa: E402
    ArimaUsageForecaster,
    GaussianProcessUsageForecaster,
    OracleForecaster,
    forecast_workload,
)
from policies.shaping.registry import SHAPING_POLICIES  # noqa: E402

INTERVAL = 12


def timed(function, *args, **kwargs):
    start = time.process_time()
    result = function(*args, **kwargs)
    return result, time.process_time() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=10_000)
    parser.add_argument("--hosts", type=int, default=250)
    parser.add_argument("--reference_steps", type=int, default=300)
    parser.add_argument("--forecast_series", type=int, default=40)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    # Up to 6 components of 0.5-4 cores / 1-16 GB, 2-150 steps, submitted over ~2 days.
    workload = random_workload(args.apps, rng, max_components=6, max_length=150,
                               submit_span=600)
    cluster = Cluster.homogeneous(32, 128, args.hosts)
    forecasts = forecast_workload(workload, OracleForecaster())
    print(f"workload: {workload.num_apps:,} applications, {workload.num_components:,} "
          f"components, {workload.component_steps():,} component-steps of work; "
          f"{args.hosts} hosts x 32 cores / 128 GB; shaping every {INTERVAL} steps")
    for name in ("baseline", "optimistic", "pessimistic"):
        policy = SHAPING_POLICIES[name](0.0, 0.0).fit(workload, forecasts, INTERVAL)
        result, seconds = timed(simulate, workload, cluster, policy, INTERVAL)
        prefix, prefix_s = timed(simulate, workload, cluster, policy, INTERVAL,
                                 max_steps=args.reference_steps)
        ref, ref_s = timed(simulate_reference, workload, cluster, policy, INTERVAL,
                           max_steps=args.reference_steps)
        assert ref.component_steps == prefix.component_steps
        fast_rate, ref_rate = prefix.component_steps / prefix_s, ref.component_steps / ref_s
        print(f"{name:12s} whole run {result.component_steps / seconds / 1e6:5.2f}M "
              f"component-steps/s ({result.component_steps:,} in {seconds:.1f} CPU-s, "
              f"{result.steps:,} steps, {result.shaping_steps:,} shaping steps, "
              f"{result.algorithm_runs:,} preempting); first {args.reference_steps} steps "
              f"{fast_rate / 1e6:.2f}M vs reference {ref_rate / 1e3:.0f}k: "
              f"{fast_rate / ref_rate:.1f}x")
    sample = rng.choice(workload.num_components, args.forecast_series, replace=False)
    for forecaster in (ArimaUsageForecaster(interval_steps=INTERVAL),
                       GaussianProcessUsageForecaster(interval_steps=INTERVAL)):
        fitted, seconds = timed(forecast_workload, workload, forecaster, sample)
        print(f"{forecaster.name:16s} {fitted.fits:,} fits in {seconds:.1f} CPU-s: "
              f"{1e3 * seconds / max(fitted.fits, 1):.1f} ms per fit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
