"""The reservation-centric baseline ([Pace18] §IV-B, as in Omega, Mesos and YARN): every
component is allocated its request, never resized and never preempted."""

import numpy as np

from policies.shaping.shapers.base import ShapingPolicy


class Baseline(ShapingPolicy):
    """Allocation = request, always. Takes no buffer: the baseline uses no forecast."""

    name = "baseline"
    shapes = False

    def __init__(self):
        super().__init__(k1=1.0, k2=0.0)

    def fit(self, workload, forecasts=None, interval_steps: int = 1):
        self.request_ = workload.request
        return self

    def targets(self, components: np.ndarray, age: np.ndarray) -> np.ndarray:
        return self.request_[components]
