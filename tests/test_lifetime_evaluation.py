"""Tests of predictors/lifetime/evaluation.py: metrics by hand and against brute force."""

import itertools

import numpy as np
import pandas as pd
import pytest

from predictors.lifetime.evaluation import (
    average_precision,
    binary_classification_metrics,
    concordance_index,
    concordance_table,
    decision_thresholds_at_recall,
    f1_by_uptime_quantile,
    log10_error_histogram,
    long_lived_by_age,
    long_lived_metrics,
    precision_at_recall,
    roc_auc,
    threshold_at_recall,
)
from predictors.lifetime.examples import DAY_S, observed_lifetimes

US = 10**6


def _brute_force_c_index(duration, finished, predicted) -> float:
    concordant = comparable = 0.0
    for i, j in itertools.permutations(range(len(duration)), 2):
        if finished[i] and (duration[i] < duration[j]
                            or (duration[i] == duration[j] and not finished[j])):
            comparable += 1
            concordant += 1.0 if predicted[i] < predicted[j] else (
                0.5 if predicted[i] == predicted[j] else 0.0)
    return concordant / comparable if comparable else float("nan")


def test_c_index_hand_case():
    # Comparable: exit 0 with 1, 2, 3 (all concordant) and exit 2 with 3 (tied prediction);
    # 1 is censored before 2 and 3 exit, so it is compared only with 0. C = 3.5 / 4.
    duration = np.array([1.0, 2.0, 3.0, 4.0])
    finished = np.array([True, False, True, True])
    predicted = np.array([1.0, 5.0, 7.0, 7.0])
    assert concordance_index(duration, finished, predicted) == pytest.approx(3.5 / 4)


@pytest.mark.parametrize("seed", range(6))
def test_c_index_equals_brute_force_with_ties_and_censoring(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 120))
    duration = rng.integers(0, 8, n).astype(float)  # many tied durations
    finished = rng.random(n) < 0.6
    predicted = rng.integers(0, 6, n).astype(float)  # many tied predictions
    expected = _brute_force_c_index(duration, finished, predicted)
    result = concordance_index(duration, finished, predicted)
    assert result == pytest.approx(expected, nan_ok=True)


def test_binary_metrics_by_hand():
    is_positive = np.array([True, False, True, True, False])
    score = np.array([0.9, 0.8, 0.7, 0.4, 0.2])
    row = binary_classification_metrics(is_positive, score, 0.5, recalls=(0.7,)).iloc[0]
    # Predicted positive: the first three, two of them right, of three positives.
    assert row["precision"] == pytest.approx(2 / 3)
    assert row["recall"] == pytest.approx(2 / 3)
    assert row["f1"] == pytest.approx(2 / 3)
    # 4 of the 6 (positive, negative) pairs are ordered right.
    assert row["auc"] == pytest.approx(4 / 6)
    # Steps of recall 1/3 at precision 1, 2/3, 3/4.
    assert row["average_precision"] == pytest.approx((1 + 2 / 3 + 3 / 4) / 3)
    # Recall >= 0.7 needs all three positives: best precision 3/4.
    assert row["precision_at_recall_70"] == pytest.approx(0.75)
    assert row["n"] == 5 and row["n_positive"] == 3
    # The highest score cut reaching the recall: 0.7 keeps 2 of 3 positives, 0.4 all 3.
    assert threshold_at_recall(is_positive, score, 0.5) == 0.7
    assert threshold_at_recall(is_positive, score, 0.7) == 0.4


@pytest.mark.parametrize("seed", range(4))
def test_auc_ap_and_precision_at_recall_equal_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 80
    is_positive = rng.random(n) < 0.3
    score = rng.integers(0, 10, n).astype(float)
    positive, negative = score[is_positive], score[~is_positive]
    pairs = positive[:, None] - negative[None, :]
    assert roc_auc(is_positive, score) == pytest.approx(
        ((pairs > 0).sum() + 0.5 * (pairs == 0).sum()) / pairs.size)
    points = []
    for threshold in sorted(set(score), reverse=True):
        chosen = score >= threshold
        points.append(((chosen & is_positive).sum() / chosen.sum(),
                       (chosen & is_positive).sum() / is_positive.sum()))
    precision, recall = map(np.array, zip(*points))
    assert average_precision(is_positive, score) == pytest.approx(
        np.sum(np.diff(np.r_[0, recall]) * precision))
    assert precision_at_recall(is_positive, score, 0.8) == pytest.approx(
        precision[recall >= 0.8].max())


class _Oracle:
    """Predicts the true remaining lifetime (clipped like the labels)."""

    def __init__(self, observation_end_us=None):
        self.observation_end_us = observation_end_us

    def encode(self, instances):
        duration_s, _ = observed_lifetimes(instances, self.observation_end_us)
        return duration_s

    def predict_remaining(self, features, uptime_s):
        return np.clip(features - uptime_s, 1.0, 7 * DAY_S)


def _instances(lifetime_days, censored=()):
    n = len(lifetime_days)
    end = (np.asarray(lifetime_days) * DAY_S * US).astype(np.int64)
    return pd.DataFrame({
        "instance_id": [f"i{i}" for i in range(n)],
        "start_time": np.zeros(n, dtype=np.int64),
        "end_time": pd.array([None if i in censored else e for i, e in enumerate(end)],
                             dtype="Int64"),
    })


def test_oracle_has_perfect_f1_at_every_uptime_and_zero_error():
    instances = _instances([0.01, 0.5, 3, 6.5, 7.5, 9, 20, 30])
    f1 = f1_by_uptime_quantile(_Oracle(), instances, decision_threshold_s=7 * DAY_S)
    assert list(f1["quantile"]) == list(range(20))
    np.testing.assert_allclose(f1["uptime_fraction"], np.arange(20) / 20)
    np.testing.assert_array_equal(f1["f1"], np.ones(20))
    histogram = log10_error_histogram(_Oracle(), instances)
    assert histogram["initial_count"].tolist()[0] == 8
    assert histogram["with_repredictions_count"].tolist()[0] == 8 * 20
    assert histogram["initial_count"].sum() == 8


def test_quantile_view_says_it_leaks_the_lifetime():
    f1 = f1_by_uptime_quantile(_Oracle(), _instances([1, 8]), decision_threshold_s=7 * DAY_S)
    assert f1["leaks_lifetime"].all() and (f1["decision_threshold_s"] == 7 * DAY_S).all()


LIFETIMES_DAYS = [0.01, 0.5, 3, 6.5, 7.5, 9, 20, 30]
AGES_S = [0, DAY_S, 10 * DAY_S, 40 * DAY_S]


def test_decisions_by_age_by_hand():
    # Predicted lifetime = age + min(T − age, 7 days). At arrival the long VMs (> 7 days)
    # all score 7 days; at day 1 they score 7.5, 8, 8, 8 days and 70 % recall needs 3 of 4,
    # so 8 days, capped at the 7-day class threshold; at day 10 both VMs alive score 17
    # days (capped); at day 40 none is alive: the threshold.
    decisions = decision_thresholds_at_recall(_Oracle(), _instances(LIFETIMES_DAYS), AGES_S,
                                              target_recall=0.7, threshold_s=7 * DAY_S)
    np.testing.assert_allclose(decisions, np.full(4, 7 * DAY_S))
    table = long_lived_by_age(_Oracle(), _instances(LIFETIMES_DAYS), AGES_S, decisions,
                              threshold_s=7 * DAY_S)
    assert table["uptime_s"].tolist() == AGES_S
    assert table["n"].tolist() == [8, 6, 2, 0]
    assert table["n_positive"].tolist() == [4, 4, 2, 0]
    np.testing.assert_array_equal(table["f1"], [1, 1, 1, np.nan])  # n = 0: no F1
    np.testing.assert_allclose(table["max_predicted_remaining_s"].iloc[:3],
                               [7 * DAY_S, 7 * DAY_S, 7 * DAY_S])
    np.testing.assert_allclose(table["median_predicted_remaining_s"].iloc[:3],
                               [6.75 * DAY_S, 6.75 * DAY_S, 7 * DAY_S])
    assert np.isnan(table["max_predicted_remaining_s"].iloc[3])


class _TimidOracle(_Oracle):
    """Ranks like the oracle but predicts 1 % of the true remaining lifetime: it never
    reaches a fixed 7-day decision (issue 11: F1 0 at arrival by construction)."""

    def predict_remaining(self, features, uptime_s):
        return np.clip((features - uptime_s) / 100, 1.0, 7 * DAY_S)


def test_decisions_chosen_on_validation_data_fix_the_timid_model():
    validation, test = _instances(LIFETIMES_DAYS), _instances([0.2, 4, 8, 12])
    fixed = long_lived_by_age(_TimidOracle(), test, [0], [7 * DAY_S], threshold_s=7 * DAY_S)
    assert fixed["f1"].tolist() == [0.0]
    # On validation data, recall 1 of the long VMs needs a decision at 7.5 days / 100.
    decisions = decision_thresholds_at_recall(_TimidOracle(), validation, [0],
                                              target_recall=1.0, threshold_s=7 * DAY_S)
    np.testing.assert_allclose(decisions, [0.075 * DAY_S])
    chosen = long_lived_by_age(_TimidOracle(), test, [0], decisions, threshold_s=7 * DAY_S)
    assert chosen["f1"].tolist() == [1.0]
    assert chosen["decision_threshold"].tolist() == [0.075 * DAY_S]
    # 70 %: the highest threshold keeping 3 of the 4 long validation VMs (9 days / 100).
    np.testing.assert_allclose(decision_thresholds_at_recall(
        _TimidOracle(), validation, [0], target_recall=0.7, threshold_s=7 * DAY_S),
        [0.09 * DAY_S])


def test_long_lived_metrics_leave_out_instances_censored_before_the_threshold():
    # Observed until day 40: i1 censored after 40 days (known long), i2 started on day 38.
    instances = _instances([1, 40, 2, 10])
    instances.loc[2, "start_time"] = int(38 * DAY_S * US)
    instances["end_time"] = pd.array([int(DAY_S * US), None, None, int(10 * DAY_S * US)],
                                     dtype="Int64")
    end_us = int(40 * DAY_S * US)
    row = long_lived_metrics(_Oracle(end_us), instances, observation_end_us=end_us,
                             decision_threshold_s=7 * DAY_S).iloc[0]
    assert row["n"] == 3 and row["n_positive"] == 2
    assert row["f1"] == 1.0 and row["threshold_s"] == 7 * DAY_S


def test_concordance_table_censors_at_the_cap():
    instances = _instances([1, 2, 3, 8, 9])
    table = concordance_table({"oracle": _Oracle()}, instances)
    # 8 and 9 days are censored at the 7-day cap, and the oracle's clipped predictions tie
    # there: only pairs with an exit before the cap count, and the oracle orders them all.
    assert table.to_dict("records") == [{"model": "oracle", "n": 5, "c_index": 1.0}]


class _ProbabilityOracle(_Oracle):
    """A classifier whose P(long) grows with the true lifetime."""

    def predict_proba_long(self, features):
        return features / features.max()


def test_concordance_table_scores_a_classifier_by_its_probability():
    instances = _instances([1, 2, 3, 8, 9])
    table = concordance_table({"la": _ProbabilityOracle()}, instances)
    assert table["c_index"].tolist() == [1.0]
