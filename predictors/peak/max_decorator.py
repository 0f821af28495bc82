"""Max decorator ([Bashir21] §4 "max peak across predictors"; reference max_decorator.py).

Advertises, at every step, the largest of the peaks its predictors advertise. The paper's
best predictor is max(N-sigma, RC-like).
"""

import numpy as np

from predictors.peak.peak_predictor import CombiningPredictor


class MaxDecorator(CombiningPredictor):
    """Element-wise maximum of several predictors' outputs."""

    combine = np.max
