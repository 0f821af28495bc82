"""Benchmark of the lifetime models (predictor level, no Beam), on the Azure V1 vmtable
sample (../shared/data/azure_v1_vmtable_a.csv.gz) as canonical instances.

    python scripts/bench_lifetime.py            # full: all VMs, ~1M training examples
    python scripts/bench_lifetime.py --quick    # 20k reference rows, ~200k examples, 100 trees
    python scripts/bench_lifetime.py --early-stopping-rounds 0   # all 2000 trees
    python scripts/bench_lifetime.py --quick --early-stopping-rounds 0 --num-threads 1

Prints, for both augmentation schemes (absolute ages; fractions of the lifetime): examples
generated per second against a per-row reference; the wall time to train the uptime model
on them (paper defaults, lifetimes capped at 1 day; `--num-threads`); and µs per prediction of
`predict_remaining` for single VMs, batches of 1,000 and the exact `LifetimeCurves` on a
replay-like pattern (1,000 VMs repredicted every simulated minute for an hour).
"""

import argparse
import os
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from fleetcast_testing.azure_samples import AZURE_VMTABLE, load_azure_instances  # noqa: E402
from predictors.lifetime.curves import LifetimeCurves  # noqa: E402
from predictors.lifetime.examples import (  # noqa: E402
    ABSOLUTE_AGES,
    DAY_S,
    LIFETIME_FRACTIONS,
    default_observation_end_us,
    default_uptime_ages_s,
    label_known,
    make_examples,
)
from predictors.lifetime.uptime_model import UptimeLifetimeModel  # noqa: E402

CAP_S = DAY_S


def per_row_examples(instances: pd.DataFrame, examples):
    """Reference: the example semantics of make_examples, one Python loop step per
    (instance, fraction or age) with the settings of `examples`."""
    cap_s, min_remaining_s = examples.cap_s, examples.min_remaining_s
    observation_end_us = max(instances["start_time"].max(), instances["end_time"].max())
    rows, uptimes, labels = [], [], []
    for i, (start, end) in enumerate(zip(instances["start_time"], instances["end_time"])):
        finished = not pd.isna(end)
        duration_s = ((end if finished else observation_end_us) - start) / 1e6
        candidates = ([f * duration_s for f in examples.uptime_fractions]
                      if examples.augmentation == LIFETIME_FRACTIONS else examples.uptime_ages_s)
        for uptime_s in candidates:
            remaining_s = duration_s - uptime_s
            if remaining_s > 0 and (finished or remaining_s >= cap_s):
                rows.append(i)
                uptimes.append(uptime_s)
                labels.append(np.log10(min(max(remaining_s, min_remaining_s), cap_s)))
    return np.array(rows), np.array(uptimes), np.array(labels)


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def scheme_kwargs(augmentation: str) -> dict:
    """The settings of a scheme at the 1-day cap (the default fractions or age grid)."""
    return {"cap_s": CAP_S, **({"uptime_ages_s": default_uptime_ages_s(CAP_S)}
                               if augmentation == ABSOLUTE_AGES else {})}


def bench_examples(instances: pd.DataFrame, reference_rows: int) -> None:
    subset = instances.iloc[:reference_rows].reset_index(drop=True)
    for augmentation in (LIFETIME_FRACTIONS, ABSOLUTE_AGES):
        kwargs = scheme_kwargs(augmentation)
        (examples, _), seconds = timed(make_examples, instances, augmentation, **kwargs)
        (sub_examples, _), sub_seconds = timed(make_examples, subset, augmentation, **kwargs)
        (ref_row, _, ref_label), ref_seconds = timed(per_row_examples, subset, sub_examples)
        assert np.array_equal(ref_row, sub_examples.row)
        assert np.allclose(ref_label, sub_examples.log10_remaining_s)
        print(f"examples, {augmentation}: {len(examples):,} from {len(instances):,} instances "
              f"in {seconds:.2f} s = {len(examples) / seconds:,.0f} examples/s")
        print(f"  same {len(subset):,} instances: vectorized "
              f"{len(sub_examples) / sub_seconds:,.0f} examples/s, per-row reference "
              f"{len(ref_row) / ref_seconds:,.0f} examples/s, "
              f"ratio {ref_seconds / sub_seconds:,.0f}x")


def bench_training(instances: pd.DataFrame, target_examples: int, num_trees: int,
                   num_threads: int, early_stopping_rounds: int) -> UptimeLifetimeModel:
    """Trains as the pipeline does: on the VMs whose label is known at the sample's end (they
    arrived at least the cap before it; the cap is 1 day, as in configs/azure_lifetime), so
    that the time-ordered early-stopping slice is not biased toward short lifetimes. The same
    VMs (a sample giving ~`target_examples` fractional examples) train both schemes; returns
    the ABSOLUTE_AGES model."""
    observation_end_us = default_observation_end_us(instances)
    labeled = instances[label_known(instances, observation_end_us, CAP_S)]
    all_examples, _ = make_examples(labeled, LIFETIME_FRACTIONS, cap_s=CAP_S,
                                    observation_end_us=observation_end_us)
    fraction = min(1.0, target_examples / len(all_examples))
    sample = labeled[np.random.default_rng(0).random(len(labeled)) < fraction]
    sample = sample.reset_index(drop=True)
    for augmentation in (LIFETIME_FRACTIONS, ABSOLUTE_AGES):
        examples, _ = make_examples(sample, augmentation, observation_end_us=observation_end_us,
                                    **scheme_kwargs(augmentation))
        model = UptimeLifetimeModel(num_trees=num_trees, num_threads=num_threads,
                                    early_stopping_rounds=early_stopping_rounds)
        _, seconds = timed(model.fit, examples)
        print(f"training, {augmentation}: {len(examples):,} examples of {len(sample):,} VMs, "
              f"{len(model.feature_names)} features, {model.booster_.num_trees()} trees kept "
              f"(max {num_trees}, early stopping after {early_stopping_rounds} rounds, "
              f"0 = off), {num_threads} threads: {seconds:.1f} s wall")
    return model


def bench_prediction(model: UptimeLifetimeModel, instances: pd.DataFrame) -> None:
    rng = np.random.default_rng(1)
    resident = instances.iloc[rng.choice(len(instances), 1000, replace=False)]
    features = model.encode(resident)
    uptime_s = 10 ** rng.uniform(1, np.log10(7 * DAY_S), len(features))

    model.predict_remaining(features[:1], uptime_s[:1])
    single_calls = 300
    _, seconds = timed(lambda: [model.predict_remaining(features[i:i + 1], uptime_s[i:i + 1])
                                for i in range(single_calls)])
    single_us = seconds / single_calls * 1e6

    repeats = 20
    _, seconds = timed(lambda: [model.predict_remaining(features, uptime_s)
                                for _ in range(repeats)])
    batch_us = seconds / (repeats * len(features)) * 1e6

    # Replay-like: the same 1,000 VMs repredicted every simulated minute for one hour.
    cache, build_seconds = timed(LifetimeCurves, model, features)
    rows = np.arange(len(features))
    minutes = 60

    def replay():
        for minute in range(minutes):
            cache.predict_remaining_s(rows, uptime_s + 60.0 * minute)

    _, replay_seconds = timed(replay)
    cached_us = (build_seconds + replay_seconds) / (minutes * len(features)) * 1e6
    check = cache.predict_remaining_s(rows, uptime_s + 60.0 * 7)
    assert np.array_equal(check, model.predict_remaining(features, uptime_s + 60.0 * 7))

    print(f"prediction ({model.booster_.num_trees()} trees, "
          f"predict_num_threads={model.predict_num_threads}):")
    print(f"  single-VM call        {single_us:8.1f} us/prediction (reference)")
    print(f"  batch of 1,000 VMs    {batch_us:8.2f} us/prediction, {single_us / batch_us:6.1f}x "
          f"vs single calls")
    print(f"  cached replay, 1,000 VMs x 60 minutes (incl. cache build and misses) "
          f"{cached_us:.3f} us/prediction, {single_us / cached_us:,.0f}x vs single calls, "
          f"{batch_us / cached_us:.1f}x vs uncached batches")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--num-threads", type=int, default=2)
    parser.add_argument("--early-stopping-rounds", type=int, default=50,
                        help="0 trains every tree (the paper's 2000 in full mode)")
    args = parser.parse_args()
    if not AZURE_VMTABLE.exists():
        sys.exit(f"missing {AZURE_VMTABLE} (the Azure V1 sample in shared/data)")
    instances = load_azure_instances(AZURE_VMTABLE)
    bench_examples(instances, reference_rows=20_000 if args.quick else len(instances))
    model = bench_training(instances, 200_000 if args.quick else 1_000_000,
                           100 if args.quick else 2000, args.num_threads,
                           args.early_stopping_rounds)
    bench_prediction(model, instances)


if __name__ == "__main__":
    main()
