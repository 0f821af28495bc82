"""Pessimistic preemption: 002 Algorithm 1, line by line.

Every shaping interval, with the running applications in scheduling order (line 6; FIFO,
priority first), the new allocations (forecast + beta, `RunningComponents.target`) are taken
from per-host free capacity that starts at the hosts' capacities (lines 1-5):

- an application's core components are taken on a copy of the free capacity (lines 8-19);
  if one makes its host's free CPU or memory negative (``< 0``), the application is fully
  preempted (lines 20-21, 34-36) and the copy discarded;
- otherwise the copy is kept (lines 23-24) and its elastic components are taken one by one,
  those alive longest first (line 25, ties by component index); an elastic component that
  leaves its host's free CPU or memory at or below zero (``<= 0``, as line 29 writes it,
  unlike line 13's ``< 0``) is preempted alone (lines 26-33, 37-38);
- every other component is resized to its new allocation (lines 39-41).

Components stay on their hosts (002 leaves migration out of scope). Line 32's `r.host` is
read as `e.host` (a typo in the paper). The simulator applies the decision: a preempted
application loses its work and is resubmitted, a preempted elastic component loses its work
and waits for a host.

When every host's total new allocation is strictly below its capacity (both resources),
no check of the algorithm can fail and the decision is "resize everything": that case is
answered without the per-application loop (same result), so the loop runs only at shaping
steps where some host is full.
"""

import numpy as np

from policies.shaping.policies.base import (
    NOTHING,
    Reshape,
    RunningComponents,
    ShapingPolicy,
)


class Pessimistic(ShapingPolicy):
    """002 Algorithm 1 (see the module docstring); k1, k2 as in ShapingPolicy."""

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
    """(fully preempted applications, preempted elastic components) of 002 Algorithm 1."""
    cpus_free = running.capacity[:, 0].copy()
    mem_free = running.capacity[:, 1].copy()
    order = np.lexsort((running.component, running.app_order))
    bounds = np.flatnonzero(np.diff(running.app_order[order])) + 1
    preempted_apps, preempted_components = [], []
    for rows in np.split(order, bounds):
        core = rows[~running.elastic[rows]]
        cpus, mem = take_core(cpus_free, mem_free, running.host[core], running.target[core])
        if cpus is None:
            preempted_apps.append(int(running.app[rows[0]]))
            continue
        cpus_free, mem_free = cpus, mem
        elastic = rows[running.elastic[rows]]
        elastic = elastic[np.lexsort((running.component[elastic], -running.age[elastic]))]
        for row in elastic:
            host = running.host[row]
            cpus_left = cpus_free[host] - running.target[row, 0]
            mem_left = mem_free[host] - running.target[row, 1]
            if cpus_left <= 0 or mem_left <= 0:
                preempted_components.append(int(running.component[row]))
            else:
                cpus_free[host], mem_free[host] = cpus_left, mem_left
    return preempted_apps, preempted_components


def take_core(cpus_free, mem_free, hosts, targets):
    """Lines 8-19: copies of the free arrays minus the core components' targets, or
    (None, None) as soon as a host's free CPU or memory goes below zero."""
    cpus, mem = cpus_free.copy(), mem_free.copy()
    for host, (cpu, memory) in zip(hosts, targets):
        cpus[host] -= cpu
        if cpus[host] < 0:
            return None, None
        mem[host] -= memory
        if mem[host] < 0:
            return None, None
    return cpus, mem
