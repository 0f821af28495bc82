"""LA's one-shot lifetime classifier (paper 003 §3.2, §4.4, App. B).

A LightGBM binary classifier of "lives longer than `threshold_s`" (2 hours in production,
003 §3.2.1), asked once, when the VM arrives; Lifetime Alignment never repredicts. Its
features are those known at arrival (`FeatureEncoder`: request size, hour and day of the
allocation, deployment size, ...; 003 App. B.1's small set also has per-customer history,
which the public traces lack).

Labels: a finished instance is long iff its lifetime exceeds the threshold; a censored one
is long once observed for at least the threshold, and is left out of training while its
class is still unknown (`long_lived_labels`).

Operating point: production LA aims at 85 % recall of long-lived VMs (003 App. C.2), so by
default the decision probability is set after training to the highest one that reaches
`target_recall` on the latest-starting `validation_fraction` of the training instances
(the slice also used for early stopping).
"""

from typing import Mapping, Optional, Sequence

import lightgbm as lgb
import numpy as np
import pandas as pd
import pyarrow as pa

from predictors.lifetime.evaluation import threshold_at_recall
from predictors.lifetime.examples import long_lived_labels, observed_lifetimes
from predictors.lifetime.features import FeatureEncoder, Instances, instances_frame
from predictors.lifetime.model_files import ModelFiles, read_model_dir, write_model_dir
from predictors.lifetime.uptime_model import booster_files, booster_from_files, \
    time_validation_mask, train_booster

DEFAULT_THRESHOLD_S = 2 * 3600.0


class LaClassifier:
    """Probability that an instance lives longer than `threshold_s`, predicted at arrival."""

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
        self.config = dict(
            threshold_s=threshold_s, num_trees=num_trees, num_leaves=num_leaves,
            learning_rate=learning_rate, min_data_in_leaf=min_data_in_leaf,
            validation_fraction=validation_fraction,
            early_stopping_rounds=early_stopping_rounds,
            target_recall=target_recall, decision_probability=decision_probability,
            seed=seed, num_threads=num_threads, predict_num_threads=predict_num_threads,
            min_category_count=min_category_count,
            features=None if features is None else list(features),
            time_origin_s=time_origin_s)
        self.threshold_s = float(threshold_s)
        self.decision_probability = float(decision_probability)
        self.predict_num_threads = predict_num_threads
        self.encoder: Optional[FeatureEncoder] = None
        self.booster: Optional[lgb.Booster] = None

    def fit(self, instances: Instances, observation_end_us: Optional[int] = None
            ) -> "LaClassifier":
        """Fits on instances with known class.

        Args:
          instances: valid instances (see `reject_invalid_lifetimes`).
          observation_end_us: when censored instances stopped being observed.
        """
        frame = instances_frame(instances)
        duration_s, finished = observed_lifetimes(frame, observation_end_us)
        is_long, known = long_lived_labels(duration_s, finished, self.threshold_s)
        train = frame[known]
        if len(train) == 0:
            raise ValueError("no instance with a known class to train the LA classifier on")
        c = self.config
        self.encoder = FeatureEncoder(c["min_category_count"], c["features"],
                                      c["time_origin_s"]).fit(train)
        matrix, label = self.encoder.transform(train), is_long[known]
        start_time_us = train["start_time"].to_numpy(np.float64)
        self.booster = train_booster(
            matrix, label.astype(np.float64), start_time_us,
            objective="binary", feature_names=self.encoder.feature_names_,
            categorical_indices=self.encoder.categorical_indices,
            num_trees=c["num_trees"], num_leaves=c["num_leaves"],
            learning_rate=c["learning_rate"], min_data_in_leaf=c["min_data_in_leaf"],
            seed=c["seed"], num_threads=c["num_threads"],
            validation_fraction=c["validation_fraction"],
            early_stopping_rounds=c["early_stopping_rounds"])
        self.decision_probability = float(c["decision_probability"])
        if c["target_recall"] is not None:
            calibration = time_validation_mask(start_time_us, c["validation_fraction"])
            if not calibration.any():
                calibration[:] = True
            threshold = threshold_at_recall(
                label[calibration], self.booster.predict(matrix[calibration]),
                c["target_recall"])
            if not np.isnan(threshold):
                self.decision_probability = threshold
        return self

    @property
    def feature_names(self):
        """Model input columns (the encoder's features)."""
        return self.encoder.feature_names_

    def encode(self, instances: Instances) -> np.ndarray:
        """Encoded features, float64 (n_instances, n_features)."""
        if self.encoder is None:
            raise ValueError("classifier is not fitted")
        return self.encoder.transform(instances)

    def predict_proba_long(self, features) -> np.ndarray:
        """P(lifetime > threshold_s), float64 (n,).

        Args:
          features: `encode` output, or instances to encode.
        """
        if isinstance(features, (pd.DataFrame, pa.Table)):
            features = self.encode(features)
        features = np.asarray(features, dtype=np.float64)
        expected = len(self.encoder.feature_names_)
        if features.ndim != 2 or features.shape[1] != expected:
            raise ValueError(f"feature matrix has shape {features.shape}, the classifier "
                             f"expects (n, {expected}) columns {self.encoder.feature_names_}")
        return self.booster.predict(features, num_threads=self.predict_num_threads)

    def predict_long(self, features) -> np.ndarray:
        """Bool (n,): predicted to live longer than threshold_s."""
        return self.predict_proba_long(features) >= self.decision_probability

    def to_files(self) -> ModelFiles:
        """model.txt and metadata.json, as for UptimeLifetimeModel."""
        return booster_files(self.booster, {
            "kind": self.KIND, "config": self.config, "encoder": self.encoder.to_dict(),
            "feature_names": self.encoder.feature_names_,
            "decision_probability": self.decision_probability,
            "num_trees_trained": self.booster.num_trees()})

    @classmethod
    def from_files(cls, files: Mapping[str, bytes]) -> "LaClassifier":
        booster, metadata = booster_from_files(files, cls.KIND)
        classifier = cls(**metadata["config"])
        classifier.encoder = FeatureEncoder.from_dict(metadata["encoder"])
        classifier.booster = booster
        classifier.decision_probability = metadata["decision_probability"]
        return classifier

    def save(self, path: str) -> None:
        """Writes `to_files()` into the local directory `path`."""
        write_model_dir(path, self.to_files())

    @classmethod
    def load(cls, path: str) -> "LaClassifier":
        return cls.from_files(read_model_dir(path))
