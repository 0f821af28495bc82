"""What a shaping policy sees and decides, and the base class of the policies.

Every shaping interval (S steps) the simulator asks the policy for the allocations of the
running components. A shaping policy's target for a component is forecast + beta ([Pace18]
§III-B), computed on the usage-to-request ratio (see policies/shaping/forecasters.py):

    target = request · min(1, max over the next S ages of (mean + K2 · uncertainty) + K1)

i.e. beta = K1 · request + K2 · request · V, with V the forecaster's uncertainty of the ratio
at each step of the interval and the maximum taken because the allocation holds for the whole
interval. Where no forecast exists for some age of the interval the target is the request.

Deviations: beta is per component, from the component's own request and forecast (Algorithm
1 subtracts a beta per component; §III-B writes beta_{A_i} with the application's request);
and a target never exceeds the request, so K1 = 1 grants exactly the request ("our method
grants all requested resources", §IV-B) and the shaper never gives more than was asked.
"""

import dataclasses

import numba
import numpy as np

from policies.shaping.forecasters import Forecasts
from policies.shaping.workload import Workload


@dataclasses.dataclass(frozen=True)
class RunningComponents:
    """The R running components at a shaping step (sorted by component index).

    Attributes:
      component, host, app: int64[R].
      elastic: bool[R].
      age: int64[R] steps run since the component's last start ([Pace18]'s "time alive").
      app_order: int64[R] the application's rank in the scheduling order (0 = first).
      target: float64[R, 2] the policy's target allocation (cpu, memory).
      capacity: float64[H, 2] the hosts' capacities.
    """

    component: np.ndarray
    host: np.ndarray
    app: np.ndarray
    elastic: np.ndarray
    age: np.ndarray
    app_order: np.ndarray
    target: np.ndarray
    capacity: np.ndarray


@dataclasses.dataclass(frozen=True)
class Reshape:
    """A policy's decision: allocation float64[R, 2] of every running component (rows of the
    preempted ones are ignored), applications to preempt fully (int64[k]) and elastic
    components to preempt alone (int64[m], component indexes)."""

    allocation: np.ndarray
    preempted_apps: np.ndarray
    preempted_components: np.ndarray


NOTHING = np.zeros(0, dtype=np.int64)


class ShapingPolicy:
    """Base class: allocation = target, nothing preempted (subclasses override `reshape`).

    Args:
      k1: the static part of beta, a fraction of the request (>= 0).
      k2: the weight of the forecast's uncertainty (>= 0).

    Fitted attributes (`fit`):
      peak_: float64[N, 2] per step of every usage series, the highest mean + k2 ·
        uncertainty over the interval that starts there, from the fit covering the step
        (`Forecasts.interval_peaks`; NaN if a step of it has no forecast).
      request_, offset_: the workload's requests and series offsets.
    """

    name = "shaping_policy"
    # False: allocations stay the requests and `reshape` is never called.
    shapes = True

    def __init__(self, k1: float = 0.0, k2: float = 0.0):
        self.k1 = k1
        self.k2 = k2

    def fit(self, workload: Workload, forecasts: Forecasts, interval_steps: int):
        self.peak_ = forecasts.interval_peaks(self.k2, interval_steps)
        self.request_, self.offset_ = workload.request, workload.offset
        return self

    def targets(self, components: np.ndarray, age: np.ndarray) -> np.ndarray:
        """float64[R, 2] forecast + beta of `components` at `age`, capped at the request."""
        # Capped at the request: [Pace18] shapes down from the request and the shaper never
        # grants more than was asked (the module docstring's deviation); the floor is
        # K1 · request, since interval_peaks clips the forecast mean at 0.
        return _targets(components, age, self.peak_, self.offset_, self.request_,
                        float(self.k1))

    def reshape(self, running: RunningComponents) -> Reshape:
        return Reshape(running.target, NOTHING, NOTHING)


@numba.njit(cache=True)
def _targets(components, age, peak, offset, request, k1):
    """`ShapingPolicy.targets`, compiled: request · min(peak + k1, 1), the request where the
    peak is NaN."""
    out = np.empty((len(components), 2))
    for i in range(len(components)):
        c = components[i]
        for r in range(2):
            ratio = peak[offset[c] + age[i], r] + k1
            if np.isnan(ratio):
                out[i, r] = request[c, r]
            else:
                out[i, r] = request[c, r] * (ratio if ratio < 1.0 else 1.0)
    return out
