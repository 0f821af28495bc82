"""Pessimistic preemption: [Pace18] Algorithm 1, line by line.

Every shaping interval, with the running applications in scheduling order (line 6), the new
allocations (`RunningComponents.target`) are taken from per-host free capacity that starts
at the hosts' capacities (lines 1-5):

- an application's core components are taken on a copy of the free capacity (lines 8-19);
  if one makes its host's free CPU or memory negative (``< 0``), the application is fully
  preempted (lines 20-21, 34-36) and the copy discarded;
- otherwise the copy is kept (lines 23-24) and its elastic components are taken one by one,
  oldest first (line 25, ties by component index); one that leaves its host's free CPU or
  memory at or below zero (``<= 0``, as line 29 writes it) is preempted alone (lines 26-33,
  37-38);
- every other component is resized (lines 39-41).

Components stay on their hosts ([Pace18] leaves migration out); line 32's `r.host` is read as
`e.host` (a typo in the paper). When every host's total new allocation is strictly below its
capacity, no check can fail and the answer, "resize everything", skips the loop; else the
loop runs compiled (numba).
"""

import numba
import numpy as np

from policies.shaping.shapers.base import (
    NOTHING,
    Reshape,
    RunningComponents,
    ShapingPolicy,
)


class Pessimistic(ShapingPolicy):
    """[Pace18] Algorithm 1 (see the module docstring); k1, k2 as in ShapingPolicy."""

    name = "pessimistic"

    def reshape(self, running: RunningComponents) -> Reshape:
        num_hosts = len(running.capacity)
        load = np.column_stack([np.bincount(running.host, running.target[:, r],
                                            minlength=num_hosts) for r in range(2)])
        if np.all(load < running.capacity):
            return Reshape(running.target, NOTHING, NOTHING)
        preempted_apps, preempted_components = algorithm_1(running)
        return Reshape(running.target, np.array(preempted_apps, dtype=np.int64),
                       np.array(preempted_components, dtype=np.int64))


def algorithm_1(running: RunningComponents):
    """(fully preempted applications, preempted elastic components) of [Pace18] Algorithm 1,
    as lists in the order the algorithm preempts them: the take sequence (applications in
    scheduling order; core components by index, then elastic ones oldest first, ties by
    index) walked once by `_take_sequence`, compiled, with the same arithmetic as the
    one-component-at-a-time reference (fleetcast_testing/reference/shaping_simulator.py)."""
    seq = np.lexsort((running.component, np.where(running.elastic, -running.age, 0),
                      running.elastic, running.app_order))
    app = running.app[seq]
    bounds = np.concatenate([[0], np.flatnonzero(app[1:] != app[:-1]) + 1, [len(seq)]])
    app_preempted, component_preempted = _take_sequence(
        running.capacity.astype(np.float64), running.host[seq].astype(np.int64),
        np.ascontiguousarray(running.target[seq], dtype=np.float64),
        running.elastic[seq].astype(np.bool_), bounds.astype(np.int64))
    return ([int(a) for a in app[bounds[:-1]][app_preempted]],
            [int(c) for c in running.component[seq][component_preempted]])


@numba.njit(cache=True)
def _take_sequence(capacity, host, target, elastic, bounds):
    """(bool[A] preempted applications, bool[R] preempted elastic components) of the take
    sequence (rows grouped by application between `bounds`, core rows first): an
    application's core takes are made on a copy of the free capacity, kept unless one leaves
    its host's free CPU or memory < 0 (lines 8-24); then each elastic take is kept unless it
    leaves them <= 0 (lines 25-33)."""
    free = capacity.copy()
    app_preempted = np.zeros(len(bounds) - 1, dtype=np.bool_)
    component_preempted = np.zeros(len(host), dtype=np.bool_)
    # Hosts' free capacity before each core take of the application (the copy to restore).
    saved = np.empty((len(host), 2))
    for a in range(len(bounds) - 1):
        end = bounds[a]
        fits = True
        while end < bounds[a + 1] and not elastic[end]:
            h = host[end]
            saved[end, 0], saved[end, 1] = free[h, 0], free[h, 1]
            free[h, 0] -= target[end, 0]
            free[h, 1] -= target[end, 1]
            end += 1
            if free[h, 0] < 0 or free[h, 1] < 0:
                fits = False
                break
        if not fits:
            for row in range(end - 1, bounds[a] - 1, -1):
                free[host[row], 0], free[host[row], 1] = saved[row, 0], saved[row, 1]
            app_preempted[a] = True
            continue
        for row in range(end, bounds[a + 1]):
            h = host[row]
            cpu_left = free[h, 0] - target[row, 0]
            memory_left = free[h, 1] - target[row, 1]
            if cpu_left <= 0 or memory_left <= 0:
                component_preempted[row] = True
            else:
                free[h, 0], free[h, 1] = cpu_left, memory_left
    return app_preempted, component_preempted
