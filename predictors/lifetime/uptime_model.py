"""The uptime-augmented lifetime model of LAVA (paper 000/001 §3, App. A–C).

A LightGBM regressor of log10 remaining lifetime (seconds) given an instance's features and
its uptime so far, trained on uptime-augmented examples (`lifetime_examples`). Asking it
again as a VM ages ("reprediction") turns a point regressor into a survival-like model:
E[log10 remaining | features, uptime].

Defaults follow the paper's model (001 App. B: 2000 trees, 32 nodes, best-first global
growth): LightGBM grows leaf-wise (best-first) with 32 leaves. Like the library the paper
used, training stops early when the loss on a held-out slice stops improving; that slice is
the latest-starting `validation_fraction` of the training instances, never a random sample.

Inference for the placement replay: `encode` once per instance, then
`predict_remaining(features, uptime_s)` on the encoded rows. `RemainingLifetimeCache` adds
an exact memo: for fixed features the model is a step function of uptime, constant between
consecutive uptime thresholds of its splits, so one LightGBM call per (distinct feature row,
uptime interval) answers every later reprediction in that interval with a table lookup.

`use_uptime=False` is the no-reprediction ablation (001 Fig. 16): trained on the uptime-0
examples only, it predicts a lifetime at arrival and the remaining lifetime is that minus
the uptime.
"""

import re
from typing import List, Mapping, Optional, Sequence, Tuple

import lightgbm as lgb
import numpy as np
import pandas as pd
import pyarrow as pa

from predictors.lifetime.examples import LifetimeExamples
from predictors.lifetime.features import FeatureEncoder
from predictors.lifetime.model_files import METADATA_FILE, ModelFiles, metadata_bytes, \
    read_metadata, read_model_dir, write_model_dir

MODEL_FILE = "model.txt"
UPTIME_FEATURE = "log10_uptime_s"


def log10_uptime(uptime_s: np.ndarray) -> np.ndarray:
    """The uptime feature: log10(1 + uptime_s), 0 at arrival (001 App. A uses log uptime)."""
    return np.log10(1.0 + np.asarray(uptime_s, dtype=np.float64))


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
                  max_bin_by_feature: Optional[Sequence[int]] = None) -> lgb.Booster:
    """Trains a LightGBM booster, early-stopped on the latest-starting examples.

    Args:
      matrix: float64 (n, n_features); label: (n,); start_time_us: (n,) start of the
        instance each example comes from, used for the time-ordered validation slice.
      objective: LightGBM objective ("regression", "binary").
      feature_names, categorical_indices: names of the matrix columns, categorical ones.
      validation_fraction, early_stopping_rounds: the examples whose instances start in the
        last `validation_fraction` of start times are held out; training stops after
        `early_stopping_rounds` rounds without improvement on them. Either one 0 disables.

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
    train_set = lgb.Dataset(matrix[~held_out], label[~held_out],
                            feature_name=list(feature_names),
                            categorical_feature=list(categorical_indices))
    if not held_out.any():
        return lgb.train(params, train_set, num_boost_round=num_trees)
    valid_set = lgb.Dataset(matrix[held_out], label[held_out], reference=train_set)
    booster = lgb.train(params, train_set, num_boost_round=num_trees, valid_sets=[valid_set],
                        callbacks=[lgb.early_stopping(early_stopping_rounds, verbose=False)])
    return lgb.Booster(model_str=booster.model_to_string(num_iteration=booster.best_iteration))


def booster_files(booster: lgb.Booster, metadata: Mapping) -> ModelFiles:
    """A booster's files: model.txt (LightGBM text, round-trip precision) and metadata.json."""
    return {MODEL_FILE: booster.model_to_string().encode("utf-8"),
            METADATA_FILE: metadata_bytes(metadata)}


def booster_from_files(files: Mapping[str, bytes], kind: str) -> Tuple[lgb.Booster, dict]:
    """Reads what `booster_files` wrote; checks the kind, version and feature names."""
    metadata = read_metadata(files, kind)
    if MODEL_FILE not in files:
        raise ValueError(f"{kind} model files {sorted(files)} lack {MODEL_FILE}")
    booster = lgb.Booster(model_str=files[MODEL_FILE].decode("utf-8"))
    if booster.feature_name() != metadata["feature_names"]:
        raise ValueError(f"the model's features {booster.feature_name()} differ from its "
                         f"metadata's {metadata['feature_names']}")
    return booster, metadata


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


class UptimeLifetimeModel:
    """Predicts remaining lifetime (seconds) from instance features and uptime."""

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
            intervals, hence the size of a `RemainingLifetimeCache` row.
          seed, num_threads: LightGBM's seed and training threads (0 = OpenMP default).
          predict_num_threads: LightGBM threads per prediction call; 1 because thread start-up
            outweighs the work of replay-sized batches (and Beam parallelizes elsewhere).
          use_uptime: False trains the no-reprediction ablation.
          min_category_count, features, time_origin_s: for the `FeatureEncoder`.
        """
        self.config = dict(
            num_trees=num_trees, num_leaves=num_leaves, learning_rate=learning_rate,
            min_data_in_leaf=min_data_in_leaf, validation_fraction=validation_fraction,
            early_stopping_rounds=early_stopping_rounds, uptime_max_bin=uptime_max_bin,
            seed=seed, num_threads=num_threads, predict_num_threads=predict_num_threads,
            use_uptime=use_uptime, min_category_count=min_category_count,
            features=None if features is None else list(features),
            time_origin_s=time_origin_s)
        self.use_uptime = use_uptime
        self.predict_num_threads = predict_num_threads
        self.encoder: Optional[FeatureEncoder] = None
        self.booster: Optional[lgb.Booster] = None
        self.cap_s = float("nan")
        self.min_remaining_s = float("nan")

    @property
    def feature_names(self) -> List[str]:
        """Model input columns: the encoder's features, then the uptime if used."""
        return self.encoder.feature_names_ + ([UPTIME_FEATURE] if self.use_uptime else [])

    def fit(self, examples: LifetimeExamples) -> "UptimeLifetimeModel":
        """Fits the encoder on the examples' instances, then the booster on the examples."""
        c = self.config
        self.encoder = FeatureEncoder(c["min_category_count"], c["features"],
                                      c["time_origin_s"]).fit(examples.instances)
        instance_matrix = self.encoder.transform(examples.instances)
        row, uptime_s, label = examples.row, examples.uptime_s, examples.log10_remaining_s
        if self.use_uptime:
            matrix = np.column_stack([instance_matrix[row], log10_uptime(uptime_s)])
        else:
            at_arrival = uptime_s == 0
            row, label = row[at_arrival], label[at_arrival]
            matrix = instance_matrix[row]
        if len(label) == 0:
            raise ValueError("no training examples (the no-uptime model needs uptime-0 ones)")
        n_instance_features = instance_matrix.shape[1]
        self.booster = train_booster(
            matrix, label,
            examples.instances["start_time"].to_numpy(np.float64)[row],
            objective="regression", feature_names=self.feature_names,
            categorical_indices=self.encoder.categorical_indices,
            num_trees=c["num_trees"], num_leaves=c["num_leaves"],
            learning_rate=c["learning_rate"], min_data_in_leaf=c["min_data_in_leaf"],
            seed=c["seed"], num_threads=c["num_threads"],
            validation_fraction=c["validation_fraction"],
            early_stopping_rounds=c["early_stopping_rounds"],
            max_bin_by_feature=([255] * n_instance_features + [c["uptime_max_bin"]]
                                if self.use_uptime else None))
        self.cap_s, self.min_remaining_s = examples.cap_s, examples.min_remaining_s
        return self

    def encode(self, instances) -> np.ndarray:
        """Encoded features, float64 (n_instances, n_instance_features); encode once per
        instance and reuse for every reprediction."""
        if self.encoder is None:
            raise ValueError("model is not fitted")
        return self.encoder.transform(instances)

    def _features(self, features) -> np.ndarray:
        if isinstance(features, (pd.DataFrame, pa.Table)):
            return self.encode(features)
        features = np.asarray(features, dtype=np.float64)
        expected = len(self.encoder.feature_names_)
        if features.ndim != 2 or features.shape[1] != expected:
            raise ValueError(f"feature matrix has shape {features.shape}, the model expects "
                             f"(n, {expected}) columns {self.encoder.feature_names_}")
        return features

    def predict_log10_remaining(self, features, uptime_s) -> np.ndarray:
        """log10 of the predicted remaining lifetime in seconds, float64 (n,), unclipped.

        Args:
          features: `encode` output (n, n_instance_features), or instances to encode.
          uptime_s: (n,) or a scalar, seconds since each instance started.
        """
        features = self._features(features)
        if not self.use_uptime:
            return self.booster.predict(features, num_threads=self.predict_num_threads)
        matrix = np.empty((features.shape[0], features.shape[1] + 1), dtype=np.float64)
        matrix[:, :-1] = features
        matrix[:, -1] = log10_uptime(uptime_s)
        return self.booster.predict(matrix, num_threads=self.predict_num_threads)

    def remaining_from_log10(self, log10_prediction: np.ndarray, uptime_s) -> np.ndarray:
        """Remaining seconds from a `predict_log10_remaining` output, clipped to the label
        range [min_remaining_s, cap_s]; the no-uptime model subtracts the uptime from its
        arrival-time lifetime first."""
        remaining_s = np.power(10.0, log10_prediction)
        if not self.use_uptime:
            remaining_s = remaining_s - np.asarray(uptime_s, dtype=np.float64)
        return np.clip(remaining_s, self.min_remaining_s, self.cap_s)

    def predict_remaining(self, features, uptime_s) -> np.ndarray:
        """Predicted remaining lifetime in seconds, float64 (n,), in [min_remaining_s, cap_s].

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
        return split_thresholds(self.booster, len(self.encoder.feature_names_))

    def to_files(self) -> ModelFiles:
        """model.txt (LightGBM text) and metadata.json (kind, version, training config,
        encoder state with category maps, features, cap)."""
        return booster_files(self.booster, {
            "kind": self.KIND, "config": self.config, "encoder": self.encoder.to_dict(),
            "feature_names": self.feature_names, "cap_s": self.cap_s,
            "min_remaining_s": self.min_remaining_s,
            "num_trees_trained": self.booster.num_trees()})

    @classmethod
    def from_files(cls, files: Mapping[str, bytes]) -> "UptimeLifetimeModel":
        booster, metadata = booster_from_files(files, cls.KIND)
        model = cls(**metadata["config"])
        model.encoder = FeatureEncoder.from_dict(metadata["encoder"])
        model.booster = booster
        model.cap_s, model.min_remaining_s = metadata["cap_s"], metadata["min_remaining_s"]
        return model

    def save(self, path: str) -> None:
        """Writes `to_files()` into the local directory `path`."""
        write_model_dir(path, self.to_files())

    @classmethod
    def load(cls, path: str) -> "UptimeLifetimeModel":
        return cls.from_files(read_model_dir(path))


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


class RemainingLifetimeCache:
    """Exact memo of `model.predict_remaining` for a fixed set of encoded instances.

    For fixed features every tree's leaf depends on the uptime only through which side of
    each uptime threshold it falls, so predictions are constant on each interval
    (t_{k-1}, t_k] of consecutive thresholds (LightGBM sends x <= t left). The cache keeps
    one value per cell (distinct feature row, interval), computed on first use, so a replay
    that repredicts the same VMs many times per simulated hour mostly does one table lookup
    per VM. The value is the remaining lifetime itself when the model uses the uptime (it
    then depends on the cell only), else the log10 lifetime at arrival (one interval), from
    which each call subtracts the uptime.

    The cells a call misses are computed in one LightGBM call, together with the next
    intervals of their rows (which their VMs reach as they age) up to `prefetch_rows` rows
    in all: a LightGBM call has a fixed cost of about 2,000 tree evaluations (measured with
    100 trees of 32 leaves: ~115 us per call, ~6 us per row), so by default a call predicts
    up to 8,000 tree evaluations' worth of rows, and later misses are mostly lookups.

    Memory: 8 bytes × distinct rows × (number of thresholds + 1), bounded by
    `uptime_max_bin`, plus 8 bytes per instance. Its interface is the placement replay's
    lifetime source (`predict_remaining_s(vm_index, uptime_s)`, `repredicts`).
    """

    def __init__(self, model: UptimeLifetimeModel, features: np.ndarray,
                 prefetch_rows: Optional[int] = None):
        """
        Args:
          model: a fitted model.
          features: `model.encode(instances)`, (n_instances, n_instance_features).
          prefetch_rows: rows per LightGBM call up to which later intervals are added;
            default max(1, 8000 // number of trees).
        """
        features = model._features(features)
        rows = np.ascontiguousarray(features).view(
            np.dtype((np.void, features.dtype.itemsize * features.shape[1]))).reshape(-1)
        _, first, group_of_row = np.unique(rows, return_index=True, return_inverse=True)
        self._model = model
        self.repredicts = model.use_uptime
        self._group_features = features[first]
        self._thresholds = model.uptime_thresholds()
        self._interval_uptime_s = interval_uptimes_s(self._thresholds)
        self._num_intervals = len(self._interval_uptime_s)
        self._prefetch_rows = (max(1, 8000 // max(model.booster.num_trees(), 1))
                               if prefetch_rows is None else prefetch_rows)
        # Flat table: cell = group * num_intervals + interval; NaN until computed.
        self._first_cell_of_row = group_of_row.reshape(-1).astype(np.int64) * self._num_intervals
        self._values = np.full(len(first) * self._num_intervals, np.nan)

    def predict_remaining_s(self, vm_index: np.ndarray, uptime_s) -> np.ndarray:
        """Same as `model.predict_remaining(features[vm_index], uptime_s)`, float64 (n,).

        Args:
          vm_index: int (n,), rows of the `features` the cache was built on.
          uptime_s: (n,) or a scalar, seconds.
        """
        vm_index = np.asarray(vm_index, dtype=np.int64)
        uptime_s = np.asarray(uptime_s, dtype=np.float64)
        if uptime_s.shape != vm_index.shape:
            uptime_s = np.broadcast_to(uptime_s, vm_index.shape)
        cell = self._first_cell_of_row[vm_index]
        if len(self._thresholds):
            cell += self._thresholds.searchsorted(log10_uptime(uptime_s), side="left")
        values = self._values[cell]
        missing = np.isnan(values)
        if missing.any():
            self._fill(cell[missing], uptime_s[missing])
            values = self._values[cell]
        if self.repredicts:
            return values
        return self._model.remaining_from_log10(values, uptime_s)

    def _fill(self, cell: np.ndarray, uptime_s: np.ndarray) -> None:
        """Computes the cells `cell` (n,), each asked at the uptime `uptime_s` (n,) in its
        interval, and the next uncomputed intervals of their rows within the budget."""
        cell, first = np.unique(cell, return_index=True)
        uptime_s = uptime_s[first]
        per_cell = self._prefetch_rows // len(cell)
        if per_cell > 1:
            step = np.arange(1, per_cell)
            later = (cell[:, None] + step)[(cell % self._num_intervals)[:, None] + step
                                          < self._num_intervals]
            later_uptime_s = self._interval_uptime_s[later % self._num_intervals]
            wanted = (np.isnan(self._values[later]) & ~np.isnan(later_uptime_s)
                      & ~np.isin(later, cell))
            later, first = np.unique(later[wanted], return_index=True)
            cell = np.concatenate([cell, later])
            uptime_s = np.concatenate([uptime_s, later_uptime_s[wanted][first]])
        log10_values = self._model.predict_log10_remaining(
            self._group_features[cell // self._num_intervals], uptime_s)
        self._values[cell] = (self._model.remaining_from_log10(log10_values, uptime_s)
                              if self.repredicts else log10_values)
