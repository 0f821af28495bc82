"""Per-task max predictor (reference simulator max_predictor.py).

Sum over the warm tasks of each task's largest usage so far in its current run (all of the
run, not a bounded history), optionally capped at the limit of each sample.
"""

import numpy as np

from predictors.peak.machine_samples import MachineSamples
from predictors.peak.peak_predictor import PerTaskPeakPredictor


class MaxPredictor(PerTaskPeakPredictor):
    """Sum of per-task running maxima.

    Args:
      min_num_samples: warm-up length (samples) of a task run.
      cap_to_limit: cap every sample at its limit before taking the max.
    """

    def __init__(self, min_num_samples: int = 24, cap_to_limit: bool = False):
        super().__init__(min_num_samples)
        self.cap_to_limit = cap_to_limit

    def _task_peaks(self, samples: MachineSamples, warm: np.ndarray) -> np.ndarray:
        usage = samples.capped_usage if self.cap_to_limit else samples.usage
        return samples.run_scan(usage, np.maximum)
