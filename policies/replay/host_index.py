"""Ordered indexes over a pool's hosts, so that an arrival does not rescan every host.

`HostIndex` keeps a set of hosts sorted two ways:

- Best-Fit order: `PoolState.free_key`, i.e. (weighted free capacity, host id, room in
  dimension 0, room in the last dimension). The best fit for a VM is the first host at or
  after the VM's weighted size that fits in every dimension. The order is cut into blocks
  of consecutive hosts, each with the most room any of its hosts has in dimension 0 and in
  the last dimension, so that a search skips whole blocks of hosts too full for the VM
  (with CPU and memory, typically hosts with memory to spare but too few cores).
- exit order: (host exit estimate in us, host id). Lifetime-aware policies restrict the
  Best-Fit search to the hosts whose exit estimate lies in a time range (a NILAS temporal
  cost level, an LA host class); such a range is a contiguous slice of this order.

`HostGroups` partitions the hosts by a policy-defined key (empty / used, LAVA state and
class, ...) with one `HostIndex` per group, and moves a host between groups when its state
changes. Updates cost O(log H) comparisons plus short list memmoves; queries stop at the
first fitting host in Best-Fit order, or scan a short exit range.
"""

import operator
from bisect import bisect_left, bisect_right, insort
from itertools import chain, islice
from typing import Hashable, Iterable, Iterator, Optional, Sequence

from policies.replay.pool import PoolState

NO_HOST = -1
# An exit range with at most this many hosts is scanned directly; a longer one is searched
# in Best-Fit order with the range as a filter.
DIRECT_SCAN_MAX_HOSTS = 24
# Best-Fit blocks hold at most _BLOCK_MAX hosts (a fuller one is split in two) and at least
# _BLOCK_MIN unless alone (a smaller one is merged with a neighbour).
_BLOCK_MAX = 32
_BLOCK_MIN = 8
# Scores are sums of rounded products: start a Best-Fit search slightly below the VM's
# weighted size so that rounding never skips a host that fits.
_SCORE_SLACK = 1e-9
_ROOM_0 = operator.itemgetter(2)
_ROOM_LAST = operator.itemgetter(3)


class HostIndex:
    """A set of hosts of `pool` in Best-Fit order and (if its groups track exits) exit order.

    Its members and their keys are maintained by the `HostGroups` that owns it. A full member
    (free key None: not even the smallest VM fits) is left out of the Best-Fit order, where
    every search would have to skip it, but stays in the exit order, so that a host filling
    up and draining by one VM costs one list update, not a move between groups.

    Fit tests compare dimension 0 and the last dimension from the key (all of them for CPU
    and memory) and only then, with more dimensions, every dimension of `pool.room`.

    Attributes (read-only for callers):
      exit_order: (exit_us, host) pairs of all members, ascending (empty unless tracked).
    """

    def __init__(self, pool: PoolState):
        self._room = pool.room
        self._host_exit_us = pool.host_exit_us
        # The index is current, so a member's key is its `pool.free_key`.
        self._free_key = pool.free_key
        self._two_dims = pool.num_dims == 2
        # The Best-Fit order: sorted blocks of keys; per block a separator (at most its first
        # key, above every key of the blocks before it: kept when its first key leaves), and
        # the most room of its hosts in dimension 0 and in the last dimension.
        self._blocks = []
        self._separators = []
        self._max_room_0 = []
        self._max_room_last = []
        self.exit_order = []

    # The Best-Fit order.
    def insert(self, key: tuple) -> None:
        """Adds a member's key."""
        separators = self._separators
        block = bisect_right(separators, key) - 1
        if block < 0:
            # Before every block (or no block yet): the first block takes it.
            if not separators:
                self._blocks.append([key])
                separators.append(key)
                self._max_room_0.append(key[2])
                self._max_room_last.append(key[3])
                return
            block = 0
            separators[0] = key
        keys = self._blocks[block]
        insort(keys, key)
        if key[2] > self._max_room_0[block]:
            self._max_room_0[block] = key[2]
        if key[3] > self._max_room_last[block]:
            self._max_room_last[block] = key[3]
        if len(keys) > _BLOCK_MAX:
            half = len(keys) // 2
            self._set_blocks(block, block + 1, keys[:half], keys[half:])

    def delete(self, key: tuple) -> None:
        """Removes a member's key."""
        separators = self._separators
        block = bisect_right(separators, key) - 1
        keys = self._blocks[block]
        del keys[bisect_left(keys, key)]
        if len(keys) < _BLOCK_MIN:
            if len(separators) > 1:
                # Merge with the next block (the previous one for the last), then split
                # again if the result is too large.
                block = min(block, len(separators) - 2)
                merged = self._blocks[block] + self._blocks[block + 1]
                if len(merged) > _BLOCK_MAX:
                    half = len(merged) // 2
                    self._set_blocks(block, block + 2, merged[:half], merged[half:])
                else:
                    self._set_blocks(block, block + 2, merged)
                return
            if not keys:
                self._blocks.clear()
                separators.clear()
                self._max_room_0.clear()
                self._max_room_last.clear()
                return
        if key[2] == self._max_room_0[block]:
            self._max_room_0[block] = max(map(_ROOM_0, keys))
        if key[3] == self._max_room_last[block]:
            self._max_room_last[block] = max(map(_ROOM_LAST, keys))

    def move(self, old: tuple, new: tuple) -> None:
        """Replaces member key `old` with `new` (the same host's)."""
        separators = self._separators
        block = bisect_right(separators, old) - 1
        last = len(separators) - 1
        if ((block == 0 or separators[block] <= new)
                and (block == last or new < separators[block + 1])):
            # The common case: the key stays in its block.
            keys = self._blocks[block]
            del keys[bisect_left(keys, old)]
            insort(keys, new)
            if new < separators[block]:
                separators[block] = new
            max_room_0, max_room_last = self._max_room_0, self._max_room_last
            if new[2] >= max_room_0[block]:
                max_room_0[block] = new[2]
            elif old[2] == max_room_0[block]:
                max_room_0[block] = max(map(_ROOM_0, keys))
            if new[3] >= max_room_last[block]:
                max_room_last[block] = new[3]
            elif old[3] == max_room_last[block]:
                max_room_last[block] = max(map(_ROOM_LAST, keys))
            return
        self.delete(old)
        self.insert(new)

    def _set_blocks(self, start: int, stop: int, *blocks: list) -> None:
        """Replaces blocks [start, stop) with `blocks` (non-empty key lists)."""
        self._blocks[start:stop] = blocks
        self._separators[start:stop] = [keys[0] for keys in blocks]
        self._max_room_0[start:stop] = [max(map(_ROOM_0, keys)) for keys in blocks]
        self._max_room_last[start:stop] = [max(map(_ROOM_LAST, keys)) for keys in blocks]

    def keys_from(self, key: tuple) -> Iterator[tuple]:
        """The Best-Fit keys from `key` (a member's key) on, in order."""
        block = bisect_right(self._separators, key) - 1
        keys = self._blocks[block]
        return chain(islice(keys, bisect_left(keys, key), None),
                     chain.from_iterable(islice(self._blocks, block + 1, None)))

    # Searches.
    def best_fit(self, demand: Sequence[float], weighted_size: float,
                 exit_lo_us: Optional[int] = None, exit_hi_us: Optional[int] = None) -> int:
        """The member host with the least weighted free capacity that fits `demand` and, if
        `exit_lo_us` is given, whose exit estimate is in [exit_lo_us, exit_hi_us)."""
        blocks = self._blocks
        if not blocks:
            return NO_HOST
        lo_key = (weighted_size - _SCORE_SLACK,)
        first_block = bisect_right(self._separators, lo_key) - 1
        if first_block < 0:
            first_block, start = 0, 0
        else:
            start = bisect_left(blocks[first_block], lo_key)
        max_room_0, max_room_last = self._max_room_0, self._max_room_last
        demand_0, demand_last = demand[0], demand[-1]
        two_dims = self._two_dims
        for block in range(first_block, len(blocks)):
            if demand_0 <= max_room_0[block] and demand_last <= max_room_last[block]:
                for key in islice(blocks[block], start, None):
                    if (demand_0 <= key[2] and demand_last <= key[3]
                            and (two_dims or all(map(operator.le, demand, self._room[key[1]])))
                            and (exit_lo_us is None
                                 or exit_lo_us <= self._host_exit_us[key[1]] < exit_hi_us)):
                        return key[1]
            start = 0
        return NO_HOST

    def best_fit_in_exit_range(self, demand: Sequence[float], weighted_size: float,
                               lo_us: Optional[int], hi_us: Optional[int]) -> int:
        """Best fit among the member hosts whose exit estimate is in [lo_us, hi_us) (None:
        unbounded)."""
        by_exit = self.exit_order
        lo_pos = 0 if lo_us is None else bisect_left(by_exit, (lo_us,))
        hi_pos = len(by_exit) if hi_us is None else bisect_left(by_exit, (hi_us,))
        return self.best_fit_in_exit_positions(demand, weighted_size, lo_pos, hi_pos)

    def best_fit_in_exit_positions(self, demand: Sequence[float], weighted_size: float,
                                   lo_pos: int, hi_pos: int) -> int:
        """Best fit among the member hosts at positions [lo_pos, hi_pos) of `exit_order`."""
        by_exit = self.exit_order
        if lo_pos >= hi_pos:
            return NO_HOST
        if hi_pos - lo_pos == len(by_exit):
            return self.best_fit(demand, weighted_size)
        if hi_pos - lo_pos <= DIRECT_SCAN_MAX_HOSTS:
            room, two_dims, le = self._room, self._two_dims, operator.le
            demand_0, demand_last = demand[0], demand[-1]
            best = None
            free_key = self._free_key
            for _, host in islice(by_exit, lo_pos, hi_pos):
                host_room = room[host]
                if (demand_0 <= host_room[0] and demand_last <= host_room[-1]
                        and (two_dims or all(map(le, demand, host_room)))):
                    key = free_key[host]
                    if best is None or key < best:
                        best = key
            return NO_HOST if best is None else best[1]
        # The hosts at these positions are those with exit estimates in this range (the
        # index is current, so the pool's exit estimates equal the exit-order keys).
        return self.best_fit(demand, weighted_size, by_exit[lo_pos][0], by_exit[hi_pos - 1][0] + 1)


class HostGroups:
    """The pool's available hosts partitioned by group, one HostIndex per group.

    Each host's group is set by the policy through `update(host, group)` (initially
    `groups[host]`); unavailable hosts (being drained) and hosts whose group is None are in
    no group. Full hosts (`PoolState.free_key` None) are members left out of the Best-Fit
    order. Call `update` after anything that changes a host's group, room, availability or
    (with `track_exit`) exit estimate.
    """

    def __init__(self, pool: PoolState, groups: Iterable[Optional[Hashable]],
                 track_exit: bool = True):
        self._pool = pool
        self._available = pool.available
        self._pool_free_key = pool.free_key
        self._host_exit_us = pool.host_exit_us
        self._track_exit = track_exit
        self._indexes = {}
        num_hosts = pool.num_hosts
        self._group = [None] * num_hosts
        # The keys under which each host is filed in its group's index.
        self._free_key = [None] * num_hosts
        self._exit_key = [None] * num_hosts
        for host, group in enumerate(groups):
            self.update(host, group)

    def index(self, key: Hashable) -> HostIndex:
        """The index of group `key` (empty if no host is in it)."""
        index = self._indexes.get(key)
        if index is None:
            index = self._indexes[key] = HostIndex(self._pool)
        return index

    def update(self, host: int, group: Optional[Hashable]) -> None:
        """Files `host` in `group` (if available) with its current room and exit."""
        if not self._available[host]:
            group = None
        old_group = self._group[host]
        if group != old_group:
            if old_group is not None:
                self._discard(host, self._indexes[old_group])
            if group is not None:
                self._add(host, self.index(group))
            self._group[host] = group
            return
        if group is None:
            return
        # Same group: re-sort the host where its keys changed (the hot path).
        index = self._indexes[group]
        key = self._pool_free_key[host]
        old = self._free_key[host]
        if key is not old:
            if old is None:
                index.insert(key)
            elif key is None:
                index.delete(old)
            else:
                index.move(old, key)
            self._free_key[host] = key
        if self._track_exit:
            self._move_exit(host, index)

    def update_exits(self, hosts: Iterable[int]) -> None:
        """Re-sorts `hosts` in their group's exit order after a change of their exit
        estimates only: equal to `update(host, its group)` for each, when the hosts' groups,
        room and availability are as at their last `update` (a reprediction's case), at
        a fraction of the cost (one is made for about every event of a repredicting
        replay)."""
        if not self._track_exit:
            return
        group_of, indexes, move_exit = self._group, self._indexes, self._move_exit
        for host in hosts:
            group = group_of[host]
            if group is not None:
                move_exit(host, indexes[group])

    def _move_exit(self, host: int, index: HostIndex) -> None:
        """Re-sorts member `host` of `index` in its exit order if its exit estimate moved."""
        exit_us = self._host_exit_us[host]
        old = self._exit_key[host]
        if exit_us != old[0]:
            by_exit = index.exit_order
            del by_exit[bisect_left(by_exit, old)]
            key = self._exit_key[host] = (exit_us, host)
            insort(by_exit, key)

    def _add(self, host: int, index: HostIndex) -> None:
        key = self._free_key[host] = self._pool_free_key[host]
        if key is not None:
            index.insert(key)
        if self._track_exit:
            key = self._exit_key[host] = (self._host_exit_us[host], host)
            insort(index.exit_order, key)

    def _discard(self, host: int, index: HostIndex) -> None:
        key = self._free_key[host]
        if key is not None:
            index.delete(key)
            self._free_key[host] = None
        if self._track_exit:
            key = self._exit_key[host]
            del index.exit_order[bisect_left(index.exit_order, key)]
            self._exit_key[host] = None
