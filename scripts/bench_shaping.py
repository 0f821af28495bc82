"""Benchmark of the shaping simulator: simulated component-steps per second per core for
each policy with oracle forecasts on [Pace18] §IV-A's cluster (250 hosts x 32 cores / 128 GB)
with >= 10,000 applications, and the ratio against the per-component reference step
(fleetcast_testing/reference/shaping_simulator.py) on the same input in the same run.
Forecaster fits are timed separately, per fit, on a sample of the usage series (the GP's
also against its dense reference evidence). Steps are `--step_s` long ([Pace18] §V: a
minute), the workload's runtimes and submissions the same in seconds whatever the step,
shaping every `--interval` steps. Last, the estimated time of
configs/shaping_002_full.textproto on 2 cores from these rates (`estimate_002_full`).

    .venv/bin/python scripts/bench_shaping.py [--apps 10000] [--step_s 60] [--interval 1]

The reference is run on the first `--reference_steps` steps only (max_steps), and the fast
simulator is timed on that same prefix for the ratio, then on the whole run.
"""

import argparse
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from fleetcast_testing.reference.peak import gp_negative_log_evidence  # noqa: E402
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

# configs/shaping_002_full.textproto: 10 seeds x (the baseline + 4 forecasters x 6 K1 x 4 K2
# x 2 policies) runs of 150,000 applications.
FULL_RUNS = 10 * (1 + 4 * 6 * 4 * 2)
FULL_APPLICATIONS = 150_000
# Component-steps one application of the synthetic trace runs at 60-s steps, and forecaster
# fits per application's worth of distinct series, as measured on configs/shaping_002.textproto
# (docs/performance.md): the scale model's inputs.
COMPONENT_STEPS_PER_APPLICATION = 2_000


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
    parser.add_argument("--step_s", type=int, default=60)
    parser.add_argument("--interval", type=int, default=1)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    interval, per_window = args.interval, max(300 // args.step_s, 1)
    # Up to 6 components of 0.5-4 cores / 1-16 GB, 10 min to 12.5 h, submitted over ~2 days.
    workload = random_workload(args.apps, rng, max_components=6, max_length=150 * per_window,
                               submit_span=600 * per_window, step_s=args.step_s)
    cluster = Cluster.homogeneous(32, 128, args.hosts)
    forecasts = forecast_workload(workload, OracleForecaster(interval_steps=interval))
    print(f"workload: {workload.num_apps:,} applications, {workload.num_components:,} "
          f"components, {workload.component_steps():,} component-steps of work; "
          f"{args.hosts} hosts x 32 cores / 128 GB; {args.step_s}-s steps, shaping every "
          f"{interval} step(s)")
    rates = {}
    for name in ("baseline", "optimistic", "pessimistic"):
        policy = SHAPING_POLICIES[name](0.0, 0.0).fit(workload, forecasts, interval)
        result, seconds = timed(simulate, workload, cluster, policy, interval)
        prefix, prefix_s = timed(simulate, workload, cluster, policy, interval,
                                 max_steps=args.reference_steps)
        ref, ref_s = timed(simulate_reference, workload, cluster, policy, interval,
                           max_steps=args.reference_steps)
        assert ref.component_steps == prefix.component_steps
        fast_rate, ref_rate = prefix.component_steps / prefix_s, ref.component_steps / ref_s
        print(f"{name:12s} whole run {result.component_steps / seconds / 1e6:5.2f}M "
              f"component-steps/s ({result.component_steps:,} in {seconds:.1f} CPU-s, "
              f"{result.steps:,} steps, {result.shaping_steps:,} shaping steps, "
              f"{result.algorithm_runs:,} preempting); first {args.reference_steps} steps "
              f"{fast_rate / 1e6:.2f}M vs reference {ref_rate / 1e3:.0f}k: "
              f"{fast_rate / ref_rate:.1f}x")
        rates[name] = result.component_steps / seconds
    sample = rng.choice(workload.num_components, args.forecast_series, replace=False)
    time_fits(workload, interval, sample)
    print(estimate_002_full(rates))
    return 0


def time_fits(workload, interval: int, sample: np.ndarray):
    """Prints the ARIMA's and the GP's CPU time per fit on the series of components `sample`,
    and the GP's against its dense reference evidence on a tenth of them."""
    for forecaster in (ArimaUsageForecaster(interval_steps=interval),
                       GaussianProcessUsageForecaster(interval_steps=interval)):
        fitted, seconds = timed(forecast_workload, workload, forecaster, sample)
        print(f"{forecaster.name:16s} {fitted.fits:,} fits in {seconds:.1f} CPU-s: "
              f"{1e3 * seconds / max(fitted.fits, 1):.2f} ms per fit")
    subset = sample[:max(1, len(sample) // 10)]
    per_fit_ms = []
    for evidence in (None, gp_negative_log_evidence):
        forecaster = GaussianProcessUsageForecaster(interval_steps=interval)
        if evidence is not None:
            forecaster.model.negative_log_evidence = evidence
        fitted, seconds = timed(forecast_workload, workload, forecaster, subset)
        per_fit_ms.append(1e3 * seconds / max(fitted.fits, 1))
    print(f"gaussian_process on {len(subset)} series: {per_fit_ms[0]:.2f} ms per fit vs "
          f"{per_fit_ms[1]:.2f} ms with the dense reference evidence: "
          f"{per_fit_ms[1] / per_fit_ms[0]:.1f}x")


def estimate_002_full(rates: dict) -> str:
    """The simulations of configs/shaping_002_full.textproto on 2 cores at the slowest of the
    measured policies' rates (component-steps per CPU-second), forecasts left out."""
    component_steps = FULL_RUNS * FULL_APPLICATIONS * COMPONENT_STEPS_PER_APPLICATION
    core_s = component_steps / min(rates.values())
    return (f"configs/shaping_002_full.textproto: {FULL_RUNS:,} runs x {FULL_APPLICATIONS:,} "
            f"applications x ~{COMPONENT_STEPS_PER_APPLICATION:,} component-steps = "
            f"{component_steps:.2e} component-steps: {core_s / 3600:,.0f} core-hours at "
            f"{min(rates.values()) / 1e6:.2f}M/s, {core_s / 2 / 86400:,.1f} days on 2 cores")


if __name__ == "__main__":
    sys.exit(main())
