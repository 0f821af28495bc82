"""The RC-like (per-task percentile) predictor of [Bashir21] §4.

Inspired by Resource Central: the sum over tasks of a percentile of each task's usage. As
in the reference simulator (per_vm_percentile_predictor.py), the percentile is taken over the
task's usage-to-limit ratios in its last num_history_samples samples (of its current run) and
scaled back by the task's current limit:

    P(t) = sum_{warm i} perc_k(U_i / L_i over its history) * L_i[t]  +  cold limits,

which is perc_k(U_i) whenever the task's limit did not change within its history.
"""

import numpy as np
from scipy import ndimage

from predictors.peak.machine_samples import MachineSamples
from predictors.peak.peak_predictor import (
    PercentileHistoryPredictor,
    PerTaskPeakPredictor,
    lerp,
    percentile_ranks,
)


class RcLikePredictor(PerTaskPeakPredictor, PercentileHistoryPredictor):
    """Sum of per-task percentiles of the recent usage.

    Args: those of PercentileHistoryPredictor.
    """

    # Partial windows are sorted in batches of this many consecutive lengths (padding
    # costs less than one sort per length).
    PARTIAL_BATCH_WIDTH = 32

    def _task_peaks(self, samples: MachineSamples, warm: np.ndarray) -> np.ndarray:
        usage = samples.capped_usage if self.cap_to_limit else samples.usage
        order = samples.task_order
        ratio = (usage / samples.limit)[order]
        window = np.minimum(samples.run_position[order], self.num_history_samples)
        warm = warm[order]
        per_task = np.zeros(len(order))
        full = warm & (window == self.num_history_samples)
        if full.any():
            per_task[full] = self._full_window_percentile(ratio)[full]
        # Warm samples early in their run have windows shorter than the history: sorted in
        # batches of similar length, each window padded to its batch's width with +inf
        # (sorted last, so the first `count` sorted values are the window's).
        partial = np.flatnonzero(warm & ~full)
        partial = partial[np.argsort(window[partial], kind="stable")]
        lower, upper, gamma = percentile_ranks(self.percentile,
                                               np.arange(1, self.num_history_samples + 1))
        batch = (window[partial] - 1) // self.PARTIAL_BATCH_WIDTH
        for at in np.split(partial, np.flatnonzero(np.diff(batch)) + 1):
            if len(at) == 0:
                continue
            count = window[at]
            width = int(count[-1])
            lag = np.arange(width - 1, -1, -1)
            rows = np.where(lag[None, :] < count[:, None],
                            ratio[np.maximum(at[:, None] - lag[None, :], 0)], np.inf)
            rows.sort(axis=1)
            index = np.arange(len(at))
            per_task[at] = lerp(rows[index, lower[count - 1]], rows[index, upper[count - 1]],
                                gamma[count - 1])
        share = np.empty(len(order))
        share[order] = per_task * samples.limit[order]
        return share

    def _full_window_percentile(self, ratio: np.ndarray) -> np.ndarray:
        """Percentile of the trailing num_history_samples values at every position.

        Two exact sliding order statistics (scipy's rank filter); positions whose trailing
        window crosses a run boundary are computed too but never used.
        """
        size = self.num_history_samples
        lower, upper, gamma = percentile_ranks(self.percentile, size)
        trailing = {"size": size, "origin": (size - 1) // 2, "mode": "nearest"}
        lower_value = ndimage.rank_filter(ratio, int(lower), **trailing)
        if upper == lower:
            return lower_value
        upper_value = ndimage.rank_filter(ratio, int(upper), **trailing)
        return lerp(lower_value, upper_value, gamma)
