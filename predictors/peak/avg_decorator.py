"""Average decorator (reference avg_decorator.py): the mean of several predictors' peaks."""

import numpy as np

from predictors.peak.peak_predictor import CombiningPredictor


class AvgDecorator(CombiningPredictor):
    """Element-wise mean of several predictors' outputs."""

    combine = np.mean
