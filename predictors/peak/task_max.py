"""Per-task max predictor (reference simulator max_predictor.py).

Sum over the warm tasks of each task's largest usage so far in its current run (all of the
run, not a bounded history), optionally capped at the limit of each sample.
"""

import numpy as np

from predictors.peak.machine_samples import MachineSamples
from predictors.peak.peak_predictor import WarmupPeakPredictor


class MaxPredictor(WarmupPeakPredictor):
    """Sum of per-task running maxima.

    Args:
      min_num_samples: warm-up length (samples) of a task run.
      cap_to_limit: cap every sample at its limit before taking the max.
    """

    def __init__(self, min_num_samples: int = 24, cap_to_limit: bool = False):
        super().__init__(min_num_samples)
        self.cap_to_limit = cap_to_limit

    def _predict_warm(self, samples: MachineSamples, warm: np.ndarray) -> np.ndarray:
        usage = samples.capped_usage if self.cap_to_limit else samples.usage
        running_max = samples.run_scan(usage, np.maximum)
        return samples.per_step_sum(np.where(warm, running_max, 0.0))
