"""Best-Fit placement (paper 003 §3.1.2 item 4; the baseline of papers 000/001 and 003).

A VM goes to the used host that it fits on with the least weighted free capacity (weighted
sum over dimensions, `PoolState.weights`); ties go to the lowest host id. Empty hosts are
used only when no used host fits (the "Any-Fit" rule of 003 §2.3), and among them the
smallest that fits.
"""

from typing import Sequence

from policies.host_index import NO_HOST, HostGroups
from policies.policy import PlacementPolicy, ScheduleTimer
from policies.pool import PoolState

USED = "used"
EMPTY = "empty"


def used_or_empty(pool: PoolState):
    """Group function: USED for hosts holding anything, EMPTY otherwise."""
    occupancy = pool.occupancy
    return lambda host: USED if occupancy[host] else EMPTY


class BestFit(PlacementPolicy):
    """Weighted-sum Best-Fit, empty hosts last."""

    name = "best_fit"

    def bind(self, pool: PoolState, schedule_timer: ScheduleTimer, now_us: int) -> None:
        self._pool = pool
        self._groups = HostGroups(pool, used_or_empty(pool), track_exit=False)

    def select(self, vm: int, demand: Sequence[float], exit_us: int, now_us: int) -> int:
        weighted_size = self._pool.weighted_size(demand)
        host = self._groups.index(USED).best_fit(demand, weighted_size)
        if host == NO_HOST:
            host = self._groups.index(EMPTY).best_fit(demand, weighted_size)
        return host

    def update(self, host: int, now_us: int) -> None:
        self._groups.update(host)
