"""Evaluation of the lifetime models ([Ling25ext] §6.4–6.5, App. B–C; [Barbalho23] §5.1,
Table 3).

Metric functions work on arrays; report functions run a model (`encode(instances)`,
`predict_remaining(features, uptime_s)` in seconds; the LA classifier's
`predict_proba_long`) over test instances and return DataFrames, documented per function,
that become the evaluation tables. They take the test period's `observation_end_us`:
classification counts a censored instance once its class is known, the uptime-quantile
reports use finished instances only, the C-index every instance with its censoring.

`long_lived_by_age` repredicts at absolute ages, as a scheduler does. The uptime-quantile
reports ([Ling25ext] Fig. 9, App. C) set the uptime to a fraction of the *true* lifetime, so
the input carries part of the answer; their tables say so (`leaks_lifetime`). A "long"
decision is a threshold on the predicted lifetime (regressors) or on P(lifetime > θ |
features, uptime) (`UptimeLongLivedClassifier`), chosen per age on a validation slice of the
training period to reach a target recall (`decision_thresholds_at_recall`), never on test data.
"""

from typing import Mapping, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from predictors.lifetime.examples import (
    DAY_S,
    DEFAULT_CAP_S,
    DEFAULT_MIN_REMAINING_S,
    long_lived_labels,
    observed_lifetimes,
)
from predictors.lifetime.features import Instances, instances_frame
from predictors.lifetime.uptime_classifier import UptimeLongLivedClassifier

LONG_LIVED_THRESHOLD_S = 7 * DAY_S
# A regressor of capped log lifetimes predicts long VMs somewhat below the cap (it averages
# log labels), so ">7 days" is decided at a predicted 3.5 days: a factor 2 (0.3 in log10)
# of tolerance. Precision at fixed recall, AUC and AP do not depend on this choice.
LONG_LIVED_DECISION_S = 3.5 * DAY_S
DEFAULT_RECALLS = (0.70, 0.75, 0.80, 0.85)
# |log10 error| bins of the App. C histogram (a factor 10 error is 1.0).
ERROR_BIN_EDGES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, np.inf)


def _precision_recall_points(is_positive: np.ndarray, score: np.ndarray
                             ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(s, precision, recall) of "score ≥ s" for each distinct score s, s descending."""
    order = np.argsort(-score, kind="stable")
    sorted_score, positive = score[order], is_positive[order]
    last_of_score = np.r_[np.flatnonzero(np.diff(sorted_score) != 0), len(score) - 1]
    true_positives = np.cumsum(positive)[last_of_score]
    return (sorted_score[last_of_score], true_positives / (last_of_score + 1.0),
            true_positives / positive.sum())


def roc_auc(is_positive: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve (Mann–Whitney: P(score_pos > score_neg) + ½ P(tie));
    NaN without both classes."""
    is_positive = np.asarray(is_positive, dtype=bool)
    n_positive = int(is_positive.sum())
    n_negative = len(is_positive) - n_positive
    if n_positive == 0 or n_negative == 0:
        return float("nan")
    ranks = rankdata(score)
    return float((ranks[is_positive].sum() - n_positive * (n_positive + 1) / 2)
                 / (n_positive * n_negative))


def average_precision(is_positive: np.ndarray, score: np.ndarray) -> float:
    """AP = Σ_k (R_k − R_{k−1}) P_k over distinct score thresholds; NaN without positives."""
    is_positive = np.asarray(is_positive, dtype=bool)
    if not is_positive.any():
        return float("nan")
    _, precision, recall = _precision_recall_points(is_positive, np.asarray(score, np.float64))
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def precision_at_recall(is_positive: np.ndarray, score: np.ndarray, recall: float) -> float:
    """Best precision of a threshold "score ≥ s" whose recall is at least `recall` ([Barbalho23]
    Table 3's P@R); NaN without positives."""
    is_positive = np.asarray(is_positive, dtype=bool)
    if not is_positive.any():
        return float("nan")
    _, precision, recalls = _precision_recall_points(is_positive, np.asarray(score, np.float64))
    return float(precision[recalls >= recall - 1e-12].max())


def threshold_at_recall(is_positive: np.ndarray, score: np.ndarray, recall: float) -> float:
    """The highest s such that "score ≥ s" has recall ≥ `recall` ([Barbalho23] App. C.2 sets LA's
    operating point by a target recall); NaN without positives."""
    is_positive = np.asarray(is_positive, dtype=bool)
    if not is_positive.any():
        return float("nan")
    thresholds, _, recalls = _precision_recall_points(is_positive,
                                                      np.asarray(score, np.float64))
    return float(thresholds[np.argmax(recalls >= recall - 1e-12)])


def precision_recall_f1(is_positive: np.ndarray, predicted_positive: np.ndarray
                        ) -> Tuple[float, float, float]:
    """(precision, recall, F1) of hard predictions; a ratio with a zero denominator is 0,
    all three NaN (null in the tables) without an instance."""
    is_positive = np.asarray(is_positive, dtype=bool)
    predicted_positive = np.asarray(predicted_positive, dtype=bool)
    if not len(is_positive):
        return float("nan"), float("nan"), float("nan")
    true_positives = np.count_nonzero(is_positive & predicted_positive)
    n_predicted, n_positive = np.count_nonzero(predicted_positive), np.count_nonzero(is_positive)
    precision = true_positives / n_predicted if n_predicted else 0.0
    recall = true_positives / n_positive if n_positive else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return float(precision), float(recall), float(f1)


def long_lived_rate(instances: Instances, *, observation_end_us: Optional[int],
                    threshold_s: float) -> float:
    """The share of `instances` known to live beyond `threshold_s` among those whose class
    is known when observed until `observation_end_us`, 0-1 (NaN without one)."""
    duration_s, finished = observed_lifetimes(instances_frame(instances), observation_end_us)
    is_long, known = long_lived_labels(duration_s, finished, threshold_s)
    return float(is_long[known].mean()) if known.any() else float("nan")


def trivial_f1s(n: int, n_positive: int, rate: float) -> Tuple[float, float]:
    """The F1 of "long-lived" that needs no model, on n instances of which n_positive are
    long-lived: (calling every instance long-lived, calling each one long-lived at random
    with probability `rate`, in expectation). The first is 2b / (1 + b) with b the base rate
    n_positive / n; the second 2br / (b + r), its precision b and its recall r. NaN
    without an instance; 0 where the F1's denominator is."""
    if n == 0:
        return float("nan"), float("nan")
    base = n_positive / n
    every = 2 * base / (1 + base)
    at_rate = 2 * base * rate / (base + rate) if base + rate > 0 else 0.0
    return float(every), float(at_rate)


def binary_classification_metrics(is_positive: np.ndarray, score: np.ndarray,
                                  decision_threshold: float,
                                  recalls: Sequence[float] = DEFAULT_RECALLS) -> pd.DataFrame:
    """One-row DataFrame: n, n_positive, decision_threshold, precision, recall, f1 (of
    "score ≥ decision_threshold"), auc, average_precision, and precision_at_recall_<r> for
    each r in `recalls`, r in percent (precision_at_recall_70 for 0.70: column names that
    BigQuery accepts too)."""
    is_positive = np.asarray(is_positive, dtype=bool)
    score = np.asarray(score, dtype=np.float64)
    precision, recall, f1 = precision_recall_f1(is_positive, score >= decision_threshold)
    row = {"n": len(score), "n_positive": int(is_positive.sum()),
           "decision_threshold": float(decision_threshold), "precision": precision,
           "recall": recall, "f1": f1, "auc": roc_auc(is_positive, score),
           "average_precision": average_precision(is_positive, score)}
    for r in recalls:
        row[f"precision_at_recall_{round(100 * r)}"] = precision_at_recall(is_positive, score,
                                                                           r)
    return pd.DataFrame([row])


def _later_greater_and_equal(rank: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """For each position i: #{j > i : rank_j > rank_i} and #{j > i : rank_j == rank_i}.

    Bottom-up merge counting: at level L every left block of 2^L positions is compared with
    its right sibling block by a sort + binary search over (block, rank) keys, all blocks at
    once. O(n log² n), vectorized.
    """
    n = len(rank)
    greater = np.zeros(n, dtype=np.int64)
    equal = np.zeros(n, dtype=np.int64)
    positions = np.arange(n, dtype=np.int64)
    key_range = int(rank.max()) + 2 if n else 1
    size = 1
    while size < n:
        block = positions // (2 * size)
        is_left = (positions // size) % 2 == 0
        right_keys = np.sort(block[~is_left] * key_range + rank[~is_left])
        left_keys = block[is_left] * key_range + rank[is_left]
        block_end = np.searchsorted(right_keys, (block[is_left] + 1) * key_range, side="left")
        after_equal = np.searchsorted(right_keys, left_keys, side="right")
        first_equal = np.searchsorted(right_keys, left_keys, side="left")
        greater[is_left] += block_end - after_equal
        equal[is_left] += after_equal - first_equal
        size *= 2
    return greater, equal


def _pairs_within_groups(*keys: np.ndarray) -> int:
    """Σ over groups of equal key tuples of C(size, 2)."""
    if len(keys[0]) == 0:
        return 0
    _, counts = np.unique(np.column_stack(keys), axis=0, return_counts=True)
    return int(np.sum(counts * (counts - 1) // 2))


def concordance_index(duration: np.ndarray, finished: np.ndarray, predicted: np.ndarray
                      ) -> float:
    """Harrell's C-index of predicted lifetimes against right-censored durations.

    A pair (i, j) is comparable when i finished first: finished_i and (duration_i <
    duration_j, or equal durations with j censored, since j then outlived i). It is
    concordant when predicted_i < predicted_j; equal predictions count ½. Two exits at the
    same time are not comparable. NaN without comparable pairs. O(n log² n).

    Args:
      duration: (n,) lifetime or censoring time; finished: (n,) bool;
      predicted: (n,) predicted lifetime (any monotone transform gives the same C).
    """
    duration = np.asarray(duration, dtype=np.float64)
    finished = np.asarray(finished, dtype=bool)
    predicted = np.asarray(predicted, dtype=np.float64)
    # Duration ascending, exits before censorings at equal duration, prediction descending
    # among equal-duration exits: every comparable j of an exit i comes after i; the
    # non-comparable ones that also come after it are same-duration exits, whose
    # predictions are not above i's, so they add only ties, removed below.
    order = np.lexsort((-predicted, ~finished, duration))
    d, e = duration[order], finished[order]
    _, rank = np.unique(predicted[order], return_inverse=True)
    greater, equal = _later_greater_and_equal(rank.reshape(-1).astype(np.int64))
    n = len(d)
    exits = np.flatnonzero(e)
    comparable = np.sum(n - 1 - exits) - _pairs_within_groups(d[e])
    if comparable == 0:
        return float("nan")
    tied = equal[exits].sum() - _pairs_within_groups(d[e], predicted[order][e])
    return float((greater[exits].sum() + 0.5 * tied) / comparable)


def _finished_test_instances(instances: Instances, observation_end_us: Optional[int]):
    frame = instances_frame(instances)
    duration_s, finished = observed_lifetimes(frame, observation_end_us)
    return frame[finished], duration_s[finished]


def predict_at_uptime_quantiles(model, instances: Instances, *, n_quantiles: int = 20,
                                observation_end_us: Optional[int] = None
                                ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Repredictions of finished instances at uptimes q/n_quantiles · T, q = 0..n−1
    ([Ling25ext] §6.5).

    Returns:
      (lifetime_s, uptime_s, predicted_remaining_s): (n_finished,), and two
      (n_finished, n_quantiles) arrays.
    """
    finished, lifetime_s = _finished_test_instances(instances, observation_end_us)
    uptime_s = lifetime_s[:, None] * (np.arange(n_quantiles) / n_quantiles)[None, :]
    if len(lifetime_s) == 0:
        return lifetime_s, uptime_s, np.empty_like(uptime_s)
    features = model.encode(finished)
    predicted = np.column_stack([model.predict_remaining(features, uptime_s[:, q])
                                 for q in range(n_quantiles)])
    return lifetime_s, uptime_s, predicted


def log10_errors(lifetime_s: np.ndarray, uptime_s: np.ndarray, predicted_remaining_s:
                 np.ndarray, *, cap_s: float = DEFAULT_CAP_S,
                 min_remaining_s: float = DEFAULT_MIN_REMAINING_S) -> np.ndarray:
    """|log10 predicted − log10 true remaining| ([Ling25ext] App. C), the truth clipped to
    [min_remaining_s, cap_s] like the training labels; shaped like `uptime_s`."""
    true_remaining_s = np.clip(np.asarray(lifetime_s)[:, None] - uptime_s,
                               min_remaining_s, cap_s)
    return np.abs(np.log10(predicted_remaining_s) - np.log10(true_remaining_s))


def long_lived_metrics(model, instances: Instances, *, observation_end_us: Optional[int] = None,
                       threshold_s: float = LONG_LIVED_THRESHOLD_S,
                       decision_threshold_s: float = LONG_LIVED_DECISION_S,
                       recalls: Sequence[float] = (0.70,)) -> pd.DataFrame:
    """"Lives beyond `threshold_s`" from the prediction at uptime 0 ([Ling25ext] §3, Table 4).

    The score is the predicted lifetime at arrival; instances whose class is unknown
    (censored before the threshold) are left out. Columns: those of
    `binary_classification_metrics` plus threshold_s.
    """
    frame = instances_frame(instances)
    duration_s, finished = observed_lifetimes(frame, observation_end_us)
    is_long, known = long_lived_labels(duration_s, finished, threshold_s)
    score, _ = long_lived_scores(model, model.encode(frame[known]), 0.0)
    table = binary_classification_metrics(is_long[known], score, decision_threshold_s, recalls)
    return table.assign(threshold_s=float(threshold_s))


def long_lived_scores(model, features: np.ndarray, age_s: float
                      ) -> Tuple[np.ndarray, np.ndarray]:
    """(score of "long-lived", predicted remaining s) of encoded rows at uptime `age_s`:
    the uptime classifier's probability (remaining NaN), else a regressor's predicted
    lifetime age + remaining. float64 (n,) each."""
    uptime_s = np.full(len(features), float(age_s))
    if isinstance(model, UptimeLongLivedClassifier):
        return model.predict_proba_long(features, uptime_s), np.full(len(features), np.nan)
    remaining_s = np.asarray(model.predict_remaining(features, uptime_s), dtype=np.float64)
    return age_s + remaining_s, remaining_s


def _scores_at_ages(model, instances: Instances, ages_s: Sequence[float], *,
                    observation_end_us: Optional[int], threshold_s: float):
    """For each age a: (is_long, score, predicted remaining) of the instances alive at a
    (observed duration > a) whose class is known (`long_lived_scores`)."""
    frame = instances_frame(instances)
    duration_s, finished = observed_lifetimes(frame, observation_end_us)
    is_long, known = long_lived_labels(duration_s, finished, threshold_s)
    features = model.encode(frame) if len(frame) else None
    for age_s in ages_s:
        rows = np.flatnonzero(known & (duration_s > age_s))
        if len(rows) == 0:
            yield is_long[rows], np.empty(0), np.empty(0)
            continue
        yield (is_long[rows],) + long_lived_scores(model, features[rows], age_s)


def decision_thresholds_at_recall(model, instances: Instances, ages_s: Sequence[float], *,
                                  target_recall: float,
                                  observation_end_us: Optional[int] = None,
                                  threshold_s: float = LONG_LIVED_THRESHOLD_S) -> np.ndarray:
    """The long-lived decision at each age, chosen on `instances` (a validation slice of
    the training period, observed until `observation_end_us`): a predicted lifetime (s)
    for a regressor, a probability for the uptime classifier.

    At age a: the highest threshold s such that "score ≥ s" has recall ≥ `target_recall`
    of the long-lived instances alive at a (`threshold_at_recall`). For a regressor never
    above `threshold_s` (a predicted lifetime beyond the class threshold always says long),
    and `threshold_s` when no long-lived instance is alive at a; for the classifier 0.5
    then.

    Returns:
      float64 (len(ages_s),).
    """
    probability = isinstance(model, UptimeLongLivedClassifier)
    highest, fallback = (1.0, 0.5) if probability else (threshold_s, threshold_s)
    thresholds = []
    for is_long, score, _ in _scores_at_ages(model, instances, ages_s,
                                             observation_end_us=observation_end_us,
                                             threshold_s=threshold_s):
        chosen = threshold_at_recall(is_long, score, target_recall)
        thresholds.append(fallback if np.isnan(chosen) else min(chosen, highest))
    return np.asarray(thresholds, dtype=np.float64)


def long_lived_by_age(model, instances: Instances, ages_s: Sequence[float],
                      decision_thresholds_s: Sequence[float], *,
                      observation_end_us: Optional[int] = None,
                      threshold_s: float = LONG_LIVED_THRESHOLD_S,
                      recalls: Sequence[float] = (0.70,)) -> pd.DataFrame:
    """"Lives beyond `threshold_s`" repredicted at absolute ages: at each age, the instances
    alive then (observed duration > age) whose class is known, scored by their predicted
    lifetime age + predicted remaining (by P(lifetime > threshold_s) for the uptime
    classifier, whose predicted remaining columns are NaN).

    Args:
      ages_s: the ages, seconds; decision_thresholds_s: the decision at each age (a
        predicted lifetime, s; `decision_thresholds_at_recall` on validation data).

    Columns: uptime_s, then those of `binary_classification_metrics` (n, n_positive,
    decision_threshold, precision, recall, f1, auc, average_precision,
    precision_at_recall_<r>), max_predicted_remaining_s and median_predicted_remaining_s
    (NaN when no instance is alive at the age), threshold_s.
    """
    rows = []
    scored = _scores_at_ages(model, instances, ages_s, observation_end_us=observation_end_us,
                             threshold_s=threshold_s)
    for age_s, decision_s, (is_long, score, remaining_s) in zip(ages_s, decision_thresholds_s,
                                                                scored):
        row = binary_classification_metrics(is_long, score, decision_s, recalls)
        some = len(remaining_s) > 0 and not np.isnan(remaining_s).all()
        rows.append(row.assign(
            uptime_s=float(age_s),
            max_predicted_remaining_s=float(remaining_s.max()) if some else np.nan,
            median_predicted_remaining_s=float(np.median(remaining_s)) if some else np.nan))
    table = pd.concat(rows, ignore_index=True)
    columns = ["uptime_s"] + [c for c in table.columns if c != "uptime_s"]
    return table[columns].assign(threshold_s=float(threshold_s))


def f1_by_uptime(lifetime_s: np.ndarray, uptime_s: np.ndarray,
                 predicted_remaining_s: np.ndarray, *,
                 threshold_s: float = LONG_LIVED_THRESHOLD_S,
                 decision_threshold_s: float = LONG_LIVED_DECISION_S) -> pd.DataFrame:
    """F1 of "lives beyond threshold_s" when repredicting at uptime q/n · T ([Ling25ext] Fig. 9).

    Args: the output of `predict_at_uptime_quantiles`, with n = uptime_s.shape[1].

    Predicted lifetime = uptime + predicted remaining; long when ≥ decision_threshold_s.
    Finished instances only (the uptime is a fraction of the true lifetime). With a decision
    below `threshold_s`, every instance older than the decision is predicted long, so F1
    falls at high quantiles; decision_threshold_s = threshold_s gives the shape of
    [Ling25ext] Fig. 9 except at uptime 0, where capped labels keep predictions below the cap.

    The uptime is a fraction of the true lifetime, so the input leaks the answer (see the
    module docstring; `long_lived_by_age` is the view without the leak).

    Columns: quantile (int q), uptime_fraction (q / n), n, precision, recall, f1,
    decision_threshold_s, leaks_lifetime (always True).
    """
    n_quantiles = uptime_s.shape[1]
    is_long = lifetime_s > threshold_s
    rows = []
    for q in range(n_quantiles):
        predicted_long = uptime_s[:, q] + predicted_remaining_s[:, q] >= decision_threshold_s
        precision, recall, f1 = precision_recall_f1(is_long, predicted_long)
        rows.append({"quantile": q, "uptime_fraction": q / n_quantiles, "n": len(lifetime_s),
                     "precision": precision, "recall": recall, "f1": f1,
                     "decision_threshold_s": float(decision_threshold_s),
                     "leaks_lifetime": True})
    return pd.DataFrame(rows)


def f1_by_uptime_quantile(model, instances: Instances, *, n_quantiles: int = 20,
                          observation_end_us: Optional[int] = None,
                          threshold_s: float = LONG_LIVED_THRESHOLD_S,
                          decision_threshold_s: float = LONG_LIVED_DECISION_S) -> pd.DataFrame:
    """`f1_by_uptime` of `model` on the finished `instances`."""
    return f1_by_uptime(
        *predict_at_uptime_quantiles(model, instances, n_quantiles=n_quantiles,
                                     observation_end_us=observation_end_us),
        threshold_s=threshold_s, decision_threshold_s=decision_threshold_s)


def error_histogram(lifetime_s: np.ndarray, uptime_s: np.ndarray,
                    predicted_remaining_s: np.ndarray, *, cap_s: float = DEFAULT_CAP_S,
                    min_remaining_s: float = DEFAULT_MIN_REMAINING_S,
                    bin_edges: Sequence[float] = ERROR_BIN_EDGES) -> pd.DataFrame:
    """Histogram of |log10 error| without and with repredictions ([Ling25ext] App. C, Fig. 12).

    Args: the output of `predict_at_uptime_quantiles`; cap_s and min_remaining_s clip the
    true remaining lifetime like the training labels.

    "initial" holds the prediction at arrival of each finished instance; "with
    repredictions" adds the repredictions at uptimes q/n · T, q = 1..n−1.

    Columns: error_lower, error_upper (bin [lower, upper)), initial_count, initial_fraction,
    with_repredictions_count, with_repredictions_fraction.
    """
    errors = log10_errors(lifetime_s, uptime_s, predicted_remaining_s, cap_s=cap_s,
                          min_remaining_s=min_remaining_s)
    edges = np.asarray(bin_edges, dtype=np.float64)
    initial, _ = np.histogram(errors[:, 0], bins=edges)
    everything, _ = np.histogram(errors.reshape(-1), bins=edges)
    return pd.DataFrame({
        "error_lower": edges[:-1], "error_upper": edges[1:],
        "initial_count": initial, "initial_fraction": initial / max(errors.shape[0], 1),
        "with_repredictions_count": everything,
        "with_repredictions_fraction": everything / max(errors.size, 1),
    })


def log10_error_histogram(model, instances: Instances, *, n_quantiles: int = 20,
                          observation_end_us: Optional[int] = None,
                          cap_s: float = DEFAULT_CAP_S,
                          min_remaining_s: float = DEFAULT_MIN_REMAINING_S,
                          bin_edges: Sequence[float] = ERROR_BIN_EDGES) -> pd.DataFrame:
    """`error_histogram` of `model` on the finished `instances`."""
    return error_histogram(
        *predict_at_uptime_quantiles(model, instances, n_quantiles=n_quantiles,
                                     observation_end_us=observation_end_us),
        cap_s=cap_s, min_remaining_s=min_remaining_s, bin_edges=bin_edges)


def concordance_table(models: Mapping[str, object], instances: Instances, *,
                      observation_end_us: Optional[int] = None,
                      cap_s: float = DEFAULT_CAP_S) -> pd.DataFrame:
    """C-index of each model's lifetime predicted at arrival ([Ling25ext] Table 4).

    The score is `predict_remaining` at uptime 0, or `predict_proba_long` for a classifier
    (the LA classifier). Durations are censored at `cap_s` as well (an instance living past
    the cap counts as censored there): the models are trained on capped labels and cannot
    rank beyond.

    Columns: model (the mapping's key), n, c_index.
    """
    frame = instances_frame(instances)
    duration_s, finished = observed_lifetimes(frame, observation_end_us)
    rows = []
    for name, model in models.items():
        rows.append({"model": name, "n": len(frame), "c_index": capped_concordance(
            duration_s, finished, arrival_scores(model, model.encode(frame)), cap_s)})
    return pd.DataFrame(rows)


def arrival_scores(model, features: np.ndarray) -> np.ndarray:
    """The model's answer at arrival of encoded rows, float64 (n,), larger for a longer
    life: P(long) for a classifier, the predicted remaining lifetime (s) for a regressor."""
    if hasattr(model, "predict_proba_long"):
        return np.asarray(model.predict_proba_long(features), dtype=np.float64)
    return np.asarray(model.predict_remaining(features, np.zeros(len(features))), np.float64)


def capped_concordance(duration_s: np.ndarray, finished: np.ndarray, score: np.ndarray,
                       cap_s: float) -> float:
    """`concordance_index` with durations censored at `cap_s` as well (an instance living
    past the cap counts as censored there): the models learn capped labels."""
    event = finished & (duration_s <= cap_s)
    return concordance_index(np.minimum(duration_s, cap_s), event, score)


def metrics_by_period(score: np.ndarray, start_us: np.ndarray, duration_s: np.ndarray,
                      finished: np.ndarray, *, split_time_us: int, period_s: float,
                      threshold_s: float, decision_threshold: float, cap_s: float,
                      recalls: Sequence[float] = (0.70,)) -> pd.DataFrame:
    """A model's answers at arrival scored per period after the split: the age of the
    model ([Barbalho23] Fig. 14).

    Args:
      score: (n,) the answer at arrival (`arrival_scores`) of instances arriving at
        `start_us` (n,) ≥ split_time_us, observed for `duration_s` (n,), `finished` (n,).
      period_s: the periods' length; threshold_s, decision_threshold: "long-lived" and the
        score from which the model says so.

    Returns:
      One row per period with an arrival: period (0-based), period_start_us, instances, the
      `binary_classification_metrics` columns over the instances whose class is known, and
      c_index over all of them (`capped_concordance`).
    """
    period_us = int(round(period_s * 1e6))
    period = (np.asarray(start_us, np.int64) - int(split_time_us)) // period_us
    is_long, known = long_lived_labels(duration_s, finished, threshold_s)
    rows = []
    for p in np.unique(period):
        at = period == p
        labelled = at & known
        row = binary_classification_metrics(is_long[labelled], score[labelled],
                                            decision_threshold, recalls)
        rows.append(row.assign(
            period=int(p), period_start_us=int(split_time_us) + int(p) * period_us,
            instances=int(at.sum()), threshold_s=float(threshold_s),
            c_index=capped_concordance(duration_s[at], finished[at], score[at], cap_s)))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def la_classifier_metrics(classifier, instances: Instances, *,
                          observation_end_us: Optional[int] = None,
                          recalls: Sequence[float] = DEFAULT_RECALLS) -> pd.DataFrame:
    """AUC, AP, F1 and precision at recall 0.70–0.85 of the LA classifier ([Barbalho23]
    Tables 1, 3).

    Instances whose class is unknown (censored before the threshold) are left out.
    Columns: those of `binary_classification_metrics` (decision_threshold is the
    classifier's decision probability) plus threshold_s.
    """
    frame = instances_frame(instances)
    duration_s, finished = observed_lifetimes(frame, observation_end_us)
    threshold_s = float(classifier.threshold_s)
    is_long, known = long_lived_labels(duration_s, finished, threshold_s)
    score = classifier.predict_proba_long(classifier.encode(frame[known]))
    table = binary_classification_metrics(is_long[known], score,
                                          classifier.decision_probability_, recalls)
    return table.assign(threshold_s=threshold_s)
