"""Scan-every-host reference of the placement replay and its policies.

Deliberately simple: every decision evaluates every host with numpy (O(hosts) per arrival),
every host exit estimate is recomputed from its VMs when needed, repredicting sources are
asked again for every live VM before every decision (no cache), LAVA keeps explicit sets of
residual VMs and finds expired deadlines by scanning. Tests require the fast replay
(policies.replay.simulator with refresh_interval_s=0) to make identical decisions; the benchmark
reports the speed ratio. No LARS, no metrics. An admission by predicted peak
(`admission`, fleetcast_testing/reference/admission.py) predicts every host from scratch at
every window end.

Same semantics as the fast replay: window ends, then exits, then LAVA deadlines, then arrivals
at equal times; warm-up VMs placed by Best-Fit at the start; ties to the lowest host id.
"""

import bisect
import heapq
import math
from typing import Optional, Sequence

import numpy as np

from configs.units import US_PER_S
from policies.la import LA_BINARY_THRESHOLDS_S
from policies.lava import LAVA_CLASS_BOUNDS_S
from policies.nilas import TEMPORAL_COST_BUCKETS_S
from policies.replay.pool import FIT_TOLERANCE, PoolSpec, used_above_room

EMPTY, OPEN, RECYCLING = 0, 1, 2
POLICIES = ("best_fit", "pbfr", "la", "class_first_fit", "nilas", "lava",
            "lava_strict_recycling")


def _exit_us(now_us: int, remaining_s: float) -> int:
    return now_us + int(np.rint(max(remaining_s, 0.0) * US_PER_S))


class ReferenceReplay:
    """One replay; call `run()` for host_of_vm int32[V] (-1 failed, -2 not replayed).

    Args mirror policies.replay.simulator.simulate; `policy` is one of POLICIES, configured by
    la_thresholds_s (LA), num_buckets / long_lived_num_buckets / long_lived_threshold_s
    (PBFR, DPBFR), time_unit_s (class First-Fit), recycle_fraction and strict_recycling
    (LAVA; policy "lava_strict_recycling" is "lava" with strict_recycling=True).
    """

    def __init__(self, trace, pool_spec: PoolSpec, policy: str, lifetimes, *,
                 start_us: Optional[int] = None, end_us: Optional[int] = None,
                 weights: Optional[Sequence[float]] = None,
                 la_thresholds_s=LA_BINARY_THRESHOLDS_S, num_buckets: int = 3,
                 long_lived_num_buckets: Optional[int] = None,
                 long_lived_threshold_s: float = 7200.0, time_unit_s: float = 60.0,
                 recycle_fraction: float = 0.9, strict_recycling: bool = False,
                 admission=None):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy}")
        self.trace = trace
        self.policy = policy
        self.lava = policy in ("lava", "lava_strict_recycling")
        self.lifetimes = lifetimes
        self.one_shot = policy in ("la", "class_first_fit")
        self.start_us = int(trace.arrival_us.min()) if start_us is None else start_us
        self.end_us = int(trace.arrival_us.max()) if end_us is None else end_us
        capacity = pool_spec.capacity
        self.num_hosts, self.num_dims = capacity.shape
        self.weights = (1.0 / capacity.max(axis=0) if weights is None
                        else np.asarray(weights, np.float64))
        self.limit = capacity * (1.0 + FIT_TOLERANCE)
        self.room = self.limit.copy()
        self.recycle_room = used_above_room(capacity, recycle_fraction)
        self.strict_recycling = strict_recycling or policy == "lava_strict_recycling"
        self.vms = [set() for _ in range(self.num_hosts)]
        self.pred_exit = {}
        self.host_of = {}
        self.la_thresholds_us = [int(t * US_PER_S) for t in la_thresholds_s]
        self.num_buckets = num_buckets
        self.long_lived_num_buckets = long_lived_num_buckets
        self.long_lived_threshold_us = int(long_lived_threshold_s * US_PER_S)
        self.admission = admission
        # VMs placed since the last window end (admitted by request until the next).
        self.fresh = set()
        self.next_window_end_us = (admission.first_event_us(self.start_us)
                                   if admission is not None else None)
        self.span = float(np.max(self._weighted(self.limit)))
        self.buckets_us = np.array(TEMPORAL_COST_BUCKETS_S, np.int64) * US_PER_S
        self.lava_bounds_us = [b * US_PER_S for b in LAVA_CLASS_BOUNDS_S]
        self.state = [EMPTY] * self.num_hosts
        self.lava_class = [0] * self.num_hosts
        self.deadline = [None] * self.num_hosts
        self.residual = [set() for _ in range(self.num_hosts)]
        self.one_shot_lifetime_s = {}
        self.time_unit_us = time_unit_s * US_PER_S
        self.first_fit_class = [None] * self.num_hosts
        self.open_order = [0] * self.num_hosts
        self.num_opened = 0

    # Host quantities, recomputed from scratch.
    def _weighted(self, rows: np.ndarray) -> np.ndarray:
        total = np.zeros(len(rows))
        for d in range(self.num_dims):
            total = total + self.weights[d] * rows[:, d]
        return total

    def _weighted_size(self, demand) -> float:
        total = 0.0
        for d in range(self.num_dims):
            total += float(self.weights[d]) * demand[d]
        return total

    def _used(self) -> np.ndarray:
        return np.array([len(v) > 0 for v in self.vms])

    def _host_exit(self) -> np.ndarray:
        return np.array([max(self.pred_exit[vm] for vm in v) if v else 0 for v in self.vms],
                        dtype=np.int64)

    def _predict_remaining_s(self, vm: int, now_us: int) -> float:
        uptime_s = (now_us - int(self.trace.arrival_us[vm])) / US_PER_S
        if self.one_shot:
            if vm not in self.one_shot_lifetime_s:
                self.one_shot_lifetime_s[vm] = float(self.lifetimes.predict_remaining_s(
                    np.array([vm]), np.zeros(1))[0])
            return max(self.one_shot_lifetime_s[vm] - uptime_s, 0.0)
        return float(self.lifetimes.predict_remaining_s(np.array([vm]), np.array([uptime_s]))[0])

    # Policies: each returns a host index or -1.
    @staticmethod
    def _best_by_score(mask: np.ndarray, score: np.ndarray) -> int:
        hosts = np.flatnonzero(mask)
        return int(hosts[np.argmin(score[hosts])]) if len(hosts) else -1

    def _best_fit(self, fits, score) -> int:
        used = self._used()
        host = self._best_by_score(fits & used, score)
        return host if host >= 0 else self._best_by_score(fits & ~used, score)

    def _pbfr(self, fits, score, demand, exit_us, now_us) -> int:
        num_buckets = self.num_buckets
        if (self.long_lived_num_buckets is not None
                and exit_us - now_us >= self.long_lived_threshold_us):
            num_buckets = self.long_lived_num_buckets
        bucket = np.minimum(((score - self._weighted_size(demand)) / self.span
                             * num_buckets).astype(np.int64), num_buckets - 1)
        used = self._used()
        for mask in (fits & used, fits & ~used):
            hosts = np.flatnonzero(mask)
            if len(hosts):
                return int(hosts[bucket[hosts] == bucket[hosts].min()][0])
        return -1

    def _la(self, fits, score, exit_us, now_us) -> int:
        used = self._used()
        vm_class = bisect.bisect_right(self.la_thresholds_us, exit_us - now_us)
        if vm_class > 0:
            host_remaining = self._host_exit() - now_us
            host_class = np.searchsorted(self.la_thresholds_us, host_remaining, side="right")
            host = self._best_by_score(fits & used & (host_class == vm_class), score)
            if host >= 0:
                return host
        return self._best_fit(fits, score)

    def _first_fit_class_of(self, remaining_us: int) -> int:
        units = remaining_us / self.time_unit_us
        return 0 if units < 1 else math.floor(math.log2(units)) + 1

    def _class_first_fit(self, fits, score, exit_us, now_us) -> int:
        vm_class = self._first_fit_class_of(exit_us - now_us)
        hosts = [h for h in np.flatnonzero(fits).tolist() if self.first_fit_class[h] == vm_class]
        if hosts:
            return min(hosts, key=lambda h: self.open_order[h])
        return self._best_by_score(fits & ~self._used(), score)

    def _open_first_fit(self, host: int, host_class: int) -> None:
        self.first_fit_class[host] = host_class
        self.open_order[host] = self.num_opened
        self.num_opened += 1

    def _temporal_cost(self, exit_us: int, now_us: int) -> np.ndarray:
        host_exit = np.where(self._used(), self._host_exit(), now_us)
        delta = np.maximum(exit_us - host_exit, 0)
        return np.searchsorted(self.buckets_us, delta, side="right") - 1

    def _nilas_order(self, mask, score, cost, used) -> int:
        hosts = np.flatnonzero(mask)
        if not len(hosts):
            return -1
        order = np.lexsort((hosts, score[hosts], ~used[hosts], cost[hosts]))
        return int(hosts[order[0]])

    def _nilas(self, fits, score, exit_us, now_us) -> int:
        return self._nilas_order(fits, score, self._temporal_cost(exit_us, now_us),
                                 self._used())

    def _lava(self, fits, score, exit_us, now_us) -> int:
        """[Ling25ext] App. I Algorithm 3: the first candidate set C below that holds a host where
        the VM fits, then NILAS's choice in C; -1 if the VM fits nowhere."""
        vm_class = bisect.bisect_right(self.lava_bounds_us[:-1], exit_us - now_us)
        state = np.array(self.state)
        host_class = np.array(self.lava_class)
        used = self._used()
        recycling = state == RECYCLING
        higher = fits & recycling & (host_class > vm_class)
        matching = fits & (state == OPEN) & (host_class == vm_class)
        non_empty = fits & used
        if self.strict_recycling:
            # The ablation: recycling hosts never take a VM of their class or higher.
            non_empty &= ~(recycling & (host_class <= vm_class))
        if higher.any():
            # Recycling hosts of a higher class, those of the class closest to the VM's.
            candidates = higher & (host_class == host_class[higher].min())
        elif matching.any():
            candidates = matching
        elif non_empty.any():
            candidates = non_empty
        else:
            candidates = fits & ~used
        return self._nilas_order(candidates, score, self._temporal_cost(exit_us, now_us), used)

    # State changes.
    def _place(self, vm: int, host: int, exit_us: int, now_us: int) -> None:
        demand = self.trace.demand[vm]
        self.room[host] -= demand
        self.fresh.add(vm)
        self.vms[host].add(vm)
        self.pred_exit[vm] = exit_us
        self.host_of[vm] = host
        if self.policy == "class_first_fit" and self.first_fit_class[host] is None:
            self._open_first_fit(host, self._first_fit_class_of(exit_us - now_us))
        if not self.lava:
            return
        if self.state[host] == EMPTY:
            self.state[host] = OPEN
            self.lava_class[host] = bisect.bisect_right(self.lava_bounds_us[:-1],
                                                        exit_us - now_us)
        if self.state[host] == OPEN:
            self.deadline[host] = now_us + self.lava_bounds_us[self.lava_class[host]]
            if np.any(self.room[host] < self.recycle_room[host]):
                self.state[host] = RECYCLING
                self.residual[host] = set(self.vms[host])

    def _remove(self, vm: int, now_us: int) -> None:
        host = self.host_of.pop(vm)
        self.vms[host].discard(vm)
        del self.pred_exit[vm]
        if not self.vms[host]:
            self.fresh.discard(vm)
            self.room[host] = self.limit[host]
            self.state[host] = EMPTY
            self.deadline[host] = None
            self.residual[host] = set()
            self.first_fit_class[host] = None
            return
        if vm in self.fresh or self.admission is None:
            self.room[host] += self.trace.demand[vm]
        else:  # its CPU share stays reserved until the next window end
            self.room[host, 1:] += self.trace.demand[vm, 1:]
        self.fresh.discard(vm)
        if self.state[host] == RECYCLING and vm in self.residual[host]:
            self.residual[host].discard(vm)
            if not self.residual[host]:
                self.lava_class[host] = max(self.lava_class[host] - 1, 0)
                self.residual[host] = set(self.vms[host])
                self.deadline[host] = now_us + self.lava_bounds_us[self.lava_class[host]]

    def _expire(self, host: int, now_us: int) -> None:
        self.lava_class[host] = min(self.lava_class[host] + 1, len(self.lava_bounds_us) - 1)
        self.state[host] = RECYCLING
        self.residual[host] = set(self.vms[host])
        self.deadline[host] = now_us + self.lava_bounds_us[self.lava_class[host]]

    def _next_deadline(self):
        deadlines = [(d, h) for h, d in enumerate(self.deadline) if d is not None]
        return min(deadlines) if deadlines else None

    def _window_end(self, now_us: int) -> None:
        """The admission's predictions of every host at window end `now_us`."""
        for host in np.flatnonzero(self._used()).tolist():
            peak = self.admission.host_peak(now_us, sorted(self.vms[host]))
            self.room[host, 0] = self.limit[host, 0] - peak
        self.fresh.clear()

    def _advance(self, exits: list, until_us: int) -> None:
        """Runs window ends, exits and LAVA deadlines up to `until_us`, in that order at equal
        times."""
        while True:
            window_end = self.next_window_end_us
            deadline = self._next_deadline() if self.lava else None
            if window_end is not None and window_end <= until_us and (
                    not exits or window_end <= exits[0][0]) and (
                    deadline is None or window_end <= deadline[0]):
                self._window_end(window_end)
                self.next_window_end_us += self.admission.step_us
                continue
            exit_event = exits[0] if exits and exits[0][0] <= until_us else None
            deadline = self._next_deadline() if self.lava else None
            if deadline is not None and deadline[0] > until_us:
                deadline = None
            if exit_event is None and deadline is None:
                return
            if deadline is None or (exit_event is not None and exit_event[0] <= deadline[0]):
                heapq.heappop(exits)
                self._remove(exit_event[1], exit_event[0])
            else:
                self._expire(deadline[1], deadline[0])

    def run(self) -> np.ndarray:
        trace = self.trace
        host_of_vm = np.full(len(trace), -2, dtype=np.int32)
        exits = []
        start = self.start_us
        alive = np.flatnonzero((trace.arrival_us < start) & (trace.exit_us > start))
        for vm in alive[np.argsort(trace.arrival_us[alive], kind="stable")].tolist():
            room_fits = np.all(trace.demand[vm] <= self.room, axis=1)
            host = self._best_fit(room_fits, self._weighted(self.room))
            host_of_vm[vm] = host
            if host >= 0:
                exit_us = _exit_us(start, self._predict_remaining_s(vm, start))
                self.room[host] -= trace.demand[vm]
                self.fresh.add(vm)
                self.vms[host].add(vm)
                self.pred_exit[vm] = exit_us
                self.host_of[vm] = host
                heapq.heappush(exits, (int(trace.exit_us[vm]), vm))
        if self.policy == "class_first_fit":
            host_exit = self._host_exit()
            for host in np.flatnonzero(self._used()).tolist():
                self._open_first_fit(host, self._first_fit_class_of(int(host_exit[host]) - start))
        if self.lava:
            host_exit = self._host_exit()
            for host in np.flatnonzero(self._used()).tolist():
                self.state[host] = OPEN
                self.lava_class[host] = bisect.bisect_right(self.lava_bounds_us[:-1],
                                                            int(host_exit[host]) - start)
                self.deadline[host] = start + self.lava_bounds_us[self.lava_class[host]]
                if np.any(self.room[host] < self.recycle_room[host]):
                    self.state[host] = RECYCLING
                    self.residual[host] = set(self.vms[host])

        replayed = np.flatnonzero((trace.arrival_us >= start) & (trace.arrival_us <= self.end_us))
        replayed = replayed[np.argsort(trace.arrival_us[replayed], kind="stable")]
        for vm in replayed.tolist():
            now = int(trace.arrival_us[vm])
            self._advance(exits, now)
            if self.lifetimes.repredicts and not self.one_shot and self.pred_exit:
                live = np.array(list(self.pred_exit))
                remaining_s = self.lifetimes.predict_remaining_s(
                    live, (now - trace.arrival_us[live]) / US_PER_S)
                for vm_live, remaining in zip(live.tolist(), remaining_s.tolist()):
                    self.pred_exit[vm_live] = _exit_us(now, remaining)
            exit_us = _exit_us(now, self._predict_remaining_s(vm, now))
            demand = trace.demand[vm]
            fits = np.all(demand <= self.room, axis=1)
            score = self._weighted(self.room)
            if self.policy == "best_fit":
                host = self._best_fit(fits, score)
            elif self.policy == "pbfr":
                host = self._pbfr(fits, score, demand, exit_us, now)
            elif self.policy == "la":
                host = self._la(fits, score, exit_us, now)
            elif self.policy == "class_first_fit":
                host = self._class_first_fit(fits, score, exit_us, now)
            elif self.policy == "nilas":
                host = self._nilas(fits, score, exit_us, now)
            else:
                host = self._lava(fits, score, exit_us, now)
            host_of_vm[vm] = host
            if host < 0:
                continue
            self._place(vm, host, exit_us, now)
            if trace.exit_us[vm] <= self.end_us:
                heapq.heappush(exits, (int(trace.exit_us[vm]), vm))
        return host_of_vm


def simulate_reference(trace, pool_spec: PoolSpec, policy: str, lifetimes, **kwargs) -> np.ndarray:
    """host_of_vm int32[V] of the reference replay (see ReferenceReplay)."""
    return ReferenceReplay(trace, pool_spec, policy, lifetimes, **kwargs).run()
