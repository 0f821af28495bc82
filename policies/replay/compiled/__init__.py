"""The placement replay's compiled engine (numba) for Best-Fit, NILAS and LAVA.

It makes the Python engine's decisions (`simulator._Replay`, the reference it is tested
against decision for decision and sample for sample) on the same events in the same order,
with the same host exit cache. Scope (`supports`): `BestFit`, `Nilas` and `Lava` (its strict
ablation and given VM classes included), two dimensions, no LARS, and lifetimes that never
repredict or are an uptime model's exact `LifetimeCurves`; anything else replays in Python.
The metrics are the Python engine's `PlacementMetrics`, reading `CompiledPool`.

Every decision scans all hosts (no index), passing over a host whose tier, class or
temporal-cost range cannot beat the best so far. A host's state is one 64-byte row of
`hosts`, read together by a reprediction; its VMs are rows of `vms` in a chain of blocks of
16, each summarizing its VMs (slots.py, rows.py), so an exact-curve reprediction is O(1)
unless a VM arrived or left or a curve may have passed its block's largest remaining
lifetime. LAVA's host state is `lava_host`; its timers a heap by (time, host), handled after
the exits and before the arrivals of their time. The kernels allocate nothing and are
compiled without numba's reference counting (`_nrt=False`, a cost on every array argument);
numba caches them per machine, and `kernel_cache` flushes them when a source changes.
"""

import pathlib
from typing import Optional

import numpy as np

from policies.best_fit import BestFit
from policies.lava import LAVA_CLASS_BOUNDS_S, Lava
from policies.nilas import TEMPORAL_COST_BUCKETS_S, Nilas
from policies.replay.compiled import kernel_cache
from policies.replay.compiled.events import run_until
from policies.replay.compiled.rows import add_row
from policies.replay.compiled.slots import (
    ARRIVAL,
    ARRIVED,
    BATCHES,
    BEST_FIT,
    BLOCK_COLUMNS,
    BLOCK_HOST,
    BLOCK_ROWS,
    CURSOR_SIZE,
    DEADLINE,
    DUE,
    EXIT,
    FAILED,
    FIRST_BLOCK,
    FREE_N,
    HOST_COLUMNS,
    LAST_BLOCK,
    LAST_PRED,
    LAVA,
    LIVE,
    N_TOUCHED,
    NILAS,
    NONE,
    NOW,
    PLACEMENTS,
    PREDICTIONS,
    ROW,
    STALE,
    TIMER,
    VM,
    VM_COLUMNS,
    WINDOW,
)
from policies.replay.pool import PoolState, requested, used_above_room
from predictors.lifetime.curves import _NEVER_US, LifetimeCurves, uptime_us_bounds

__all__ = ["ARRIVAL", "BATCHES", "FAILED", "NOW", "PLACEMENTS", "PREDICTIONS", "CompiledReplay",
           "supports"]
# Before any kernel is loaded: cache entries compiled from older sources are dropped.
kernel_cache.flush_if_sources_changed(pathlib.Path(__file__).parent,
                                     kernel_cache.package_kernels(__name__))

_BUCKETS_US = np.array(TEMPORAL_COST_BUCKETS_S, np.int64) * 1_000_000
_LAVA_BOUNDS_US = np.array(LAVA_CLASS_BOUNDS_S, np.int64) * 1_000_000


_LOADED = []  # [True] once the kernel is loaded (asking numba costs ~0.1 ms a call)


def loaded() -> bool:
    """Whether this process has the engine's kernel loaded (from numba's cache, or compiled
    when the machine has none: about a minute)."""
    if not _LOADED and run_until.signatures:
        _LOADED.append(True)
    return bool(_LOADED)


def supports(policy, lifetimes, lars, pool: PoolState, uses_cache: bool) -> bool:
    """Whether this engine replays `policy` with `lifetimes` (see the module)."""
    if type(policy) not in (BestFit, Nilas, Lava) or lars is not None or pool.num_dims != 2:
        return False
    if not uses_cache:
        return True
    return (type(lifetimes) is LifetimeCurves and lifetimes.exact and lifetimes.repredicts
            and not np.isnan(lifetimes.values).any())


def _most_alive(arrivals_us: np.ndarray, exits_us: np.ndarray) -> int:
    """At least the most of these VMs on hosts at once (rows of `vms` for them): after each
    arrival, the VMs arrived so far less those that left before its time (a VM leaving at its
    time may still be there; one that fails is counted too)."""
    if len(arrivals_us) == 0:
        return 0
    left = np.searchsorted(np.sort(exits_us), arrivals_us, side="left")
    return int(np.max(np.arange(1, len(arrivals_us) + 1) - left))


def _policy_kind(policy) -> int:
    return {BestFit: BEST_FIT, Nilas: NILAS, Lava: LAVA}[type(policy)]


def _cache_lines(shape: tuple) -> np.ndarray:
    """Zeros int64[shape] starting on a 64-byte boundary: rows of 8 are cache lines."""
    size = int(np.prod(shape))
    buffer = np.zeros(size + 8, np.int64)
    skip = (-buffer.ctypes.data % 64) // 8
    return buffer[skip:skip + size].reshape(shape)


class CompiledPool:
    """The engine's state, and the `PoolState` attributes that `PlacementMetrics` reads."""

    def __init__(self, pool: PoolState, vm_exit_us: dict, num_rows: int,
                 arrival_us: np.ndarray, row_of_vm: np.ndarray, cursor: np.ndarray,
                 demand: Optional[np.ndarray] = None):
        self.spec, self.capacity, self.num_hosts = pool.spec, pool.capacity, pool.num_hosts
        self.limit = pool.limit
        num_hosts = pool.num_hosts
        room = np.array(pool.room, dtype=np.float64).reshape(num_hosts, 2)
        self.room0, self.room1 = room[:, 0].copy(), room[:, 1].copy()
        self.occupancy = np.array(pool.occupancy, dtype=np.int64)
        self.host_exit_us = np.array(pool.host_exit_us, dtype=np.int64)
        self.limit_0 = np.ascontiguousarray(pool.limit[:, 0])
        self.limit_1 = np.ascontiguousarray(pool.limit[:, 1])
        num_blocks = num_rows // BLOCK_ROWS + num_hosts + 1  # each host's last is partial
        self.vms = np.zeros((VM_COLUMNS, num_blocks * BLOCK_ROWS), np.int64)
        self.slot_of = np.full(len(arrival_us), -1, np.int64)
        # With an admission (`demand`, the VMs' float64[V, 2]): the admission's window each
        # VM was placed in (the warm-up's: the first).
        self.demand = demand
        self.placed_window = np.zeros(len(arrival_us) if demand is not None else 1, np.int64)
        self.cursor = cursor
        self.hosts = _cache_lines((num_hosts, HOST_COLUMNS))
        self.hosts[:, [FIRST_BLOCK, LAST_BLOCK]] = -1
        self.hosts[:, LAST_PRED] = NONE  # not repredicted yet
        self.hosts[:, STALE] = 1  # read every VM at the first reprediction
        self.block_links = np.zeros((num_blocks, BLOCK_COLUMNS), np.int64)
        # A stack of the free blocks (its first cursor[FREE_N] entries), the lowest on top.
        self.free_blocks = np.arange(num_blocks - 1, -1, -1, dtype=np.int64)
        cursor[FREE_N] = num_blocks
        count = np.zeros(num_hosts, np.int64)
        for vm, host in pool.vm_host.items():  # the warm-up's VMs: fresh
            row = add_row(host, count[host], cursor, self.hosts, self.block_links,
                          self.free_blocks)
            count[host] += 1
            self.slot_of[vm] = row
            self.vms[[VM, EXIT, ARRIVED, ROW], row] = (vm, vm_exit_us[vm], arrival_us[vm],
                                                      row_of_vm[vm])
        self.live = len(pool.vm_host)
        self.vm_host = _LiveVms(self)

    def used(self) -> np.ndarray:
        """Demand placed per host and dimension: float64[H, 2] (as `PoolState.used`; with an
        admission, `AdmittedPool.used`)."""
        if self.demand is not None:
            return requested(*self.residents(), self.demand, self.num_hosts)
        return self.limit - np.column_stack([self.room0, self.room1])

    def residents(self):
        """(vms, hosts) int64[n]: the live VMs by index and their hosts (`PoolState`'s)."""
        vms = np.flatnonzero(self.slot_of >= 0)
        return vms, self.block_links[self.slot_of[vms] // BLOCK_ROWS, BLOCK_HOST]

    def set_cpu_rooms(self, hosts: np.ndarray, rooms: np.ndarray) -> list:
        """Sets the CPU room of `hosts` (`AdmittedPool.set_cpu_rooms`); the engine scans
        every host, so no host needs re-indexing: returns []."""
        self.room0[hosts] = rooms
        return []

    def new_window(self) -> None:
        """The admission predicted: the VMs placed so far are counted (`AdmittedPool`)."""
        self.cursor[WINDOW] += 1

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
      replayed, arrivals_us, exits_us, true_exits_us: the replay's arrivals (VM, time,
        predicted and true exit).
      exit_times, exit_vms: its exit stream without the sentinel.
    """

    def __init__(self, replay, replayed, arrivals_us, exits_us, true_exits_us, exit_times,
                 exit_vms):
        pool = replay.pool
        trace = replay.trace
        num_vms, num_hosts = len(trace), pool.num_hosts
        cache = replay.cache
        curves = self._curves(replay.lifetimes if cache is not None else None, num_vms)
        arrival_all = np.asarray(trace.arrival_us, np.int64)
        num_rows = len(pool.vm_host) + _most_alive(arrivals_us, true_exits_us)
        self.cursor = np.zeros(CURSOR_SIZE, np.int64)
        admits = replay.admission is not None and replay.admission.peaks is not None
        self.state = state = CompiledPool(pool, {vm: pool.vm_exit_us(vm) for vm in pool.vm_host},
                                          num_rows, arrival_all, curves[0], self.cursor,
                                          trace.demand if admits else None)
        cut = int(np.searchsorted(arrivals_us, replay.takeover_us))
        self.cut = cut
        self.params = np.array([
            replay.takeover_us, cut, int(cache is not None and replay.takeover_us
                                         > replay.start_us),
            _policy_kind(replay.policy), int(cache is not None),
            cache.interval_us if cache is not None else 0, replay.metrics_start_us,
            int(getattr(replay.policy, "strict_recycling", False)), int(admits)],
            dtype=np.int64)
        self.weights = np.array(pool.weights, dtype=np.float64)
        self.cursor[LIVE] = state.live
        self.arrivals = tuple(np.asarray(a, np.int64) for a in (
            replayed, arrivals_us, exits_us, true_exits_us))
        self.curve_rows = (arrival_all, curves[0])
        self.exit_stream = (np.asarray(exit_times, np.int64), np.asarray(exit_vms, np.int64))
        self.demand = (np.ascontiguousarray(trace.demand[:, 0]),
                       np.ascontiguousarray(trace.demand[:, 1]))
        self.decisions = np.full(len(replayed), -1, np.int64)
        # The due list (first the warm-up's used hosts, due), due FIFO, exit heap.
        due_list = np.zeros(num_hosts, np.int64)
        self.cache_arrays = (
            due_list, np.zeros(8 * num_hosts + 64, np.int64),
            np.zeros(8 * num_hosts + 64, np.int64), np.zeros(5 * num_hosts + 64, np.int64),
            np.zeros(5 * num_hosts + 64, np.int64), *curves[1:])
        self.lava_arrays = self._lava(replay.policy, pool, num_vms, len(replayed))
        due_hosts = np.flatnonzero(state.occupancy > 0)
        due_list[:len(due_hosts)] = due_hosts
        state.hosts[due_hosts, DUE] = 1
        self.cursor[N_TOUCHED] = len(due_hosts)

    @staticmethod
    def _lava(policy, pool: PoolState, num_vms: int, num_arrivals: int):
        """LAVA's state: per host (the columns above) and recycle room float64[H, 2], per VM
        its given class (-1: from its predicted exit; empty for another policy, which never
        reads it), the timer heap."""
        num_hosts = pool.num_hosts
        lava_host = np.zeros((num_hosts, 6), np.int64)
        lava_host[:, DEADLINE] = lava_host[:, TIMER] = NONE
        recycle_room = np.zeros((num_hosts, 2))
        vm_classes = np.zeros(0, np.int64)
        if isinstance(policy, Lava):
            recycle_room = used_above_room(pool.capacity, policy.recycle_fraction)
            vm_classes = np.full(num_vms, -1, np.int64)
            if policy.vm_classes is not None:
                vm_classes[:] = policy.vm_classes
        timers = 4 * num_hosts + num_arrivals // 8 + 64
        return (lava_host, np.ascontiguousarray(recycle_room[:, 0]),
                np.ascontiguousarray(recycle_room[:, 1]), vm_classes,
                np.zeros(timers, np.int64), np.zeros(timers, np.int64), _LAVA_BOUNDS_US)

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
        return np.asarray(curves.row_of_vm, np.int64), cell_us, end_us

    def advance(self, until_us: int) -> None:
        """Handles every exit and arrival up to `until_us` (inclusive), in the replay's order."""
        state = self.state
        run_until(until_us, self.cursor, self.params, self.weights, *self.arrivals,
                  *self.exit_stream, *self.curve_rows, *self.demand, state.limit_0,
                  state.limit_1, state.room0, state.room1, state.occupancy,
                  state.host_exit_us, state.vms, state.slot_of, state.placed_window,
                  state.hosts,
                  state.block_links, state.free_blocks, self.decisions, *self.cache_arrays,
                  *self.lava_arrays, _BUCKETS_US)
        state.live = int(self.cursor[LIVE])
