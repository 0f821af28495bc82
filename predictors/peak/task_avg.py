"""Per-task average predictor (reference simulator avg_predictor.py).

Sum over the warm tasks of each task's mean usage over its whole current run, optionally
capped at the limit of each sample.
"""

import numpy as np

from predictors.peak.machine_samples import MachineSamples
from predictors.peak.peak_predictor import PerTaskPeakPredictor


class AvgPredictor(PerTaskPeakPredictor):
    """Sum of per-task running means.

    Args:
      min_num_samples: warm-up length (samples) of a task run.
      cap_to_limit: cap every sample at its limit before averaging.
    """

    def __init__(self, min_num_samples: int = 24, cap_to_limit: bool = False):
        super().__init__(min_num_samples)
        self.cap_to_limit = cap_to_limit

    def _task_peaks(self, samples: MachineSamples, warm: np.ndarray) -> np.ndarray:
        usage = samples.capped_usage if self.cap_to_limit else samples.usage
        return samples.run_scan(usage, np.add) / samples.run_position
