"""Per-machine percentile predictor (reference per_machine_percentile_predictor.py).

A percentile of the machine's history, taken like the N-sigma predictor over the warm tasks'
aggregate usage-to-limit ratio (capped at 1) and scaled by their current total limit:

    P(t) = min(1, perc_k(r)) * sum_{warm i} L_i[t]  +  cold limits.
"""

import numpy as np

from predictors.peak.machine_samples import MachineSamples, WarmRatioHistory
from predictors.peak.peak_predictor import PercentileHistoryPredictor, sorted_row_percentile


class PerMachinePercentilePredictor(PercentileHistoryPredictor):
    """Percentile of the machine's recent usage ratio.

    Args: those of PercentileHistoryPredictor.
    """

    def _predict_warm(self, samples: MachineSamples, warm: np.ndarray) -> np.ndarray:
        return self.warm_peaks(samples.warm_ratio_history(
            self.num_history_samples, self.min_warm_samples, self.cap_to_limit))

    def warm_peaks(self, history: WarmRatioHistory) -> np.ndarray:
        """The warm tasks' peak at each row of a ratio history: float64[T]."""
        value = sorted_row_percentile(history.ratio, history.length, self.percentile)
        return np.where(history.length > 0, np.minimum(1.0, value) * history.warm_limit, 0.0)
