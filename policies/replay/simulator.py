"""Event-driven replay of one pool's VM arrivals and exits under a placement policy
([Ling25] §5.1, [Ling25ext] App. F, [Barbalho23] §5.2).

Events go in time order; at equal times: window ends of an admission by predicted peak
(policies/replay/admission.py: the VMs leaving then were in the window), VM exits, migration
completions (LARS), policy timers (LAVA's deadlines), arrivals (placed, or counted as
failed), metric samples, defragmentation checks (LARS); within a kind by VM or host index.
A replay is deterministic for its inputs and seeds.

Warm-up ([Ling25ext] App. F): VMs alive at `start_us` are placed first, in arrival order, by
Best-Fit; metrics start `warmup_s` later. The policy under test takes over at `start_us`
(POLICY_FROM_START) or when metrics start (BEST_FIT_UNTIL_METRICS: Best-Fit places the
arrivals before then, so a pool that starts empty fills alike for every policy). Censored
VMs (exit unknown) must be given an exit at or after `end_us`, where the replay stops.
Before every decision a repredicting source refreshes the hosts due (`HostExitCache`); the
predictions at arrival are one batched call made before the replay starts.
"""

import dataclasses
import functools
import heapq
from typing import Dict, Optional

import numpy as np

from configs.units import US_PER_S
from policies.best_fit import BestFit
from policies.lars import Lars
from policies.policy import PlacementPolicy
from policies.replay import compiled
from policies.replay.admission import Admission, AdmittedPool
from policies.replay.lifetime_source import (
    HostExitCache,
    LifetimeSource,
    OneShotLifetimes,
    to_exit_us,
)
from policies.replay.metrics import InflationMix, PlacementMetrics
from policies.replay.pool import PoolSpec, PoolState

# Event kinds, in their order at equal times. Arrivals come from the sorted trace arrays.
ADMISSION, EXIT, MIGRATION_DONE, TIMER, ARRIVAL, SAMPLE, DEFRAG_CHECK = range(7)
# host_of_vm values besides host indexes.
FAILED = -1
NOT_REPLAYED = -2
# Warm starts: when the policy under test takes over from Best-Fit.
POLICY_FROM_START = "policy_from_start"
BEST_FIT_UNTIL_METRICS = "best_fit_until_metrics"
WARM_STARTS = (POLICY_FROM_START, BEST_FIT_UNTIL_METRICS)
# Engines: "auto" replays in the compiled engine what it supports (policies/replay/compiled/:
# Best-Fit, NILAS and LAVA, no LARS, two dimensions, oracle-like or exact-curve lifetimes,
# with or without an admission) and the rest in Python; "python" replays everything in Python
# (the reference the compiled engine is tested against).
ENGINES = ("auto", "python")


def stream_exit_first(exit_us: int, exit_vm: int, events: list) -> bool:
    """Whether the exit stream's next exit (`exit_us`, `exit_vm`) comes before the head of
    the event heap, in the heap's (time, kind, key) order."""
    return not events or exit_us < events[0][0] or (
        exit_us == events[0][0] and (EXIT, exit_vm) < events[0][1:])


@dataclasses.dataclass(frozen=True)
class PlacementTrace:
    """The VMs of one pool, in arrival order.

    Attributes:
      arrival_us: int64[V] arrival times (µs).
      exit_us: int64[V] exit times (µs), >= the arrival; a censored VM's is at or after the
        replay's end (`from_arrays`).
      demand: float64[V, D] demand per dimension (finite, >= 0), in the pool's units; in
        column order, so that each dimension's column is an array without a copy.
    """
    arrival_us: np.ndarray
    exit_us: np.ndarray
    demand: np.ndarray

    def __post_init__(self):
        arrival = np.asarray(self.arrival_us, dtype=np.int64)
        exit_ = np.asarray(self.exit_us, dtype=np.int64)
        demand = np.asfortranarray(self.demand, dtype=np.float64)
        if arrival.ndim != 1 or exit_.shape != arrival.shape or demand.ndim != 2 \
                or len(demand) != len(arrival):
            raise ValueError("need arrival_us[V], exit_us[V] and demand[V, D]")
        if np.any(exit_ < arrival):
            raise ValueError("a VM exits before it arrives")
        if np.any(demand < 0) or not np.all(np.isfinite(demand)):
            raise ValueError("demand must be finite and non-negative")
        object.__setattr__(self, "arrival_us", arrival)
        object.__setattr__(self, "exit_us", exit_)
        object.__setattr__(self, "demand", demand)

    def __len__(self) -> int:
        return len(self.arrival_us)

    @classmethod
    def from_arrays(cls, arrival_us, exit_us, demand, end_us: Optional[int] = None
                    ) -> "PlacementTrace":
        """Builds a trace; `exit_us` may be float with NaN for censored VMs, which then exit
        at `end_us` (default: the last arrival)."""
        arrival_us = np.asarray(arrival_us, dtype=np.int64)
        exit_float = np.asarray(exit_us, dtype=np.float64)
        censored = np.isnan(exit_float)
        if end_us is None:
            end_us = int(arrival_us.max())
        exits = np.where(censored, np.maximum(end_us, arrival_us), np.nan_to_num(exit_float))
        return cls(arrival_us, exits.astype(np.int64), demand)

    def lifetime_s(self) -> np.ndarray:
        """True (or censored) lifetimes in seconds, for the oracle."""
        return (self.exit_us - self.arrival_us) / US_PER_S


@dataclasses.dataclass
class PlacementResult:
    """The outcome of one replay.

    Attributes:
      policy: the policy's name.
      host_of_vm: int32[V], the host each VM was first placed on, FAILED (-1) if none fit,
        NOT_REPLAYED (-2) if it arrived after `end_us` or ended before `start_us`.
      timeseries: the metric samples (policies.replay.metrics), one array per column.
      summary: their means and the replay's counts (warmup_vms, warmup_failed,
        warm_start_vms, migrations..., predictions, prediction_batches; with an admission,
        its usage replay's rates, `Admission.summary`).
      usage_totals: with an admission, its per-host counts (`admission.UsageTotals`).
    """
    policy: str
    host_of_vm: np.ndarray
    timeseries: Dict[str, np.ndarray]
    summary: Dict[str, float]
    usage_totals: Optional[object] = None


@dataclasses.dataclass
class ReplayProgress:
    """How far a running replay has got, for progress reports from another thread: the trace
    time (us) of the last arrival handled and the arrivals handled so far; `loading_engine`
    while the compiled engine is being loaded in this process (compiled, the first time on a
    machine)."""
    now_us: Optional[int] = None
    arrivals: int = 0
    loading_engine: bool = False


def simulate(trace: PlacementTrace, pool_spec: PoolSpec, policy: PlacementPolicy,
             lifetimes: LifetimeSource, *, start_us: Optional[int] = None,
             end_us: Optional[int] = None, warmup_s: float = 2 * 86400.0,
             sample_period_s: float = 300.0, refresh_interval_s: float = 900.0,
             inflation_mix: Optional[InflationMix] = None, stranding_every: int = 12,
             lars: Optional[Lars] = None, weights=None,
             warm_start: str = POLICY_FROM_START,
             progress: Optional[ReplayProgress] = None, engine: str = "auto",
             admission: Optional[Admission] = None) -> PlacementResult:
    """Replays `trace` on `pool_spec` with `policy` and returns decisions and metrics.

    Args:
      lifetimes: the lifetime source; a one-shot policy (LA) gets it wrapped in
        OneShotLifetimes.
      start_us: start of the replay window (default: the first arrival).
      end_us: end of the replay window (default: the last arrival).
      warmup_s: metrics start this long after `start_us` ([Ling25ext] App. F: two days).
      sample_period_s: time between metric samples.
      refresh_interval_s: HostExitCache refresh interval for repredicting sources.
      inflation_mix: the VM shapes of stranding by inflation (None: no stranding).
      stranding_every: stranding is measured at every n-th metric sample.
      lars: optional defragmenter.
      weights: Best-Fit dimension weights (PoolState default if None).
      warm_start: POLICY_FROM_START or BEST_FIT_UNTIL_METRICS (module docstring).
      progress: updated at every arrival (the compiled engine: at every metric sample), if
        given.
      engine: "auto" or "python" (ENGINES).
      admission: admits by a fortune teller's predicted peak and replays the VMs' usage
        (policies/replay/admission.py; not with `lars`); None admits by requests.
    """
    replay = _Replay(trace, pool_spec, policy, lifetimes, start_us, end_us, warmup_s,
                     sample_period_s, refresh_interval_s, inflation_mix, stranding_every,
                     lars, weights, warm_start, engine, admission)
    if progress is not None:
        replay.progress = progress
    return replay.run()


class _Replay:
    """State of one replay; `run` is the event loop."""

    def __init__(self, trace, pool_spec, policy, lifetimes, start_us, end_us, warmup_s,
                 sample_period_s, refresh_interval_s, inflation_mix, stranding_every, lars,
                 weights, warm_start, engine, admission=None):
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        if sample_period_s <= 0 or warmup_s < 0:
            raise ValueError("sample_period_s must be > 0 and warmup_s >= 0")
        if warm_start not in WARM_STARTS:
            raise ValueError(f"warm_start must be one of {WARM_STARTS}, got {warm_start!r}")
        if trace.demand.shape[1] != pool_spec.capacity.shape[1]:
            raise ValueError("trace and pool have different resource dimensions")
        self.trace = trace
        self.policy = policy
        if policy.one_shot and lifetimes.repredicts:
            lifetimes = OneShotLifetimes(lifetimes, len(trace))
        self.lifetimes = lifetimes
        arrival = trace.arrival_us
        self.start_us = int(arrival.min()) if start_us is None else int(start_us)
        self.end_us = int(arrival.max()) if end_us is None else int(end_us)
        self.metrics_start_us = self.start_us + int(warmup_s * US_PER_S)
        # When the policy under test (and LARS) take over from the warm-up's Best-Fit.
        self.takeover_us = (self.start_us if warm_start == POLICY_FROM_START
                            else self.metrics_start_us)
        self.sample_period_us = int(sample_period_s * US_PER_S)
        if admission is not None and lars is not None:
            raise ValueError("an admission by predicted peak does not run with LARS")
        self.admission = admission
        smallest = trace.demand.min(axis=0)
        self.pool = (AdmittedPool(pool_spec, weights, smallest, demand=trace.demand)
                     if admission is not None and admission.peaks is not None
                     else PoolState(pool_spec, weights, smallest_demand=smallest))
        # Repredictions only where something reads them: the policy or LARS's order.
        self.cache = (HostExitCache(lifetimes, arrival, refresh_interval_s)
                      if lifetimes.repredicts and (policy.uses_exit_estimates or lars is not None)
                      else None)
        self.metrics = PlacementMetrics(self.pool, inflation_mix, stranding_every)
        self.compiled = engine == "auto" and compiled.supports(
            policy, lifetimes, lars, self.pool, self.cache is not None)
        self._metrics_options = (inflation_mix, stranding_every)
        self.lars = lars
        # The policy placing arrivals, and the defragmenter running, now: the warm-up's
        # Best-Fit and none until the take-over, then `policy` and `lars`.
        self.deciding = None
        self.defragmenting = None
        self.events = []
        self.host_of_vm = np.full(len(trace), NOT_REPLAYED, dtype=np.int32)
        # Counts since metrics started.
        self.placements = 0
        self.failed = 0
        self.migrations_before_metrics = None
        self.progress = ReplayProgress()

    @functools.cached_property
    def demands(self) -> list:
        """Per-VM demand tuples, for the Python engine; zipping the columns is several times
        faster than a tuple per row."""
        return list(zip(*self.trace.demand.T.tolist()))

    def schedule_timer(self, time_us: int, host: int) -> None:
        heapq.heappush(self.events, (time_us, TIMER, host))

    def schedule_migration_done(self, time_us: int, vm: int) -> None:
        heapq.heappush(self.events, (time_us, MIGRATION_DONE, vm))

    def host_changed(self, host: int) -> None:
        if self.cache is not None:
            self.cache.touch(host)

    def _warm_up(self) -> Dict[str, int]:
        """Places the VMs alive at `start_us` with Best-Fit, in arrival order; that Best-Fit
        decides until the take-over."""
        trace, start = self.trace, self.start_us
        baseline = self.deciding = BestFit()
        baseline.bind(self.pool, self.schedule_timer, start)
        alive = np.flatnonzero((trace.arrival_us < start) & (trace.exit_us > start))
        alive = alive[np.argsort(trace.arrival_us[alive], kind="stable")]
        if not len(alive):
            return {"warmup_vms": 0, "warmup_failed": 0}
        uptime_s = (start - trace.arrival_us[alive]) / US_PER_S
        exits = to_exit_us(start, self.lifetimes.predict_remaining_s(alive, uptime_s)).tolist()
        failed = 0
        for vm, exit_us in zip(alive.tolist(), exits):
            demand = tuple(self.trace.demand[vm].tolist())
            host = baseline.select(vm, demand, exit_us, start)
            if host < 0:
                failed += 1
                self.host_of_vm[vm] = FAILED
                continue
            self.pool.place(vm, host, demand, exit_us)
            baseline.placed(vm, host, start)
            self.host_of_vm[vm] = host
        return {"warmup_vms": len(alive), "warmup_failed": failed}

    def _exit_stream(self):
        """(exit_us, vm) int64 arrays, sorted, of every VM that may exit inside the replay
        after its arrival.

        Exit times are known up front, so they need no heap: the event loop merges this
        sorted stream with the heap of the other events, and skips the VMs never placed.
        A VM exiting at its arrival time goes through the heap instead, after its placement.
        """
        trace = self.trace
        exit_us = trace.exit_us
        vms = np.flatnonzero((exit_us > trace.arrival_us) & (exit_us > self.start_us)
                             & (exit_us <= self.end_us))
        vms = vms[np.argsort(exit_us[vms], kind="stable")]
        return exit_us[vms], vms

    def _exit(self, vm: int, now_us: int) -> None:
        host = self.pool.remove(vm, self.demands[vm])
        self.deciding.removed(vm, host, now_us)
        if self.cache is not None:
            self.cache.touch(host)
        if self.defragmenting is not None:
            self.defragmenting.vm_exited(vm, host, now_us)

    def run(self) -> PlacementResult:
        counts = self._warm_up()
        replayed, arrivals, exits, true_exits = self._replayed()
        exit_times, exit_vms = self._exit_stream()
        if self.compiled:
            return self._run_compiled(counts, replayed, arrivals, exits, true_exits, exit_times,
                                      exit_vms)
        if self.cache is not None:
            self.cache.bind(self.pool)
        if self.admission is not None:
            self.admission.bind(self.pool)
            first_us = self.admission.first_event_us(self.start_us)
            if first_us <= self.end_us:
                heapq.heappush(self.events, (first_us, ADMISSION, 0))
        # As lists closed by a sentinel past `end_us`, for the event loop.
        exit_times = exit_times.tolist() + [self.end_us + 1]
        exit_vms = exit_vms.tolist() + [-1]
        # The arrivals before the take-over (none with POLICY_FROM_START) go to Best-Fit.
        cut = int(np.searchsorted(arrivals, self.takeover_us))
        next_pos = self._replay_arrivals(replayed[:cut], arrivals[:cut], exits[:cut],
                                         exit_times, exit_vms, 0)
        next_pos = self._drain(exit_times, exit_vms, next_pos,
                               min(self.takeover_us - 1, self.end_us))
        # A window end at the take-over comes first, as every window end at its time.
        while self.events and self.events[0][:2] == (self.takeover_us, ADMISSION):
            self._dispatch(heapq.heappop(self.events))
        self._take_over()
        next_pos = self._replay_arrivals(replayed[cut:], arrivals[cut:], exits[cut:],
                                         exit_times, exit_vms, next_pos)
        self._drain(exit_times, exit_vms, next_pos, self.end_us)
        counts["warm_start_vms"] = cut
        return PlacementResult(self.policy.name, self.host_of_vm, self.metrics.timeseries(),
                               self._summary(counts),
                               None if self.admission is None else self.admission.totals)

    def _run_compiled(self, counts, replayed, arrivals, exits, true_exits, exit_times,
                      exit_vms) -> PlacementResult:
        """`run` after the warm-up in the compiled engine, which stops at every metric
        sample for the Python metrics to read its state, and before every window end of an
        admission for it to predict and set the rooms."""
        engine = compiled.CompiledReplay(self, replayed, arrivals, exits, true_exits,
                                         exit_times, exit_vms)
        self.metrics = PlacementMetrics(engine.state, *self._metrics_options)
        cursor = engine.cursor
        admission = self.admission
        window_ends = ()
        if admission is not None:
            admission.bind(engine.state)
            window_ends = range(admission.first_event_us(self.start_us), self.end_us + 1,
                                admission.usage.step_us)

        def advance(until_us: int) -> None:
            self.progress.loading_engine = not compiled.loaded()
            engine.advance(until_us)
            self.progress.loading_engine = False
            self.progress.now_us = int(cursor[compiled.NOW])
            self.progress.arrivals = int(cursor[compiled.ARRIVAL])

        samples = range(self.metrics_start_us, self.end_us + 1, self.sample_period_us)
        for time_us, kind in heapq.merge(((t, ADMISSION) for t in window_ends),
                                         ((t, SAMPLE) for t in samples)):
            if kind == ADMISSION:  # before the exits and arrivals at its time
                advance(time_us - 1)
                admission.window_end(time_us, time_us >= self.metrics_start_us)
                continue
            advance(time_us)
            self.metrics.sample(time_us, int(cursor[compiled.PLACEMENTS]),
                                int(cursor[compiled.FAILED]), 0)
        # Past the end only for a take-over after it, which still refreshes the cache.
        advance(max(self.end_us, self.takeover_us))
        self.placements = int(cursor[compiled.PLACEMENTS])
        self.failed = int(cursor[compiled.FAILED])
        if self.cache is not None:
            self.cache.num_predictions = int(cursor[compiled.PREDICTIONS])
            self.cache.num_batches = int(cursor[compiled.BATCHES])
        self.host_of_vm[replayed] = engine.decisions
        counts["warm_start_vms"] = engine.cut
        return PlacementResult(self.policy.name, self.host_of_vm, self.metrics.timeseries(),
                               self._summary(counts),
                               None if admission is None else admission.totals)

    def _take_over(self) -> None:
        """Binds the policy under test and LARS to the pool as it is at `takeover_us` (the
        warm-up VMs, and Best-Fit's arrivals before then), as the policies' `bind` expects,
        and schedules the first periodic events."""
        now = self.takeover_us
        if self.cache is not None and now > self.start_us:
            # The estimates the policy starts from are current, as the warm-up VMs' are at
            # start_us.
            self.deciding.exits_changed(self.cache.refresh(now), now)
        self.deciding = self.policy
        self.policy.bind(self.pool, self.schedule_timer, now)
        if self.lars is not None:
            self.defragmenting = self.lars
            self.lars.bind(self.pool, self.policy, self.demands, self.schedule_migration_done,
                           self.host_changed)
            heapq.heappush(self.events, (now, DEFRAG_CHECK, 0))
        if self.metrics_start_us <= self.end_us:
            heapq.heappush(self.events, (self.metrics_start_us, SAMPLE, 0))

    def _replayed(self):
        """(vms, arrival times, predicted exits at arrival, true exits) of the VMs arriving
        in the window, in arrival order."""
        arrival = self.trace.arrival_us
        if np.all(arrival[1:] >= arrival[:-1]):  # in arrival order (as documented): views
            first = np.searchsorted(arrival, self.start_us, side="left")
            stop = np.searchsorted(arrival, self.end_us, side="right")
            replayed, arrivals = np.arange(first, stop), arrival[first:stop]
            true_exits = self.trace.exit_us[first:stop]
        else:
            replayed = np.flatnonzero((arrival >= self.start_us) & (arrival <= self.end_us))
            replayed = replayed[np.argsort(arrival[replayed], kind="stable")]
            arrivals, true_exits = arrival[replayed], self.trace.exit_us[replayed]
        exits = to_exit_us(arrivals, self.lifetimes.predict_remaining_s(
            replayed, np.zeros(len(replayed))))
        return replayed, arrivals, exits, true_exits

    def _replay_arrivals(self, replayed, arrivals, exits, exit_times, exit_vms,
                         next_pos: int) -> int:
        """Every arrival in order, after the events before it, placed by the deciding
        policy; returns the position in the exit stream reached (from `next_pos`). The hot
        loop: methods and attributes are bound to locals, and the common exit (no LARS) is
        inlined."""
        pool, policy, cache, lars = self.pool, self.deciding, self.cache, self.defragmenting
        progress = self.progress
        events, demands, metrics_start = self.events, self.demands, self.metrics_start_us
        heappush, heappop = heapq.heappush, heapq.heappop
        select, placed, place = policy.select, policy.placed, pool.place
        exits_changed = policy.exits_changed
        remove, removed, vm_host = pool.remove, policy.removed, pool.vm_host
        next_exit_us = exit_times[next_pos]
        # Decisions in replay order (select's -1 is FAILED), stored into host_of_vm at the
        # end: cheaper than numpy item writes.
        decisions = []
        decide = decisions.append
        for vm, now, exit_us, true_exit_us in zip(replayed.tolist(), arrivals.tolist(),
                                                   exits.tolist(),
                                                   self.trace.exit_us[replayed].tolist()):
            before_arrival = (now, ARRIVAL)
            while True:
                # The next event: the stream's exit or the heap's head; only events before
                # this arrival.
                if next_exit_us <= now and stream_exit_first(next_exit_us, exit_vms[next_pos],
                                                             events):
                    gone = exit_vms[next_pos]
                    exit_time_us = next_exit_us
                    next_pos += 1
                    next_exit_us = exit_times[next_pos]
                    if gone not in vm_host:
                        continue
                    if lars is None:
                        # The common event, inlined (same as _exit).
                        host = remove(gone, demands[gone])
                        removed(gone, host, exit_time_us)
                        if cache is not None:
                            cache.touch(host)
                    else:
                        self._exit(gone, exit_time_us)
                elif events and events[0] < before_arrival:
                    self._dispatch(heappop(events))
                else:
                    break
            progress.now_us = now
            progress.arrivals += 1
            if cache is not None:
                changed = cache.refresh(now)
                if changed:
                    exits_changed(changed, now)
            demand = demands[vm]
            host = select(vm, demand, exit_us, now)
            decide(host)
            if host < 0:
                self.failed += now >= metrics_start
                continue
            place(vm, host, demand, exit_us)
            placed(vm, host, now)
            if cache is not None:
                cache.touch(host)
            self.placements += now >= metrics_start
            if true_exit_us == now:
                heappush(events, (now, EXIT, vm))
        self.host_of_vm[replayed] = decisions
        return next_pos

    def _drain(self, exit_times, exit_vms, next_pos: int, until_us: int) -> int:
        """The events up to `until_us` after the last arrival replayed; returns the position
        in the exit stream reached."""
        events, vm_host = self.events, self.pool.vm_host
        while True:
            next_exit_us = exit_times[next_pos]
            if next_exit_us <= until_us and stream_exit_first(next_exit_us, exit_vms[next_pos],
                                                              events):
                gone = exit_vms[next_pos]
                next_pos += 1
                if gone in vm_host:
                    self._exit(gone, next_exit_us)
            elif events and events[0][0] <= until_us:
                self._dispatch(heapq.heappop(events))
            else:
                return next_pos

    def _summary(self, warmup_counts: dict) -> dict:
        summary = self.metrics.summary()
        summary.update(warmup_counts)
        lars, cache = self.lars, self.cache
        if lars is not None:
            summary.update(lars_migrations=lars.migrations,
                           lars_scheduled_migrations=lars.scheduled_migrations,
                           lars_saved_migrations=lars.saved_migrations,
                           lars_failed_migrations=lars.failed_migrations,
                           lars_drained_hosts=lars.drained_hosts)
        if cache is not None:
            summary.update(predictions=cache.num_predictions,
                           prediction_batches=cache.num_batches)
        if self.admission is not None:
            summary.update(self.admission.summary())
        return summary

    def _dispatch(self, event) -> None:
        now, kind, key = event
        if kind == EXIT:
            self._exit(key, now)
        elif kind == TIMER:
            self.deciding.on_timer(key, now)
        elif kind == MIGRATION_DONE:
            self.lars.migration_done(key, now)
        elif kind == SAMPLE:
            migrations = 0 if self.lars is None else self.lars.migrations
            if self.migrations_before_metrics is None:
                self.migrations_before_metrics = migrations
            self.metrics.sample(now, self.placements, self.failed,
                                migrations - self.migrations_before_metrics)
            if now + self.sample_period_us <= self.end_us:
                heapq.heappush(self.events, (now + self.sample_period_us, SAMPLE, 0))
        elif kind == ADMISSION:
            for host in self.admission.window_end(now, now >= self.metrics_start_us):
                self.deciding.update(host, now)
            step_us = self.admission.usage.step_us
            if now + step_us <= self.end_us:
                heapq.heappush(self.events, (now + step_us, ADMISSION, 0))
        elif kind == DEFRAG_CHECK:
            self.lars.check(now)
            if now + self.lars.check_period_us <= self.end_us:
                heapq.heappush(self.events, (now + self.lars.check_period_us, DEFRAG_CHECK, 0))
