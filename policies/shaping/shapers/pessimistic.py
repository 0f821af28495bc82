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
capacity, no check can fail and the answer, "resize everything", skips the loop.
"""

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


TIGHT_MARGIN = 1e-9


def first_takes(capacity, host, target, elastic, by_host, tight, bad) -> np.ndarray:
    """Marks `bad` the failing takes of the `tight` hosts, all at once, from each host's
    free capacity after every take by cumulative sums; returns the hosts where some free
    capacity is within TIGHT_MARGIN of 0, where the sums' rounding could differ from the
    sequential subtractions': their takes must be redone one by one (`take`)."""
    rows = by_host[tight[host[by_host]]]
    if not len(rows):
        return rows
    on = host[rows]
    taken = np.cumsum(target[rows], axis=0)
    start = np.concatenate([[0], np.flatnonzero(on[1:] != on[:-1]) + 1])
    before = np.repeat(taken[start] - target[rows[start]], np.diff(np.append(start, len(rows))),
                       axis=0)
    free = capacity[on] - (taken - before)
    bad[rows] = np.where(elastic[rows], np.any(free <= 0, axis=1), np.any(free < 0, axis=1))
    near = np.any(np.abs(free) <= capacity[on] * TIGHT_MARGIN, axis=1)
    return np.unique(on[near])


def algorithm_1(running: RunningComponents):
    """(fully preempted applications, preempted elastic components) of [Pace18] Algorithm 1.

    Same decisions, in the same order, as taking the components one at a time (the
    per-application loop of fleetcast_testing/reference/shaping_simulator.py), but only the first
    failing take is looked for at a time: in the take sequence (applications in scheduling
    order; core components by index, then elastic ones oldest first) every take before
    the first failing one succeeds, and that one's preemption changes only the free
    capacity of its hosts after it. Each host's free capacity after every take is its
    capacity minus the takes before it one by one (`np.subtract.accumulate`), so that the
    comparisons with 0 are those of the sequential algorithm bit for bit. Cost: one pass
    per preemption, and one per host that is nearly full, instead of one Python step per
    component. Targets must be >= 0 (they are: the forecast mean is clipped at 0).
    """
    seq = np.lexsort((running.component, np.where(running.elastic, -running.age, 0),
                      running.elastic, running.app_order))
    host, target, app = running.host[seq], running.target[seq], running.app[seq]
    elastic = running.elastic[seq]
    by_host = np.argsort(host, kind="stable")
    bounds = np.searchsorted(host[by_host], np.arange(len(running.capacity) + 1))
    active = np.ones(len(seq), dtype=bool)
    bad = np.zeros(len(seq), dtype=bool)

    def take(h):
        """Free capacity after each active take on host h, and which takes fail there
        (core: < 0, lines 13 and 17; elastic: <= 0, line 29)."""
        rows = by_host[bounds[h]:bounds[h + 1]]
        rows = rows[active[rows]]
        free = np.subtract.accumulate(np.vstack([running.capacity[h], target[rows]]))[1:]
        bad[by_host[bounds[h]:bounds[h + 1]]] = False
        bad[rows] = np.where(elastic[rows], np.any(free <= 0, axis=1),
                             np.any(free < 0, axis=1))

    # A host whose targets (all >= 0: free capacity only decreases) sum below its capacity
    # by more than rounding (n·ulp ≪ 1e-9 relative) has no failing take: skipped.
    load = np.column_stack([np.bincount(host, target[:, r], minlength=len(running.capacity))
                            for r in range(2)])
    tight = np.any(load >= running.capacity * (1 - TIGHT_MARGIN), axis=1)
    for h in first_takes(running.capacity, host, target, elastic, by_host, tight, bad):
        take(h)
    preempted_apps, preempted_components = [], []
    point = 0
    while True:
        failing = np.flatnonzero(bad[point:])
        if not len(failing):
            return preempted_apps, preempted_components
        point += int(failing[0])
        if elastic[point]:
            removed = np.array([point])
            preempted_components.append(int(running.component[seq[point]]))
        else:
            # Lines 20-21: the whole application, its elastic components included.
            removed = np.flatnonzero(app == app[point])
            preempted_apps.append(int(app[point]))
        active[removed] = False
        for h in np.unique(host[removed]):
            take(h)
