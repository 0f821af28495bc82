"""All usage samples of one machine, laid out for vectorized peak prediction.

A machine's samples form a sparse (step x task) table: at every sample time ("step") some
tasks report one usage value and the limit in force. The peak predictors and the oracle of
[Bashir21] all work on that table; `MachineSamples` holds it as flat arrays sorted by
(step, task) and caches the derived arrays they share (per-step offsets, task order, runs).

A *run* of a task is a maximal stretch of consecutive machine steps in which the task has a
sample. Runs matter because the reference simulator keeps a task's state (warm-up count,
history) only while the task appears in every snapshot: a task missing from one snapshot
starts over when it comes back.
"""

import dataclasses
import functools
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided


class WarmRatioHistory(NamedTuple):
    """Past usage-to-limit ratio of the tasks that are warm at each step.

    ratio[t, j] = sum_i U_i[t - j] / sum_i L_i[t - j] over the tasks i that are warm at step t
    and whose current run reaches back j steps; it is defined for j < length[t] (NaN beyond).
    This is the series the reference N-sigma and per-machine percentile predictors build
    from their per-task history deques.

    Attributes:
      ratio: float64[T, num_history_samples].
      length: int64[T], min(num_history_samples, longest warm run at t); 0 = no warm task.
      warm_limit: float64[T], sum of the current limits of the warm tasks.
    """

    ratio: np.ndarray
    length: np.ndarray
    warm_limit: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class MachineSamples:
    """All samples of one machine, sorted by (step, task).

    Attributes:
      times: int64[T], strictly increasing sample times (µs) of the machine; steps may be
        missing (gaps), but every step has at least one sample.
      step: int64[S], index into `times`, non-decreasing.
      task: int64[S], dense task index in [0, N); unique within a step.
      usage: float64[S], the chosen usage metric, finite and >= 0.
      limit: float64[S], the task's limit at that sample, finite and > 0.
    """

    times: np.ndarray
    step: np.ndarray
    task: np.ndarray
    usage: np.ndarray
    limit: np.ndarray

    def __post_init__(self):
        for name, dtype in (("times", np.int64), ("step", np.int64), ("task", np.int64),
                            ("usage", np.float64), ("limit", np.float64)):
            value = getattr(self, name)
            if not isinstance(value, np.ndarray) or value.dtype != dtype or value.ndim != 1:
                raise TypeError(f"{name} must be a 1-d {np.dtype(dtype).name} array")
        num_samples = len(self.step)
        if not len(self.task) == len(self.usage) == len(self.limit) == num_samples:
            raise ValueError("step, task, usage and limit must have the same length")
        if len(self.times) == 0 or num_samples == 0:
            raise ValueError("a machine needs at least one sample")
        if np.any(np.diff(self.times) <= 0):
            raise ValueError("times must be strictly increasing")
        step_delta = np.diff(self.step)
        if self.step[0] != 0 or self.step[-1] != len(self.times) - 1 or np.any(step_delta < 0) \
                or np.any(step_delta > 1):
            raise ValueError("step must be non-decreasing and cover every index of times")
        if self.task.min() < 0:
            raise ValueError("task indices must be >= 0")
        if np.any((step_delta == 0) & (np.diff(self.task) <= 0)):
            raise ValueError("tasks must be strictly increasing within a step (no duplicates)")
        if not np.all(np.isfinite(self.usage)) or np.any(self.usage < 0):
            raise ValueError("usage must be finite and >= 0")
        if not np.all(np.isfinite(self.limit)) or np.any(self.limit <= 0):
            raise ValueError("limit must be finite and > 0")

    @classmethod
    def from_arrays(cls, time_us, task_ids, usage, limit) -> "MachineSamples":
        """Builds the table from unsorted samples of one machine.

        Args:
          time_us: int[S] sample times in µs.
          task_ids: [S] task identifiers of any sortable type (ints or strings).
          usage: float[S]; limit: float[S].
        Raises ValueError on duplicate (time, task) pairs or invalid values.
        """
        times, step = np.unique(np.asarray(time_us, dtype=np.int64), return_inverse=True)
        _, task = np.unique(np.asarray(task_ids), return_inverse=True)
        step = step.astype(np.int64).ravel()
        task = task.astype(np.int64).ravel()
        # One sort of a combined key (valid pairs are unique, so any sort orders them alike).
        order = np.argsort(step * (int(task.max(initial=0)) + 1) + task)
        return cls(times=times, step=step[order], task=task[order],
                   usage=np.asarray(usage, dtype=np.float64)[order],
                   limit=np.asarray(limit, dtype=np.float64)[order])

    @property
    def num_steps(self) -> int:
        return len(self.times)

    @property
    def num_samples(self) -> int:
        return len(self.step)

    @property
    def num_tasks(self) -> int:
        return int(self.task.max()) + 1

    @functools.cached_property
    def step_offsets(self) -> np.ndarray:
        """int64[T + 1]: the samples of step t are [step_offsets[t], step_offsets[t + 1])."""
        return np.searchsorted(self.step, np.arange(self.num_steps + 1)).astype(np.int64)

    @functools.cached_property
    def task_order(self) -> np.ndarray:
        """int64[S]: permutation that sorts the samples by (task, step)."""
        # (task, step) pairs are unique: one sort of a combined key.
        return np.argsort(self.task * self.num_steps + self.step)

    @functools.cached_property
    def _runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        order = self.task_order
        task, step = self.task[order], self.step[order]
        new_run = np.ones(len(order), dtype=bool)
        new_run[1:] = (task[1:] != task[:-1]) | (step[1:] != step[:-1] + 1)
        starts = np.flatnonzero(new_run)
        ends = np.append(starts[1:], len(order)) - 1
        run_id = np.cumsum(new_run) - 1
        position, start_step, end_step = (np.empty(len(order), dtype=np.int64) for _ in range(3))
        position[order] = np.arange(len(order)) - starts[run_id] + 1
        start_step[order] = step[starts][run_id]
        end_step[order] = step[ends][run_id]
        return position, start_step, end_step

    @property
    def run_position(self) -> np.ndarray:
        """int64[S]: 1-based position of each sample in its task's run (its sample count)."""
        return self._runs[0]

    @property
    def run_start_step(self) -> np.ndarray:
        """int64[S]: first step of the run each sample belongs to."""
        return self._runs[1]

    @property
    def run_end_step(self) -> np.ndarray:
        """int64[S]: last step of the run each sample belongs to."""
        return self._runs[2]

    @functools.cached_property
    def capped_usage(self) -> np.ndarray:
        """float64[S]: usage capped at the sample's own limit."""
        return np.minimum(self.usage, self.limit)

    def per_step_sum(self, values: np.ndarray) -> np.ndarray:
        """Sums per-sample `values` (float64[S]) over each step: float64[T]."""
        return np.bincount(self.step, weights=values, minlength=self.num_steps)

    def run_scan(self, values: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
        """Inclusive scan of per-sample `values` (float64[S]) along each task run.

        out[j] = ufunc.reduce(values of the run of j up to and including j), e.g. np.add for a
        running sum, np.maximum for a running max. Vectorized doubling (Hillis-Steele):
        log2(longest run) passes over the samples instead of a Python loop per run.
        """
        order = self.task_order
        scanned = values[order].astype(np.float64, copy=True)
        position = self.run_position[order]
        distance = 1
        while distance < position.max(initial=0):
            reaches = position[distance:] > distance
            combined = ufunc(scanned[distance:], scanned[:-distance])
            scanned[distance:] = np.where(reaches, combined, scanned[distance:])
            distance *= 2
        out = np.empty_like(scanned)
        out[order] = scanned
        return out

    @functools.cached_property
    def _warm_ratio_histories(self) -> dict:
        return {}

    def warm_ratio_history(self, num_history_samples: int, min_warm_samples: int,
                           cap_to_limit: bool) -> WarmRatioHistory:
        """The machine-level ratio history of the warm tasks at every step (see WarmRatioHistory).

        Computed once per argument tuple: the N-sigma and per-machine percentile predictors
        (and the forecasters) with the same warm-up and history share it. Read-only arrays.

        A task is warm at step t when its run has at least `min_warm_samples` samples up to t.
        Each sample (step s, run [a, d], position k) feeds ratio[t, t - s] for the steps t in
        its run at which it is still in the window (t - s < num_history_samples) and the task
        is warm (t >= a + min_warm_samples - 1). Those t form one contiguous range, so the sums
        are built with one difference array per (s, j) and a cumulative sum along j, then read
        back along the diagonals t = s + j. Cost O(S + T * num_history_samples).
        """
        key = (num_history_samples, min_warm_samples, cap_to_limit)
        if key not in self._warm_ratio_histories:
            history = self._compute_warm_ratio_history(*key)
            for array in history:
                array.flags.writeable = False
            self._warm_ratio_histories[key] = history
        return self._warm_ratio_histories[key]

    def _compute_warm_ratio_history(self, num_history_samples: int, min_warm_samples: int,
                                    cap_to_limit: bool) -> WarmRatioHistory:
        horizon = num_history_samples
        num_steps = self.num_steps
        usage = self.capped_usage if cap_to_limit else self.usage
        lag_lo = np.maximum(0, self.run_start_step + min_warm_samples - 1 - self.step)
        lag_hi = np.minimum(self.run_end_step - self.step, horizon - 1)
        keep = lag_lo <= lag_hi
        # Rows are sample steps (after `horizon` rows of zeros), columns lags.
        columns = horizon + 1
        row = (self.step[keep] + horizon) * columns
        cells = np.concatenate([row + lag_lo[keep], row + lag_hi[keep] + 1])

        def diagonal_sums(values):
            weights = np.concatenate([values[keep], -values[keep]])
            by_step_lag = np.bincount(cells, weights=weights,
                                      minlength=(num_steps + horizon) * columns
                                      ).reshape(num_steps + horizon, columns)
            np.cumsum(by_step_lag, axis=1, out=by_step_lag)  # in place: T x horizon floats
            # view[t, j] = by_step_lag[horizon + t - j, j]: the samples of step t - j at lag j.
            return as_strided(by_step_lag[horizon], shape=(num_steps, horizon),
                              strides=(by_step_lag.itemsize * columns,
                                       -by_step_lag.itemsize * horizon),
                              writeable=False)

        warm = self.run_position >= min_warm_samples
        starts = self.step_offsets[:-1]
        longest = np.maximum.reduceat(np.where(warm, self.run_position, 0), starts)
        length = np.minimum(longest, horizon).astype(np.int64)
        valid = np.arange(horizon)[None, :] < length[:, None]
        ratio = np.full((num_steps, horizon), np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            np.divide(diagonal_sums(usage), diagonal_sums(self.limit), out=ratio, where=valid)
        warm_limit = self.per_step_sum(np.where(warm, self.limit, 0.0))
        return WarmRatioHistory(ratio=ratio, length=length, warm_limit=warm_limit)
