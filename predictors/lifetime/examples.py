"""Uptime-augmented lifetime examples and the time-based train/test split ([Ling25ext] §3).

An example is (instance, uptime Tu, label), the label log10(clip(T − Tu, min_remaining_s,
cap_s)) of the remaining lifetime in seconds, so that a model learns E[log10 remaining |
features, uptime] and can be repredicted as a VM ages. The uptimes are either:

- ABSOLUTE_AGES (`make_age_examples`, the stage's default): a fixed grid of ages
  (`default_uptime_ages_s`), an example per age the instance is still alive at, so that the
  examples at age a are every VM alive at a and a young VM can be called long;
- LIFETIME_FRACTIONS (`make_uptime_examples`, the paper's): Tu = f·T for fractions f (default
  0, 1/8, ..., 7/8); a label at uptime u > 0 then lies in [u/7, 7u].

The cap (7 days, [Ling25ext] App. B) bounds the label, not the lifetime: a VM living past it
also gives examples at uptimes beyond the cap labelled with the cap ("still long"). A
right-censored instance (end_time null, observed for D) gives an example only where its label
is known whatever its lifetime, D − Tu ≥ cap_s, labelled log10(cap_s); `label_known` selects
the instances old enough for that, which the pipeline trains the regressors on by default.
`censoring_weighted` instead keeps every training instance and weighs each example by the
inverse of the chance that an arrival of the training period had its label seen by the split
(inverse probability of censoring weights). Zero or negative lifetimes are rejected with a
reason.
"""

import dataclasses
from typing import Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from predictors.lifetime.features import Instances, instances_frame

DAY_S = 86400.0
DEFAULT_CAP_S = 7 * DAY_S
DEFAULT_MIN_REMAINING_S = 1.0
UPTIME_FRACTIONS = tuple(i / 8 for i in range(8))
# The augmentation schemes (LifetimeModelConfig.Augmentation names them the same way).
ABSOLUTE_AGES = "ABSOLUTE_AGES"
LIFETIME_FRACTIONS = "LIFETIME_FRACTIONS"
# The start of the default age grid; then 1 h, 2 h, 4 h, ... up to the cap.
_SHORT_AGES_S = (0.0, 60.0, 300.0, 900.0, 1800.0)

REASON_ZERO_LIFETIME = "lifetime is zero (end_time == start_time)"
REASON_NEGATIVE_LIFETIME = "lifetime is negative (end_time < start_time)"
REASON_MISSING_START = "start_time is missing"


def default_uptime_ages_s(cap_s: float = DEFAULT_CAP_S) -> Tuple[float, ...]:
    """The default grid of absolute ages (s): 0, 1 min, 5 min, 15 min, 30 min, then 1 h,
    2 h, 4 h, ... doubling, every age at most `cap_s`."""
    ages = [a for a in _SHORT_AGES_S if a <= cap_s]
    hour = 3600.0
    while hour <= cap_s:
        ages.append(hour)
        hour *= 2
    return tuple(ages)


def reject_invalid_lifetimes(instances: Instances) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """Splits off instances whose lifetime cannot be used.

    Returns:
      (valid, rejected): `valid` holds the usable rows with a fresh 0..n-1 index; `rejected`
      holds the other rows with an extra string column `reason` (one of the REASON_*
      constants), for the pipeline's dead-letter output.
    """
    frame = instances_frame(instances)
    start = pd.to_numeric(frame["start_time"]).to_numpy(np.float64, na_value=np.nan)
    end = pd.to_numeric(frame["end_time"]).to_numpy(np.float64, na_value=np.nan)
    reason = np.full(len(frame), None, dtype=object)
    reason[end < start] = REASON_NEGATIVE_LIFETIME
    reason[end == start] = REASON_ZERO_LIFETIME
    reason[np.isnan(start)] = REASON_MISSING_START
    bad = pd.notna(reason)
    rejected = frame[bad].assign(reason=reason[bad])
    return frame[~bad].reset_index(drop=True), rejected.reset_index(drop=True)


def started_before_trace(instances: Instances, trace_start_us: int = 0) -> np.ndarray:
    """Bool (n,): the instance was already running when the trace began (start_time ≤
    `trace_start_us`: Google v3 writes such starts as 0, the Azure packing trace as negative
    times), so its lifetime is unknown (left-truncated) and it gives no label."""
    frame = instances_frame(instances)
    return pd.to_numeric(frame["start_time"]).to_numpy(np.float64, na_value=np.nan) \
        <= trace_start_us


def default_observation_end_us(instances: Instances) -> int:
    """The latest start or end time in the table: a lower bound of the trace end, which is
    safe for censoring (an instance observed longer than we assume is still censored)."""
    frame = instances_frame(instances)
    latest = pd.concat([frame["start_time"], frame["end_time"]]).max()
    return int(latest)


def observed_lifetimes(instances: Instances, observation_end_us: Optional[int] = None
                       ) -> Tuple[np.ndarray, np.ndarray]:
    """Observed durations and whether each instance finished.

    Args:
      instances: rows with start_time and end_time (µs); must hold no invalid lifetimes.
      observation_end_us: when censored instances stopped being observed; default
        `default_observation_end_us`.

    Returns:
      (duration_s, finished): float64 seconds, the lifetime T where finished, else the
      observed duration D = observation_end − start (T > D); bool, end_time not null.

    Raises:
      ValueError: some rows have a zero or negative lifetime (use reject_invalid_lifetimes).
    """
    frame = instances_frame(instances)
    start = pd.to_numeric(frame["start_time"]).to_numpy(np.float64, na_value=np.nan)
    end = pd.to_numeric(frame["end_time"]).to_numpy(np.float64, na_value=np.nan)
    invalid = int(np.count_nonzero(np.isnan(start) | (end <= start)))
    if invalid:
        raise ValueError(f"{invalid} instances have a missing start or a non-positive "
                         "lifetime; split them off with reject_invalid_lifetimes first")
    if observation_end_us is None:
        observation_end_us = default_observation_end_us(frame)
    finished = ~np.isnan(end)
    duration_s = (np.where(finished, end, float(observation_end_us)) - start) / 1e6
    return duration_s, finished


def long_lived_labels(duration_s: np.ndarray, finished: np.ndarray, threshold_s: float
                      ) -> Tuple[np.ndarray, np.ndarray]:
    """Whether each instance lives longer than `threshold_s`, and whether that is known.

    A finished instance is long iff T > threshold. A censored one is known to be long once
    D ≥ threshold (T > D); before that its class is unknown.

    Returns:
      (is_long, known): bool arrays shaped like `duration_s`.
    """
    is_long = np.where(finished, duration_s > threshold_s, duration_s >= threshold_s)
    return is_long, finished | is_long


@dataclasses.dataclass(frozen=True)
class LifetimeExamples:
    """Uptime-augmented examples over `instances` (one example per row of the arrays).

    Attributes:
      instances: the valid instances the examples come from (index 0..n-1).
      row: int64 (n_examples,), the instance row of each example.
      uptime_s: float64 (n_examples,), the uptime Tu in seconds.
      log10_remaining_s: float64 (n_examples,), the label.
      censored: bool (n_examples,), the example comes from a right-censored instance.
      cap_s, min_remaining_s: the label range.
      augmentation: ABSOLUTE_AGES or LIFETIME_FRACTIONS.
      uptime_fractions: the fractions of LIFETIME_FRACTIONS (empty for ABSOLUTE_AGES).
      uptime_ages_s: the age grid of ABSOLUTE_AGES (empty for LIFETIME_FRACTIONS).
      weight: float64 (n_examples,), each example's training weight; None: all 1.
    """

    instances: pd.DataFrame
    row: np.ndarray
    uptime_s: np.ndarray
    log10_remaining_s: np.ndarray
    censored: np.ndarray
    cap_s: float
    min_remaining_s: float
    uptime_fractions: Tuple[float, ...]
    augmentation: str = LIFETIME_FRACTIONS
    uptime_ages_s: Tuple[float, ...] = ()
    weight: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.row)

    def sample_weight(self) -> np.ndarray:
        """float64 (n_examples,): `weight`, or ones."""
        return np.ones(len(self.row)) if self.weight is None else self.weight

    def to_frame(self) -> pd.DataFrame:
        """The examples table: instance_id (string), start_time (µs), uptime_s,
        log10_remaining_s, censored (bool). Features are not included: they are derived from
        the instances table by the model's encoder."""
        return pd.DataFrame({
            "instance_id": self.instances["instance_id"].to_numpy()[self.row],
            "start_time": self.instances["start_time"].to_numpy()[self.row],
            "uptime_s": self.uptime_s,
            "log10_remaining_s": self.log10_remaining_s,
            "censored": self.censored,
        })


def _check_label_range(cap_s: float, min_remaining_s: float) -> None:
    if not 0 < min_remaining_s <= cap_s:
        raise ValueError(f"need 0 < min_remaining_s <= cap_s, got {min_remaining_s}, {cap_s}")


def _examples(instances: Instances, uptime_s_of, *, cap_s: float, min_remaining_s: float,
              observation_end_us: Optional[int], **settings
              ) -> Tuple[LifetimeExamples, pd.DataFrame]:
    """The examples at uptimes `uptime_s_of(duration_s)` ((n, k) seconds, one column per
    candidate uptime): a candidate is kept when the instance is alive there (uptime <
    duration) and its label is known (finished, or censored with at least `cap_s` left)."""
    valid, rejected = reject_invalid_lifetimes(instances)
    duration_s, finished = observed_lifetimes(valid, observation_end_us)
    uptime_s = uptime_s_of(duration_s)
    remaining_s = duration_s[:, None] - uptime_s
    keep = (remaining_s > 0) & (finished[:, None] | (remaining_s >= cap_s))
    row, column = np.nonzero(keep)
    examples = LifetimeExamples(
        instances=valid,
        row=row.astype(np.int64),
        uptime_s=uptime_s[row, column],
        log10_remaining_s=np.log10(np.clip(remaining_s[row, column], min_remaining_s, cap_s)),
        censored=~finished[row],
        cap_s=float(cap_s),
        min_remaining_s=float(min_remaining_s),
        **settings,
    )
    return examples, rejected


def make_uptime_examples(instances: Instances, *, cap_s: float = DEFAULT_CAP_S,
                         uptime_fractions: Sequence[float] = UPTIME_FRACTIONS,
                         min_remaining_s: float = DEFAULT_MIN_REMAINING_S,
                         observation_end_us: Optional[int] = None
                         ) -> Tuple[LifetimeExamples, pd.DataFrame]:
    """LIFETIME_FRACTIONS examples, the paper's scheme (see the module docstring).

    Args:
      instances: rows of the canonical `instances` table.
      cap_s: largest remaining lifetime a label can say, seconds.
      uptime_fractions: fractions of the lifetime at which examples are taken, in [0, 1).
      min_remaining_s: smallest remaining lifetime a label can say (log10 needs > 0), seconds.
      observation_end_us: when censored instances stopped being observed (the trace end, or
        the split time for a training period); default `default_observation_end_us`.

    Returns:
      (examples, rejected): rejected rows carry a `reason` column.
    """
    fractions = np.asarray(uptime_fractions, dtype=np.float64)
    if fractions.size == 0 or (fractions < 0).any() or (fractions >= 1).any():
        raise ValueError(f"uptime_fractions must be non-empty and in [0, 1): {uptime_fractions}")
    _check_label_range(cap_s, min_remaining_s)
    return _examples(instances, lambda duration_s: duration_s[:, None] * fractions[None, :],
                     cap_s=cap_s, min_remaining_s=min_remaining_s,
                     observation_end_us=observation_end_us,
                     uptime_fractions=tuple(float(f) for f in fractions),
                     augmentation=LIFETIME_FRACTIONS)


def make_age_examples(instances: Instances, *, cap_s: float = DEFAULT_CAP_S,
                      uptime_ages_s: Optional[Sequence[float]] = None,
                      min_remaining_s: float = DEFAULT_MIN_REMAINING_S,
                      observation_end_us: Optional[int] = None
                      ) -> Tuple[LifetimeExamples, pd.DataFrame]:
    """ABSOLUTE_AGES examples (see the module docstring): one per age of the grid at which
    the instance is alive and its label known.

    Args:
      uptime_ages_s: the age grid in seconds, each ≥ 0; sorted and deduplicated, and 0 is
        always added (the no-uptime ablation and the prediction at arrival need it); default
        `default_uptime_ages_s(cap_s)`.
      other arguments: as for `make_uptime_examples`.
    """
    ages = np.asarray(default_uptime_ages_s(cap_s) if uptime_ages_s is None
                      else uptime_ages_s, dtype=np.float64)
    if (ages < 0).any() or not np.isfinite(ages).all():
        raise ValueError(f"uptime_ages_s must be finite and >= 0: {uptime_ages_s}")
    ages = np.unique(np.r_[0.0, ages])
    _check_label_range(cap_s, min_remaining_s)
    return _examples(instances,
                     lambda duration_s: np.broadcast_to(ages, (len(duration_s), len(ages))),
                     cap_s=cap_s, min_remaining_s=min_remaining_s,
                     observation_end_us=observation_end_us, uptime_fractions=(),
                     augmentation=ABSOLUTE_AGES, uptime_ages_s=tuple(float(a) for a in ages))


def make_examples(instances: Instances, augmentation: str, **kwargs
                  ) -> Tuple[LifetimeExamples, pd.DataFrame]:
    """`make_age_examples` for ABSOLUTE_AGES, `make_uptime_examples` for LIFETIME_FRACTIONS
    (keyword arguments: those of the chosen function)."""
    builders = {ABSOLUTE_AGES: make_age_examples, LIFETIME_FRACTIONS: make_uptime_examples}
    if augmentation not in builders:
        raise ValueError(f"unknown augmentation {augmentation!r}; known: {sorted(builders)}")
    return builders[augmentation](instances, **kwargs)


def label_known(instances: Instances, observation_end_us: int, horizon_s: float
                ) -> np.ndarray:
    """Bool (n,): the instance started at least `horizon_s` before `observation_end_us`.

    By then each such instance has finished or has run for `horizon_s`, so its label at
    arrival (the lifetime capped at `horizon_s`, or "longer than `horizon_s`") is known.
    Keeping instead every recent instance that happens to have finished would keep the short
    ones and drop the long ones: a training set (and a time-ordered validation slice, which
    is the most recent part) biased toward short lifetimes.
    """
    frame = instances_frame(instances)
    started = pd.to_numeric(frame["start_time"]).to_numpy(np.float64, na_value=np.nan)
    return started <= observation_end_us - horizon_s * 1e6


def censoring_weighted(examples: LifetimeExamples, population_start_us: np.ndarray,
                       observation_end_us: int, min_probability: float) -> LifetimeExamples:
    """`examples` weighted by the inverse probability of censoring, for training on every
    instance of a training period that ends at `observation_end_us`.

    The label of an example at uptime u of an instance living T is seen once the instance
    has been observed for min(T, u + cap_s); an arrival of the period is observed that long
    with probability G = P(observation_end − start ≥ min(T, u + cap_s)), the share of
    `population_start_us` (µs, every arrival of the period) that started early enough. Each
    kept example weighs 1/G, so that long-lived VMs, whose labels recent arrivals hide, count
    as often as they arrive (unbiased when the arrival time says nothing of the lifetime).
    Examples with G < `min_probability` are dropped, which bounds a weight by its inverse.
    """
    duration_s, _ = observed_lifetimes(examples.instances, observation_end_us)
    needed_s = np.minimum(duration_s[examples.row], examples.uptime_s + examples.cap_s)
    observed_for_s = np.sort((observation_end_us - np.asarray(population_start_us,
                                                              np.float64)) / 1e6)
    seen = 1.0 - np.searchsorted(observed_for_s, needed_s, side="left") / len(observed_for_s)
    keep = seen >= min_probability
    return dataclasses.replace(
        examples, row=examples.row[keep], uptime_s=examples.uptime_s[keep],
        log10_remaining_s=examples.log10_remaining_s[keep], censored=examples.censored[keep],
        weight=examples.sample_weight()[keep] / seen[keep])


@dataclasses.dataclass(frozen=True)
class TimeSplit:
    """Instances split at a point in time.

    Attributes:
      train: instances that started before `split_time_us`, observed only until then: an
        end after the split is unknown at training time, so those rows are censored
        (end_time and end_type set to null).
      test: instances that started at or after `split_time_us`, as given.
      split_time_us: the split time; the observation end of `train`.
      observation_end_us: the observation end of `test` (the trace end).
    """

    train: pd.DataFrame
    test: pd.DataFrame
    split_time_us: int
    observation_end_us: int


def split_time_of_span(first_start_us: int, observation_end_us: int,
                       train_fraction: float) -> int:
    """The time `train_fraction` of the way from `first_start_us` to `observation_end_us`."""
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    return int(first_start_us + train_fraction * (observation_end_us - first_start_us))


def split_time_at_fraction(instances: Instances, train_fraction: float) -> int:
    """The time `train_fraction` of the way from the first start to the latest time seen."""
    frame = instances_frame(instances)
    return split_time_of_span(int(frame["start_time"].min()),
                              default_observation_end_us(frame), train_fraction)


def time_split(instances: Instances, split_time_us: int,
               observation_end_us: Optional[int] = None) -> TimeSplit:
    """Train on the past, test on the future: never a random split across time.

    Args:
      instances: valid instances (see `reject_invalid_lifetimes`).
      split_time_us: instances starting before it train, the others test.
      observation_end_us: the trace end; default `default_observation_end_us(instances)`.
    """
    frame = instances_frame(instances)
    if observation_end_us is None:
        observation_end_us = default_observation_end_us(frame)
    start = pd.to_numeric(frame["start_time"]).to_numpy(np.float64, na_value=np.nan)
    end = pd.to_numeric(frame["end_time"]).to_numpy(np.float64, na_value=np.nan)
    in_train = start < split_time_us
    train = frame[in_train].copy()
    ends_later = end[in_train] > split_time_us
    train["end_time"] = pd.array(np.where(ends_later, np.nan, end[in_train]), dtype="Int64")
    if "end_type" in train.columns:
        train["end_type"] = train["end_type"].where(~ends_later, None)
    return TimeSplit(train=train.reset_index(drop=True),
                     test=frame[~in_train].reset_index(drop=True),
                     split_time_us=int(split_time_us),
                     observation_end_us=int(observation_end_us))
