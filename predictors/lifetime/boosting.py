"""LightGBM lifetime models: training on a time-ordered validation split, and the base class
of the models that are one booster over `FeatureEncoder` rows (the uptime model, its
no-uptime ablation and the LA classifier).

Their files are model.txt (the LightGBM text model, written with round-trip precision) and
metadata.json, which adds to `LifetimeModel.metadata` the encoder's state (category maps),
the feature names (checked against the booster's on load) and the number of trees kept.
"""

import re
from typing import Iterator, Mapping, Optional, Sequence

import lightgbm as lgb
import numpy as np
import pandas as pd
import pyarrow as pa

from predictors.lifetime.base import LifetimeModel, ModelFiles
from predictors.lifetime.features import FeatureEncoder

MODEL_FILE = "model.txt"


def time_validation_mask(start_time_us: np.ndarray, validation_fraction: float) -> np.ndarray:
    """Bool (n,): the examples whose instances start in the last `validation_fraction` of
    start times; all False when that would leave no training or no validation example."""
    if validation_fraction <= 0 or len(start_time_us) == 0:
        return np.zeros(len(start_time_us), dtype=bool)
    held_out = start_time_us >= np.quantile(start_time_us, 1.0 - validation_fraction)
    return held_out if 0 < held_out.sum() < len(held_out) else np.zeros_like(held_out)


def train_booster(matrix: np.ndarray, label: np.ndarray, start_time_us: np.ndarray, *,
                  objective: str, feature_names: Sequence[str],
                  categorical_indices: Sequence[int], num_trees: int,
                  num_leaves: int, learning_rate: float, min_data_in_leaf: int, seed: int,
                  num_threads: int, validation_fraction: float, early_stopping_rounds: int,
                  max_bin_by_feature: Optional[Sequence[int]] = None,
                  weight: Optional[np.ndarray] = None) -> lgb.Booster:
    """Trains a LightGBM booster, early-stopped on the latest-starting examples.

    Args:
      matrix: float64 (n, n_features); label: (n,); start_time_us: (n,) start of the
        instance each example comes from, used for the time-ordered validation slice.
      objective: LightGBM objective ("regression", "binary").
      feature_names, categorical_indices: names of the matrix columns, categorical ones.
      validation_fraction, early_stopping_rounds: the examples whose instances start in the
        last `validation_fraction` of start times are held out; training stops after
        `early_stopping_rounds` rounds without improvement on them. Either one 0 disables.
      weight: (n,) each example's weight in the loss (None: 1), the held-out ones' too.

    Returns:
      A booster holding only the trees up to the best iteration.
    """
    params = {
        "objective": objective, "num_leaves": num_leaves, "learning_rate": learning_rate,
        "min_data_in_leaf": min_data_in_leaf, "seed": seed, "num_threads": num_threads,
        "deterministic": True, "force_col_wise": True, "verbosity": -1,
    }
    if max_bin_by_feature is not None:
        params["max_bin_by_feature"] = list(max_bin_by_feature)
    held_out = (time_validation_mask(start_time_us, validation_fraction)
                if early_stopping_rounds > 0 else np.zeros(len(label), dtype=bool))
    def weight_of(rows):
        return None if weight is None else weight[rows]

    train_set = lgb.Dataset(matrix[~held_out], label[~held_out], weight=weight_of(~held_out),
                            feature_name=list(feature_names),
                            categorical_feature=list(categorical_indices))
    if not held_out.any():
        return lgb.train(params, train_set, num_boost_round=num_trees)
    valid_set = lgb.Dataset(matrix[held_out], label[held_out], weight=weight_of(held_out),
                            reference=train_set)
    booster = lgb.train(params, train_set, num_boost_round=num_trees, valid_sets=[valid_set],
                        callbacks=[lgb.early_stopping(early_stopping_rounds, verbose=False)])
    return lgb.Booster(model_str=booster.model_to_string(num_iteration=booster.best_iteration))


def split_thresholds(booster: lgb.Booster, feature_index: int) -> np.ndarray:
    """Sorted distinct thresholds of the numerical splits on one feature, from the model text
    (which LightGBM writes with round-trip precision, so they equal the ones it predicts
    with)."""
    text = booster.model_to_string()
    features = re.findall(r"^split_feature=(.*)$", text, flags=re.MULTILINE)
    thresholds = re.findall(r"^threshold=(.*)$", text, flags=re.MULTILINE)
    found = [np.array(t.split(), dtype=np.float64)[np.array(f.split(), dtype=np.int64)
                                                   == feature_index]
             for f, t in zip(features, thresholds)]
    return np.unique(np.concatenate(found)) if found else np.empty(0)


class BoostedLifetimeModel(LifetimeModel):
    """A LightGBM booster over `FeatureEncoder` rows.

    Parameters shared by the subclasses: num_trees, num_leaves, learning_rate,
    min_data_in_leaf, validation_fraction, early_stopping_rounds, seed, num_threads (see
    `train_booster`), predict_num_threads (LightGBM threads per prediction call),
    min_category_count, features, time_origin_s (see `FeatureEncoder`).

    Fitted attributes: `encoder_` (FeatureEncoder) and `booster_` (lgb.Booster).
    """

    FILES = (MODEL_FILE,)

    def _fit_encoder(self, instances) -> FeatureEncoder:
        """A FeatureEncoder with the model's parameters, fitted on `instances`."""
        return FeatureEncoder(self.min_category_count, self.features,
                              self.time_origin_s).fit(instances)

    def _train(self, matrix: np.ndarray, label: np.ndarray, start_time_us: np.ndarray, *,
               objective: str, max_bin_by_feature: Optional[Sequence[int]] = None,
               weight: Optional[np.ndarray] = None) -> lgb.Booster:
        """`train_booster` with the model's parameters on rows of `feature_names`."""
        return train_booster(
            matrix, label, start_time_us, objective=objective,
            feature_names=self.feature_names,
            categorical_indices=self.encoder_.categorical_indices,
            num_trees=self.num_trees, num_leaves=self.num_leaves,
            learning_rate=self.learning_rate, min_data_in_leaf=self.min_data_in_leaf,
            seed=self.seed, num_threads=self.num_threads,
            validation_fraction=self.validation_fraction,
            early_stopping_rounds=self.early_stopping_rounds,
            max_bin_by_feature=max_bin_by_feature, weight=weight)

    def encode(self, instances) -> np.ndarray:
        """Encoded features, float64 (n_instances, n_instance_features); encode once per
        instance and reuse for every prediction."""
        return self._fitted_encoder().transform(instances)

    def encode_chunks(self, instances) -> Iterator[np.ndarray]:
        """`encode` in row chunks, in order (`FeatureEncoder.transform_chunks`): for callers
        that keep less than every row's features."""
        return self._fitted_encoder().transform_chunks(instances)

    def feature_importance(self) -> pd.DataFrame:
        """LightGBM's importance of each model input (`feature_names`): columns feature,
        gain (total gain of its splits), gain_fraction (its share, 0-1), splits."""
        self._fitted_encoder()  # raises when not fitted
        booster = self.booster_
        gain = booster.feature_importance(importance_type="gain").astype(np.float64)
        total = gain.sum()
        return pd.DataFrame({
            "feature": booster.feature_name(), "gain": gain,
            "gain_fraction": gain / total if total > 0 else np.zeros_like(gain),
            "splits": booster.feature_importance(importance_type="split").astype(np.int64)})

    def _fitted_encoder(self) -> FeatureEncoder:
        if getattr(self, "encoder_", None) is None:
            raise ValueError(f"this {type(self).__name__} is not fitted")
        return self.encoder_

    def _features(self, features) -> np.ndarray:
        """`features` as encoded rows: instances (DataFrame or Arrow table) are encoded, a
        matrix is checked to have the encoder's columns."""
        if isinstance(features, (pd.DataFrame, pa.Table)):
            return self.encode(features)
        features = np.asarray(features, dtype=np.float64)
        expected = len(self.encoder_.feature_names_)
        if features.ndim != 2 or features.shape[1] != expected:
            raise ValueError(f"feature matrix has shape {features.shape}, the model expects "
                             f"(n, {expected}) columns {self.encoder_.feature_names_}")
        return features

    def _fitted_metadata(self) -> dict:
        return {"encoder": self.encoder_.to_dict(), "feature_names": self.feature_names,
                "num_trees_trained": self.booster_.num_trees()}

    def _parameter_files(self) -> ModelFiles:
        return {MODEL_FILE: self.booster_.model_to_string().encode("utf-8")}

    def _set_fitted(self, metadata: Mapping, files: Mapping[str, bytes]) -> None:
        """Reads the booster and the encoder; checks the booster's feature names."""
        booster = lgb.Booster(model_str=files[MODEL_FILE].decode("utf-8"))
        if booster.feature_name() != metadata["feature_names"]:
            raise ValueError(f"the model's features {booster.feature_name()} differ from its "
                             f"metadata's {metadata['feature_names']}")
        self.booster_ = booster
        self.encoder_ = FeatureEncoder.from_dict(metadata["encoder"])
