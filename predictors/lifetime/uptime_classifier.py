"""P(lifetime > θ | features, uptime): a LightGBM classifier of long-lived VMs, asked again
as a VM ages ([Ling25ext] §3's view of a lifetime as a probability distribution).

The uptime model learns a point estimate, E[log10 remaining | features, uptime], with no
distribution to read a probability from; this model learns the probability: a binary booster
over the instance features and log10(1 + uptime_s), one example per (instance, age) of an
absolute age grid below `threshold_s` at which the instance is alive and its class known.
The label is "lives longer than `threshold_s`": a finished instance's by its lifetime, a
censored one long once observed that long, else left out (`long_lived_labels`), so censoring
never makes a VM short. At an uptime of `threshold_s` or more the answer is 1. For fixed
features it is a step function of the uptime, so `LongLivedCurves` answers it exactly; its
decision probability is chosen per age on the training period's validation slice
(pipelines/stages/lifetime/training.py).
"""

from typing import List, Optional, Sequence

import numpy as np

from configs.units import DAY_S
from predictors.lifetime.boosting import BoostedLifetimeModel, split_thresholds
from predictors.lifetime.examples import (
    default_uptime_ages_s,
    long_lived_labels,
    observed_lifetimes,
)
from predictors.lifetime.features import Instances, instances_frame
from predictors.lifetime.uptime_model import UPTIME_FEATURE, log10_uptime

DEFAULT_THRESHOLD_S = 7.0 * DAY_S


class UptimeLongLivedClassifier(BoostedLifetimeModel):
    """P(lifetime > `threshold_s` | features, uptime), repredicted as a VM ages.

    Fitted attributes: `encoder_`, `booster_` (see `BoostedLifetimeModel`),
    `uptime_ages_s_`, the ages (s) the training examples sit at, and `num_examples_`, the
    number of (instance, age) examples.
    """

    KIND = "uptime_long_lived_classifier"
    use_uptime = True  # read by the curves: the prediction depends on the uptime

    def __init__(self, *, threshold_s: float = DEFAULT_THRESHOLD_S,
                 uptime_ages_s: Optional[Sequence[float]] = None, num_trees: int = 2000,
                 num_leaves: int = 32, learning_rate: float = 0.1, min_data_in_leaf: int = 20,
                 validation_fraction: float = 0.1, early_stopping_rounds: int = 50,
                 uptime_max_bin: int = 64, seed: int = 0, num_threads: int = 0,
                 predict_num_threads: int = 1, min_category_count: int = 10,
                 features: Optional[Sequence[str]] = None, time_origin_s: float = 0.0):
        """
        Args:
          threshold_s: lifetime above which an instance is long-lived, seconds.
          uptime_ages_s: the ages (s) of the training examples; those at or past
            `threshold_s` are dropped and 0 is always added; default the uptime model's
            `default_uptime_ages_s(threshold_s)`.
          other arguments: as for `UptimeLifetimeModel`.
        """
        self._store_params(locals())

    @property
    def feature_names(self) -> List[str]:
        """Model input columns: the encoder's features, then the uptime."""
        return self.encoder_.feature_names_ + [UPTIME_FEATURE]

    def training_ages_s(self) -> np.ndarray:
        """The sorted ages (s) below `threshold_s` the examples sit at, 0 included."""
        ages = np.asarray(default_uptime_ages_s(float(self.threshold_s))
                          if self.uptime_ages_s is None else self.uptime_ages_s, np.float64)
        if (ages < 0).any() or not np.isfinite(ages).all():
            raise ValueError(f"uptime_ages_s must be finite and >= 0: {self.uptime_ages_s}")
        return np.unique(np.r_[0.0, ages[ages < self.threshold_s]])

    def fit(self, instances: Instances, observation_end_us: Optional[int] = None
            ) -> "UptimeLongLivedClassifier":
        """Fits on every (instance, age) with the instance alive at the age and its class
        known at `observation_end_us` (when censored instances stopped being observed)."""
        frame = instances_frame(instances)
        duration_s, finished = observed_lifetimes(frame, observation_end_us)
        is_long, known = long_lived_labels(duration_s, finished, float(self.threshold_s))
        ages = self.training_ages_s()
        alive = known[:, None] & (duration_s[:, None] > ages[None, :])
        row, age = np.nonzero(alive)
        if len(row) == 0:
            raise ValueError("no instance with a known class to train the classifier on")
        self.encoder_ = self._fit_encoder(frame.iloc[np.unique(row)])
        matrix = np.column_stack([self.encoder_.transform(frame)[row],
                                  log10_uptime(ages[age])])
        start_time_us = frame["start_time"].to_numpy(np.float64)[row]
        n_instance_features = matrix.shape[1] - 1
        self.booster_ = self._train(
            matrix, is_long[row].astype(np.float64), start_time_us, objective="binary",
            max_bin_by_feature=[255] * n_instance_features + [self.uptime_max_bin])
        self.uptime_ages_s_ = tuple(float(a) for a in ages)
        self.num_examples_ = len(row)
        return self

    def predict_proba_long(self, features, uptime_s=0.0) -> np.ndarray:
        """P(lifetime > threshold_s | features, uptime), float64 (n,); 1 from an uptime of
        threshold_s on (decided on the uptime feature, so that the answer is a step function
        of it: an uptime a few ulps below the threshold whose log10 rounds to the
        threshold's is past it too).

        Args:
          features: `encode` output (n, n_instance_features), or instances to encode.
          uptime_s: (n,) or a scalar, seconds since each instance started.
        """
        features = self._features(features)
        uptime_s = np.broadcast_to(np.asarray(uptime_s, dtype=np.float64), len(features))
        matrix = np.empty((features.shape[0], features.shape[1] + 1), dtype=np.float64)
        matrix[:, :-1] = features
        matrix[:, -1] = log10_uptime(uptime_s)
        probability = self.booster_.predict(matrix, num_threads=self.predict_num_threads)
        return np.where(matrix[:, -1] >= self._log10_threshold(), 1.0, probability)

    def _log10_threshold(self) -> float:
        return float(log10_uptime(float(self.threshold_s)))

    def uptime_thresholds(self) -> np.ndarray:
        """Sorted log10 uptime thresholds of the booster's splits, and the class threshold's
        (where the answer becomes 1)."""
        splits = split_thresholds(self.booster_, len(self.encoder_.feature_names_))
        # Intervals are (t_{k-1}, t_k]: the answer is 1 from the first x above this one.
        below_threshold = np.nextafter(self._log10_threshold(), -np.inf)
        return np.unique(np.r_[splits[splits < below_threshold], below_threshold])

    def _fitted_metadata(self) -> dict:
        return {**super()._fitted_metadata(), "uptime_ages_s": list(self.uptime_ages_s_),
                "num_examples": self.num_examples_}

    def _set_fitted(self, metadata, files) -> None:
        super()._set_fitted(metadata, files)
        self.uptime_ages_s_ = tuple(metadata["uptime_ages_s"])
        self.num_examples_ = metadata["num_examples"]
