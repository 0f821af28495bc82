"""NILAS: Non-Invasive Lifetime-Aware Scheduling ([Ling25] §4.2, [Ling25ext] App. I Algorithm 2).

A host's exit time is the latest (re)predicted exit of its VMs. For a VM with predicted exit
`vm_exit`, a host's temporal cost is the bucket index of
    delta_t = max(vm_exit - host_exit, 0)
with bucket lower bounds {0m, 30m, 60m, 90m, 2h, 3h, 4h, 6h, 12h, 24h, 168h}: delta_t = 70m is
cost 2, delta_t >= 168h is cost 10. NILAS places the VM on the feasible host of lowest
temporal cost, ties broken by Best-Fit (least weighted free capacity, then host id, used hosts
before empty ones). An empty host's exit is "now", so its cost is that of the VM's own
remaining lifetime.

Hosts of one cost level form a contiguous range of the exit order, so the search walks the
levels from 0 upward and runs a range-restricted Best-Fit in each level that has hosts.
"""

import bisect
from typing import Sequence, Tuple

from configs.units import US_PER_S
from policies.best_fit import UsedOrEmptyPolicy
from policies.replay.host_index import NO_HOST, HostIndex

TEMPORAL_COST_BUCKETS_S = (0, 1800, 3600, 5400, 7200, 10800, 14400, 21600, 43200, 86400, 604800)
_BUCKETS_US = [b * US_PER_S for b in TEMPORAL_COST_BUCKETS_S]
_LEVEL_1_US = _BUCKETS_US[1]
LAST_LEVEL = len(TEMPORAL_COST_BUCKETS_S) - 1
NO_LEVEL = LAST_LEVEL + 1


def temporal_cost(delta_us: int) -> int:
    """Bucket index of delta_t = `delta_us` (negative counts as 0)."""
    if delta_us <= 0:
        return 0
    return bisect.bisect_right(_BUCKETS_US, delta_us) - 1


def best_host_by_temporal_cost(index: HostIndex, demand: Sequence[float], weighted_size: float,
                               vm_exit_us: int, min_level: int = 0,
                               max_level: int = LAST_LEVEL) -> Tuple[int, int]:
    """(cost, host) of the lowest-cost, then best-fitting, member host of `index` that fits.

    Only cost levels in [min_level, max_level] are considered; (NO_LEVEL, NO_HOST) if none.
    Level k holds hosts with exit in [vm_exit - b[k+1] + 1, vm_exit - b[k] + 1), unbounded
    above for k = 0 and below for the last level.
    """
    exits = index.exit_order
    if not exits:
        return NO_LEVEL, NO_HOST
    if min_level == 0:
        if exits[0][0] > vm_exit_us - _LEVEL_1_US:
            # Every member outlives the VM (or nearly): all at cost 0, plain Best-Fit.
            host = index.best_fit(demand, weighted_size)
            return (0, host) if host != NO_HOST else (NO_LEVEL, NO_HOST)
        hi_pos = len(exits)
    else:
        hi_pos = bisect.bisect_left(exits, (vm_exit_us - _BUCKETS_US[min_level] + 1,))
    while hi_pos > 0:
        # The latest exit left sets the next level that has hosts: skip empty levels.
        delta_us = vm_exit_us - exits[hi_pos - 1][0]
        level = bisect.bisect_right(_BUCKETS_US, delta_us) - 1 if delta_us > 0 else 0
        if level < min_level:
            level = min_level
        if level > max_level:
            break
        lo_pos = (0 if level == LAST_LEVEL else
                  bisect.bisect_left(exits, (vm_exit_us - _BUCKETS_US[level + 1] + 1,), 0, hi_pos))
        host = index.best_fit_in_exit_positions(demand, weighted_size, lo_pos, hi_pos)
        if host != NO_HOST:
            return level, host
        hi_pos = lo_pos
        min_level = level + 1
    return NO_LEVEL, NO_HOST


class Nilas(UsedOrEmptyPolicy):
    """NILAS as the highest-ranked score, Best-Fit below it."""

    name = "nilas"
    track_exit = True

    def select(self, vm: int, demand: Sequence[float], exit_us: int, now_us: int) -> int:
        weighted_size = self._pool.weighted_size(demand)
        used = self._used_hosts
        empty_level = temporal_cost(exit_us - now_us)
        _, host = best_host_by_temporal_cost(used, demand, weighted_size, exit_us, 0, empty_level)
        if host == NO_HOST:
            host = self._empty_hosts.best_fit(demand, weighted_size)
        if host == NO_HOST and empty_level < LAST_LEVEL:
            # Only stale exit estimates (in the past) put used hosts above the empty level.
            _, host = best_host_by_temporal_cost(used, demand, weighted_size, exit_us,
                                                 empty_level + 1)
        return host
