"""LA's one-shot lifetime classifier ([Barbalho23] §3.2, §4.4, App. B).

A LightGBM binary classifier of "lives longer than `threshold_s`" (2 hours in production,
[Barbalho23] §3.2.1), asked once, when the VM arrives; Lifetime Alignment never repredicts.
Its features are those known at arrival (`FeatureEncoder`; [Barbalho23] App. B.1 also uses
per-customer history, which the public traces lack). A finished instance is long iff its
lifetime exceeds the threshold; a censored one once observed that long, and it is left out
of training while its class is unknown (`long_lived_labels`). The decision probability is by
default the highest that reaches `target_recall` (production LA: 85 % recall of long-lived
VMs, [Barbalho23] App. C.2) on the latest-starting `validation_fraction` of the training
instances, the slice also used for early stopping.
"""

from typing import List, Optional, Sequence

import numpy as np

from predictors.lifetime.boosting import BoostedLifetimeModel, time_validation_mask
from predictors.lifetime.evaluation import threshold_at_recall
from predictors.lifetime.examples import long_lived_labels, observed_lifetimes
from predictors.lifetime.features import Instances, instances_frame

DEFAULT_THRESHOLD_S = 2 * 3600.0


class LaClassifier(BoostedLifetimeModel):
    """Probability that an instance lives longer than `threshold_s`, predicted at arrival.

    Fitted attributes: `encoder_`, `booster_` (see `BoostedLifetimeModel`), and
    `decision_probability_`, the probability at or above which `predict_long` says long.
    """

    KIND = "la_classifier"

    def __init__(self, *, threshold_s: float = DEFAULT_THRESHOLD_S, num_trees: int = 500,
                 num_leaves: int = 32, learning_rate: float = 0.05, min_data_in_leaf: int = 20,
                 validation_fraction: float = 0.1, early_stopping_rounds: int = 50,
                 target_recall: Optional[float] = 0.85, decision_probability: float = 0.5,
                 seed: int = 0, num_threads: int = 0, predict_num_threads: int = 1,
                 min_category_count: int = 10, features: Optional[Sequence[str]] = None,
                 time_origin_s: float = 0.0):
        """
        Args:
          threshold_s: lifetime above which an instance is long-lived, seconds.
          target_recall: recall of long-lived instances that sets the decision probability
            at fit time (see the module docstring); None keeps `decision_probability`.
          decision_probability: `predict_long` says long at or above this probability, when
            `target_recall` is None or the calibration slice has no long-lived instance.
          other arguments: as for `UptimeLifetimeModel`.
        """
        self._store_params(locals())

    @property
    def feature_names(self) -> List[str]:
        """Model input columns (the encoder's features)."""
        return self.encoder_.feature_names_

    def fit(self, instances: Instances, observation_end_us: Optional[int] = None
            ) -> "LaClassifier":
        """Fits on instances with known class.

        Args:
          instances: valid instances (see `reject_invalid_lifetimes`).
          observation_end_us: when censored instances stopped being observed.
        """
        frame = instances_frame(instances)
        duration_s, finished = observed_lifetimes(frame, observation_end_us)
        is_long, known = long_lived_labels(duration_s, finished, float(self.threshold_s))
        train = frame[known]
        if len(train) == 0:
            raise ValueError("no instance with a known class to train the LA classifier on")
        self.encoder_ = self._fit_encoder(train)
        matrix, label = self.encoder_.transform(train), is_long[known]
        start_time_us = train["start_time"].to_numpy(np.float64)
        self.booster_ = self._train(matrix, label.astype(np.float64), start_time_us,
                                    objective="binary")
        self.decision_probability_ = self._calibrated_probability(matrix, label,
                                                                  start_time_us)
        return self

    def _calibrated_probability(self, matrix: np.ndarray, label: np.ndarray,
                                start_time_us: np.ndarray) -> float:
        """The decision probability reaching `target_recall` on the latest-starting training
        rows (all rows when that slice is empty), else `decision_probability`."""
        if self.target_recall is None:
            return float(self.decision_probability)
        calibration = time_validation_mask(start_time_us, self.validation_fraction)
        if not calibration.any():
            calibration[:] = True
        threshold = threshold_at_recall(
            label[calibration], self.booster_.predict(matrix[calibration]), self.target_recall)
        return float(self.decision_probability) if np.isnan(threshold) else threshold

    def predict_proba_long(self, features) -> np.ndarray:
        """P(lifetime > threshold_s), float64 (n,).

        Args:
          features: `encode` output (n, n_features), or instances to encode.
        """
        return self.booster_.predict(self._features(features),
                                     num_threads=self.predict_num_threads)

    def predict_long(self, features) -> np.ndarray:
        """Bool (n,): predicted to live longer than threshold_s."""
        return self.predict_proba_long(features) >= self.decision_probability_

    def _fitted_metadata(self) -> dict:
        return {**super()._fitted_metadata(),
                "decision_probability": self.decision_probability_}

    def _set_fitted(self, metadata, files) -> None:
        super()._set_fitted(metadata, files)
        self.decision_probability_ = metadata["decision_probability"]


def predict_classes(classifiers: Sequence[LaClassifier], instances) -> np.ndarray:
    """Lifetime class per instance, int64 (n,), from classifiers of increasing thresholds:
    the number of them that, in order, predict the instance long (0: short at the first
    threshold; k: long at the first k). Separate models need not nest, so a VM predicted
    long at a threshold but short at a lower one counts as short at the lower one.

    Args:
      classifiers: fitted LaClassifiers, thresholds strictly increasing.
      instances: the instances (DataFrame or Arrow table); each classifier encodes them.
    """
    thresholds = [float(c.threshold_s) for c in classifiers]
    if not thresholds or thresholds != sorted(set(thresholds)):
        raise ValueError(f"need classifiers of strictly increasing thresholds, got {thresholds}")
    long_at = np.vstack([c.predict_long(instances) for c in classifiers])
    return np.logical_and.accumulate(long_at, axis=0).sum(axis=0).astype(np.int64)
