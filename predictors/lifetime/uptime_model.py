"""The uptime-augmented lifetime model of LAVA (paper 000/001 §3, App. A–C).

A LightGBM regressor of log10 remaining lifetime (seconds) given an instance's features and
its uptime so far, trained on uptime-augmented examples (`lifetime_examples`: at absolute
ages by default, or at fractions of the lifetime as in the paper). Asking it again as a VM
ages ("reprediction") turns a point regressor into a survival-like model:
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

from typing import List, Optional, Sequence

import numpy as np

from predictors.lifetime.boosting import BoostedLifetimeModel, split_thresholds
from predictors.lifetime.examples import LifetimeExamples

UPTIME_FEATURE = "log10_uptime_s"


def log10_uptime(uptime_s: np.ndarray) -> np.ndarray:
    """The uptime feature: log10(1 + uptime_s), 0 at arrival (001 App. A uses log uptime)."""
    return np.log10(1.0 + np.asarray(uptime_s, dtype=np.float64))


class UptimeLifetimeModel(BoostedLifetimeModel):
    """Predicts remaining lifetime (seconds) from instance features and uptime.

    Fitted attributes: `encoder_`, `booster_` (see `BoostedLifetimeModel`), the label
    range of the training examples, `cap_s_` and `min_remaining_s_` (seconds), which clips
    every prediction, and their `augmentation_` (ABSOLUTE_AGES or LIFETIME_FRACTIONS; None
    in files written before it was recorded).
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
            intervals, hence the size of a `RemainingLifetimeCache` row.
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
        """Fits the encoder on the examples' instances, then the booster on the examples
        (on those at uptime 0 only without `use_uptime`)."""
        self.encoder_ = self._fit_encoder(examples.instances)
        instance_matrix = self.encoder_.transform(examples.instances)
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
        self.booster_ = self._train(
            matrix, label, examples.instances["start_time"].to_numpy(np.float64)[row],
            objective="regression",
            max_bin_by_feature=([255] * n_instance_features + [self.uptime_max_bin]
                                if self.use_uptime else None))
        self.cap_s_, self.min_remaining_s_ = examples.cap_s, examples.min_remaining_s
        self.augmentation_ = examples.augmentation
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
                "min_remaining_s": self.min_remaining_s_, "augmentation": self.augmentation_}

    def _set_fitted(self, metadata, files) -> None:
        super()._set_fitted(metadata, files)
        self.cap_s_, self.min_remaining_s_ = metadata["cap_s"], metadata["min_remaining_s"]
        self.augmentation_ = metadata.get("augmentation")


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
        self._prefetch_rows = (max(1, 8000 // max(model.booster_.num_trees(), 1))
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
