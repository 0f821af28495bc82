"""LARS: Lifetime-Aware ReScheduling for defragmentation (paper 000/001 §4.4, App. H).

When the share of empty hosts falls below `empty_hosts_threshold_pct` (checked every
`check_period_s`), the defragmenter picks hosts to drain, fewest VMs first, then most free
weighted capacity, then lowest id, up to `max_draining_hosts` at a time. A draining host
takes no new VMs. Its VMs are queued for live migration:

- lifetime order (LARS): longest predicted remaining lifetime first (the pool's current
  exit estimate), so that short VMs get the time to exit on their own;
- baseline order: a seeded random permutation, i.e. an order that ignores lifetimes (the
  paper's baseline is the order recorded in its traces, which this project does not have).

At most `max_inflight` migrations run at once; each keeps the VM's demand reserved on both
hosts for `migration_duration_s` (paper: 3 in flight, 20 minutes). The target is chosen by
the placement policy under test, with the VM's current prediction. A queued VM that exits
before its turn saves a migration; a VM that fits nowhere stays (its host drains when it
exits). A drained host becomes available again.
"""

import collections
from typing import Callable, Sequence

import numpy as np

from configs.units import US_PER_S
from policies.policy import PlacementPolicy
from policies.replay.pool import PoolState


class Lars:
    """Defragmenter driven by the replay (`check`, `migration_done`, `vm_exited`).

    Attributes (counts over the whole replay):
      migrations: migrations started.
      saved_migrations: queued VMs that exited before their turn.
      failed_migrations: queued VMs for which no target host fit.
      drained_hosts: hosts picked for draining.
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
        self.saved_migrations = 0
        self.failed_migrations = 0
        self.drained_hosts = 0

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
        exits = pool.host_vms[host]
        if self.lifetime_order:
            vms = sorted(exits, key=lambda vm: (-exits[vm], vm))
        else:
            vms = sorted(exits)
            vms = [vms[i] for i in self._rng.permutation(len(vms))]
        self._queue.extend(vms)

    def _start_migrations(self, now_us: int) -> None:
        pool = self._pool
        while len(self._inflight) < self.max_inflight and self._queue:
            vm = self._queue.popleft()
            source = pool.vm_host.get(vm)
            if source is None:
                self.saved_migrations += 1
                continue
            demand = self._demands[vm]
            target = self._policy.select(vm, demand, pool.host_vms[source][vm], now_us)
            if target < 0:
                self.failed_migrations += 1
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
        exit_us = pool.host_vms[source][vm]
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
