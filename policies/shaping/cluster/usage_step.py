"""The simulator's usage step without kills, compiled: a step at which no component is killed
is decided, accounted and aged in one pass over the running components (numba); a step at
which some component would be killed is left to the simulator's array path."""

import numba
import numpy as np


@numba.njit(cache=True)
def usage_step(running, usage, offset, length, age, host, allocation, capacity, killing,
               tolerance, cpu_throttled, component_limits, cyclic, allocated_sum, used_sum):
    """Step 4-5 of policies/shaping/cluster/simulator.py for `running` (int64[R], ascending)
    when nothing dies: returns False, changing nothing, if a component would be killed (its
    own limit under `component_limits`, or a host over capacity x (1 + tolerance) in a
    `killing` resource, bool[2]); else adds each component's allocation and use to
    `allocated_sum` / `used_sum`, ages it a step, and returns True.

    A component's use is its series at its age (modulo its length when `cyclic`), its CPU
    throttled to its allocation when `cpu_throttled`. Host loads are summed in component
    order, as np.bincount sums them, so the decision is the array path's bit for bit."""
    load = np.zeros((len(capacity), 2))
    use = np.empty((len(running), 2))
    for i in range(len(running)):
        c = running[i]
        step = age[c] % length[c] if cyclic else age[c]
        for r in range(2):
            value = usage[offset[c] + step, r]
            if r == 0 and cpu_throttled and value > allocation[c, 0]:
                value = allocation[c, 0]
            if component_limits and killing[r] and value > allocation[c, r] * (1 + tolerance):
                return False
            use[i, r] = value
            load[host[c], r] += value
    for h in range(len(capacity)):
        for r in range(2):
            if killing[r] and load[h, r] > capacity[h, r] * (1 + tolerance):
                return False
    for i in range(len(running)):
        c = running[i]
        for r in range(2):
            allocated_sum[c, r] += allocation[c, r]
            used_sum[c, r] += use[i, r]
        age[c] += 1
    return True
