"""A simple per-component reference of the shaping simulator's step.

`ReferenceSimulation` is `shaping.cluster.simulator.Simulation` with step 4-5 (usage,
overload, accounting, ageing) written as a plain Python loop over the running components,
one at a time, the way a straightforward simulator would: the tests check that the
vectorized step gives the same runs, and scripts/bench_shaping.py times both."""

import numpy as np

from policies.shaping.cluster.simulator import OVERLOAD_TOLERANCE, Simulation


class ReferenceSimulation(Simulation):
    """Simulation whose `advance` loops over components in Python."""

    def advance(self, t: int):
        w, running = self.workload, self.running()
        num_hosts = len(self.capacity)
        load = [[0.0, 0.0] for _ in range(num_hosts)]
        use = np.zeros((len(running), 2))
        for i, c in enumerate(running):
            use[i] = w.usage[w.offset[c] + self.age[c]]
            load[self.host[c]][0] += use[i, 0]
            load[self.host[c]][1] += use[i, 1]
        load = np.array(load)
        over = any(load[h][r] > self.capacity[h][r] * (1 + OVERLOAD_TOLERANCE)
                   for h in range(num_hosts) for r in range(2))
        if over:
            self.kill_overloads(running, use, load)
        finished = []
        for i, c in enumerate(running):
            if self.host[c] < 0:
                continue
            self.allocated_sum[c] += self.allocation[c]
            self.used_sum[c] += use[i]
            self.result.component_steps += 1
            self.age[c] += 1
            if self.age[c] >= w.length[c]:
                finished.append(c)
        for c in finished:
            self.complete(int(c), t + 1)


def simulate_reference(workload, cluster, policy, interval_steps, seed=0, max_steps=10 ** 9):
    return ReferenceSimulation(workload, cluster, policy, interval_steps, seed, max_steps).run()


def algorithm_1_reference(running):
    """[Pace18] Algorithm 1 one component at a time, as the paper writes it (the loop that
    `policies.shaping.shapers.pessimistic.algorithm_1` replaced): (fully preempted
    applications, preempted elastic components)."""
    cpus_free = running.capacity[:, 0].copy()
    mem_free = running.capacity[:, 1].copy()
    order = np.lexsort((running.component, running.app_order))
    bounds = np.flatnonzero(np.diff(running.app_order[order])) + 1
    preempted_apps, preempted_components = [], []
    for rows in np.split(order, bounds):
        cpus, mem = cpus_free.copy(), mem_free.copy()
        fits = True
        for row in rows[~running.elastic[rows]]:  # lines 8-19
            host = running.host[row]
            cpus[host] -= running.target[row, 0]
            mem[host] -= running.target[row, 1]
            if cpus[host] < 0 or mem[host] < 0:
                fits = False
                break
        if not fits:  # lines 20-21
            preempted_apps.append(int(running.app[rows[0]]))
            continue
        cpus_free, mem_free = cpus, mem
        elastic = rows[running.elastic[rows]]
        elastic = elastic[np.lexsort((running.component[elastic], -running.age[elastic]))]
        for row in elastic:  # lines 25-33
            host = running.host[row]
            cpus_left = cpus_free[host] - running.target[row, 0]
            mem_left = mem_free[host] - running.target[row, 1]
            if cpus_left <= 0 or mem_left <= 0:
                preempted_components.append(int(running.component[row]))
            else:
                cpus_free[host], mem_free[host] = cpus_left, mem_left
    return preempted_apps, preempted_components
