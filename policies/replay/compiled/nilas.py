"""Best-Fit and NILAS (policies/best_fit.py, policies/nilas.py) decisions in the compiled
engine, by a scan of every host."""

import numba
import numpy as np

from policies.replay.compiled.slots import NILAS, NO_END


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
    nilas = policy == NILAS
    empty_level = temporal_cost(exit_us - now, buckets) if nilas else 0
    best, best_level, best_score = -1, 0, 0.0
    # The delta_t range [low, high) of the best level so far: a host outside it has another
    # level, found without a search unless lower.
    low, high = NO_END, NO_END
    best_empty, best_empty_score = -1, 0.0
    for h in range(room0.shape[0]):
        if a0 <= room0[h] and a1 <= room1[h]:
            score = w0 * room0[h] + w1 * room1[h]
            if occupancy[h] > 0:
                delta = exit_us - host_exit[h] if nilas else 0
                if best >= 0 and delta >= high:
                    continue
                if best < 0 or delta < low:
                    best_level = temporal_cost(delta, buckets) if nilas else 0
                    low, high = level_range(best_level, buckets)
                    best, best_score = h, score
                elif score < best_score:
                    best, best_score = h, score
            elif best_empty < 0 or score < best_empty_score:
                best_empty, best_empty_score = h, score
    if best >= 0 and best_level <= empty_level:
        return best
    return best_empty if best_empty >= 0 else best


@numba.njit(cache=True, inline="always", _nrt=False)
def level_range(level, buckets):
    """The delta_t (µs) of temporal cost `level`: [low, high), ±NO_END for no bound."""
    low = -NO_END if level == 0 else buckets[level]
    high = NO_END if level == buckets.shape[0] - 1 else buckets[level + 1]
    return low, high
