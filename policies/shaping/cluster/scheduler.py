"""The application scheduler: a FIFO queue (priority first) and first-fit placement on the
hosts' free allocations (capacity minus the allocations of the components they run)."""

import bisect
from typing import Optional

import numba
import numpy as np


class FifoQueue:
    """Waiting applications in scheduling order: higher priority first, then earlier
    submission, then application index.

    A resubmitted application (failed or fully preempted) keeps its original submission
    step, so it re-enters "in a position commensurate to its original priority" ([Pace18]
    §III-B): ahead of everything of its priority submitted after it.

    Args:
      priority, submit_step: int64[A] of the workload's applications.
    """

    def __init__(self, priority: np.ndarray, submit_step: np.ndarray):
        self._priority = priority
        self._submit_step = submit_step
        self._keys = []

    def key(self, app: int) -> tuple:
        return (-int(self._priority[app]), int(self._submit_step[app]), int(app))

    def push(self, app: int):
        bisect.insort(self._keys, self.key(app))

    def head(self) -> int:
        return self._keys[0][2]

    def pop(self) -> int:
        return self._keys.pop(0)[2]

    def __len__(self) -> int:
        return len(self._keys)


@numba.njit(cache=True)
def first_fit(free: np.ndarray, demand: np.ndarray) -> int:
    """The lowest-index host whose free float[H, 2] holds demand float[2], or -1."""
    for host in range(len(free)):
        if free[host, 0] >= demand[0] and free[host, 1] >= demand[1]:
            return host
    return -1


def place_all(free: np.ndarray, demand: np.ndarray) -> Optional[np.ndarray]:
    """Hosts int64[k] for components of demand float[k, 2], first fit one after the other,
    taken from `free` (modified in place); None (and `free` unchanged) if one does not fit."""
    hosts = _place_all(free, np.ascontiguousarray(demand, dtype=np.float64))
    return hosts if len(hosts) == len(demand) else None


@numba.njit(cache=True)
def _place_all(free, demand):
    """place_all, compiled: the hosts of all of `demand`, or an empty array (and `free`
    unchanged) when one does not fit."""
    if not len(demand):
        return np.empty(0, dtype=np.int64)
    # Shortcuts for a head that cannot fit (the common case in a full cluster): a component
    # larger than every host's free room, or more demand than all of it (free room < 0 of
    # overcommitted hosts counts 0; beyond rounding, so the loop decides near-exact fills).
    for r in range(2):
        room, widest, total, largest = 0.0, -np.inf, 0.0, -np.inf
        for h in range(len(free)):
            room += max(free[h, r], 0.0)
            widest = max(widest, free[h, r])
        for i in range(len(demand)):
            total += demand[i, r]
            largest = max(largest, demand[i, r])
        if largest > widest or total > room * (1 + 1e-9) + 1e-12:
            return np.empty(0, dtype=np.int64)
    before = free.copy()
    hosts = np.empty(len(demand), dtype=np.int64)
    for i in range(len(demand)):
        host = first_fit(free, demand[i])
        if host < 0:
            free[:] = before
            return hosts[:0]
        hosts[i] = host
        free[host, 0] -= demand[i, 0]
        free[host, 1] -= demand[i, 1]
    return hosts
