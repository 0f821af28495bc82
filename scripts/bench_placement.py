"""Benchmark of the placement replay: events per second per policy, vs the scan-every-host
reference on the same input.

    .venv/bin/python scripts/bench_placement.py            # 1,000 hosts, 1M arrivals
    .venv/bin/python scripts/bench_placement.py --quick    # 200 hosts, 50k arrivals

A synthetic pool: `--hosts` hosts of 48 cores and 192 GB, `--arrivals` VMs of Azure-like
shapes and heavy-tailed lifetimes arriving as a Poisson process for ~80 % CPU utilization.
Events are the arrivals and exits inside the replay. Best-Fit, NILAS and LAVA run in both
engines, the other policies in Python, each with oracle lifetimes; NILAS and LAVA also with
three repredicting sources (15-minute refresh): the noisy oracle of accuracy 0.8 ([Ling25ext]
App. G.1), a stand-in with a gradient-boosted model's per-call cost shape, and a real
`UptimeLifetimeModel` as exact `LifetimeCurves` (trained, untimed, on another synthetic
trace), each against the oracle on the same span (`--model_arrivals` in Python, the whole
trace compiled), the least of `--repeats` interleaved rounds. The reference runs on the first
`--reference_arrivals`, the fast replay again on that prefix for the ratio. CPU seconds.
Admission by predicted peak, on the same pool with a usage series per VM, is
`bench_admission.py`'s.
"""

import argparse
import functools
import pathlib
import sys

import numpy as np

# Runnable as a plain script from anywhere: the repository root holds the packages.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import pandas as pd

from fleetcast_testing.reference.placement_simulator import simulate_reference
from fleetcast_testing.timing import cpu_timed
from policies.best_fit import BestFit
from policies.la import LifetimeAlignment
from policies.lava import Lava
from policies.nilas import Nilas
from policies.quantized_best_fit import QuantizedBestFit
from policies.replay.lifetime_source import (
    ModelLifetimes,
    NoisyOracleLifetimes,
    OracleLifetimes,
)
from policies.replay.pool import PoolSpec
from policies.replay.simulator import PlacementTrace, simulate
from predictors.lifetime.curves import LifetimeCurves
from predictors.lifetime.examples import make_age_examples
from predictors.lifetime.uptime_model import UptimeLifetimeModel

HOST_SHAPE = (48.0, 192.0)
VM_SHAPES = np.array([[1, 1.75], [2, 3.5], [4, 7], [8, 14], [1, 0.75], [8, 56], [16, 112]])
VM_SHAPE_P = np.array([0.55, 0.2, 0.1, 0.09, 0.03, 0.02, 0.01])
# The real model's job names: the noisy log10 lifetime feature cut into this many bins.
NUM_JOBS = 40
MODEL_FEATURES = ("collection_logical_name", "cpu_request", "memory_request")


def synthetic_trace(num_vms: int, num_hosts: int, utilization: float, seed: int):
    """(trace, log10 lifetime feature) of a heavy-tailed synthetic pool."""
    rng = np.random.default_rng(seed)
    short = rng.random(num_vms) < 0.7
    log10_lifetime_s = np.where(short, rng.normal(3.0, 0.4, num_vms),
                                rng.normal(4.8, 0.7, num_vms))
    lifetime_s = np.clip(10.0 ** log10_lifetime_s, 60.0, 30 * 86400.0)
    demand = VM_SHAPES[rng.choice(len(VM_SHAPES), num_vms, p=VM_SHAPE_P)]
    busy_cores = utilization * num_hosts * HOST_SHAPE[0]
    rate_per_s = busy_cores / np.mean(demand[:, 0] * lifetime_s)
    arrival_s = np.cumsum(rng.exponential(1.0 / rate_per_s, num_vms))
    arrival_us = (arrival_s * 1e6).astype(np.int64)
    exit_us = arrival_us + (lifetime_s * 1e6).astype(np.int64)
    # A noisy copy of the lifetime is the stand-in model's only feature.
    feature = log10_lifetime_s + rng.normal(0.0, 0.3, num_vms)
    return PlacementTrace(arrival_us, exit_us, demand), feature


class StandInModel:
    """predict_remaining(features, uptime_s) with a GBDT-like cost: ~50 us per call plus
    ~1 us per row (a 100-tree, depth-5 ensemble evaluated with numpy)."""

    def __init__(self, seed: int = 0, num_trees: int = 100, depth: int = 5):
        rng = np.random.default_rng(seed)
        self._thresholds = rng.normal(3.5, 1.2, (num_trees, depth))
        self._leaf = rng.normal(0.0, 0.01, (num_trees, 2 ** depth))
        self._powers = 2 ** np.arange(depth)

    def predict_remaining(self, features: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        x = np.asarray(features)[:, None, None]
        leaf = ((x > self._thresholds[None]) * self._powers).sum(axis=2)
        correction = np.take_along_axis(self._leaf[None], leaf[:, :, None], axis=2).sum(axis=(1, 2))
        lifetime_s = 10.0 ** (np.asarray(features) + correction)
        return np.maximum(lifetime_s - uptime_s, 0.5 * lifetime_s)


def instances_table(trace: PlacementTrace, feature: np.ndarray) -> pd.DataFrame:
    """The trace's VMs as canonical `instances` rows; the job name bins `feature`."""
    job = np.digitize(feature, np.linspace(1.5, 7.0, NUM_JOBS - 1))
    return pd.DataFrame({
        "instance_id": [f"vm{i}" for i in range(len(trace))],
        "start_time": trace.arrival_us,
        "end_time": trace.exit_us,
        "collection_logical_name": np.array([f"job{j}" for j in range(NUM_JOBS)])[job],
        "cpu_request": trace.demand[:, 0],
        "memory_request": trace.demand[:, 1],
    })


def trained_model_lifetimes(trace: PlacementTrace, feature: np.ndarray, num_hosts: int,
                            seed: int) -> LifetimeCurves:
    """A small LightGBM uptime model, trained on 20k VMs of another synthetic trace, behind
    the exact reprediction cache over the VMs of `trace`."""
    train_trace, train_feature = synthetic_trace(20_000, num_hosts, 0.8, seed + 1)
    examples, _ = make_age_examples(instances_table(train_trace, train_feature))
    model = UptimeLifetimeModel(num_trees=100, num_leaves=32, num_threads=1,
                                early_stopping_rounds=0, features=MODEL_FEATURES,
                                seed=seed).fit(examples)
    return LifetimeCurves(model, model.encode(instances_table(trace, feature)))


def count_events(trace: PlacementTrace, end_us: int) -> int:
    return int(np.sum(trace.arrival_us <= end_us) + np.sum(trace.exit_us <= end_us))


def replay(trace, pool, make_policy, lifetimes, **options):
    """A function that replays `trace` on `pool` with a new `make_policy()` (built inside the
    timing, as each run builds its policy) and `lifetimes`; `options` go to `simulate`."""
    return lambda: simulate(trace, pool, make_policy(), lifetimes, **options)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--arrivals", type=int, default=1_000_000)
    parser.add_argument("--reference_arrivals", type=int, default=20_000)
    parser.add_argument("--model_arrivals", type=int, default=50_000)
    parser.add_argument("--utilization", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5,
                        help="rounds of the model-like runs (each source once per round); "
                        "the least time of each is kept")
    parser.add_argument("--quick", action="store_true", help="200 hosts, 50k arrivals")
    args = parser.parse_args()
    if args.quick:
        args.hosts, args.arrivals, args.reference_arrivals, args.model_arrivals = \
            200, 50_000, 5_000, 5_000

    trace, feature = synthetic_trace(args.arrivals, args.hosts, args.utilization, args.seed)
    pool = PoolSpec.from_shape(HOST_SHAPE, args.hosts)
    oracle = OracleLifetimes(trace.lifetime_s())
    model = ModelLifetimes(StandInModel(args.seed), feature)
    end_us = int(trace.arrival_us.max())
    prefix_end_us = int(trace.arrival_us[min(args.reference_arrivals, len(trace)) - 1])
    events = count_events(trace, end_us)
    prefix_events = count_events(trace, prefix_end_us)
    print(f"{args.hosts} hosts, {len(trace):,} arrivals, {events:,} events, "
          f"{(end_us - trace.arrival_us[0]) / 86400e6:.1f} days; reference on the first "
          f"{args.reference_arrivals:,} arrivals ({prefix_events:,} events)")
    print(f"{'policy':21} {'engine':8} {'lifetimes':9} {'events/s':>10} {'empty %':>8} "
          f"{'ref events/s':>12} {'fast/ref':>8}")

    # Loads the compiled engine (compiles it, the first time on a machine) before timing.
    simulate(trace, pool, Nilas(), oracle, end_us=int(trace.arrival_us[99]))
    cases = [(BestFit, "best_fit", {}), (QuantizedBestFit, "pbfr", {}),
             (LifetimeAlignment, "la", {}), (Nilas, "nilas", {}), (Lava, "lava", {}),
             (lambda: Lava(strict_recycling=True), "lava_strict_recycling", {})]
    common = dict(warmup_s=0.0, sample_period_s=3600.0)
    for make_policy, reference_name, options in cases:
        _, reference_s = cpu_timed(functools.partial(
            simulate_reference, trace, pool, reference_name, oracle, end_us=prefix_end_us,
            **options))
        for engine in engines(make_policy):
            result, seconds = cpu_timed(replay(trace, pool, make_policy, oracle, engine=engine,
                                           **common))
            _, fast_prefix_s = cpu_timed(replay(trace, pool, make_policy, oracle,
                                            end_us=prefix_end_us, refresh_interval_s=0,
                                            engine=engine, **common))
            print(f"{result.policy:21} {engine_name(engine):8} {'oracle':9} "
                  f"{events / seconds:10,.0f} {result.summary['empty_hosts_pct']:8.2f} "
                  f"{prefix_events / reference_s:12,.0f} {reference_s / fast_prefix_s:8.1f}")
    # The Python engine repredicts on a prefix; the compiled one on the whole trace, where its
    # per-run setup (tenths of a second for the trace's arrays) does not weigh on the rate.
    prefix_arrivals = min(args.model_arrivals, len(trace))
    spans = {"python": (prefix_arrivals, int(trace.arrival_us[prefix_arrivals - 1])),
             "auto": (len(trace), end_us)}
    print("model-like lifetimes (Python engine: the first "
          f"{prefix_arrivals:,} arrivals, {count_events(trace, spans['python'][1]):,} events; "
          f"compiled engine: all {len(trace):,} arrivals):")
    lightgbm = trained_model_lifetimes(trace, feature, args.hosts, args.seed)
    noisy = NoisyOracleLifetimes(trace.lifetime_s(), 0.8, args.seed)
    for make_policy in (Nilas, Lava):
        for engine in engines(make_policy):
            # The compiled engine repredicts exact curves only (the others replay in Python).
            sources = ((("oracle", oracle), ("lightgbm", lightgbm)) if engine == "auto" else
                       (("oracle", oracle), ("noisy 0.8", noisy), ("stand-in", model),
                        ("lightgbm", lightgbm)))
            span_end_us = spans[engine][1]
            span_events = count_events(trace, span_end_us)
            timings = timed_rounds({name: replay(trace, pool, make_policy, source,
                                                 end_us=span_end_us, refresh_interval_s=900.0,
                                                 engine=engine, **common)
                                    for name, source in sources}, args.repeats)
            oracle_rate = span_events / timings["oracle"][1]
            for source_name, (result, seconds) in timings.items():
                rate = span_events / seconds
                detail = "" if source_name == "oracle" else (
                    f"({result.summary['predictions'] / span_events:.1f} "
                    f"repredictions per event, {result.summary['prediction_batches']:,} "
                    f"batches; {rate / oracle_rate:.0%} of oracle)")
                print(f"{result.policy:21} {engine_name(engine):8} {source_name:9} "
                      f"{rate:10,.0f} {result.summary['empty_hosts_pct']:8.2f} {detail}")


def timed_rounds(runs: dict, repeats: int) -> dict:
    """{name: (result, least CPU seconds)} of `repeats` rounds, each running every one of
    `runs` once in turn: a slow spell of a shared machine falls on all of them alike, so
    their ratios hold better than those of runs timed one after the other."""
    timings = {}
    for _ in range(repeats):
        for name, run in runs.items():
            result, seconds = cpu_timed(run)
            timings[name] = (result, min(seconds, timings.get(name, (None, seconds))[1]))
    return timings


def engines(make_policy) -> tuple:
    """The engines to time a policy in: the compiled one too where it replays the policy."""
    policy = make_policy()
    return ("auto", "python") if type(policy) in (BestFit, Nilas, Lava) else ("python",)


def engine_name(engine: str) -> str:
    return "compiled" if engine == "auto" else engine


if __name__ == "__main__":
    main()
