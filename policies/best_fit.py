"""Best-Fit placement ([Barbalho23] §3.1.2 item 4; the baseline of [Ling25] and [Barbalho23]).

A VM goes to the used host that it fits on with the least weighted free capacity (weighted
sum over dimensions, `PoolState.weights`); ties go to the lowest host id. Empty hosts are
used only when no used host fits (the "Any-Fit" rule of [Barbalho23] §2.3), and among them the
smallest that fits.
"""

from typing import Sequence

from policies.policy import PlacementPolicy, ScheduleTimer
from policies.replay.host_index import NO_HOST, HostGroups
from policies.replay.pool import PoolState

# Group keys of `UsedOrEmptyPolicy`: whether the host holds anything.
USED = True
EMPTY = False


class UsedOrEmptyPolicy(PlacementPolicy):
    """A policy whose host index groups are USED and EMPTY hosts.

    Subclasses set `track_exit` if they search by exit estimate, and may extend `bind`.
    """

    track_exit = False

    def bind(self, pool: PoolState, schedule_timer: ScheduleTimer, now_us: int) -> None:
        self._pool = pool
        self._occupancy = pool.occupancy
        self._groups = HostGroups(pool, (occupancy > 0 for occupancy in pool.occupancy),
                                  self.track_exit)
        self._used_hosts = self._groups.index(USED)
        self._empty_hosts = self._groups.index(EMPTY)

    def update(self, host: int, now_us: int) -> None:
        self._groups.update(host, self._occupancy[host] > 0)

    def exits_changed(self, hosts: Sequence[int], now_us: int) -> None:
        # A reprediction moves no host between the used and the empty group.
        self._groups.update_exits(hosts)

    def placed(self, vm: int, host: int, now_us: int) -> None:
        self._groups.update(host, USED)

    def removed(self, vm: int, host: int, now_us: int) -> None:
        self._groups.update(host, self._occupancy[host] > 0)


class BestFit(UsedOrEmptyPolicy):
    """Weighted-sum Best-Fit, empty hosts last."""

    name = "best_fit"
    uses_exit_estimates = False
    uses_lifetimes = False

    def select(self, vm: int, demand: Sequence[float], exit_us: int, now_us: int) -> int:
        weighted_size = self._pool.weighted_size(demand)
        host = self._used_hosts.best_fit(demand, weighted_size)
        if host == NO_HOST:
            host = self._empty_hosts.best_fit(demand, weighted_size)
        return host
