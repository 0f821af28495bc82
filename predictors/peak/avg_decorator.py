"""Average decorator (reference avg_decorator.py): the mean of several predictors' peaks."""

from typing import Sequence

import numpy as np

from predictors.peak.machine_samples import MachineSamples
from predictors.peak.peak_predictor import PeakPredictor


class AvgDecorator(PeakPredictor):
    """Element-wise mean of several predictors' outputs."""

    def __init__(self, predictors: Sequence[PeakPredictor]):
        if not predictors:
            raise ValueError("AvgDecorator needs at least one predictor")
        self.predictors = list(predictors)

    def predict(self, samples: MachineSamples) -> np.ndarray:
        return np.mean([p.predict(samples) for p in self.predictors], axis=0)
