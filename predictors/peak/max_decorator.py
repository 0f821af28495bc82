"""Max decorator (paper 004 §4 "max peak across predictors"; reference max_decorator.py).

Advertises, at every step, the largest of the peaks its predictors advertise. The paper's
best predictor is max(N-sigma, RC-like).
"""

from typing import Sequence

import numpy as np

from predictors.peak.machine_samples import MachineSamples
from predictors.peak.peak_predictor import PeakPredictor


class MaxDecorator(PeakPredictor):
    """Element-wise maximum of several predictors' outputs."""

    def __init__(self, predictors: Sequence[PeakPredictor]):
        if not predictors:
            raise ValueError("MaxDecorator needs at least one predictor")
        self.predictors = list(predictors)

    def predict(self, samples: MachineSamples) -> np.ndarray:
        return np.max([p.predict(samples) for p in self.predictors], axis=0)
