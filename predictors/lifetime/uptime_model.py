"""The uptime-augmented lifetime model of LAVA ([Ling25] §3, [Ling25ext] App. A–C): a LightGBM
regressor of log10 remaining lifetime (seconds) given an instance's features and its uptime,
E[log10 remaining | features, uptime], repredicted as a VM ages.

Defaults follow the paper's model ([Ling25ext] App. B: 2000 trees, 32 leaves, best-first
growth); training stops early when the loss on the latest-starting `validation_fraction` of
the training instances (never a random sample) stops improving. For fixed features the model
is a step function of the uptime (`uptime_thresholds`), so
`predictors.lifetime.curves.LifetimeCurves` answers every reprediction exactly by a lookup.
`use_uptime=False` is the no-reprediction ablation ([Ling25ext] Fig. 16): trained on uptime-0
examples, it predicts a lifetime at arrival, and the remaining lifetime is that minus the
uptime.
"""

from typing import List, Optional, Sequence

import numpy as np

from predictors.lifetime.boosting import BoostedLifetimeModel, split_thresholds
from predictors.lifetime.examples import LifetimeExamples

UPTIME_FEATURE = "log10_uptime_s"


def log10_uptime(uptime_s: np.ndarray) -> np.ndarray:
    """The uptime feature: log10(1 + uptime_s), 0 at arrival ([Ling25ext] App. A: log uptime)."""
    return np.log10(1.0 + np.asarray(uptime_s, dtype=np.float64))


class UptimeLifetimeModel(BoostedLifetimeModel):
    """Predicts remaining lifetime (seconds) from instance features and uptime (the
    constructor's Args).

    Attributes (fitted):
      encoder_, booster_: the feature encoder and the LightGBM booster
        (`BoostedLifetimeModel`).
      cap_s_, min_remaining_s_: the label range of the training examples (seconds), which
        clips every prediction.
      augmentation_: ABSOLUTE_AGES or LIFETIME_FRACTIONS, or None for a model file that does
        not record it.
      uptime_ages_s_: the ABSOLUTE_AGES grid (seconds); empty otherwise or when not recorded.
    """

    KIND = "uptime_lifetime_model"

    def __init__(self, *, num_trees: int = 2000, num_leaves: int = 32,
                 learning_rate: float = 0.1, min_data_in_leaf: int = 20,
                 validation_fraction: float = 0.1, early_stopping_rounds: int = 50,
                 uptime_max_bin: int = 64, seed: int = 0, num_threads: int = 0,
                 predict_num_threads: int = 1, use_uptime: bool = True,
                 min_category_count: int = 10,
                 features: Optional[Sequence[str]] = None, time_origin_s: float = 0.0):
        """
        Args:
          num_trees: boosting rounds at most (fewer when early stopping triggers).
          num_leaves, learning_rate, min_data_in_leaf: LightGBM tree shape and shrinkage.
          validation_fraction, early_stopping_rounds: see `train_booster`.
          uptime_max_bin: histogram bins of the uptime feature; bounds the number of uptime
            intervals, hence the length of a `LifetimeCurves` curve.
          seed, num_threads: LightGBM's seed and training threads (0 = OpenMP default).
          predict_num_threads: LightGBM threads per prediction call; 1 because thread start-up
            outweighs the work of replay-sized batches (and Beam parallelizes elsewhere).
          use_uptime: False trains the no-reprediction ablation.
          min_category_count, features, time_origin_s: for the `FeatureEncoder`.
        """
        self._store_params(locals())

    @property
    def feature_names(self) -> List[str]:
        """Model input columns: the encoder's features, then the uptime if used."""
        return self.encoder_.feature_names_ + ([UPTIME_FEATURE] if self.use_uptime else [])

    def fit(self, examples: LifetimeExamples) -> "UptimeLifetimeModel":
        """Fits the encoder on the examples' instances, then the booster on the examples,
        with their weights (on those at uptime 0 only without `use_uptime`)."""
        self.encoder_ = self._fit_encoder(examples.instances)
        instance_matrix = self.encoder_.transform(examples.instances)
        row, uptime_s, label = examples.row, examples.uptime_s, examples.log10_remaining_s
        weight = examples.weight
        if self.use_uptime:
            matrix = np.column_stack([instance_matrix[row], log10_uptime(uptime_s)])
        else:
            at_arrival = uptime_s == 0
            row, label = row[at_arrival], label[at_arrival]
            weight = None if weight is None else weight[at_arrival]
            matrix = instance_matrix[row]
        if len(label) == 0:
            raise ValueError("no training examples (the no-uptime model needs uptime-0 ones)")
        n_instance_features = instance_matrix.shape[1]
        self.booster_ = self._train(
            matrix, label, examples.instances["start_time"].to_numpy(np.float64)[row],
            objective="regression", weight=weight,
            max_bin_by_feature=([255] * n_instance_features + [self.uptime_max_bin]
                                if self.use_uptime else None))
        self.cap_s_, self.min_remaining_s_ = examples.cap_s, examples.min_remaining_s
        self.augmentation_ = examples.augmentation
        self.uptime_ages_s_ = tuple(examples.uptime_ages_s)
        return self

    def predict_log10_remaining(self, features, uptime_s) -> np.ndarray:
        """log10 of the predicted remaining lifetime in seconds, float64 (n,), unclipped.

        Args:
          features: `encode` output (n, n_instance_features), or instances to encode.
          uptime_s: (n,) or a scalar, seconds since each instance started.
        """
        features = self._features(features)
        if not self.use_uptime:
            return self.booster_.predict(features, num_threads=self.predict_num_threads)
        matrix = np.empty((features.shape[0], features.shape[1] + 1), dtype=np.float64)
        matrix[:, :-1] = features
        matrix[:, -1] = log10_uptime(uptime_s)
        return self.booster_.predict(matrix, num_threads=self.predict_num_threads)

    def remaining_from_log10(self, log10_prediction: np.ndarray, uptime_s) -> np.ndarray:
        """Remaining seconds from a `predict_log10_remaining` output, clipped to the label
        range [min_remaining_s_, cap_s_]; the no-uptime model subtracts the uptime from its
        arrival-time lifetime first."""
        remaining_s = np.power(10.0, log10_prediction)
        if not self.use_uptime:
            remaining_s = remaining_s - np.asarray(uptime_s, dtype=np.float64)
        return np.clip(remaining_s, self.min_remaining_s_, self.cap_s_)

    def predict_remaining(self, features, uptime_s) -> np.ndarray:
        """Predicted remaining lifetime in seconds, float64 (n,), in
        [min_remaining_s_, cap_s_].

        Args:
          features: `encode` output (n, n_instance_features), or instances to encode.
          uptime_s: (n,) or a scalar, seconds since each instance started.
        """
        return self.remaining_from_log10(self.predict_log10_remaining(features, uptime_s),
                                         uptime_s)

    def uptime_thresholds(self) -> np.ndarray:
        """Sorted log10 uptime thresholds of the model's splits (empty without uptime)."""
        if not self.use_uptime:
            return np.empty(0)
        return split_thresholds(self.booster_, len(self.encoder_.feature_names_))

    def _fitted_metadata(self) -> dict:
        return {**super()._fitted_metadata(), "cap_s": self.cap_s_,
                "min_remaining_s": self.min_remaining_s_, "augmentation": self.augmentation_,
                "uptime_ages_s": list(self.uptime_ages_s_)}

    def _set_fitted(self, metadata, files) -> None:
        super()._set_fitted(metadata, files)
        self.cap_s_, self.min_remaining_s_ = metadata["cap_s"], metadata["min_remaining_s"]
        self.augmentation_ = metadata.get("augmentation")
        self.uptime_ages_s_ = tuple(metadata.get("uptime_ages_s", ()))


def interval_uptimes_s(thresholds: np.ndarray) -> np.ndarray:
    """An uptime (s) in each interval of sorted log10-uptime `thresholds`, float64 (k + 1,):
    0 in the first, then the middle (in log10) of each interval, then a decade past the last
    threshold; NaN for an interval that holds no such uptime (none, or too narrow)."""
    if not len(thresholds):
        return np.zeros(1)
    log10_middle = np.concatenate([(thresholds[:-1] + thresholds[1:]) / 2,
                                   [thresholds[-1] + 1.0]])
    uptime_s = np.concatenate([[0.0], np.power(10.0, log10_middle) - 1.0])
    interval = np.searchsorted(thresholds, log10_uptime(uptime_s), side="left")
    inside = (uptime_s >= 0) & (interval == np.arange(len(uptime_s)))
    return np.where(inside, uptime_s, np.nan)

