"""LAVA: Lifetime-Aware VM Allocation ([Ling25] §4.3, [Ling25ext] App. I Algorithm 3).

Lifetime classes LC1..LC4 (indexes 0..3) hold predicted remaining lifetimes < 1 h, 1-10 h,
10-100 h and >= 100 h (the paper's 100-1000 h class takes the longer ones too). A host is
EMPTY, OPEN or RECYCLING and has a class:

- a VM placed on an empty host opens it with the VM's class;
- an open host with more than `recycle_fraction` of its CPU or memory used turns recycling,
  its VMs becoming residual; when its last residual VM exits it drops a class (not below LC1)
  and all its VMs become residual;
- a used host's deadline (the paper's "time-out for each host") is its class's upper bound
  after the later of entering that class and, while open, its latest placement. A host still
  used then was underpredicted: it moves up a class (not above LC4), turns recycling, and its
  VMs become residual;
- hosts holding warm-up VMs ([Ling25ext] App. F) take the class of their longest predicted
  remaining lifetime, open or (over the threshold) recycling.

Placement is Algorithm 3, a score (`Lava.select`): a VM fails only when no host fits it.
"""

import bisect
import operator
from typing import Optional, Sequence

from configs.units import US_PER_S
from policies.nilas import LAST_LEVEL, best_host_by_temporal_cost
from policies.policy import PlacementPolicy, ScheduleTimer
from policies.replay.host_index import NO_HOST, HostGroups
from policies.replay.pool import PoolState, used_above_room

# Upper bound of each lifetime class in seconds (LC1..LC4).
LAVA_CLASS_BOUNDS_S = (3600, 36000, 360000, 3600000)
NUM_CLASSES = len(LAVA_CLASS_BOUNDS_S)
# A remaining lifetime at or above edge k is at least class k + 1.
_CLASS_EDGES_US = [b * US_PER_S for b in LAVA_CLASS_BOUNDS_S[:-1]]
EMPTY, OPEN, RECYCLING = 0, 1, 2
STATE_NAMES = {EMPTY: "empty", OPEN: "open", RECYCLING: "recycling"}
_EMPTY_GROUP = 0


class Lava(PlacementPolicy):
    """LAVA host states, classes and deadlines (the module docstring), NILAS within a tier.

    Args:
      recycle_fraction: an open host turns recycling when more than this fraction of any
        dimension is used (paper: 0.9), in (0, 1].
      strict_recycling: False is LAVA (Algorithm 3); True is the "lava_strict_recycling"
        ablation, §4.3's prose ("Recycling hosts only receive VMs that are at least one
        lifetime class lower") read as a hard rule: a VM never goes to a recycling host of
        its class or lower, and fails if no other host fits.
      vm_classes: int[V], the class index (0 = LC1) of each VM of the trace from elsewhere
        (the lifetime stage's P(lifetime > 1 h, 10 h, 100 h) classifiers, [Ling25ext] §3's
        lifetime as a distribution), or None: the class of the VM's predicted remaining
        lifetime at arrival. The predicted exit still ranks hosts within a tier.
    """

    def __init__(self, recycle_fraction: float = 0.9, strict_recycling: bool = False,
                 vm_classes: Optional[Sequence[int]] = None):
        if not 0.0 < recycle_fraction <= 1.0:
            raise ValueError(f"recycle_fraction must be in (0, 1], got {recycle_fraction}")
        self.recycle_fraction = recycle_fraction
        self.strict_recycling = strict_recycling
        self.vm_classes = vm_classes
        # A list: the hot path indexes it once per arrival.
        self._vm_classes = None if vm_classes is None else [int(c) for c in vm_classes]
        if self._vm_classes and not (min(self._vm_classes) >= 0
                                     and max(self._vm_classes) < NUM_CLASSES):
            raise ValueError(f"vm_classes must be class indexes 0..{NUM_CLASSES - 1}")
        self.name = "lava_strict_recycling" if strict_recycling else "lava"
        self._bounds_us = [b * US_PER_S for b in LAVA_CLASS_BOUNDS_S]

    def with_vm_classes(self, vm_classes: Sequence[int]) -> "Lava":
        """This LAVA (unbound) with `vm_classes`."""
        return Lava(self.recycle_fraction, self.strict_recycling, vm_classes)

    @staticmethod
    def lifetime_class(remaining_us: int) -> int:
        """LAVA class index (0 = LC1) of a predicted remaining lifetime."""
        return bisect.bisect_right(_CLASS_EDGES_US, remaining_us)

    def host_state(self, host: int):
        """(state, class, deadline_us, residual VM count) of `host`; for tests and reports."""
        return (self._state[host], self._class[host], self._deadline[host],
                self._residuals[host])

    def bind(self, pool: PoolState, schedule_timer: ScheduleTimer, now_us: int) -> None:
        self._pool = pool
        self._schedule_timer = schedule_timer
        num_hosts = pool.num_hosts
        self._state = [EMPTY] * num_hosts
        self._class = [0] * num_hosts
        self._deadline = [None] * num_hosts
        self._timer_us = [None] * num_hosts
        # A VM on host h is residual iff its placement number is <= residual_cut[h].
        self._residual_cut = [0] * num_hosts
        self._residuals = [0] * num_hosts
        self._vm_seq = {}
        self._seq = 0
        self._recycle_room = used_above_room(pool.capacity, self.recycle_fraction).tolist()
        self._two_dims = pool.num_dims == 2
        # Hosts that already hold VMs (warm-up): class of their longest prediction, open
        # unless already over the threshold.
        for host in range(num_hosts):
            vms = pool.host_vms[host]
            if not vms:
                continue
            for vm in vms:
                self._seq += 1
                self._vm_seq[vm] = self._seq
            self._state[host] = OPEN
            self._class[host] = self.lifetime_class(pool.host_exit_us[host] - now_us)
            self._set_deadline(host, now_us)
            if self._over_threshold(host):
                self._state[host] = RECYCLING
                self._make_all_residual(host)
        self._groups = HostGroups(pool, map(self._group_key, range(num_hosts)),
                                  track_exit=True)
        index = self._groups.index
        self._empty = index(_EMPTY_GROUP)
        self._open = [index(OPEN * NUM_CLASSES + c) for c in range(NUM_CLASSES)]
        self._recycling = [index(RECYCLING * NUM_CLASSES + c) for c in range(NUM_CLASSES)]
        # Tier 1 per VM class: recycling hosts of higher classes, closest class first.
        self._higher_recycling = [self._recycling[vm_class + 1:]
                                  for vm_class in range(NUM_CLASSES)]
        # Tier 3 per VM class: open hosts of other classes, and unless recycling is strict,
        # recycling hosts of the VM's class or lower.
        lower_recycling = [[] if self.strict_recycling else self._recycling[:vm_class + 1]
                           for vm_class in range(NUM_CLASSES)]
        self._other_used = [
            [self._open[c] for c in range(NUM_CLASSES) if c != vm_class]
            + lower_recycling[vm_class] for vm_class in range(NUM_CLASSES)]

    def _group_key(self, host: int) -> int:
        """Group of `host`: one per (state, class), except that all empty hosts share one.
        (Inlined in `placed` and `removed`, where the state is known.)"""
        state = self._state[host]
        return _EMPTY_GROUP if state == EMPTY else state * NUM_CLASSES + self._class[host]

    def select(self, vm: int, demand: Sequence[float], exit_us: int, now_us: int) -> int:
        """The host for a VM of class c: the first tier with a fitting host, NILAS (temporal
        cost, then Best-Fit) within it; -1 if no host fits.

        1. a recycling host of class > c, the closest class first;
        2. an open host of class c (Algorithm 3's "matching host": §4.3 ranks "open hosts
           whose lifetime class are equal", so a recycling host of class c is not one);
        3. any other used host (open hosts of other classes, recycling hosts of class <= c
           unless `strict_recycling`): by then tiers 1 and 2 hold no fitting host;
        4. an empty host.

        Algorithm 3 leaves a tier-3 placement's effect on the host open: the host keeps its
        state, class and residual VMs, so a VM outliving the class shows at the deadline.
        """
        weighted_size = self._pool.weighted_size(demand)
        vm_classes = self._vm_classes
        vm_class = (bisect.bisect_right(_CLASS_EDGES_US, exit_us - now_us)  # lifetime_class
                    if vm_classes is None else vm_classes[vm])
        # Tier 1: recycling hosts of a higher class, the closest class with a fitting host.
        for recycling in self._higher_recycling[vm_class]:
            if recycling.exit_order:
                _, host = best_host_by_temporal_cost(recycling, demand, weighted_size, exit_us)
                if host != NO_HOST:
                    return host
        # Tier 2: matching (open, same class) hosts.
        same_class = self._open[vm_class]
        if same_class.exit_order:
            _, host = best_host_by_temporal_cost(same_class, demand, weighted_size, exit_us)
            if host != NO_HOST:
                return host
        # Tier 3, any non-empty host: NILAS's choice over the union of the used groups not
        # searched above (they hold no fitting host). A group only needs searching up to the
        # lowest cost level found so far.
        best = None
        max_level = LAST_LEVEL
        free_key = self._pool.free_key
        for other in self._other_used[vm_class]:
            if other.exit_order:
                level, host = best_host_by_temporal_cost(other, demand, weighted_size, exit_us,
                                                         0, max_level)
                if host != NO_HOST:
                    # Ranked by level, then free key: score, then host id.
                    key = (level, free_key[host])
                    if best is None or key < best:
                        best = key
                        max_level = level
        if best is not None:
            return best[1][1]
        # Tier 4, empty hosts: all at the same temporal cost, so NILAS is Best-Fit there.
        return self._empty.best_fit(demand, weighted_size)

    def placed(self, vm: int, host: int, now_us: int) -> None:
        seq = self._seq = self._seq + 1
        self._vm_seq[vm] = seq
        state = self._state[host]
        if state == EMPTY:
            state = self._state[host] = OPEN
            self._class[host] = (self.lifetime_class(self._pool.vm_exit_us(vm) - now_us)
                                 if self._vm_classes is None else self._vm_classes[vm])
        if state == OPEN:
            self._set_deadline(host, now_us)
            if self._over_threshold(host):
                state = self._state[host] = RECYCLING
                self._make_all_residual(host)
        self._groups.update(host, state * NUM_CLASSES + self._class[host])

    def removed(self, vm: int, host: int, now_us: int) -> None:
        seq = self._vm_seq.pop(vm)
        if not self._pool.host_vms[host]:
            self._state[host] = EMPTY
            self._deadline[host] = None
            self._residuals[host] = 0
            self._groups.update(host, _EMPTY_GROUP)
            return
        state = self._state[host]
        if state == RECYCLING and seq <= self._residual_cut[host]:
            self._residuals[host] -= 1
            if self._residuals[host] == 0:
                self._class[host] = max(self._class[host] - 1, 0)
                self._make_all_residual(host)
                self._set_deadline(host, now_us)
        self._groups.update(host, state * NUM_CLASSES + self._class[host])

    def on_timer(self, host: int, now_us: int) -> None:
        if self._timer_us[host] != now_us:
            return
        self._timer_us[host] = None
        if self._state[host] == EMPTY:
            return
        if self._deadline[host] > now_us:
            self._arm_timer(host, self._deadline[host])
            return
        self._class[host] = min(self._class[host] + 1, NUM_CLASSES - 1)
        self._state[host] = RECYCLING
        self._make_all_residual(host)
        self._set_deadline(host, now_us)
        self._groups.update(host, self._group_key(host))

    def update(self, host: int, now_us: int) -> None:
        self._groups.update(host, self._group_key(host))

    def exits_changed(self, hosts: Sequence[int], now_us: int) -> None:
        # States and classes change only in placed, removed and on_timer, never with an
        # exit estimate: the hosts stay in their groups.
        self._groups.update_exits(hosts)

    def _over_threshold(self, host: int) -> bool:
        room, recycle_room = self._pool.room[host], self._recycle_room[host]
        if self._two_dims:
            return room[0] < recycle_room[0] or room[1] < recycle_room[1]
        return any(map(operator.lt, room, recycle_room))

    def _make_all_residual(self, host: int) -> None:
        self._residual_cut[host] = self._seq
        self._residuals[host] = len(self._pool.host_vms[host])

    def _set_deadline(self, host: int, now_us: int) -> None:
        deadline = self._deadline[host] = now_us + self._bounds_us[self._class[host]]
        # One pending timer per host: a timer that fires before a postponed deadline re-arms
        # itself, so placements on open hosts do not pile up timers.
        pending = self._timer_us[host]
        if pending is None or pending > deadline:
            self._arm_timer(host, deadline)

    def _arm_timer(self, host: int, time_us: int) -> None:
        self._timer_us[host] = time_us
        self._schedule_timer(time_us, host)
