"""Stratified Kaplan–Meier lifetime baseline ([Ling25ext] App. B, Table 4).

One Kaplan–Meier survival curve per stratum (a combination of categorical features, e.g.
request shape × priority), estimated from finished lifetimes and right-censored observed
durations alike; strata with fewer than `min_stratum_count` training instances share the
curve of all training instances.

Prediction is the conditional median remaining lifetime given the uptime u: the smallest
t ≥ 0 with S(u + t) ≤ S(u) / 2. The median, not the mean, because under censoring the curve
often stops above 0 and the mean is then undefined, and because the lifetime metrics are in
the log domain, where the median is the natural point estimate. When the curve never falls to
S(u) / 2 (more than half of the survivors were still running at their last observation) the
prediction is `cap_s`, the longest remaining lifetime the other models predict.
"""

import io
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from predictors.lifetime.base import LifetimeModel, ModelFiles
from predictors.lifetime.examples import DEFAULT_CAP_S, DEFAULT_MIN_REMAINING_S, observed_lifetimes
from predictors.lifetime.features import (
    NULL_CATEGORY,
    Instances,
    available_features,
    derive_features,
    instances_frame,
)

CURVES_FILE = "curves.npz"

DEFAULT_STRATUM_FEATURES = ("pool", "priority", "scheduling_class", "collection_type",
                            "vm_category", "request_shape")


def kaplan_meier_curve(duration_s: np.ndarray, finished: np.ndarray
                       ) -> Tuple[np.ndarray, np.ndarray]:
    """Kaplan–Meier estimate S(t) = Π_{t_k ≤ t} (1 − d_k / n_k).

    Args:
      duration_s: (n,) lifetime if finished, else observed duration (censoring time).
      finished: (n,) bool, the duration ends in an observed exit.

    Returns:
      (times, survival): the distinct exit times t_k ascending, and S just after each; an
      instance censored at t_k is still at risk at t_k (the usual convention).
    """
    times, exits = np.unique(duration_s[finished], return_counts=True)
    at_risk = len(duration_s) - np.searchsorted(np.sort(duration_s), times, side="left")
    return times, np.cumprod(1.0 - exits / at_risk)


def survival_at(times: np.ndarray, survival: np.ndarray, t_s: np.ndarray) -> np.ndarray:
    """S(t_s) of one curve, float64 shaped like t_s (1 before the first exit)."""
    # Position 0 of the padded curve is S = 1 before the first exit.
    padded = np.concatenate([[1.0], survival])
    return padded[np.searchsorted(times, np.asarray(t_s, dtype=np.float64), side="right")]


class KaplanMeierLifetimeModel(LifetimeModel):
    """Per-stratum Kaplan–Meier curves; predicts the conditional median remaining lifetime.

    Fitted attributes: `features_` (the stratum features in use), `stratum_index_`
    ({feature-value tuple: curve index}) and `curves_` ([(times_s, survival)], each two
    float64 (k,) arrays; curves_[0] is the pooled curve).
    """

    KIND = "kaplan_meier"
    FILES = (CURVES_FILE,)

    def __init__(self, *, stratum_features: Sequence[str] = DEFAULT_STRATUM_FEATURES,
                 min_stratum_count: int = 10, cap_s: float = DEFAULT_CAP_S,
                 min_remaining_s: float = DEFAULT_MIN_REMAINING_S, time_origin_s: float = 0.0):
        """
        Args:
          stratum_features: categorical features (lifetime_features.FEATURES) that define the
            strata; those the instances lack, or that are all null, are skipped.
          min_stratum_count: strata with fewer training instances use the pooled curve.
          cap_s, min_remaining_s: predictions are clipped to [min_remaining_s, cap_s].
          time_origin_s: see `derive_features`.
        """
        self._store_params(locals())
        self.features_: List[str] = []
        self.stratum_index_: Dict[Tuple[str, ...], int] = {}
        self.curves_: List[Tuple[np.ndarray, np.ndarray]] = []

    @property
    def feature_names(self) -> List[str]:
        """The stratum features in use (those the training instances had)."""
        return self.features_

    def _stratum_keys(self, frame) -> Tuple[List[Tuple[str, ...]], np.ndarray]:
        """Distinct feature-value tuples in `frame` and each row's position among them."""
        if not self.features_:
            return [()], np.zeros(len(frame), dtype=np.int64)
        derived = derive_features(frame, self.features_, self.time_origin_s)
        codes, labels = zip(*(pd.factorize(derived[name]) for name in self.features_))
        combos, inverse = np.unique(np.column_stack(codes), axis=0, return_inverse=True)
        keys = [tuple(labels[j][c] for j, c in enumerate(combo)) for combo in combos]
        return keys, inverse.reshape(-1)

    def fit(self, instances: Instances, observation_end_us: Optional[int] = None
            ) -> "KaplanMeierLifetimeModel":
        """Fits the curves on valid instances (see `reject_invalid_lifetimes`)."""
        frame = instances_frame(instances)
        duration_s, finished = observed_lifetimes(frame, observation_end_us)
        candidates = [f for f in self.stratum_features if f in available_features(frame.columns)]
        derived = derive_features(frame, candidates, self.time_origin_s)
        self.features_ = [f for f in candidates if not (derived[f] == NULL_CATEGORY).all()]
        keys, stratum = self._stratum_keys(frame)
        counts = np.bincount(stratum, minlength=len(keys))
        self.curves_ = [kaplan_meier_curve(duration_s, finished)]
        self.stratum_index_ = {}
        for position in np.flatnonzero(counts >= self.min_stratum_count):
            members = stratum == position
            self.stratum_index_[keys[position]] = len(self.curves_)
            self.curves_.append(kaplan_meier_curve(duration_s[members], finished[members]))
        return self

    def encode(self, instances: Instances) -> np.ndarray:
        """Stratum index of each instance, int64 (n,); 0 is the pooled curve."""
        keys, position = self._stratum_keys(instances_frame(instances))
        index_of_key = np.array([self.stratum_index_.get(k, 0) for k in keys], dtype=np.int64)
        return index_of_key[position]

    def survival(self, strata: np.ndarray, t_s: np.ndarray) -> np.ndarray:
        """S(t_s) of each element's stratum curve, float64 (n,)."""
        strata = np.asarray(strata, dtype=np.int64)
        t_s = np.broadcast_to(np.asarray(t_s, dtype=np.float64), strata.shape)
        result = np.empty(strata.shape)
        for s in np.unique(strata):
            members = strata == s
            result[members] = survival_at(*self.curves_[s], t_s[members])
        return result

    def predict_remaining(self, features: np.ndarray, uptime_s) -> np.ndarray:
        """Conditional median remaining lifetime in seconds, float64 (n,), in
        [min_remaining_s, cap_s].

        Args:
          features: `encode` output (n,).
          uptime_s: (n,) or a scalar, seconds since each instance started.
        """
        strata = np.asarray(features, dtype=np.int64)
        uptime_s = np.broadcast_to(np.asarray(uptime_s, dtype=np.float64), strata.shape)
        remaining_s = np.full(strata.shape, float(self.cap_s))
        for s in np.unique(strata):
            members = np.flatnonzero(strata == s)
            times, survival = self.curves_[s]
            half = 0.5 * survival_at(times, survival, uptime_s[members])
            # First exit time at which the curve is at or below half its value at the uptime.
            k = np.searchsorted(-survival, -half, side="left")
            defined = k < len(times)
            remaining_s[members[defined]] = times[k[defined]] - uptime_s[members[defined]]
        return np.clip(remaining_s, self.min_remaining_s, self.cap_s)

    def _fitted_metadata(self) -> dict:
        """The stratum features and the stratum keys with their curve index."""
        strata = sorted(([list(key), index] for key, index in self.stratum_index_.items()),
                        key=lambda pair: pair[1])
        return {"features": self.features_, "strata": strata}

    def _parameter_files(self) -> ModelFiles:
        """curves.npz: all curves concatenated (times, survival) and the offsets where each
        curve starts."""
        lengths = [len(times) for times, _ in self.curves_]
        buffer = io.BytesIO()
        np.savez(buffer,
                 times=np.concatenate([times for times, _ in self.curves_]),
                 survival=np.concatenate([survival for _, survival in self.curves_]),
                 offsets=np.cumsum([0] + lengths))
        return {CURVES_FILE: buffer.getvalue()}

    def _set_fitted(self, metadata, files) -> None:
        self.features_ = list(metadata["features"])
        self.stratum_index_ = {tuple(key): index for key, index in metadata["strata"]}
        with np.load(io.BytesIO(files[CURVES_FILE]), allow_pickle=False) as arrays:
            times, survival, offsets = arrays["times"], arrays["survival"], arrays["offsets"]
        self.curves_ = [(times[a:b], survival[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
