"""Tests of predictors/lifetime_examples.py."""

import numpy as np
import pandas as pd
import pytest

from predictors.lifetime.examples import (
    DAY_S,
    REASON_NEGATIVE_LIFETIME,
    REASON_ZERO_LIFETIME,
    label_known,
    long_lived_labels,
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
