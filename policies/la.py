"""Lifetime Alignment, LA and LA-Binary ([Barbalho23] §3.1.2, Algorithm 2).

Lifetimes are split into classes by ascending thresholds: class c holds predicted remaining
lifetimes in [thresholds[c-1], thresholds[c]). A VM's class comes from its prediction at
arrival. A host's class is defined dynamically as the class of its longest predicted
remaining lifetime, from its VMs' *initial* predictions (no reprediction: LA is one-shot, so
a VM that outlives its prediction counts as about to exit).

A VM of class > 0 goes to a used host of its own class if one fits (Best-Fit among them),
otherwise to any used host (Best-Fit); class-0 VMs go anywhere used (Best-Fit); an empty host
is opened only when no used host fits. LA-Binary has one threshold, 2 hours.
"""

import bisect
from typing import Sequence

from configs.units import US_PER_S
from policies.best_fit import UsedOrEmptyPolicy
from policies.replay.host_index import NO_HOST

LA_BINARY_THRESHOLDS_S = (7200,)
# The multi-class LA of [Barbalho23] App. B.3: doubling class widths, 15 * 2^i minutes.
LA_MULTI_CLASS_THRESHOLDS_S = tuple(15 * 60 * 2 ** i for i in range(9))


class LifetimeAlignment(UsedOrEmptyPolicy):
    """LA: a VM prefers used hosts of its lifetime class, Best-Fit among them (the module
    docstring); one-shot, on the predictions at arrival.

    Args:
      class_thresholds_s: the class boundaries, seconds, positive and increasing (default
        LA-Binary's one, 2 hours).
    """

    one_shot = True
    track_exit = True

    def __init__(self, class_thresholds_s: Sequence[float] = LA_BINARY_THRESHOLDS_S):
        thresholds = [int(t * US_PER_S) for t in class_thresholds_s]
        if not thresholds or thresholds != sorted(set(thresholds)) or thresholds[0] <= 0:
            raise ValueError(f"class thresholds must be positive and increasing, "
                             f"got {class_thresholds_s}")
        self._thresholds_us = thresholds
        self.name = "la_binary" if tuple(class_thresholds_s) == LA_BINARY_THRESHOLDS_S else "la"

    def lifetime_class(self, remaining_us: int) -> int:
        """Class of a predicted remaining lifetime (0 = shortest)."""
        return bisect.bisect_right(self._thresholds_us, remaining_us)

    def select(self, vm: int, demand: Sequence[float], exit_us: int, now_us: int) -> int:
        weighted_size = self._pool.weighted_size(demand)
        used = self._used_hosts
        vm_class = self.lifetime_class(exit_us - now_us)
        if vm_class > 0:
            # Hosts of the same class: remaining = host_exit - now in the class's interval.
            thresholds = self._thresholds_us
            lo_us = now_us + thresholds[vm_class - 1]
            hi_us = now_us + thresholds[vm_class] if vm_class < len(thresholds) else None
            host = used.best_fit_in_exit_range(demand, weighted_size, lo_us, hi_us)
            if host != NO_HOST:
                return host
        host = used.best_fit(demand, weighted_size)
        if host == NO_HOST:
            host = self._empty_hosts.best_fit(demand, weighted_size)
        return host
