"""The borg-default (limit) predictor of [Bashir21] §4: a fixed fraction of the total limit.

P(t) = phi * sum of the limits of the warm tasks + sum of the limits of the cold tasks.

phi = 1 is the reference simulator's LimitPredictor (no overcommit), whose output is the total
limit whatever the warm-up. The reference has no phi; the paper's borg-default uses
phi = 0.9 (§5.2: 10 % of resources are unused 95 % of the time). Here a task is cold while
its run has fewer than min_num_samples samples, the paper's literal warm-up rule; with the
default min_num_samples = 0 every task is warm and the predictor saves exactly 1 - phi, as in
the paper's Fig. 10.
"""

import numpy as np

from predictors.peak.machine_samples import MachineSamples
from predictors.peak.peak_predictor import PeakPredictor


class BorgDefaultPredictor(PeakPredictor):
    """phi times the total limit, cold tasks at their full limit.

    Args:
      phi: fraction of the warm tasks' limit advertised (1 = no overcommit).
      min_num_samples: run length below which a task counts at its full limit.
    """

    def __init__(self, phi: float = 0.9, min_num_samples: int = 0):
        if phi < 0 or min_num_samples < 0:
            raise ValueError("need phi >= 0 and min_num_samples >= 0, got "
                             f"{phi} and {min_num_samples}")
        self.phi = phi
        self.min_num_samples = min_num_samples

    def sample_peaks(self, samples: MachineSamples) -> np.ndarray:
        """Each sample's share of its step's peak: float64[S] (as
        peak_predictor.PerTaskPeakPredictor's)."""
        warm = samples.run_position >= self.min_num_samples
        return np.where(warm, self.phi, 1.0) * samples.limit

    def predict(self, samples: MachineSamples) -> np.ndarray:
        return samples.per_step_sum(self.sample_peaks(samples))
