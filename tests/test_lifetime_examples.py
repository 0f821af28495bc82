"""Tests of predictors/lifetime/examples.py."""

import numpy as np
import pandas as pd
import pytest

from predictors.lifetime.examples import (
    ABSOLUTE_AGES,
    DAY_S,
    LIFETIME_FRACTIONS,
    REASON_NEGATIVE_LIFETIME,
    REASON_ZERO_LIFETIME,
    censoring_weighted,
    default_uptime_ages_s,
    label_known,
    long_lived_labels,
    make_age_examples,
    make_examples,
    make_uptime_examples,
    observed_lifetimes,
    split_time_at_fraction,
    split_time_of_span,
    started_before_trace,
    time_split,
)

US = 10**6


def _instances(start_s, end_s) -> pd.DataFrame:
    """end_s None = censored."""
    return pd.DataFrame({
        "instance_id": [f"i{i}" for i in range(len(start_s))],
        "start_time": (np.asarray(start_s, dtype=np.float64) * US).astype(np.int64),
        "end_time": pd.array([None if e is None else int(e * US) for e in end_s],
                             dtype="Int64"),
    })


def test_finished_instance_yields_eight_examples_with_exact_labels():
    examples, rejected = make_uptime_examples(_instances([100], [900]))
    assert len(rejected) == 0
    np.testing.assert_array_equal(examples.row, np.zeros(8))
    np.testing.assert_allclose(examples.uptime_s, np.arange(0, 800, 100))
    np.testing.assert_allclose(examples.log10_remaining_s, np.log10(np.arange(800, 0, -100)))
    assert not examples.censored.any()


def test_cap_bounds_the_remaining_lifetime_label():
    lifetime_s = 10 * DAY_S
    examples, _ = make_uptime_examples(_instances([0], [lifetime_s]), cap_s=7 * DAY_S)
    uptime_s = np.arange(8) / 8 * lifetime_s
    np.testing.assert_allclose(examples.uptime_s, uptime_s)
    np.testing.assert_allclose(examples.log10_remaining_s,
                               np.log10(np.minimum(lifetime_s - uptime_s, 7 * DAY_S)))


def test_censored_instances_give_only_examples_whose_label_is_known():
    # Observed until day 10: the first runs 9 days (censored), the second 3 days (censored).
    instances = _instances([1 * DAY_S, 7 * DAY_S, 0], [None, None, 10 * DAY_S])
    examples, _ = make_uptime_examples(instances, cap_s=7 * DAY_S)
    from_censored = examples.censored
    # (1 - f) * 9 days >= 7 days  <=>  f <= 2/9: f = 0 and 1/8.
    np.testing.assert_array_equal(examples.row[from_censored], [0, 0])
    np.testing.assert_allclose(examples.uptime_s[from_censored], [0, 9 * DAY_S / 8])
    np.testing.assert_allclose(examples.log10_remaining_s[from_censored],
                               np.log10(7 * DAY_S))
    assert 1 not in examples.row
    assert (examples.row[~from_censored] == 2).sum() == 8


def test_non_positive_lifetimes_are_rejected_with_reasons():
    examples, rejected = make_uptime_examples(_instances([10, 10, 10], [10, 5, 20]))
    assert list(rejected["instance_id"]) == ["i0", "i1"]
    assert list(rejected["reason"]) == [REASON_ZERO_LIFETIME, REASON_NEGATIVE_LIFETIME]
    assert list(examples.instances["instance_id"]) == ["i2"]
    with pytest.raises(ValueError, match="reject_invalid_lifetimes"):
        observed_lifetimes(_instances([10], [10]))


def test_remaining_below_the_floor_is_clipped():
    examples, _ = make_uptime_examples(_instances([0], [4]), min_remaining_s=1.0)
    # Remaining 4, 3.5, ..., 0.5 s: the last one is floored at 1 s.
    np.testing.assert_allclose(examples.log10_remaining_s,
                               np.log10([4, 3.5, 3, 2.5, 2, 1.5, 1, 1]))


def test_vectorized_examples_equal_a_per_row_reference():
    rng = np.random.default_rng(7)
    n = 300
    start_s = rng.uniform(0, 20 * DAY_S, n)
    lifetime_s = 10 ** rng.uniform(0, 6.5, n)
    end_s = [None if s + t > 20 * DAY_S else s + t for s, t in zip(start_s, lifetime_s)]
    instances = _instances(start_s, end_s)
    cap_s, fractions = 7 * DAY_S, [0, 0.25, 0.5, 0.75]
    examples, _ = make_uptime_examples(instances, cap_s=cap_s, uptime_fractions=fractions,
                                       observation_end_us=int(20 * DAY_S * US))
    expected = []
    for i, row in instances.iterrows():
        finished = not pd.isna(row["end_time"])
        duration = ((row["end_time"] if finished else 20 * DAY_S * US) - row["start_time"]) / US
        for f in fractions:
            remaining = duration - f * duration
            if finished or remaining >= cap_s:
                expected.append((i, f * duration,
                                 np.log10(min(max(remaining, 1.0), cap_s)), not finished))
    row, uptime, label, censored = map(np.array, zip(*expected))
    np.testing.assert_array_equal(examples.row, row)
    np.testing.assert_allclose(examples.uptime_s, uptime)
    np.testing.assert_allclose(examples.log10_remaining_s, label)
    np.testing.assert_array_equal(examples.censored, censored)


def test_default_age_grid_is_log_spaced_up_to_the_cap():
    assert default_uptime_ages_s(7 * DAY_S) == (
        0, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 57600, 115200, 230400, 460800)
    assert default_uptime_ages_s(3600) == (0, 60, 300, 900, 1800, 3600)
    assert default_uptime_ages_s(100) == (0, 60)


def test_age_examples_of_finished_instances_exact():
    # Lifetimes 30 s, 1 h, 3 days: alive at 0 only; at 0 .. 30 min; at every age < 3 days.
    examples, rejected = make_age_examples(_instances([0, 50, 100], [30, 3650, 100 + 3 * DAY_S]),
                                           cap_s=DAY_S)
    assert len(rejected) == 0 and examples.augmentation == ABSOLUTE_AGES
    assert examples.uptime_ages_s == default_uptime_ages_s(DAY_S)
    ages = np.array(default_uptime_ages_s(DAY_S))
    np.testing.assert_array_equal(examples.row, [0] + [1] * 5 + [2] * len(ages))
    np.testing.assert_allclose(examples.uptime_s, np.r_[0, ages[:5], ages])
    np.testing.assert_allclose(examples.log10_remaining_s, np.log10(np.r_[
        30, 3600 - ages[:5], np.minimum(3 * DAY_S - ages, DAY_S)]))
    assert not examples.censored.any()


def test_age_examples_label_a_young_vm_long():
    # The point of absolute ages: at 1 minute a 3-day VM's label is the cap, while with
    # fractions every label at uptime u lies in [u/7, 7u].
    instances = _instances([0, 0], [120, 3 * DAY_S])
    by_age, _ = make_age_examples(instances, cap_s=DAY_S, uptime_ages_s=[60])
    np.testing.assert_array_equal(by_age.row, [0, 0, 1, 1])
    np.testing.assert_allclose(by_age.uptime_s, [0, 60, 0, 60])
    np.testing.assert_allclose(by_age.log10_remaining_s,
                               np.log10([120, 60, DAY_S, DAY_S]))
    by_fraction, _ = make_uptime_examples(instances, cap_s=7 * DAY_S)
    young = (by_fraction.uptime_s > 0) & (by_fraction.uptime_s <= 60)
    remaining = 10 ** by_fraction.log10_remaining_s[young]
    assert (remaining <= 7 * by_fraction.uptime_s[young] + 1e-9).all()


def test_age_examples_of_censored_instances_only_where_the_label_is_known():
    # Observed until day 10: i0 runs 9 days (censored), i1 3 days (censored), i2 finished.
    instances = _instances([1 * DAY_S, 7 * DAY_S, 0], [None, None, 10 * DAY_S])
    ages = [0, 3600, 2 * DAY_S, 3 * DAY_S, 20 * DAY_S]
    examples, _ = make_age_examples(instances, cap_s=7 * DAY_S, uptime_ages_s=ages)
    # 9 days − age ≥ 7 days  <=>  age ≤ 2 days; i1 (3 days < cap) gives nothing.
    np.testing.assert_array_equal(examples.row[examples.censored], [0, 0, 0])
    np.testing.assert_allclose(examples.uptime_s[examples.censored], [0, 3600, 2 * DAY_S])
    np.testing.assert_allclose(examples.log10_remaining_s[examples.censored],
                               np.log10(7 * DAY_S))
    assert 1 not in examples.row
    # The finished 10-day VM is alive at every age but 20 days; capped labels.
    finished = examples.row == 2
    np.testing.assert_allclose(examples.uptime_s[finished], ages[:4])
    np.testing.assert_allclose(10 ** examples.log10_remaining_s[finished],
                               [7 * DAY_S, 7 * DAY_S, 7 * DAY_S, 7 * DAY_S])
    assert not examples.censored[finished].any()


def test_age_grid_gets_zero_and_is_sorted_and_bad_settings_are_errors():
    examples, _ = make_age_examples(_instances([0], [1000]), uptime_ages_s=[300, 60, 60])
    np.testing.assert_allclose(examples.uptime_s, [0, 60, 300])
    assert examples.uptime_ages_s == (0, 60, 300)
    with pytest.raises(ValueError, match="uptime_ages_s"):
        make_age_examples(_instances([0], [1000]), uptime_ages_s=[-1])
    with pytest.raises(ValueError, match="unknown augmentation"):
        make_examples(_instances([0], [1000]), "SOMETIMES")
    fractions, _ = make_examples(_instances([0], [1000]), LIFETIME_FRACTIONS)
    assert fractions.augmentation == LIFETIME_FRACTIONS and len(fractions) == 8


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorized_age_examples_equal_a_per_vm_loop(seed):
    rng = np.random.default_rng(seed)
    n = 200
    start_s = rng.uniform(0, 20 * DAY_S, n)
    lifetime_s = 10 ** rng.uniform(0, 6.5, n)
    # Some lifetimes exactly on a grid age: a VM is not alive at its own end.
    lifetime_s[:10] = rng.choice([60.0, 3600.0, 7200.0], 10)
    start_s, lifetime_s = np.round(start_s), np.maximum(np.round(lifetime_s), 1)
    instances = _instances(start_s, [None if s + t > 20 * DAY_S else s + t
                                     for s, t in zip(start_s, lifetime_s)])
    cap_s = float(rng.choice([DAY_S, 7 * DAY_S]))
    ages = sorted(set(rng.choice(default_uptime_ages_s(14 * DAY_S), 8).tolist()) | {0.0})
    observation_end_us = int(20 * DAY_S * US)
    examples, _ = make_age_examples(instances, cap_s=cap_s, uptime_ages_s=ages,
                                    observation_end_us=observation_end_us)
    expected = []
    for i, row in instances.iterrows():
        finished = not pd.isna(row["end_time"])
        end_us = row["end_time"] if finished else observation_end_us
        duration = (end_us - row["start_time"]) / US
        for age in ages:
            remaining = duration - age
            if remaining <= 0:
                continue  # dead (or ending) at this age
            if finished or remaining >= cap_s:
                expected.append((i, age, np.log10(min(max(remaining, 1.0), cap_s)),
                                 not finished))
    row, uptime, label, censored = map(np.array, zip(*expected))
    np.testing.assert_array_equal(examples.row, row)
    np.testing.assert_array_equal(examples.uptime_s, uptime)
    np.testing.assert_allclose(examples.log10_remaining_s, label, rtol=1e-13)
    np.testing.assert_array_equal(examples.censored, censored)


def test_time_split_censors_training_rows_that_end_after_the_split():
    instances = _instances([0, 10, 20, 50, 60], [5, 40, None, 70, None])
    instances["end_type"] = ["FINISH", "KILL", None, "FINISH", None]
    split = time_split(instances, 30 * US)
    assert list(split.train["instance_id"]) == ["i0", "i1", "i2"]
    assert list(split.test["instance_id"]) == ["i3", "i4"]
    assert split.train["end_time"].tolist()[0] == 5 * US
    assert split.train["end_time"].isna().tolist() == [False, True, True]
    assert split.train["end_type"].isna().tolist() == [False, True, True]
    assert split.observation_end_us == 70 * US
    duration_s, finished = observed_lifetimes(split.train, split.split_time_us)
    np.testing.assert_allclose(duration_s, [5, 20, 10])
    np.testing.assert_array_equal(finished, [True, False, False])
    assert split_time_at_fraction(instances, 0.5) == 35 * US


def test_long_lived_labels_know_censored_instances_only_past_the_threshold():
    duration_s = np.array([5.0, 10.0, 12.0, 10.0, 8.0])
    finished = np.array([True, True, True, False, False])
    is_long, known = long_lived_labels(duration_s, finished, threshold_s=10.0)
    np.testing.assert_array_equal(is_long, [False, False, True, True, False])
    np.testing.assert_array_equal(known, [True, True, True, True, False])


def test_split_with_a_given_observation_end_and_the_span_rule():
    instances = _instances([0, 10, 20, 50, 60], [5, 40, None, 70, None])
    split = time_split(instances, 30 * US, observation_end_us=100 * US)
    assert split.observation_end_us == 100 * US
    duration_s, finished = observed_lifetimes(split.test, split.observation_end_us)
    np.testing.assert_allclose(duration_s, [20, 40])
    np.testing.assert_array_equal(finished, [True, False])
    assert split_time_of_span(10 * US, 110 * US, 0.25) == 35 * US
    with pytest.raises(ValueError, match="train_fraction"):
        split_time_of_span(0, 10, 1.0)


def test_started_before_trace_and_label_known_masks():
    instances = _instances([-5, 0, 1, 40, 70], [10, None, 3, None, 80])
    np.testing.assert_array_equal(started_before_trace(instances),
                                  [True, True, False, False, False])
    np.testing.assert_array_equal(started_before_trace(instances, trace_start_us=1 * US),
                                  [True, True, True, False, False])
    # Observed until 100 s: a label up to 60 s is known for starts at or before 40 s.
    np.testing.assert_array_equal(label_known(instances, 100 * US, 60.0),
                                  [True, True, True, True, False])


def test_censoring_weights_by_hand():
    """Arrivals at hours 0, 2, 4, 6, 8 of a period ending at hour 10, cap 5 h: each example
    weighs 1 / the share of arrivals observed for min(lifetime, uptime + cap)."""
    hour = 3600
    instances = _instances([0.5 * hour, 0.5 * hour], [3.5 * hour, None])
    population_us = np.array([0, 2, 4, 6, 8]) * hour * US
    examples, _ = make_age_examples(instances, cap_s=5 * hour, uptime_ages_s=[hour, 4 * hour],
                                    observation_end_us=10 * hour * US)
    weighted = censoring_weighted(examples, population_us, 10 * hour * US,
                                  min_probability=0.25)
    got = sorted(zip(weighted.row, weighted.uptime_s, weighted.weight))
    # The finished one needs 3 h at ages 0 and 1 h (observed that long: 4 of 5 arrivals);
    # the censored one 5 h at age 0 and 6 h at 1 h (3 of 5), 9 h at 4 h (1 of 5 < 0.25:
    # left out).
    assert got == [(0, 0.0, 1.25), (0, hour, 1.25), (1, 0.0, 5 / 3), (1, hour, 5 / 3)]
    assert np.array_equal(examples.sample_weight(), np.ones(len(examples)))


def test_censoring_weights_undo_the_short_skew_of_recent_arrivals():
    """Lifetimes independent of the arrival: at age 0, the weighted mean of the labels of
    every arrival seen until the split matches that of the whole population's, where the
    unweighted mean of the same examples is skewed short."""
    rng = np.random.default_rng(0)
    n, window_s, cap_s = 40_000, 10 * DAY_S, 5 * DAY_S
    start_s = rng.uniform(0, window_s, n)
    lifetime_s = 10 ** rng.uniform(1, 6, n)
    end_s = start_s + lifetime_s
    instances = _instances(start_s, [e if e < window_s else None for e in end_s])
    examples, _ = make_age_examples(instances, cap_s=cap_s, uptime_ages_s=[],
                                    observation_end_us=int(window_s * US))
    weighted = censoring_weighted(examples, instances["start_time"].to_numpy(),
                                  int(window_s * US), min_probability=0.1)
    truth = np.log10(np.clip(lifetime_s, 1, cap_s)).mean()
    plain = examples.log10_remaining_s.mean()
    reweighted = np.average(weighted.log10_remaining_s, weights=weighted.weight)
    assert plain < truth - 0.1
    assert abs(reweighted - truth) < 0.02
