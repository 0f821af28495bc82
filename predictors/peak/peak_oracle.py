"""The peak oracle of [Bashir21] §3: the true future peak of the tasks present now.

PO(t) = max over the steps s of t's window of sum_{i present at t} U_i[s] (or a percentile
of those sums; U_i[s] = 0 when task i has no sample at s), with the semantics of the public
reference simulator (googleinterns/cluster-resource-forecast, fortune_teller.py + oracle.py):

- the window of step t is the steps s in (t, t + horizon]: [Bashir21] eq. 2 writes t <= s,
  but the predictors have already seen the sample at t (peak_predictor.py). Every step of the
  machine in it counts, a step where none of t's tasks has a sample as a sum of 0;
- cap_to_limit caps each future usage at the task's limit *at t*; an empty window (a gap
  longer than the horizon follows t) gives the total limit at t;
- which steps get a value, and where their windows end, follow the reference's streaming
  loop (`PeakOracle.window_ends`): on a gap-free grid with the horizon a multiple of step_s, the
  steps t with t + horizon <= the last time, each with a full window, and NaN for the last
  `horizon` of data; after a gap, windows as short or long as the reference's. Where the
  reference would crash (more samples in one step than steps left to emit, after a gap longer
  than the horizon) the remaining steps wait for the next step's samples.
"""

import numpy as np

from predictors.peak.machine_samples import MachineSamples
from predictors.peak.peak_predictor import PeakPredictor, sorted_row_percentile

REFERENCE_STEP_S = 300


class PeakOracle(PeakPredictor):
    """Clairvoyant future peak of the tasks present at each step.

    Args:
      horizon_s: how far the oracle looks ahead (seconds); 0 gives the total limit everywhere,
        as in the reference.
      percentile: percentile of the future per-step sums (100 = max), numpy 'linear'.
      cap_to_limit: cap every future usage of a task at its limit at t.
      step_s: the trace's step, used by the reference's emission rule (TIME_STEP_IN_SEC).
    """

    def __init__(self, horizon_s: float = 86400, percentile: float = 100,
                 cap_to_limit: bool = False, step_s: float = REFERENCE_STEP_S):
        if horizon_s < 0 or step_s <= 0:
            raise ValueError(f"need horizon_s >= 0 and step_s > 0, got {horizon_s}, {step_s}")
        if percentile < 0:
            raise ValueError(f"percentile must be >= 0, got {percentile}")
        self.horizon_s = horizon_s
        self.percentile = min(percentile, 100)
        self.cap_to_limit = cap_to_limit
        self.step_s = step_s

    def window_ends(self, samples: MachineSamples) -> np.ndarray:
        """int64[T]: the last step of each step's window; -1 where the oracle emits nothing.

        The reference's emission rule: a step is emitted once a sample arrives later than the
        previous emitted step's time + horizon + step_s (the first step: later than its own
        time + horizon), at most one step per arriving sample, plus one final step at the end
        of the data. O(T) loop over steps.
        """
        times = samples.times.tolist()
        counts = np.diff(samples.step_offsets).tolist()
        num_steps = len(times)
        horizon_us = round(self.horizon_s * 1_000_000)
        if horizon_us == 0:
            return np.arange(num_steps, dtype=np.int64)
        step_us = round(self.step_s * 1_000_000)
        ends = [-1] * num_steps
        threshold = times[0] + horizon_us
        next_step = 0
        for step in range(1, num_steps):
            time, emitted = times[step], 0
            while emitted < counts[step] and next_step < step and time > threshold:
                ends[next_step] = step - 1
                threshold = times[next_step] + horizon_us + step_us
                next_step += 1
                emitted += 1
        if next_step < num_steps:
            ends[next_step] = num_steps - 1
        return np.asarray(ends, dtype=np.int64)

    def predict(self, samples: MachineSamples) -> np.ndarray:
        """PO(t) for every step: float64[T], NaN where the reference emits nothing."""
        ends = self.window_ends(samples)
        emitted = ends >= 0
        width = np.where(emitted, ends - np.arange(samples.num_steps), 0)
        out = np.where(emitted, samples.per_step_sum(samples.limit), np.nan)
        max_width = int(width.max())
        if max_width == 0:
            return out
        window = self._future_windows(samples, max_width)
        full = np.flatnonzero(width == max_width)
        partial = np.flatnonzero((width > 0) & (width < max_width))
        if self.percentile >= 100:
            out[full] = window.max(axis=1)[full]
            lag = np.arange(1, max_width + 1)
            in_window = lag[None, :] <= width[partial, None]
            out[partial] = np.where(in_window, window[partial], -np.inf).max(axis=1)
        else:
            rows = np.concatenate([full, partial])
            out[rows] = sorted_row_percentile(window[rows], width[rows], self.percentile)
        return out

    def _future_windows(self, samples: MachineSamples, max_width: int) -> np.ndarray:
        """window[t, k - 1] = sum of U_i[t + k] over the tasks i present at t, k in 1..max_width.

        A read-only float64[T, max_width] view (values past the end of the data are 0).

        A task's samples are cut into segments: maximal stretches of consecutive steps (and,
        with cap_to_limit, of constant limit, since the cap uses the limit at t). The sample of
        task i at s counts for t in segment [a, d] of i when a <= t <= min(d, s - 1), i.e. for
        lags k = s - t in [max(s - d, 1), s - a]: one range per (segment, later sample) pair.
        The ranges are accumulated per future step s as a difference array over lags, stored
        with the largest lag first (column max_width - k) and summed along the row, so a
        single-segment task only ever adds. window[t, k - 1] then lies on a diagonal of that
        band, which a strided view reads without copying.
        """
        order = samples.task_order
        task, step = samples.task[order], samples.step[order]
        usage, limit = samples.usage[order], samples.limit[order]
        new_segment = np.ones(len(order), dtype=bool)
        new_segment[1:] = (task[1:] != task[:-1]) | (step[1:] != step[:-1] + 1)
        if self.cap_to_limit:
            new_segment[1:] |= limit[1:] != limit[:-1]
        first = np.flatnonzero(new_segment)
        last = np.append(first[1:], len(order)) - 1
        segment_start, segment_end = step[first], step[last]
        # Later samples of the same task that can still see the segment: up to d + max_width.
        key_stride = samples.num_steps + max_width + 1
        key = task * key_stride + step
        pair_end = np.searchsorted(key, task[first] * key_stride + segment_end + max_width,
                                   side="right")
        pair_start = first + 1
        num_pairs = np.maximum(pair_end - pair_start, 0)
        segment = np.repeat(np.arange(len(first)), num_pairs)
        offset = np.arange(num_pairs.sum()) - np.repeat(np.cumsum(num_pairs) - num_pairs, num_pairs)
        position = pair_start[segment] + offset
        future_step = step[position]
        value = usage[position]
        if self.cap_to_limit:
            value = np.minimum(value, limit[first][segment])
        lag_lo = np.maximum(future_step - segment_end[segment], 1)
        lag_hi = np.minimum(future_step - segment_start[segment], max_width)
        keep = lag_lo <= lag_hi
        future_step, value = future_step[keep], value[keep]
        lag_lo, lag_hi = lag_lo[keep], lag_hi[keep]
        columns = max_width + 1
        row = future_step * columns + max_width
        subtract = lag_lo >= 2
        cells = np.concatenate([row - lag_hi, row[subtract] - lag_lo[subtract] + 1])
        weights = np.concatenate([value, -value[subtract]])
        # max_width zero rows at the end keep every diagonal read in bounds.
        num_rows = samples.num_steps + max_width
        band = np.bincount(cells, weights=weights, minlength=num_rows * columns)
        # In place: the band is the largest array of the predictor (T x horizon).
        np.cumsum(band.reshape(num_rows, columns), axis=1, out=band.reshape(num_rows, columns))
        # window[t, k - 1] = band[(t + k) * columns + max_width - k]
        #                  = band[2 * max_width + t * columns + (k - 1) * max_width].
        return np.lib.stride_tricks.as_strided(
            band[2 * max_width:], shape=(samples.num_steps, max_width),
            strides=(band.itemsize * columns, band.itemsize * max_width), writeable=False)
