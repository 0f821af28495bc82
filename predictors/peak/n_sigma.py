"""The N-sigma predictor of [Bashir21] §4: mean + n standard deviations of the machine total.

As in the reference simulator (n_sigma_predictor.py), the statistic is taken over the warm
tasks' aggregate usage-to-limit *ratio* history (`MachineSamples.warm_ratio_history`: the
sum of their usages over the sum of their limits, aligned by age over their last
num_history_samples samples), capped at 1 and scaled by their current total limit:

    P(t) = min(1, mean(r) + n * stdev(r)) * sum_{warm i} L_i[t]  +  cold limits,

with stdev the sample standard deviation (ddof = 1, Python's statistics.stdev). With
constant limits this is mean + n * std of the warm tasks' total usage, as the paper writes it.
"""

import numpy as np

from predictors.peak.machine_samples import MachineSamples, WarmRatioHistory
from predictors.peak.peak_predictor import WarmupPeakPredictor


class NSigmaPredictor(WarmupPeakPredictor):
    """Gaussian upper bound of the machine's usage ratio.

    Args:
      n: number of standard deviations (paper: 5 in simulation, 3 in production).
      num_history_samples: history length (samples; >= 2).
      min_num_samples: warm-up length (samples).
      cap_to_limit: cap every sample at its limit first.
    """

    def __init__(self, n: float = 5, num_history_samples: int = 120, min_num_samples: int = 24,
                 cap_to_limit: bool = False):
        super().__init__(min_num_samples)
        if num_history_samples < 2:
            raise ValueError("num_history_samples must be >= 2 (a standard deviation needs two)")
        self.n = n
        self.num_history_samples = num_history_samples
        self.cap_to_limit = cap_to_limit

    def _predict_warm(self, samples: MachineSamples, warm: np.ndarray) -> np.ndarray:
        return self.warm_peaks(samples.warm_ratio_history(
            self.num_history_samples, self.min_warm_samples, self.cap_to_limit))

    def warm_peaks(self, history: WarmRatioHistory) -> np.ndarray:
        """The warm tasks' peak at each row of a ratio history: float64[T]."""
        count = history.length
        has_warm = count > 0
        ratio = np.where(np.isnan(history.ratio), 0.0, history.ratio)
        mean = ratio.sum(axis=1) / np.maximum(count, 1)
        in_history = np.arange(self.num_history_samples)[None, :] < count[:, None]
        deviation = np.where(in_history, ratio - mean[:, None], 0.0)
        std = np.sqrt((deviation ** 2).sum(axis=1) / np.maximum(count - 1, 1))
        bound = np.minimum(1.0, mean + self.n * std)
        return np.where(has_warm, bound * history.warm_limit, 0.0)
