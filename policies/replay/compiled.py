"""The placement replay's compiled engine (numba) for Best-Fit and NILAS.

It makes the decisions of the Python engine (`simulator._Replay`, the reference it is tested
against, decision for decision and sample for sample) on the same events in the same order,
with the same host exit cache for repredicting sources, 5-10× faster, and with exact
lifetime curves it repredicts a host in O(1) unless one of its VMs was placed, left, or
moved to its next curve interval: the Python engine's cost of repredictions is re-sorting
hosts in its indexes, which this engine does not keep. Every decision scans all hosts (no
index): O(hosts) per arrival, a few ns per host.

Scope (`supports`): policies `BestFit` and `Nilas` (exact classes), two resource dimensions,
no LARS, and a lifetime source that either never repredicts or is the exact
`LifetimeCurves` of an uptime model with every cell evaluated; anything else replays in the
Python engine. The metrics are the Python engine's `PlacementMetrics`, read at every sample
from `CompiledPool`, a view of the engine's arrays.

State per host: room, occupancy, exit estimate, the time of its last reprediction, and for
repredictions the largest remaining lifetime of its VMs at that time (`max_rem`), the
earliest end of their current curve intervals (`next_end`), and whether a VM that held the
largest one left (`stale`). VMs on a host are a doubly linked list, newest first, so the VMs
placed since the last reprediction (`fresh`) lead it.
"""

from typing import Optional

import numba
import numpy as np

from policies.best_fit import BestFit
from policies.nilas import TEMPORAL_COST_BUCKETS_S, Nilas
from policies.replay.pool import NO_EXIT_US, PoolState
from predictors.lifetime.curves import _NEVER_US, LifetimeCurves, uptime_us_bounds

BEST_FIT, NILAS = 0, 1
_BUCKETS_US = np.array(TEMPORAL_COST_BUCKETS_S, np.int64) * 1_000_000
# Cursor slots: the engine's scalar state between calls (those without _ are read by the
# replay: arrivals handled, the last one's time, counts).
(ARRIVAL, _EXIT_POS, _N_DIRTY, _Q_HEAD, _Q_TAIL, _HEAP_N, PLACEMENTS, FAILED, PREDICTIONS,
 BATCHES, _LIVE, _TAKEN_OVER, NOW) = range(13)
# Parameter slots.
_TAKEOVER_US, _CUT, _TAKEOVER_REFRESH, _POLICY, _REPREDICT, _INTERVAL_US, _METRICS_US = range(7)


def supports(policy, lifetimes, lars, pool: PoolState, uses_cache: bool) -> bool:
    """Whether this engine replays `policy` with `lifetimes` (see the module)."""
    if type(policy) not in (BestFit, Nilas) or lars is not None or pool.num_dims != 2:
        return False
    if not uses_cache:
        return True
    return (type(lifetimes) is LifetimeCurves and lifetimes.exact and lifetimes.repredicts
            and not np.isnan(lifetimes.values).any())


class CompiledPool:
    """The engine's state, and the `PoolState` attributes that `PlacementMetrics` reads."""

    def __init__(self, pool: PoolState, vm_exit_us: dict, num_vms: int):
        self.spec, self.capacity, self.num_hosts = pool.spec, pool.capacity, pool.num_hosts
        self.limit = pool.limit
        num_hosts = pool.num_hosts
        room = np.array(pool.room, dtype=np.float64).reshape(num_hosts, 2)
        self.room0, self.room1 = room[:, 0].copy(), room[:, 1].copy()
        self.occupancy = np.array(pool.occupancy, dtype=np.int64)
        self.host_exit_us = np.array(pool.host_exit_us, dtype=np.int64)
        self.limit_0 = np.ascontiguousarray(pool.limit[:, 0])
        self.limit_1 = np.ascontiguousarray(pool.limit[:, 1])
        self.head = np.full(num_hosts, -1, np.int64)
        self.next_vm = np.full(num_vms, -1, np.int64)
        self.prev_vm = np.full(num_vms, -1, np.int64)
        self.host_of = np.full(num_vms, -1, np.int64)
        self.vm_exit_us = np.zeros(num_vms, np.int64)
        self.fresh = np.zeros(num_vms, np.bool_)
        for vm, host in pool.vm_host.items():  # the warm-up's VMs: new to the cache
            self.host_of[vm] = host
            self.vm_exit_us[vm] = vm_exit_us[vm]
            self.fresh[vm] = True
            self.next_vm[vm] = self.head[host]
            if self.head[host] >= 0:
                self.prev_vm[self.head[host]] = vm
            self.head[host] = vm
        self.live = len(pool.vm_host)
        self.vm_host = _LiveVms(self)

    def used(self) -> np.ndarray:
        """Demand placed per host and dimension: float64[H, 2] (as `PoolState.used`)."""
        return self.limit - np.column_stack([self.room0, self.room1])

    def occupancy_array(self) -> np.ndarray:
        return self.occupancy.copy()


class _LiveVms:
    """`len()` of the live VMs, as `PoolState.vm_host` gives it to the metrics."""

    def __init__(self, pool: CompiledPool):
        self._pool = pool

    def __len__(self) -> int:
        return self._pool.live


class CompiledReplay:
    """Runs the events of a `simulator._Replay` after its warm-up with the compiled engine.

    Args:
      replay: the Python replay, warmed up (its pool holds the warm-up VMs), whose policy,
        cache and metrics settings this engine takes over.
      replayed, arrivals_us, exits_us: the replay's arrivals (VM, time, predicted exit).
      exit_times, exit_vms: its exit stream without the sentinel.
    """

    def __init__(self, replay, replayed, arrivals_us, exits_us, exit_times, exit_vms):
        pool = replay.pool
        trace = replay.trace
        num_vms, num_hosts = len(trace), pool.num_hosts
        self.state = state = CompiledPool(pool, {vm: pool.vm_exit_us(vm) for vm in pool.vm_host},
                                          num_vms)
        cache = replay.cache
        cut = int(np.searchsorted(arrivals_us, replay.takeover_us))
        self.cut = cut
        self.params = np.array([
            replay.takeover_us, cut, int(cache is not None and replay.takeover_us
                                         > replay.start_us),
            NILAS if isinstance(replay.policy, Nilas) else BEST_FIT, int(cache is not None),
            cache.interval_us if cache is not None else 0, replay.metrics_start_us],
            dtype=np.int64)
        self.weights = np.array(pool.weights, dtype=np.float64)
        self.cursor = np.zeros(13, np.int64)
        self.cursor[_TAKEN_OVER] = int(not self.params[_TAKEOVER_REFRESH])
        self.cursor[_LIVE] = state.live
        self.arrivals = (np.asarray(replayed, np.int64), np.asarray(arrivals_us, np.int64),
                         np.asarray(exits_us, np.int64),
                         trace.exit_us[np.asarray(replayed, np.int64)].astype(np.int64))
        self.exit_stream = (np.asarray(exit_times, np.int64), np.asarray(exit_vms, np.int64))
        self.demand = (np.ascontiguousarray(trace.demand[:, 0]),
                       np.ascontiguousarray(trace.demand[:, 1]))
        self.decisions = np.full(len(replayed), -1, np.int64)
        curves = self._curves(replay.lifetimes if cache is not None else None, num_vms)
        self.cache_arrays = (
            np.full(num_hosts, np.iinfo(np.int64).min, np.int64),  # last reprediction
            np.zeros(num_hosts, np.int64),  # max_rem
            np.zeros(num_hosts, np.int64),  # next_end
            np.ones(num_hosts, np.bool_),  # stale: recompute every VM
            # Dirty hosts (the warm-up's used hosts), marks, due list, due FIFO, exit heap.
            state.occupancy > 0, np.zeros(num_hosts, np.bool_),
            np.zeros(num_hosts, np.int64), np.zeros(num_hosts, np.int64),
            np.zeros(8 * num_hosts + 64, np.int64), np.zeros(8 * num_hosts + 64, np.int64),
            np.zeros(5 * num_hosts + 64, np.int64), np.zeros(5 * num_hosts + 64, np.int64),
            np.zeros(num_vms, np.int64), np.zeros(num_vms, np.int64),  # vm_rem, column
            np.asarray(trace.arrival_us, np.int64)) + curves
        dirty_hosts = np.flatnonzero(state.occupancy > 0)
        self.cache_arrays[6][:len(dirty_hosts)] = dirty_hosts
        self.cursor[_N_DIRTY] = len(dirty_hosts)

    @staticmethod
    def _curves(curves: Optional[LifetimeCurves], num_vms: int):
        """(row of each VM, remaining µs per (row, interval), interval ends in µs of uptime)
        of exact curves, as `ExitTracker` rounds them; empty for a source without
        repredictions."""
        if curves is None:
            return (np.zeros(num_vms, np.int64), np.zeros((1, 1), np.int64),
                    np.array([_NEVER_US], np.int64))
        end_us = np.append(uptime_us_bounds(curves.thresholds), _NEVER_US).astype(np.int64)
        cell_us = np.rint(np.maximum(curves.values, 0.0) * 1e6).astype(np.int64)
        return curves.row_of_vm.astype(np.int64), cell_us, end_us

    def advance(self, until_us: int) -> None:
        """Handles every exit and arrival up to `until_us` (inclusive), in the replay's order."""
        state = self.state
        _advance(until_us, self.cursor, self.params, self.weights, *self.arrivals,
                 *self.exit_stream, *self.demand, state.limit_0, state.limit_1,
                 state.room0, state.room1, state.occupancy,
                 state.host_exit_us, state.head, state.next_vm, state.prev_vm, state.host_of,
                 state.vm_exit_us, state.fresh, self.decisions, *self.cache_arrays,
                 _BUCKETS_US)
        state.live = int(self.cursor[_LIVE])


@numba.njit(cache=True)
def _heap_less(times, hosts, a, b):
    return times[a] < times[b] or (times[a] == times[b] and hosts[a] < hosts[b])


@numba.njit(cache=True)
def _heap_swap(times, hosts, a, b):
    times[a], times[b] = times[b], times[a]
    hosts[a], hosts[b] = hosts[b], hosts[a]


@numba.njit(cache=True)
def _heap_push(times, hosts, n, time_us, host):
    """Pushes (time_us, host) on the heap of n entries; returns n + 1."""
    times[n] = time_us
    hosts[n] = host
    i = n
    while i > 0:
        parent = (i - 1) // 2
        if not _heap_less(times, hosts, i, parent):
            break
        _heap_swap(times, hosts, i, parent)
        i = parent
    return n + 1


@numba.njit(cache=True)
def _heap_pop(times, hosts, n):
    """Removes the least entry of the heap of n entries; returns n - 1."""
    n -= 1
    times[0] = times[n]
    hosts[0] = hosts[n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and _heap_less(times, hosts, child + 1, child):
            child += 1
        if not _heap_less(times, hosts, child, i):
            break
        _heap_swap(times, hosts, i, child)
        i = child
    return n


@numba.njit(cache=True)
def _level(delta_us, buckets):
    """NILAS's temporal cost of delta_t = `delta_us`."""
    if delta_us <= 0:
        return 0
    return np.searchsorted(buckets, delta_us, side="right") - 1


@numba.njit(cache=True)
def _select(policy, vm, now, exit_us, d0, d1, room0, room1, occupancy, host_exit, w0, w1,
            buckets):
    """Best-Fit (least weighted free capacity, then host id; used hosts before empty ones)
    or NILAS (lowest temporal cost, then Best-Fit; an empty host costs what the VM's own
    remaining lifetime does, and a used host of equal cost comes first): the host, or -1."""
    a0, a1 = d0[vm], d1[vm]
    empty_level = _level(exit_us - now, buckets) if policy == NILAS else 0
    best, best_level, best_score = -1, 0, 0.0
    best_empty, best_empty_score = -1, 0.0
    for h in range(room0.shape[0]):
        if a0 <= room0[h] and a1 <= room1[h]:
            score = w0 * room0[h] + w1 * room1[h]
            if occupancy[h] > 0:
                level = _level(exit_us - host_exit[h], buckets) if policy == NILAS else 0
                if best < 0 or level < best_level or (level == best_level
                                                      and score < best_score):
                    best, best_level, best_score = h, level, score
            elif best_empty < 0 or score < best_empty_score:
                best_empty, best_empty_score = h, score
    if best >= 0 and best_level <= empty_level:
        return best
    return best_empty if best_empty >= 0 else best


@numba.njit(cache=True)
def _remaining(vm, now, arrival, row_of_vm, cell_us, end_us, column):
    """The VM's remaining lifetime (µs) on its curve interval at `now` (moving forward)."""
    c = column[vm]
    uptime = now - arrival[vm]
    while end_us[c] < uptime:
        c += 1
    column[vm] = c
    return cell_us[row_of_vm[vm], c]


@numba.njit(cache=True)
def _advance(until_us, cursor, params, weights, replayed, arrivals, arrival_exits,
             true_exits, exit_times, exit_vms, d0, d1, lim0, lim1, room0, room1, occupancy,
             host_exit, head, next_vm, prev_vm, vm_host, vm_exit, fresh, decisions,
             last_pred, max_rem, next_end, stale, dirty, mark, dirty_stack, due_list,
             queue_time, queue_host, heap_time, heap_host, vm_rem, column, arrival_all,
             row_of_vm, cell_us, end_us, buckets):
    w0, w1 = weights[0], weights[1]
    n_arrivals, n_exits = replayed.shape[0], exit_times.shape[0]
    while True:
        i = cursor[ARRIVAL]
        pos = cursor[_EXIT_POS]
        next_arrival = arrivals[i] if i < n_arrivals else until_us + 1
        # The take-over from Best-Fit (simulator._Replay.run): once the arrivals and exits
        # before it are done, the cache refreshes at its time.
        if cursor[_TAKEN_OVER] == 0 and i >= params[_CUT] and params[_TAKEOVER_US] <= until_us \
                and not (pos < n_exits and exit_times[pos] < params[_TAKEOVER_US]):
            _refresh(params[_TAKEOVER_US], cursor, params, occupancy, host_exit, head,
                     next_vm, vm_exit, fresh, last_pred, max_rem, next_end, stale, dirty, mark,
                     dirty_stack, due_list, queue_time, queue_host, heap_time, heap_host,
                     vm_rem, column, arrival_all, row_of_vm, cell_us, end_us)
            cursor[_TAKEN_OVER] = 1
            continue
        if pos < n_exits and exit_times[pos] <= until_us and exit_times[pos] <= next_arrival:
            cursor[_EXIT_POS] = pos + 1
            vm = exit_vms[pos]
            if vm_host[vm] >= 0:
                _remove(vm, cursor, d0, d1, lim0, lim1, room0, room1, occupancy, host_exit,
                        head, next_vm, prev_vm, vm_host, vm_exit, fresh, last_pred, max_rem,
                        stale, dirty, dirty_stack, vm_rem)
            continue
        if next_arrival > until_us:
            return
        now = next_arrival
        vm = replayed[i]
        cursor[ARRIVAL] = i + 1
        cursor[NOW] = now
        if params[_REPREDICT]:
            _refresh(now, cursor, params, occupancy, host_exit, head, next_vm, vm_exit, fresh,
                     last_pred, max_rem, next_end, stale, dirty, mark, dirty_stack, due_list,
                     queue_time, queue_host, heap_time, heap_host, vm_rem, column,
                     arrival_all, row_of_vm, cell_us, end_us)
        policy = params[_POLICY] if i >= params[_CUT] else BEST_FIT
        exit_us = arrival_exits[i]
        host = _select(policy, vm, now, exit_us, d0, d1, room0, room1, occupancy, host_exit,
                       w0, w1, buckets)
        decisions[i] = host
        counted = now >= params[_METRICS_US]
        if host < 0:
            cursor[FAILED] += counted
            continue
        room0[host] -= d0[vm]
        room1[host] -= d1[vm]
        occupancy[host] += 1
        vm_host[vm] = host
        vm_exit[vm] = exit_us
        fresh[vm] = True
        if exit_us > host_exit[host]:
            host_exit[host] = exit_us
        next_vm[vm] = head[host]
        prev_vm[vm] = -1
        if head[host] >= 0:
            prev_vm[head[host]] = vm
        head[host] = vm
        cursor[_LIVE] += 1
        _touch(host, cursor, dirty, dirty_stack)
        cursor[PLACEMENTS] += counted
        if true_exits[i] == now:
            _remove(vm, cursor, d0, d1, lim0, lim1, room0, room1, occupancy, host_exit, head,
                    next_vm, prev_vm, vm_host, vm_exit, fresh, last_pred, max_rem, stale,
                    dirty, dirty_stack, vm_rem)


@numba.njit(cache=True)
def _touch(host, cursor, dirty, dirty_stack):
    if not dirty[host]:
        dirty[host] = True
        dirty_stack[cursor[_N_DIRTY]] = host
        cursor[_N_DIRTY] += 1


@numba.njit(cache=True)
def _remove(vm, cursor, d0, d1, lim0, lim1, room0, room1, occupancy, host_exit, head,
            next_vm, prev_vm, vm_host, vm_exit, fresh, last_pred, max_rem, stale, dirty,
            dirty_stack, vm_rem):
    """`PoolState.remove` and the cache's touch."""
    host = vm_host[vm]
    vm_host[vm] = -1
    if prev_vm[vm] >= 0:
        next_vm[prev_vm[vm]] = next_vm[vm]
    else:
        head[host] = next_vm[vm]
    if next_vm[vm] >= 0:
        prev_vm[next_vm[vm]] = prev_vm[vm]
    cursor[_LIVE] -= 1
    occupancy[host] -= 1
    if occupancy[host] == 0:
        room0[host] = lim0[host]
        room1[host] = lim1[host]
        host_exit[host] = NO_EXIT_US
        stale[host] = True
    else:
        room0[host] += d0[vm]
        room1[host] += d1[vm]
        gone_exit = vm_exit[vm] if fresh[vm] else last_pred[host] + vm_rem[vm]
        if gone_exit == host_exit[host]:
            latest = NO_EXIT_US
            v = head[host]
            while v >= 0:
                e = vm_exit[v] if fresh[v] else last_pred[host] + vm_rem[v]
                if e > latest:
                    latest = e
                v = next_vm[v]
            host_exit[host] = latest
        if not fresh[vm] and vm_rem[vm] == max_rem[host]:
            stale[host] = True
    _touch(host, cursor, dirty, dirty_stack)


@numba.njit(cache=True)
def _refresh(now, cursor, params, occupancy, host_exit, head, next_vm, vm_exit, fresh,
             last_pred, max_rem, next_end, stale, dirty, mark, dirty_stack, due_list,
             queue_time, queue_host, heap_time, heap_host, vm_rem, column, arrival_all,
             row_of_vm, cell_us, end_us):
    """`HostExitCache.refresh(now)` with exact curves: the used hosts touched since, due by
    the interval, or whose exit estimate passed, repredicted."""
    interval = params[_INTERVAL_US]
    num_hosts = occupancy.shape[0]
    n_due = 0
    if interval == 0:
        for h in range(num_hosts):
            if occupancy[h] > 0:
                due_list[n_due] = h
                n_due += 1
        for k in range(cursor[_N_DIRTY]):
            dirty[dirty_stack[k]] = False
        cursor[_N_DIRTY] = 0
    else:
        for k in range(cursor[_N_DIRTY]):
            h = dirty_stack[k]
            dirty[h] = False
            if not mark[h]:
                mark[h] = True
                due_list[n_due] = h
                n_due += 1
        cursor[_N_DIRTY] = 0
        head_pos = cursor[_Q_HEAD]
        while head_pos < cursor[_Q_TAIL] and queue_time[head_pos] <= now:
            h = queue_host[head_pos]
            if last_pred[h] + interval == queue_time[head_pos] and not mark[h]:
                mark[h] = True
                due_list[n_due] = h
                n_due += 1
            head_pos += 1
        cursor[_Q_HEAD] = head_pos
        while cursor[_HEAP_N] > 0 and heap_time[0] < now:
            time_us, h = heap_time[0], heap_host[0]
            cursor[_HEAP_N] = _heap_pop(heap_time, heap_host, cursor[_HEAP_N])
            if host_exit[h] == time_us and not mark[h]:
                mark[h] = True
                due_list[n_due] = h
                n_due += 1
    repredicted = 0
    for k in range(n_due):
        h = due_list[k]
        mark[h] = False
        if occupancy[h] == 0:
            continue
        repredicted += 1
        _repredict(h, now, occupancy, host_exit, head, next_vm, fresh, last_pred, max_rem,
                   next_end, stale, vm_rem, column, arrival_all, row_of_vm, cell_us, end_us)
        cursor[PREDICTIONS] += occupancy[h]
        if interval > 0:
            _schedule(h, now + interval, cursor, host_exit, queue_time, queue_host,
                      heap_time, heap_host)
    if repredicted:
        cursor[BATCHES] += 1
        if interval > 0:
            _compact(cursor, interval, num_hosts, occupancy, host_exit, last_pred,
                     queue_time, queue_host, heap_time, heap_host)


@numba.njit(cache=True)
def _repredict(h, now, occupancy, host_exit, head, next_vm, fresh, last_pred, max_rem,
               next_end, stale, vm_rem, column, arrival_all, row_of_vm, cell_us, end_us):
    """Host h's exit estimate at `now`: now + the largest remaining lifetime of its VMs,
    looking up only its fresh VMs unless one left or moved to its next interval."""
    every_vm = stale[h] or now > next_end[h]
    if every_vm:
        largest, end = -1, np.int64(1 << 62)
    else:
        largest, end = max_rem[h], next_end[h]
    v = head[h]
    while v >= 0 and (every_vm or fresh[v]):
        remaining = _remaining(v, now, arrival_all, row_of_vm, cell_us, end_us, column)
        vm_rem[v] = remaining
        fresh[v] = False
        if remaining > largest:
            largest = remaining
        interval_end = arrival_all[v] + end_us[column[v]]
        if interval_end < end:
            end = interval_end
        v = next_vm[v]
    stale[h] = False
    max_rem[h] = largest
    next_end[h] = end
    host_exit[h] = now + largest
    last_pred[h] = now


@numba.njit(cache=True)
def _schedule(h, due_us, cursor, host_exit, queue_time, queue_host, heap_time, heap_host):
    tail = cursor[_Q_TAIL]
    if tail == queue_time.shape[0]:
        # Shift the live entries to the front (the compaction keeps at most all hosts).
        live = tail - cursor[_Q_HEAD]
        queue_time[:live] = queue_time[cursor[_Q_HEAD]:tail].copy()
        queue_host[:live] = queue_host[cursor[_Q_HEAD]:tail].copy()
        cursor[_Q_HEAD], tail = 0, live
    queue_time[tail] = due_us
    queue_host[tail] = h
    cursor[_Q_TAIL] = tail + 1
    if host_exit[h] < due_us:
        cursor[_HEAP_N] = _heap_push(heap_time, heap_host, cursor[_HEAP_N], host_exit[h], h)


@numba.njit(cache=True)
def _compact(cursor, interval, num_hosts, occupancy, host_exit, last_pred, queue_time,
             queue_host, heap_time, heap_host):
    """Drops superseded entries as `HostExitCache._schedule` does, past 4 per host."""
    if cursor[_HEAP_N] > 4 * num_hosts:
        n = 0
        for h in range(num_hosts):
            if occupancy[h] > 0:
                n = _heap_push(heap_time, heap_host, n, host_exit[h], h)
        cursor[_HEAP_N] = n
    if cursor[_Q_TAIL] - cursor[_Q_HEAD] > 4 * num_hosts:
        hosts = np.flatnonzero(last_pred != np.iinfo(np.int64).min)
        due = last_pred[hosts] + interval
        order = np.argsort(due, kind="mergesort")  # stable: host order among equal times
        n = hosts.shape[0]
        queue_time[:n] = due[order]
        queue_host[:n] = hosts[order]
        cursor[_Q_HEAD], cursor[_Q_TAIL] = 0, n
