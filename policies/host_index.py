"""Ordered indexes over a pool's hosts, so that an arrival does not rescan every host.

`HostIndex` keeps a set of hosts sorted two ways:

- Best-Fit order: (weighted free capacity, host id). The best fit for a VM is the first host
  at or after the VM's weighted size that fits in every dimension.
- exit order: (host exit estimate in us, host id). Lifetime-aware policies restrict the
  Best-Fit search to the hosts whose exit estimate lies in a time range (a NILAS temporal
  cost level, an LA host class); such a range is a contiguous slice of this order.

`HostGroups` partitions the hosts by a policy-defined key (empty / used, LAVA state and
class, ...) with one `HostIndex` per group, and moves a host between groups when its state
changes. Updates cost O(log H) comparisons plus a list memmove; queries stop at the first
fitting host in Best-Fit order, or scan a short exit range.
"""

import bisect
import itertools
import operator
from typing import Callable, Hashable, Optional, Sequence

from policies.pool import PoolState

NO_HOST = -1
# An exit range with at most this many hosts is scanned directly; a longer one is searched
# in Best-Fit order with the range as a filter.
DIRECT_SCAN_MAX_HOSTS = 24
# Scores are sums of rounded products: start a Best-Fit search slightly below the VM's
# weighted size so that rounding never skips a host that fits.
_SCORE_SLACK = 1e-9
_MIN_TIME = -(1 << 63)
_MAX_TIME = 1 << 63


class HostIndex:
    """A set of hosts of `pool` in Best-Fit order and (if `track_exit`) exit order.

    A full member (`score` None: not even the smallest VM fits) is left out of the Best-Fit
    order, where every search would have to skip it, but stays in the exit order, so that a
    host filling up and draining by one VM costs one list update, not a move between groups.
    """

    def __init__(self, pool: PoolState, track_exit: bool = True):
        self._pool = pool
        self._track_exit = track_exit
        self._by_free = []
        self._free_key = {}
        # (exit_us, host) pairs in ascending order; read-only for callers.
        self.exit_order = []
        self._exit_key = {}

    def add(self, host: int, score: Optional[float]) -> None:
        if score is not None:
            key = (score, host)
            self._free_key[host] = key
            bisect.insort(self._by_free, key)
        if self._track_exit:
            key = (self._pool.host_exit_us[host], host)
            self._exit_key[host] = key
            bisect.insort(self.exit_order, key)

    def discard(self, host: int) -> None:
        key = self._free_key.pop(host, None)
        if key is not None:
            del self._by_free[bisect.bisect_left(self._by_free, key)]
        if self._track_exit:
            key = self._exit_key.pop(host)
            del self.exit_order[bisect.bisect_left(self.exit_order, key)]

    def refresh(self, host: int, score: Optional[float]) -> None:
        """Re-sorts member `host` after its room (now `score`, None if full) or exit
        estimate changed."""
        old = self._free_key.get(host)
        key = None if score is None else (score, host)
        if key != old:
            by_free = self._by_free
            if old is not None:
                del by_free[bisect.bisect_left(by_free, old)]
                del self._free_key[host]
            if key is not None:
                bisect.insort(by_free, key)
                self._free_key[host] = key
        if self._track_exit:
            key = (self._pool.host_exit_us[host], host)
            old = self._exit_key[host]
            if key != old:
                by_exit = self.exit_order
                del by_exit[bisect.bisect_left(by_exit, old)]
                bisect.insort(by_exit, key)
                self._exit_key[host] = key

    def in_best_fit_order(self, weighted_size: float):
        """Iterator of (score, host) over the member hosts that may fit `weighted_size`."""
        start = bisect.bisect_left(self._by_free, (weighted_size - _SCORE_SLACK,))
        return itertools.islice(self._by_free, start, None)

    def best_fit(self, demand: Sequence[float], weighted_size: float) -> int:
        """The member host with the least weighted free capacity that fits `demand`."""
        room = self._pool.room
        le = operator.le
        demand_0 = demand[0]
        by_free = self._by_free
        start = bisect.bisect_left(by_free, (weighted_size - _SCORE_SLACK,))
        # Dimension 0 first: a cheap test that rejects most hosts that do not fit.
        for _, host in itertools.islice(by_free, start, None):
            host_room = room[host]
            if demand_0 <= host_room[0] and all(map(le, demand, host_room)):
                return host
        return NO_HOST

    def best_fit_in_exit_range(self, demand: Sequence[float], weighted_size: float,
                               lo_us: Optional[int], hi_us: Optional[int],
                               lo_pos: Optional[int] = None,
                               hi_pos: Optional[int] = None) -> int:
        """Best fit among the member hosts whose exit estimate is in [lo_us, hi_us).

        None means unbounded. `lo_pos`/`hi_pos`, when the caller already knows them, are the
        positions of the range in `exit_order`.
        """
        by_exit = self.exit_order
        if lo_pos is None:
            lo_pos = 0 if lo_us is None else bisect.bisect_left(by_exit, (lo_us,))
        if hi_pos is None:
            hi_pos = len(by_exit) if hi_us is None else bisect.bisect_left(by_exit, (hi_us,))
        if lo_pos >= hi_pos:
            return NO_HOST
        if hi_pos - lo_pos == len(by_exit):
            return self.best_fit(demand, weighted_size)
        room = self._pool.room
        le = operator.le
        demand_0 = demand[0]
        if hi_pos - lo_pos <= DIRECT_SCAN_MAX_HOSTS:
            best = None
            free_key = self._free_key
            for _, host in itertools.islice(by_exit, lo_pos, hi_pos):
                host_room = room[host]
                if demand_0 <= host_room[0] and all(map(le, demand, host_room)):
                    key = free_key[host]
                    if best is None or key < best:
                        best = key
            return NO_HOST if best is None else best[1]
        # The index is current, so the pool's exit estimates equal the exit-order keys.
        host_exit_us = self._pool.host_exit_us
        lo_us = _MIN_TIME if lo_us is None else lo_us
        hi_us = _MAX_TIME if hi_us is None else hi_us
        start = bisect.bisect_left(self._by_free, (weighted_size - _SCORE_SLACK,))
        for _, host in itertools.islice(self._by_free, start, None):
            host_room = room[host]
            if (demand_0 <= host_room[0] and lo_us <= host_exit_us[host] < hi_us
                    and all(map(le, demand, host_room))):
                return host
        return NO_HOST


class HostGroups:
    """The pool's available hosts partitioned by `group_of(host)`, one HostIndex per group.

    Unavailable hosts (being drained) and hosts for which `group_of` returns None are in no
    group; full hosts (less room than `PoolState.smallest_demand`) are members left out of
    the Best-Fit order. Call `update(host)` after anything that changes a host's group, free
    capacity or exit estimate.
    """

    def __init__(self, pool: PoolState, group_of: Callable[[int], Optional[Hashable]],
                 track_exit: bool = True):
        self._pool = pool
        self._group_of = group_of
        self._track_exit = track_exit
        self._indexes = {}
        self._group = [None] * pool.num_hosts
        for host in range(pool.num_hosts):
            self.update(host)

    def index(self, key: Hashable) -> HostIndex:
        """The index of group `key` (empty if no host is in it)."""
        index = self._indexes.get(key)
        if index is None:
            index = self._indexes[key] = HostIndex(self._pool, self._track_exit)
        return index

    def update(self, host: int) -> None:
        pool = self._pool
        new = self._group_of(host) if pool.available[host] else None
        old = self._group[host]
        if new is None and old is None:
            return
        score = (pool.score(host) if all(map(operator.le, pool.smallest_demand, pool.room[host]))
                 else None)
        if new == old:
            self._indexes[new].refresh(host, score)
            return
        if old is not None:
            self._indexes[old].discard(host)
        if new is not None:
            self.index(new).add(host, score)
        self._group[host] = new
