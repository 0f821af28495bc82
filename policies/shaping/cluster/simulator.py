"""The shaping simulator's step loop ([Pace18] §III-B, §IV-A): a workload on a cluster under
a fitted shaping policy, one `step_s` at a time. Each step: submitted applications join the
FIFO queue (scheduler.py); every `interval_steps` the policy resizes running components and
may preempt; waiting elastic components, then the queue's head while all its core components
fit, are placed first fit on the hosts' free allocations; components use their series at
their age and the failure model (`host`, `component`, `memory`) kills those over capacity or
allocation (a killed core component fails its application); survivors age, and an
application ends with its last core component (or, with `elastic_progress`, when its work
is done). `growth` "if_free" grants a resize up only where the host has room. A failed or
fully preempted application restarts from age 0 at its place in the queue, and runs at its
requests after `unshaped_after_failures` failures. docs/stages/shaping.md states each rule
in full; overload is tested with a relative tolerance of 1e-9 of the capacity.
"""

import dataclasses

import numpy as np

from policies.shaping.cluster.cluster import Cluster
from policies.shaping.cluster.scheduler import FifoQueue, first_fit, place_all
from policies.shaping.cluster.usage_step import usage_step
from policies.shaping.shapers.base import RunningComponents, ShapingPolicy
from policies.shaping.workload import Workload

WAITING, QUEUED, RUNNING, DONE = 0, 1, 2, 3
OVERLOAD_TOLERANCE = 1e-9
# Step 4's failure models (ShapingConfig.failure_model), and the resources whose overuse kills.
FAILURE_MODELS = ("host", "component", "memory")
KILLING_RESOURCES = {"host": [0, 1], "component": [0, 1], "memory": [1]}
GROWTH_MODELS = ("always", "if_free")


@dataclasses.dataclass
class SimulationResult:
    """The outcome of one simulation: per application arrays (int64[A], or float64[A, 2]
    for (cpu, memory)) and per run counts.

    Attributes:
      finish_step, start_step: the step the application finished (-1: unfinished) and was
        first admitted (-1: never).
      failures, preemptions: its failures (a core component killed) and full preemptions.
      failed_components, preempted_components: its components killed / preempted, those of
        failed or preempted applications included.
      lost_steps: component-steps of its work lost to kills and preemptions.
      allocated, used: (cpu, memory) summed over its component-steps.
      steps, component_steps, shaping_steps, algorithm_runs: per run, the steps simulated,
        component-steps run, shaping steps, and shaping steps that preempted something.
      queued_app_steps: per run, the sum over steps of the applications waiting in the queue
        (after the step's admissions).
    """

    finish_step: np.ndarray
    start_step: np.ndarray
    failures: np.ndarray
    preemptions: np.ndarray
    failed_components: np.ndarray
    preempted_components: np.ndarray
    lost_steps: np.ndarray
    allocated: np.ndarray
    used: np.ndarray
    steps: int = 0
    component_steps: int = 0
    shaping_steps: int = 0
    algorithm_runs: int = 0
    queued_app_steps: int = 0


class Simulation:
    """One run of `workload` on `cluster` under a fitted `policy` (the module docstring's
    step loop); `run()` returns its `SimulationResult`.

    Args:
      workload: the applications, their components and usage series.
      cluster: the hosts' capacities, in the workload's units.
      policy: a shaping policy fitted on the workload's forecasts.
      interval_steps: S, steps between shaping steps.
      seed: seed of the overload victims' tie-break order.
      max_steps: steps simulated at most; applications unfinished then stay so.
      failure_model: "host" (overloaded hosts kill components), "component" (a component
        using more than its allocation is killed first) or "memory" (CPU compressible; only
        memory over the allocation, then over the host's capacity, kills).
      unshaped_after_failures: failures after which an application runs at its requests
        (the retry rule); 0: never.
      growth: "always" or "if_free" (growth granted only from the host's free resources).
      elastic_progress: applications progress by their running components (see the module
        docstring) instead of each component by its own length.
    """

    def __init__(self, workload: Workload, cluster: Cluster, policy: ShapingPolicy,
                 interval_steps: int, seed: int = 0, max_steps: int = 10 ** 9,
                 failure_model: str = "host", unshaped_after_failures: int = 0,
                 growth: str = "always", elastic_progress: bool = False):
        if failure_model not in FAILURE_MODELS:
            raise ValueError(f"failure_model must be one of {FAILURE_MODELS}, got "
                             f"{failure_model!r}")
        if growth not in GROWTH_MODELS:
            raise ValueError(f"growth must be one of {GROWTH_MODELS}, got {growth!r}")
        self.component_limits = failure_model in ("component", "memory")
        self.killing = KILLING_RESOURCES[failure_model]
        self.killing_mask = np.isin([0, 1], self.killing)
        self.cpu_throttled = failure_model == "memory"
        self.grant_if_free = growth == "if_free"
        self.elastic_progress = elastic_progress
        w = self.workload = workload
        self.capacity, self.policy = cluster.capacity, policy
        self.interval_steps, self.max_steps = interval_steps, max_steps
        num_apps, num_components = w.num_apps, w.num_components
        self.app_of = w.app_of
        self.host = np.full(num_components, -1, dtype=np.int64)
        self.age = np.zeros(num_components, dtype=np.int64)
        self.allocation = np.zeros((num_components, 2))
        self.free = self.capacity.copy()
        self.queue = FifoQueue(w.priority, w.submit_step)
        self.state = np.full(num_apps, WAITING)
        self.core_left = np.zeros(num_apps, dtype=np.int64)
        self.waiting_elastic = set()
        self.unshaped_after_failures = unshaped_after_failures
        self.unshaped = np.zeros(num_apps, dtype=bool)
        # Whether any application runs unshaped: spares every placement the lookup until one does.
        self._any_unshaped = False
        self.victim_order = np.random.default_rng(seed).permutation(num_components)
        # A component's target at age 0 does not depend on the schedule: computed once.
        self.admission_target = policy.targets(np.arange(num_components),
                                               np.zeros(num_components, dtype=np.int64))
        self.allocated_sum = np.zeros((num_components, 2))
        self.used_sum = np.zeros((num_components, 2))
        # elastic_progress: each application's work (component-steps) and the part done.
        core_length = np.where(w.elastic, 0, w.length)
        self.work = np.diff(w.app_start) * np.maximum.reduceat(core_length, w.app_start[:-1])
        self.progress = np.zeros(num_apps, dtype=np.int64)
        self.result = SimulationResult(
            np.full(num_apps, -1), np.full(num_apps, -1), *(np.zeros(num_apps, np.int64)
                                                            for _ in range(5)),
            np.zeros((num_apps, 2)), np.zeros((num_apps, 2)))
        self._running = None
        self._dirty = True

    def run(self) -> SimulationResult:
        w, t, arrived = self.workload, 0, 0
        while t < self.max_steps:
            while arrived < w.num_apps and w.submit_step[arrived] <= t:
                self.state[arrived] = QUEUED
                self.queue.push(arrived)
                arrived, self._dirty = arrived + 1, True
            if self.policy.shapes and t % self.interval_steps == 0 and len(self.running()):
                self.reshape()
            if self._dirty:
                self.schedule(t)
            if not len(self.running()):
                if len(self.queue):
                    raise ValueError(f"application {self.queue.head()} fits no empty cluster")
                if arrived == w.num_apps:
                    break
                t = max(t + 1, int(w.submit_step[arrived]))
                continue
            self.result.queued_app_steps += len(self.queue)
            self.advance(t)
            t += 1
        return self.finish_run(t)

    def running(self) -> np.ndarray:
        """int64[R] the placed components, ascending (cached until a placement changes)."""
        if self._running is None:
            self._running = np.flatnonzero(self.host >= 0)
        return self._running

    def series_age(self, components: np.ndarray) -> np.ndarray:
        """int64[k] the step of their series that `components` use now: their age, modulo
        their length with elastic_progress."""
        age = self.age[components]
        return age % self.workload.length[components] if self.elastic_progress else age

    def advance(self, t: int):
        """Usage, overload kills, accounting and ageing of step t: compiled where nothing
        dies (usage_step.py), else by arrays (`advance_with_kills`)."""
        w, running = self.workload, self.running()
        if not usage_step(running, w.usage, w.offset, w.length, self.age, self.host,
                          self.allocation, self.capacity, self.killing_mask,
                          OVERLOAD_TOLERANCE, self.cpu_throttled, self.component_limits,
                          self.elastic_progress, self.allocated_sum, self.used_sum):
            running = self.advance_with_kills(running)
        self.result.component_steps += len(running)
        if self.elastic_progress:
            self.advance_applications(running, t + 1)
            return
        for c in running[self.age[running] >= w.length[running]]:
            self.complete(int(c), t + 1)

    def advance_with_kills(self, running: np.ndarray) -> np.ndarray:
        """A step at which components die: kills them, then accounts and ages the survivors;
        returns the survivors."""
        w = self.workload
        use = w.usage[w.offset[running] + self.series_age(running)]
        if self.cpu_throttled:
            use[:, 0] = np.minimum(use[:, 0], self.allocation[running, 0])
        if self.component_limits:
            running, use = self.kill_over_limits(running, use)
        host, killing = self.host[running], self.killing
        load = np.column_stack([np.bincount(host, use[:, r], minlength=len(self.capacity))
                                for r in range(2)])
        if np.any(load[:, killing] > self.capacity[:, killing] * (1 + OVERLOAD_TOLERANCE)):
            self.kill_overloads(running, use, load)
            alive = self.host[running] >= 0
            running, use = running[alive], use[alive]
        self.allocated_sum[running] += self.allocation[running]
        self.used_sum[running] += use
        self.age[running] += 1
        return running

    def advance_applications(self, running: np.ndarray, t_end: int):
        """elastic_progress: the applications of `running` (ascending) advance by their
        running components; those whose work is done finish at t_end."""
        app = self.app_of[running]
        if not len(app):
            return
        # `running` ascends, so each application's components are one run of `app`.
        first = np.concatenate([[0], np.flatnonzero(app[1:] != app[:-1]) + 1])
        apps = app[first]
        self.progress[apps] += np.diff(np.append(first, len(app)))
        for a in apps[self.progress[apps] >= self.work[apps]]:
            self.finish_app(int(a), t_end)

    def kill_over_limits(self, running, use):
        """Step 4, component and memory models: kills every component using more than its
        allocation of a killing resource; returns (running, use) of the survivors."""
        killing = self.killing
        over = np.any(use[:, killing] > self.allocation[running][:, killing]
                      * (1 + OVERLOAD_TOLERANCE), axis=1)
        if not over.any():
            return running, use
        for c in running[over]:
            if self.host[c] >= 0:  # not gone with its application already
                self.kill(int(c), failed=True)
        alive = self.host[running] >= 0
        return running[alive], use[alive]

    def kill_overloads(self, running, use, load):
        """Step 4: kills components of hosts overloaded in a killing resource until each
        fits (modifies load)."""
        killing = self.killing
        limit = self.capacity[:, killing] * (1 + OVERLOAD_TOLERANCE)
        priority = self.workload.priority[self.app_of[running]]
        for h in np.flatnonzero(np.any(load[:, killing] > limit, axis=1)):
            on = np.flatnonzero(self.host[running] == h)
            on = on[np.lexsort((self.victim_order[running[on]], priority[on]))]
            for row in on:
                if np.all(load[h, killing] <= limit[h]):
                    break
                c = int(running[row])
                if self.host[c] < 0:
                    continue
                released, hosts = self.kill(c, failed=True)
                np.subtract.at(load, hosts, use[np.searchsorted(running, released)])

    def kill(self, c: int, failed: bool):
        """Kills component c (failed: by the OS; else preempted): its whole application if c
        is core, else c alone, which then waits for a host. Returns (the components
        released, their hosts)."""
        w, app = self.workload, int(self.app_of[c])
        if w.elastic[c]:
            released = np.array([c])
            self.waiting_elastic.add(c)
        else:
            start, end = w.app_start[app], w.app_start[app + 1]
            released = start + np.flatnonzero(self.host[start:end] >= 0)
            (self.result.failures if failed else self.result.preemptions)[app] += 1
            if failed and self.result.failures[app] == self.unshaped_after_failures:
                self.unshaped[app] = self._any_unshaped = True
            self.waiting_elastic.difference_update(range(start, end))
            self.state[app] = QUEUED
            self.queue.push(app)
        counts = self.result.failed_components if failed else self.result.preempted_components
        counts[app] += len(released)
        # elastic_progress: an elastic component takes back its work; a core one all of it.
        self.progress[app] = self.progress[app] - int(self.age[c]) if w.elastic[c] else 0
        self.result.lost_steps[app] += int(self.age[released].sum())
        hosts = self.host[released]
        self.release(released)
        self.age[released] = 0
        return released, hosts

    def release(self, components: np.ndarray):
        np.add.at(self.free, self.host[components], self.allocation[components])
        self.host[components] = -1
        self._running, self._dirty = None, True

    def complete(self, c: int, t_end: int):
        """Component c reached its length at the end of step t_end - 1."""
        app = int(self.app_of[c])
        host = self.host[c]
        if host < 0:  # its application finished earlier in this loop
            return
        # release() of one component, without its array overhead (the same additions).
        self.free[host] += self.allocation[c]
        self.host[c] = -1
        self._running, self._dirty = None, True
        if self.workload.elastic[c]:
            return
        self.core_left[app] -= 1
        if self.core_left[app] == 0:
            self.finish_app(app, t_end)

    def finish_app(self, app: int, t_end: int):
        """Application `app` finished at t_end: its components leave their hosts."""
        start, end = self.workload.app_start[app], self.workload.app_start[app + 1]
        self.release(start + np.flatnonzero(self.host[start:end] >= 0))
        self.waiting_elastic.difference_update(range(start, end))
        self.state[app], self.result.finish_step[app] = DONE, t_end

    def place(self, components: np.ndarray, hosts: np.ndarray):
        """Places components (admitted on their requests) and shapes them at once: the
        policy's target from age 0 (the request for the baseline, and for a forecaster
        until its first forecast: [Pace18] §V's grace period)."""
        self.host[components] = hosts
        self.allocation[components] = self.unshaped_to_request(
            components, self.admission_target[components])
        np.subtract.at(self.free, hosts, self.allocation[components])
        self.age[components] = 0
        self._running = None

    def unshaped_to_request(self, components: np.ndarray, target: np.ndarray) -> np.ndarray:
        """float64[k, 2] `target` of `components`, their requests where their application
        runs unshaped (the retry rule)."""
        if not self._any_unshaped:
            return target
        unshaped = self.unshaped[self.app_of[components]]
        return np.where(unshaped[:, None], self.workload.request[components], target)

    def schedule(self, t: int):
        """Step 3: waiting elastic components, then the queue's head while it fits."""
        w, self._dirty = self.workload, False
        waiting = sorted(self.waiting_elastic, key=lambda c: (self.queue.key(self.app_of[c]), c))
        self.waiting_elastic.clear()
        self.place_elastic(waiting)
        while len(self.queue):
            app = self.queue.head()
            components = np.arange(w.app_start[app], w.app_start[app + 1])
            core = components[~w.elastic[components]]
            hosts = place_all(self.free.copy(), w.request[core])
            if hosts is None:
                return
            self.queue.pop()
            self.place(core, hosts)
            self.state[app], self.core_left[app] = RUNNING, len(core)
            if self.result.start_step[app] < 0:
                self.result.start_step[app] = t
            self.place_elastic(components[w.elastic[components]])

    def place_elastic(self, components):
        """Places each elastic component first fit, or leaves it waiting."""
        if len(components) and np.any(self.workload.request[components].min(axis=0)
                                      > self.free.max(axis=0)):
            self.waiting_elastic.update(int(c) for c in components)  # none fits anywhere
            return
        for c in components:
            host = first_fit(self.free, self.workload.request[c])
            if host >= 0:
                self.place(np.array([c]), np.array([host]))
            else:
                self.waiting_elastic.add(int(c))

    def reshape(self):
        """Step 2: the policy's allocations and preemptions."""
        self.result.shaping_steps += 1
        running = self.running()
        app = self.app_of[running]
        # `running` ascends and components are numbered application by application, so
        # `app` is sorted: its distinct values and their indexes without a sort.
        first = np.ones(len(app), dtype=bool)
        first[1:] = app[1:] != app[:-1]
        apps, inverse = app[first], np.cumsum(first) - 1
        # The scheduling order (FifoQueue.key: priority first, then submission, then index).
        w = self.workload
        rank = np.empty(len(apps), dtype=np.int64)
        rank[np.lexsort((apps, w.submit_step[apps], -w.priority[apps]))] = np.arange(len(apps))
        target = self.policy.targets(running, self.series_age(running))
        view = RunningComponents(running, self.host[running], app,
                                 self.workload.elastic[running], self.age[running],
                                 rank[inverse], self.unshaped_to_request(running, target),
                                 self.capacity)
        decision = self.policy.reshape(view)
        before = self.allocation[running]
        self.allocation[running] = decision.allocation
        self.result.algorithm_runs += int(len(decision.preempted_apps)
                                          + len(decision.preempted_components) > 0)
        for a in decision.preempted_apps:
            start, end = self.workload.app_start[a], self.workload.app_start[a + 1]
            self.kill(int(start + np.flatnonzero(~self.workload.elastic[start:end])[0]),
                      failed=False)
        for c in decision.preempted_components:
            if self.host[c] >= 0:
                self.kill(int(c), failed=False)
        if self.grant_if_free:
            alive = self.host[running] >= 0
            self.allocation[running[alive]] = self.granted(
                running[alive], before[alive], decision.allocation[alive])
        placed = self.running()
        host = self.host[placed]
        self.free = self.capacity - np.column_stack([
            np.bincount(host, self.allocation[placed, r], minlength=len(self.capacity))
            for r in range(2)])
        self._dirty = True

    def granted(self, components: np.ndarray, before: np.ndarray, wanted: np.ndarray):
        """float64[k, 2] the allocations of every placed component (ascending) under growth
        "if_free": each shrink to `wanted`, then, per resource and in component order, each
        growth over `before` where its host still has that much free, else `before`."""
        allocation = np.minimum(before, wanted)
        host, num_hosts = self.host[components], len(self.capacity)
        for r in range(2):
            free = self.capacity[:, r] - np.bincount(host, allocation[:, r], minlength=num_hosts)
            growth = wanted[:, r] - allocation[:, r]
            # Hosts whose total growth fits grant every growth; the others, one at a time.
            tight = np.bincount(host, growth, minlength=num_hosts) > free
            allocation[~tight[host], r] = wanted[~tight[host], r]
            for row in np.flatnonzero(tight[host] & (growth > 0)):
                if free[host[row]] >= growth[row]:
                    free[host[row]] -= growth[row]
                    allocation[row, r] = wanted[row, r]
        return allocation

    def finish_run(self, steps: int) -> SimulationResult:
        result = self.result
        result.steps = steps
        app_of, num_apps = self.app_of, self.workload.num_apps
        for r in range(2):
            result.allocated[:, r] = np.bincount(app_of, self.allocated_sum[:, r], num_apps)
            result.used[:, r] = np.bincount(app_of, self.used_sum[:, r], num_apps)
        return result


def simulate(workload: Workload, cluster: Cluster, policy: ShapingPolicy,
             interval_steps: int, seed: int = 0, max_steps: int = 10 ** 9,
             failure_model: str = "host", unshaped_after_failures: int = 0,
             growth: str = "always", elastic_progress: bool = False) -> SimulationResult:
    """Runs `workload` on `cluster` under the fitted `policy` (see the module docstring;
    the arguments are `Simulation`'s)."""
    return Simulation(workload, cluster, policy, interval_steps, seed, max_steps,
                      failure_model, unshaped_after_failures, growth, elastic_progress).run()
