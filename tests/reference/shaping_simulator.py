"""A simple per-component reference of the shaping simulator's step (not installed).

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
