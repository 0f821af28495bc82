"""LARS: Lifetime-Aware ReScheduling for defragmentation ([Ling25] §4.4, [Ling25ext] App. H).

When fewer than `empty_hosts_threshold_pct` % of hosts are empty (checked every
`check_period_s`), `Lars` drains up to `max_draining_hosts` hosts at a time (fewest VMs, then
most free weighted capacity, then lowest id). A draining host takes no new VMs; its VMs are
queued for live migration, longest predicted remaining lifetime first (LARS), so that short
VMs get the time to exit on their own, or in a seeded random order (the baseline: the paper's
is its traces' recorded order). At most `max_inflight` migrations run, each reserving the
VM's demand on both hosts for `migration_duration_s`; the placement policy under test picks
the target. Counts ([Ling25ext] Table 2): scheduled = performed (`migrations`) + saved (the
VM exited first) + failed (no target fit) + pending at the end.

The orders are compared paired ([Ling25ext] §6.3: "LARS does not affect which hosts are
picked for migration at a given time, but orders the VMs"): a closed-loop replay records its
drains (`Lars.drains`), and `replay_drains` replays the migration queue of exactly those
drains in another order, without replaying the pool. Re-running the closed loop instead would
not pair them: the pools diverge after the first migration.
"""

import collections
import dataclasses
import heapq
from typing import Callable, Dict, Iterable, List, Sequence, Tuple

import numpy as np

from configs.units import US_PER_S
from policies.policy import PlacementPolicy
from policies.replay.pool import PoolState


@dataclasses.dataclass(frozen=True)
class Drain:
    """One drain decision: at `time_us`, `host` was picked; `vms` (ascending) were on it,
    with the exit estimates `exit_estimates_us` the lifetime order sorts by."""
    time_us: int
    host: int
    vms: Tuple[int, ...]
    exit_estimates_us: Tuple[int, ...]


def migration_order(drain: Drain, lifetime_order: bool, rng: np.random.Generator) -> List[int]:
    """The drained VMs in migration order: longest exit estimate first (ties: lower VM), or
    a random permutation of the ascending VMs drawn from `rng`."""
    if lifetime_order:
        pairs = sorted(zip(drain.exit_estimates_us, drain.vms), key=lambda p: (-p[0], p[1]))
        return [vm for _, vm in pairs]
    return [drain.vms[i] for i in rng.permutation(len(drain.vms))]


class Lars:
    """The defragmenter, driven by the replay (`bind`, then `check`, `migration_done`,
    `vm_exited`).

    Args:
      empty_hosts_threshold_pct: drain while fewer than this % of hosts are empty.
      lifetime_order: True: longest exit estimate first (LARS); False: a seeded random order.
      max_inflight: migrations running at once (paper: 3).
      migration_duration_s: seconds a migration keeps the VM's demand on both hosts (paper:
        1200).
      max_draining_hosts: hosts draining at once.
      check_period_s: seconds between checks of the empty-host share.
      seed: seed of the random order.

    Attributes (counts over the whole replay):
      migrations: migrations performed (started; one whose VM exits in flight included).
      scheduled_migrations: VMs queued for migration.
      saved_migrations: queued VMs that exited before their turn.
      failed_migrations: queued VMs for which no target host fit.
      drained_hosts: hosts picked for draining.
      drains: the drain decisions, as `Drain`s in decision order.
      failed: (index in `drains`, VM) of every failed migration.
    """

    def __init__(self, empty_hosts_threshold_pct: float, lifetime_order: bool = True,
                 max_inflight: int = 3, migration_duration_s: float = 1200.0,
                 max_draining_hosts: int = 1, check_period_s: float = 300.0, seed: int = 0):
        if max_inflight < 1 or max_draining_hosts < 1 or check_period_s <= 0:
            raise ValueError("max_inflight, max_draining_hosts and check_period_s must be > 0")
        self.empty_hosts_threshold_pct = empty_hosts_threshold_pct
        self.lifetime_order = lifetime_order
        self.max_inflight = max_inflight
        self.migration_duration_us = int(migration_duration_s * US_PER_S)
        self.max_draining_hosts = max_draining_hosts
        self.check_period_us = int(check_period_s * US_PER_S)
        self.seed = seed

    def bind(self, pool: PoolState, policy: PlacementPolicy, demands: Sequence[tuple],
             schedule_migration_done: Callable[[int, int], None],
             host_changed: Callable[[int], None]) -> None:
        """`schedule_migration_done(time_us, vm)` must call `migration_done(vm, time_us)`;
        `host_changed(host)` tells the replay that a host's VMs changed."""
        self._pool = pool
        self._policy = policy
        self._demands = demands
        self._schedule_migration_done = schedule_migration_done
        self._host_changed = host_changed
        self._rng = np.random.default_rng(self.seed)
        self._draining = set()
        self._queue = collections.deque()
        self._inflight = {}
        self.migrations = 0
        self.scheduled_migrations = 0
        self.saved_migrations = 0
        self.failed_migrations = 0
        self.drained_hosts = 0
        self.drains: List[Drain] = []
        self.failed: List[Tuple[int, int]] = []

    @property
    def pending(self) -> int:
        """Queued VMs whose turn has not come."""
        return len(self._queue)

    @property
    def drain_schedule(self) -> Tuple[Tuple[int, int], ...]:
        """(time_us, host) of every drain decision."""
        return tuple((drain.time_us, drain.host) for drain in self.drains)

    def check(self, now_us: int) -> None:
        """Starts draining hosts if empty hosts are below the threshold."""
        pool = self._pool
        empty_pct = 100.0 * pool.num_empty / pool.num_hosts
        while (empty_pct < self.empty_hosts_threshold_pct
               and len(self._draining) < self.max_draining_hosts):
            host = self._pick_host()
            if host is None:
                break
            self._drain(host, now_us)
        self._start_migrations(now_us)

    def _pick_host(self):
        pool = self._pool
        candidates = [h for h in range(pool.num_hosts)
                      if pool.available[h] and pool.host_vms[h]]
        if not candidates:
            return None
        return min(candidates, key=lambda h: (len(pool.host_vms[h]), -pool.score(h), h))

    def _drain(self, host: int, now_us: int) -> None:
        pool = self._pool
        pool.available[host] = False
        self._policy.update(host, now_us)
        self._draining.add(host)
        self.drained_hosts += 1
        exits = pool.host_exits_us(host)
        vms = tuple(sorted(exits))
        drain = Drain(now_us, host, vms, tuple(exits[vm] for vm in vms))
        self.drains.append(drain)
        index = len(self.drains) - 1
        self._queue.extend((vm, index) for vm in
                           migration_order(drain, self.lifetime_order, self._rng))
        self.scheduled_migrations += len(vms)

    def _start_migrations(self, now_us: int) -> None:
        pool = self._pool
        while len(self._inflight) < self.max_inflight and self._queue:
            vm, drain = self._queue.popleft()
            source = pool.vm_host.get(vm)
            if source is None:
                self.saved_migrations += 1
                continue
            demand = self._demands[vm]
            target = self._policy.select(vm, demand, pool.vm_exit_us(vm), now_us)
            if target < 0:
                self.failed_migrations += 1
                self.failed.append((drain, vm))
                continue
            pool.hold(target, demand)
            self._policy.update(target, now_us)
            self._inflight[vm] = target
            self.migrations += 1
            self._schedule_migration_done(now_us + self.migration_duration_us, vm)

    def migration_done(self, vm: int, now_us: int) -> None:
        target = self._inflight.pop(vm, None)
        if target is None:
            return
        pool = self._pool
        demand = self._demands[vm]
        source = pool.vm_host[vm]
        exit_us = pool.vm_exit_us(vm)
        pool.remove(vm, demand)
        self._policy.removed(vm, source, now_us)
        pool.release(target, demand)
        pool.place(vm, target, demand, exit_us)
        self._policy.placed(vm, target, now_us)
        self._host_changed(source)
        self._host_changed(target)
        self._release_if_drained(source, now_us)
        self._start_migrations(now_us)

    def vm_exited(self, vm: int, host: int, now_us: int) -> None:
        """`vm` left `host` (already removed from the pool and the policy)."""
        target = self._inflight.pop(vm, None)
        if target is not None:
            self._pool.release(target, self._demands[vm])
            self._policy.update(target, now_us)
            self._host_changed(target)
        self._release_if_drained(host, now_us)
        if target is not None:
            self._start_migrations(now_us)

    def _release_if_drained(self, host: int, now_us: int) -> None:
        if host in self._draining and self._pool.occupancy[host] == 0:
            self._draining.discard(host)
            self._pool.available[host] = True
            self._policy.update(host, now_us)


@dataclasses.dataclass(frozen=True)
class DrainReplay:
    """Counts of one migration order on recorded drains (`replay_drains`), as `Lars`'s:
    migrations performed, scheduled, saved and failed, VMs still queued at the end
    (`pending`), hosts drained, migrations started within `window_us`
    (`window_migrations`), and the (time_us, host) of every drain."""
    migrations: int
    scheduled_migrations: int
    saved_migrations: int
    failed_migrations: int
    pending: int
    drained_hosts: int
    window_migrations: int
    drain_schedule: Tuple[Tuple[int, int], ...]


def replay_drains(drains: Sequence[Drain], exit_us: Sequence[int], end_us: int, *,
                  lifetime_order: bool, max_inflight: int = 3,
                  migration_duration_s: float = 1200.0, seed: int = 0,
                  failed: Iterable[Tuple[int, int]] = (),
                  window_us: Tuple[int, int] = (0, 0)) -> DrainReplay:
    """Replays the migration queue of recorded `drains` in one order (paired comparison).

    Each drain queues its VMs at its time, in the order of `migration_order` (the seeded
    generator is drawn once per drain, in drain order, as `Lars` does); a VM already queued
    or in flight is not queued again. At most `max_inflight` migrations run; a slot frees
    when the migration ends or its VM exits (`exit_us[vm]`, the true exit). A VM gone at its
    turn is saved; one in `failed`, (drain index, VM) (no target in the recording), fails;
    any other migrates. Nothing happens after `end_us`. At equal times exits and migration ends come
    before a drain, as in the replay. With the recording's order this reproduces its counts
    (`Lars`), unless times tie.
    """
    if max_inflight < 1:
        raise ValueError("max_inflight must be > 0")
    duration_us = int(migration_duration_s * US_PER_S)
    failed = set(failed)
    rng = np.random.default_rng(seed)
    counts: Dict[str, int] = collections.Counter()
    queue, queued = collections.deque(), set()
    slot_free = []          # heap of (time a slot frees, vm)

    def start_migrations(now_us: int) -> None:
        while len(slot_free) < max_inflight and queue:
            vm, drain = queue.popleft()
            queued.discard(vm)
            if exit_us[vm] <= now_us:
                counts["saved"] += 1
            elif (drain, vm) in failed:
                counts["failed"] += 1
            else:
                counts["migrations"] += 1
                counts["window"] += window_us[0] <= now_us <= window_us[1]
                heapq.heappush(slot_free, (min(now_us + duration_us, exit_us[vm]), vm))

    for index, drain in enumerate(drains):
        if drain.time_us > end_us:
            break
        while slot_free and slot_free[0][0] <= drain.time_us:
            now_us, vm = heapq.heappop(slot_free)
            start_migrations(now_us)
        for vm in migration_order(drain, lifetime_order, rng):
            if vm not in queued and not any(vm == v for _, v in slot_free):
                queue.append((vm, index))
                queued.add(vm)
                counts["scheduled"] += 1
        start_migrations(drain.time_us)
    while slot_free and slot_free[0][0] <= end_us:
        now_us, vm = heapq.heappop(slot_free)
        start_migrations(now_us)
    return DrainReplay(
        migrations=counts["migrations"], scheduled_migrations=counts["scheduled"],
        saved_migrations=counts["saved"], failed_migrations=counts["failed"],
        pending=len(queue), drained_hosts=sum(d.time_us <= end_us for d in drains),
        window_migrations=counts["window"],
        drain_schedule=tuple((d.time_us, d.host) for d in drains if d.time_us <= end_us))
