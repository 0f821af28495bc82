"""Best-Fit and NILAS (policies/best_fit.py, policies/nilas.py) decisions in the compiled
engine, by a scan of every host."""

import numba
import numpy as np

from policies.replay.compiled.slots import NILAS


@numba.njit(cache=True, _nrt=False)
def temporal_cost(delta_us, buckets):
    """NILAS's temporal cost of delta_t = `delta_us`."""
    if delta_us <= 0:
        return 0
    return np.searchsorted(buckets, delta_us, side="right") - 1


@numba.njit(cache=True, _nrt=False)
def select(policy, vm, now, exit_us, d0, d1, room0, room1, occupancy, host_exit, w0, w1,
           buckets):
    """Best-Fit (least weighted free capacity, then host id; used hosts before empty ones)
    or NILAS (lowest temporal cost, then Best-Fit; an empty host costs what the VM's own
    remaining lifetime does, and a used host of equal cost comes first): the host, or -1."""
    a0, a1 = d0[vm], d1[vm]
    empty_level = temporal_cost(exit_us - now, buckets) if policy == NILAS else 0
    best, best_level, best_score = -1, 0, 0.0
    best_empty, best_empty_score = -1, 0.0
    for h in range(room0.shape[0]):
        if a0 <= room0[h] and a1 <= room1[h]:
            score = w0 * room0[h] + w1 * room1[h]
            if occupancy[h] > 0:
                level = temporal_cost(exit_us - host_exit[h], buckets) if policy == NILAS else 0
                if best < 0 or level < best_level or (level == best_level
                                                      and score < best_score):
                    best, best_level, best_score = h, level, score
            elif best_empty < 0 or score < best_empty_score:
                best_empty, best_empty_score = h, score
    if best >= 0 and best_level <= empty_level:
        return best
    return best_empty if best_empty >= 0 else best
