"""The shaping simulator's step loop (002 §III-B, §IV-A).

Time advances in steps of the workload's `step_s`. At every step, in this order:

1. applications submitted at this step join the FIFO queue (scheduler.py);
2. every `interval_steps` steps (a shaping step) a shaping policy sets the running
   components' allocations and may preempt (policies/); the baseline never does;
3. the scheduler places, on the hosts' free allocations (capacity minus allocations), first
   the waiting elastic components of running applications (in scheduling order), then the
   queue's head while its core components all fit (first fit, strict FIFO: the head blocks
   the queue); its elastic components take a host if one fits, else wait. A component is
   admitted on its request and then allocated the policy's target at once (forecast + beta
   over its first S steps; the request while its forecaster has no forecast yet, 002 §V's
   "grace period"; the request if its application runs unshaped, see the retry rule), not
   its request until the next shaping step: 002 shapes from the forecasts, and the oracle's
   exist from a component's first step;
4. every running component uses its series at its age. With the `host` failure model (the
   default) a host whose usage exceeds its capacity (CPU or memory; both treated as
   incompressible, as 002's simulator treats them) has components killed by the operating
   system until it fits: lowest priority first, ties in a seeded random order (fixed per
   component for the run). With the `component` model every component whose usage exceeds
   its own allocation (CPU or memory: a container limit) is killed first, in component
   order; the survivors' usage then fits their allocations, so a host overloads only where
   its allocations exceed its capacity, which the optimistic policy allows (it resizes
   without checking the host), and there the operating system kills as above. A killed
   core component fails its application;
5. the surviving components age by one step; a component that reaches its length finishes,
   and an application finishes when all its core components have (its elastic components
   stop then).

A failed or fully preempted application loses all its work (every component restarts at age
0) and is resubmitted into the queue at its priority and original submission (scheduler.py);
a killed or preempted elastic component loses its work and waits for a host. The run ends
when every application has finished, or after `max_steps` (the rest are unfinished).

Retry rule (`unshaped_after_failures`, n): an application that has failed n times (a core
component killed; preemptions do not count) runs *unshaped* from its next attempt on: all
its components are allocated their requests, on admission and at every shaping step, for
the rest of its life. 002 §III-B only says a failed application is resubmitted; 002's
simulator (the Omega simulator's extension, footnote 5; the first author's fork
fraPace/cluster-scheduler-simulator, ZoeDynamicScheduler.jobCrashed) does this: after
`crashedAllowed` crashes (1 in the oracle version; 5 in a later one with a real predictor) it
sets the job's `disableResize`, so the job is neither resized nor checked against its
limits again. Other rules were possible (restart only the failed component at its request;
back off the shaper's beta after a failure); this one is 002's, and it guarantees
progress: the retry replays the same usage against the same forecasts, so without it a
component that failed under the `component` model fails again at the same age, forever,
and at the head of the FIFO queue blocks every application behind it. Usage never exceeds
the request (the workload clips it), so an unshaped application never fails under the
`component` model. n = 0 keeps shaping failed applications (under the `host` model a kill
depends on the co-located load, so a retry can succeed).

Overload is tested with a relative tolerance of 1e-9 of the capacity: an oracle allocation
request · (usage / request) can exceed the usage by a rounding error.
"""

import dataclasses

import numpy as np

from policies.shaping.cluster.cluster import Cluster
from policies.shaping.cluster.scheduler import FifoQueue, first_fit, place_all
from policies.shaping.policies.base import RunningComponents, ShapingPolicy
from policies.shaping.workload import Workload

WAITING, QUEUED, RUNNING, DONE = 0, 1, 2, 3
OVERLOAD_TOLERANCE = 1e-9
# Step 4's failure models (ShapingConfig.failure_model).
FAILURE_MODELS = ("host", "component")


@dataclasses.dataclass
class SimulationResult:
    """Per application (int64[A] / float64[A, 2]) and per run counts of one simulation.

    finish_step: -1 if unfinished; start_step: first admission (-1 never). failures:
    application failures (a core component killed); preemptions: full preemptions;
    failed_components / preempted_components: components killed / preempted (those of
    failed or preempted applications included); lost_steps: component-steps of work lost;
    allocated / used: (cpu, memory) summed over the application's component-steps.
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


class Simulation:
    """One run of `workload` on `cluster` under a fitted `policy` (see the module docstring).

    Args:
      interval_steps: S, steps between shaping steps.
      seed: seed of the overload victims' tie-break order.
      max_steps: last step simulated (exclusive).
      failure_model: "host" (overloaded hosts kill components) or "component" (a component
        using more than its allocation fails); see the module docstring.
      unshaped_after_failures: failures after which an application runs at its requests
        (the module docstring's retry rule); 0: never.
    """

    def __init__(self, workload: Workload, cluster: Cluster, policy: ShapingPolicy,
                 interval_steps: int, seed: int = 0, max_steps: int = 10 ** 9,
                 failure_model: str = "host", unshaped_after_failures: int = 0):
        if failure_model not in FAILURE_MODELS:
            raise ValueError(f"failure_model must be one of {FAILURE_MODELS}, got "
                             f"{failure_model!r}")
        self.component_limits = failure_model == "component"
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
            self.advance(t)
            t += 1
        return self.finish_run(t)

    def running(self) -> np.ndarray:
        """int64[R] the placed components, ascending (cached until a placement changes)."""
        if self._running is None:
            self._running = np.flatnonzero(self.host >= 0)
        return self._running

    def advance(self, t: int):
        """Usage, overload kills, accounting and ageing of step t."""
        w, running = self.workload, self.running()
        use = w.usage[w.offset[running] + self.age[running]]
        if self.component_limits:
            running, use = self.kill_over_limits(running, use)
        host = self.host[running]
        load = np.column_stack([np.bincount(host, use[:, r], minlength=len(self.capacity))
                                for r in range(2)])
        if np.any(load > self.capacity * (1 + OVERLOAD_TOLERANCE)):
            self.kill_overloads(running, use, load)
            alive = self.host[running] >= 0
            running, use = running[alive], use[alive]
        self.allocated_sum[running] += self.allocation[running]
        self.used_sum[running] += use
        self.result.component_steps += len(running)
        self.age[running] += 1
        for c in running[self.age[running] >= w.length[running]]:
            self.complete(int(c), t + 1)

    def kill_over_limits(self, running, use):
        """Step 4, component model: kills every component using more than its allocation;
        returns (running, use) of the survivors."""
        over = np.any(use > self.allocation[running] * (1 + OVERLOAD_TOLERANCE), axis=1)
        if not over.any():
            return running, use
        for c in running[over]:
            if self.host[c] >= 0:  # not gone with its application already
                self.kill(int(c), failed=True)
        alive = self.host[running] >= 0
        return running[alive], use[alive]

    def kill_overloads(self, running, use, load):
        """Step 4: kills components of overloaded hosts until each fits (modifies load)."""
        limit = self.capacity * (1 + OVERLOAD_TOLERANCE)
        priority = self.workload.priority[self.app_of[running]]
        for h in np.flatnonzero(np.any(load > limit, axis=1)):
            on = np.flatnonzero(self.host[running] == h)
            on = on[np.lexsort((self.victim_order[running[on]], priority[on]))]
            for row in on:
                if np.all(load[h] <= limit[h]):
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
            start, end = self.workload.app_start[app], self.workload.app_start[app + 1]
            self.release(start + np.flatnonzero(self.host[start:end] >= 0))
            self.waiting_elastic.difference_update(range(start, end))
            self.state[app], self.result.finish_step[app] = DONE, t_end

    def place(self, components: np.ndarray, hosts: np.ndarray):
        """Places components (admitted on their requests) and shapes them at once: the
        policy's target from age 0 (the request for the baseline, and for a forecaster
        until its first forecast: 002 §V's grace period)."""
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
        apps, inverse = np.unique(app, return_inverse=True)
        rank = np.empty(len(apps), dtype=np.int64)
        rank[sorted(range(len(apps)), key=lambda i: self.queue.key(apps[i]))] = np.arange(
            len(apps))
        age = self.age[running]
        view = RunningComponents(running, self.host[running], app,
                                 self.workload.elastic[running], age, rank[inverse],
                                 self.unshaped_to_request(running,
                                                          self.policy.targets(running, age)),
                                 self.capacity)
        decision = self.policy.reshape(view)
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
        placed = self.host >= 0
        self.free = self.capacity - np.column_stack([
            np.bincount(self.host[placed], self.allocation[placed, r],
                        minlength=len(self.capacity)) for r in range(2)])
        self._dirty = True

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
             failure_model: str = "host", unshaped_after_failures: int = 0
             ) -> SimulationResult:
    """Runs `workload` on `cluster` under the fitted `policy` (see the module docstring)."""
    return Simulation(workload, cluster, policy, interval_steps, seed, max_steps,
                      failure_model, unshaped_after_failures).run()
