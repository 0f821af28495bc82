"""Lifetime curves: each VM's predicted remaining lifetime over its whole uptime, from one
batched model call, so that a reprediction is an array lookup (the "learned distributions"
used for repredictions, [Ling25ext] §3 and App. G.3).

Exact curves (the default; the placement replay's): for fixed features a LightGBM model is a
step function of x = log10(1 + uptime_s), constant on each interval (t_{k-1}, t_k] of its
sorted distinct split thresholds on that feature (`model.uptime_thresholds()`). Every
distinct feature row is evaluated once per interval, and `predict_remaining_s` answers
    value[row(vm), searchsorted(thresholds, log10(1 + uptime_s), "left")],
which *is* the model's answer (same float64 input, same comparisons). An interval too narrow
to hold a representable uptime is evaluated by a model call when a VM first reaches it.

Grid curves (`grid_uptime_s=`): the curve at fixed uptimes, interpolated linearly in log10
remaining against log10(1 + uptime), constant past the last: exact at the grid ages only, for
models that are not step functions of the uptime.

`LongLivedCurves` is the same machinery over an `UptimeLongLivedClassifier`'s
P(T > θ | features, uptime); `ExitTracker` is the replay's fast path over exact curves.
"""

import array
import bisect
from typing import Iterable, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import pyarrow as pa

from configs.units import US_PER_S
from predictors.lifetime.uptime_model import (
    UPTIME_FEATURE,
    UptimeLifetimeModel,
    interval_uptimes_s,
    log10_uptime,
)

# Rows per LightGBM call when evaluating curves (bounds the temporary matrix).
_CHUNK_ROWS = 1 << 18
# "Never": the end of the last interval, in microseconds of uptime.
_NEVER_US = 1 << 62


def uptime_us_bounds(thresholds: np.ndarray) -> np.ndarray:
    """Per sorted log10-uptime threshold t_k, the largest integer uptime d (µs) whose feature
    log10(1 + (d / US_PER_S)) is <= t_k, computed exactly as the replay computes it; int64
    (k,), -1 where no uptime >= 0 is (a threshold below 0). Uptime d lies in interval k of
    `searchsorted(thresholds, ., "left")` iff bounds[k-1] < d <= bounds[k]."""
    thresholds = np.asarray(thresholds, dtype=np.float64)

    def feature(d):
        return log10_uptime(d / US_PER_S)

    guess = np.floor((np.power(10.0, thresholds) - 1.0) * US_PER_S)
    bound = np.clip(guess, -1, 2.0 ** 61).astype(np.int64)
    for _ in range(64):  # a few steps at most: the guess is off by float rounding only
        up = (bound + 1 >= 0) & (feature(bound + 1) <= thresholds)
        down = (bound >= 0) & (feature(np.maximum(bound, 0)) > thresholds)
        if not (up.any() or down.any()):
            return bound
        bound = bound + up - down
    raise ArithmeticError("uptime bounds did not converge")


def check_uptime_grid(model: UptimeLifetimeModel) -> None:
    """Raises ValueError unless the model's uptime splits fit the age grid it records
    (ABSOLUTE_AGES models saved with `uptime_ages_s`): LightGBM puts at most one threshold
    strictly between each pair of consecutive grid ages, and none outside the grid."""
    ages = getattr(model, "uptime_ages_s_", None)
    if not model.use_uptime or not ages:
        return
    grid = log10_uptime(np.asarray(ages, dtype=np.float64))
    thresholds = model.uptime_thresholds()
    gap = np.searchsorted(grid, thresholds, side="left")
    outside = (gap == 0) | (gap == len(grid)) | np.isin(thresholds, grid)
    if outside.any() or len(np.unique(gap)) != len(gap):
        raise ValueError(
            f"the booster's uptime splits (log10 uptime {np.round(thresholds, 4).tolist()}) do "
            f"not fit the model's recorded age grid {list(ages)} s: model and metadata differ")


def check_features(model: UptimeLifetimeModel) -> None:
    """Raises ValueError unless the booster's features are the encoder's plus the uptime."""
    expected = list(model.encoder_.feature_names_) + ([UPTIME_FEATURE] if model.use_uptime
                                                       else [])
    found = model.booster_.feature_name()
    if found != expected:
        raise ValueError(f"the booster's features {found} differ from the model's "
                         f"{expected}")


def curves_for_saved_model(model, instances, path: str) -> "LifetimeCurves":
    """Exact curves of a loaded model over `instances`; a model that is not an uptime model,
    whose booster does not match its features or recorded age grid, or whose features the
    instances lack raises ValueError naming `path`."""
    try:
        if not isinstance(model, UptimeLifetimeModel):
            raise ValueError(f"it is a {type(model).__name__}, not an UptimeLifetimeModel")
        check_features(model)
        check_uptime_grid(model)
        return LifetimeCurves(model, instances)
    except ValueError as error:
        raise ValueError(f"lifetime model at {path}: {error}") from error


def distinct_rows(chunks: Iterable[np.ndarray], num_rows: int
                  ) -> Tuple[np.ndarray, np.ndarray]:
    """(distinct rows float64 (k, F), in `np.unique`'s order; each row's index among them,
    int64 (num_rows,)) of the rows of float64 (rows, F) `chunks`, in order. Only the distinct
    rows so far and one chunk are held, so encoded instances need not be kept whole; a
    chunk's own distinct rows are merged with them (not all its rows), so the sort's
    transient is the distinct rows' and the chunk's own."""
    row_of = np.empty(num_rows, np.int64)
    distinct, start = None, 0
    for chunk in chunks:
        first, chunk_row_of = _unique_rows(chunk)
        if distinct is None:  # the first chunk's distinct rows, already in order
            distinct, inverse = chunk[first], np.arange(len(first))
        else:
            both = np.concatenate([distinct, chunk[first]])
            first, inverse = _unique_rows(both)
            # the earlier rows' indexes move with the new rows
            row_of[:start] = inverse[:len(distinct)][row_of[:start]]
            distinct, inverse = both[first], inverse[len(distinct):]
        row_of[start:start + len(chunk)] = inverse[chunk_row_of]
        start += len(chunk)
    if start != num_rows:
        raise ValueError(f"the chunks hold {start} rows, not {num_rows}")
    return distinct, row_of


def _unique_rows(matrix: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(index of the first of each distinct row of (n, F) `matrix`, in `np.unique`'s order of
    the rows' bytes; each row's index among them, int64 (n,))."""
    rows = np.ascontiguousarray(matrix).view(
        np.dtype((np.void, matrix.dtype.itemsize * matrix.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


class StepCurves:
    """Per distinct feature row, a model's answer on each interval of its uptime splits
    (exact curves) or at each age of a grid (grid curves), from batched calls; the lookup
    machinery shared by `LifetimeCurves` and `LongLivedCurves`.

    Attributes:
      thresholds: the curve's breakpoints, log10(1 + uptime_s), sorted (exact curves), or
        the grid's log10(1 + uptime_s) (grid curves).
      values: float64 (distinct feature rows, len(thresholds) + 1) for exact curves: the
        answer on each interval; (rows, grid size) for grid curves (what a subclass stores
        there: see `_cell_values`). NaN for an exact interval not evaluated yet (see the
        module).
      row_of_vm: int64 (n_instances,), each instance's row of `values`.
    Memory: 8 bytes × rows × columns + 8 bytes per instance.
    """

    def __init__(self, model, features,
                 grid_uptime_s: Optional[Sequence[float]] = None):
        """
        Args:
          model: a fitted model with `uptime_thresholds()` and `use_uptime`.
          features: `model.encode(instances)`, (n_instances, n_instance_features), or the
            instances (DataFrame or Arrow table), then encoded a chunk at a time.
          grid_uptime_s: None for exact curves, else the uptime grid (s) of grid curves.
        """
        chunks = (model.encode_chunks(features) if isinstance(features, (pd.DataFrame, pa.Table))
                  else [model._features(features)])
        self._model = model
        self._row_features, self.row_of_vm = distinct_rows(chunks, len(features))
        self.exact = grid_uptime_s is None
        if self.exact:
            self.thresholds = model.uptime_thresholds()
            self._interval_uptime_s = interval_uptimes_s(self.thresholds)
        else:
            if not model.use_uptime:
                raise ValueError("grid curves need a model that uses the uptime")
            self._interval_uptime_s = np.unique(np.asarray(grid_uptime_s, dtype=np.float64))
            if not len(self._interval_uptime_s) or self._interval_uptime_s[0] < 0:
                raise ValueError(f"grid_uptime_s must be non-empty and >= 0: {grid_uptime_s}")
            self.thresholds = log10_uptime(self._interval_uptime_s)
        self.values = self._evaluate()

    @property
    def num_columns(self) -> int:
        return len(self._interval_uptime_s)

    def _cell_values(self, row_features: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        """What `values` holds for rows of features at uptimes (s): float64 (n,)."""
        raise NotImplementedError

    def _evaluate(self) -> np.ndarray:
        """Every (row, interval or grid age) with an uptime to ask at, in one call per
        `_CHUNK_ROWS` rows."""
        num_rows, num_columns = len(self._row_features), self.num_columns
        values = np.full(num_rows * num_columns, np.nan)
        cells = np.flatnonzero(np.tile(~np.isnan(self._interval_uptime_s), num_rows))
        for start in range(0, len(cells), _CHUNK_ROWS):
            self._fill(cells[start:start + _CHUNK_ROWS], values)
        return values.reshape(num_rows, num_columns)

    def _fill(self, cells: np.ndarray, values: np.ndarray, uptime_s=None) -> None:
        """Evaluates flat `cells` of `values` at their column's uptime (or `uptime_s`)."""
        row, column = np.divmod(cells, self.num_columns)
        if uptime_s is None:
            uptime_s = self._interval_uptime_s[column]
        values[cells] = self._cell_values(self._row_features[row], uptime_s)

    def column(self, uptime_s: np.ndarray) -> np.ndarray:
        """Exact curves: the interval index of each uptime (s), int64."""
        return self.thresholds.searchsorted(log10_uptime(uptime_s), side="left")

    def _query(self, vm_index, uptime_s) -> Tuple[np.ndarray, np.ndarray]:
        """(each VM's row of `values`, uptime_s as float64 (n,))."""
        vm_index = np.asarray(vm_index, dtype=np.int64)
        uptime_s = np.asarray(uptime_s, dtype=np.float64)
        if uptime_s.shape != vm_index.shape:
            uptime_s = np.broadcast_to(uptime_s, vm_index.shape)
        return self.row_of_vm[vm_index], uptime_s

    def _lookup(self, row: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        """Exact curves: the values of each row's interval at its uptime, float64 (n,),
        evaluating intervals not evaluated yet."""
        flat = self.values.reshape(-1)
        cell = row * self.num_columns
        if len(self.thresholds):
            cell += self.column(uptime_s)
        values = flat[cell]
        missing = np.isnan(values)
        if missing.any():
            unique_cell, first = np.unique(cell[missing], return_index=True)
            self._fill(unique_cell, flat, uptime_s[missing][first])
            values = flat[cell]
        return values


class LifetimeCurves(StepCurves):
    """Remaining-lifetime curves of a fixed set of encoded instances (see the module).

    The lifetime source interface of the placement replay: `repredicts`,
    `predict_remaining_s(vm_index, uptime_s)` (seconds, float64) and `exit_tracker`.
    `values` holds remaining seconds for exact curves (log10 lifetime at arrival, one
    column, for the no-uptime ablation) and log10 remaining seconds for grid curves.
    """

    def __init__(self, model: UptimeLifetimeModel, features,
                 grid_uptime_s: Optional[Sequence[float]] = None):
        """
        Args:
          model: a fitted uptime model (or its no-uptime ablation).
          features: `model.encode(instances)`, (n_instances, n_instance_features), or the
            instances (DataFrame or Arrow table), then encoded a chunk at a time.
          grid_uptime_s: None for exact curves, else the uptime grid (s) of grid curves.
        """
        self.repredicts = model.use_uptime
        super().__init__(model, features, grid_uptime_s)

    def _cell_values(self, row_features: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        model = self._model
        log10_values = model.predict_log10_remaining(row_features, uptime_s)
        return (model.remaining_from_log10(log10_values, uptime_s)
                if self.repredicts and self.exact else log10_values)

    def predict_remaining_s(self, vm_index: np.ndarray, uptime_s) -> np.ndarray:
        """`model.predict_remaining(features[vm_index], uptime_s)`, float64 (n,): exactly
        for exact curves, interpolated for grid curves.

        Args:
          vm_index: int (n,), rows of the `features` the curves were built on.
          uptime_s: (n,) or a scalar, seconds.
        """
        row, uptime_s = self._query(vm_index, uptime_s)
        if not self.exact:
            return self._interpolate(row, uptime_s)
        values = self._lookup(row, uptime_s)
        if self.repredicts:
            return values
        return self._model.remaining_from_log10(values, uptime_s)

    def _interpolate(self, row: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        """Grid curves: linear in log10 remaining vs log10(1 + uptime) between grid ages."""
        x, grid = log10_uptime(uptime_s), self.thresholds
        right = np.clip(grid.searchsorted(x, side="right"), 1, max(len(grid) - 1, 1))
        left = right - 1
        if len(grid) == 1:
            log10_values = self.values[row, 0]
        else:
            weight = np.clip((x - grid[left]) / (grid[right] - grid[left]), 0.0, 1.0)
            log10_values = ((1.0 - weight) * self.values[row, left]
                            + weight * self.values[row, right])
        return self._model.remaining_from_log10(log10_values, uptime_s)

    def exit_tracker(self, arrival_us: np.ndarray) -> Optional["ExitTracker"]:
        """The replay's per-VM exit tracker over VMs arriving at `arrival_us` (int64 (n,)),
        or None (grid curves, no-uptime model: use `predict_remaining_s`)."""
        if not (self.exact and self.repredicts):
            return None
        return ExitTracker(self, arrival_us)


class LongLivedCurves(StepCurves):
    """Exact curves of P(lifetime > θ | features, uptime) of an `UptimeLongLivedClassifier`
    over a fixed set of encoded instances: `values` holds the probability on each interval,
    and `predict_proba_long` equals the classifier's answer at every uptime."""

    def __init__(self, model, features):
        """
        Args:
          model: a fitted `UptimeLongLivedClassifier`.
          features: `model.encode(instances)`, (n_instances, n_instance_features), or the
            instances (DataFrame or Arrow table), then encoded a chunk at a time.
        """
        super().__init__(model, features)

    def _cell_values(self, row_features: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        return self._model.predict_proba_long(row_features, uptime_s)

    def predict_proba_long(self, vm_index: np.ndarray, uptime_s) -> np.ndarray:
        """`model.predict_proba_long(features[vm_index], uptime_s)`, float64 (n,)."""
        return self._lookup(*self._query(vm_index, uptime_s))


def _int64_array(values: np.ndarray) -> array.array:
    """An int64 numpy array as an `array.array` of the same values (no Python int each)."""
    copy = array.array("q")
    copy.frombytes(memoryview(np.ascontiguousarray(values, dtype=np.int64)).cast("B"))
    return copy


class ExitTracker:
    """Each VM's current remaining lifetime from exact curves, in int64 `array.array`s (8
    bytes per VM each; indexing gives Python ints, as fast as a list's), so that
    its predicted exit at `now_us` is `now_us + remaining_us[vm]`, equal to
    `to_exit_us(now_us, predict_remaining_s(...))` once `advance([vm], now_us)` ran.

    Per VM it keeps the current interval's remaining lifetime (µs, rounded as `to_exit_us`
    rounds) and the last time (µs) the VM stays in that interval; a VM moves on only when it
    is advanced after that time, i.e. at most once per interval, by a bisection of its
    integer uptime in the intervals' ends (`uptime_us_bounds`) and a table lookup. This
    relies on the feature being non-decreasing in the integer uptime, as correctly rounded
    division and a monotone log10 make it (the tests check both sides of every end).

    Args:
      curves: exact curves.
      arrival_us: int64[V] the VMs' arrival times (µs).

    Attributes (read-only for callers; int64 arrays indexed by VM):
      remaining_us: the remaining lifetime (int µs) on the VM's current interval.
      until_us: the last time (int µs) of that interval (-1: not looked up yet).
    """

    def __init__(self, curves: LifetimeCurves, arrival_us: np.ndarray):
        self._curves = curves
        arrival_us = np.asarray(arrival_us, dtype=np.int64)
        self._arrival_us = _int64_array(arrival_us)
        # Ends of the intervals as uptimes in µs, "never" for the last one.
        end_us = np.append(uptime_us_bounds(curves.thresholds), _NEVER_US)
        self._end_us = end_us.tolist()
        self._num_columns = curves.num_columns
        first_cell = curves.row_of_vm * curves.num_columns
        self._first_cell = _int64_array(first_cell)
        # Remaining µs per cell, as `to_exit_us` rounds; -1 for a cell not evaluated yet.
        values = curves.values.reshape(-1)
        cell_us = np.where(np.isnan(values), -1, np.rint(
            np.maximum(np.nan_to_num(values), 0.0) * US_PER_S)).astype(np.int64)
        self._cell_us = _int64_array(cell_us)
        # Every VM starts in the interval of uptime 0; built with numpy, as the trace may
        # hold millions of VMs.
        column = int(curves.column(np.zeros(1))[0]) if len(curves.thresholds) else 0
        remaining_us = cell_us[first_cell + column]
        # A VM whose cell is not evaluated yet is looked up (and evaluated) on first use.
        until_us = np.where(remaining_us < 0, -1, arrival_us + end_us[column])
        self.until_us = _int64_array(until_us)
        self.remaining_us = _int64_array(remaining_us)

    def exits_us(self, vms: Sequence[int], now_us: int) -> list:
        """Predicted exit (int µs) at `now_us` of each VM of `vms` (a list of ints)."""
        self.advance(vms, now_us)
        remaining = self.remaining_us
        return [now_us + remaining[vm] for vm in vms]

    def advance(self, vms: Sequence[int], now_us: int) -> None:
        """Moves each VM of `vms` whose interval ended before `now_us` to its interval at
        `now_us`, found by bisection, with its remaining lifetime (one loop, no list of the
        stale VMs: the replay calls this for about every event)."""
        arrival, end_us, first_cell, cell_us = (self._arrival_us, self._end_us,
                                                self._first_cell, self._cell_us)
        until, remaining = self.until_us, self.remaining_us
        for vm in vms:
            if until[vm] >= now_us:
                continue
            start_us = arrival[vm]
            column = bisect.bisect_left(end_us, now_us - start_us)
            value = cell_us[first_cell[vm] + column]
            if value < 0:
                value = self._evaluate(vm, now_us, first_cell[vm] + column)
            until[vm] = start_us + end_us[column]
            remaining[vm] = value

    def _evaluate(self, vm: int, now_us: int, cell: int) -> int:
        """A cell not evaluated yet (an interval too narrow for `interval_uptimes_s`)."""
        uptime_s = (now_us - self._arrival_us[vm]) / US_PER_S
        remaining_s = self._curves.predict_remaining_s(np.array([vm]), np.array([uptime_s]))
        value = self._cell_us[cell] = int(np.rint(max(remaining_s[0], 0.0) * US_PER_S))
        return value
