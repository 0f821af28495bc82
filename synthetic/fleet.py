"""Fleet: the cell's machines and their machine_events, and the sampling helpers the workload
shares (lognormal draws, machine fractions to resource units).

Machines of a few platforms, all ADDed at time 0; now and then one is REMOVEd for a repair
and ADDed back, a few get an UPDATE (memory upgrade).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from configs.units import DAY_US, HOUR_US, US_PER_S
from synthetic.constants import MACHINE_ADD, MACHINE_REMOVE, MACHINE_UPDATE, RESOURCE_UNITS

# (cpus, memory, share of machines, cycles-per-instruction scale) per platform.
_PLATFORMS = np.array([
    (0.50, 0.50, 0.45, 1.00),
    (0.50, 0.25, 0.20, 1.10),
    (0.75, 0.50, 0.15, 0.90),
    (1.00, 1.00, 0.10, 0.85),
    (0.25, 0.25, 0.10, 1.25),
])
_MACHINES_PER_SWITCH = 16
_REMOVALS_PER_MACHINE_DAY = 1 / 30
_UPGRADED_MACHINE_SHARE = 0.05
# Largest request as a fraction of a machine: every task fits on the smallest platform.
_MAX_REQUEST_UNITS = 20_000
_MIN_REQUEST_UNITS = 10


def _lognormal(rng: np.random.Generator, median, sigma: float, size=None) -> np.ndarray:
    """Lognormal samples with the given median(s) and log-sd; one per median by default."""
    return median * np.exp(sigma * rng.standard_normal(np.shape(median) if size is None else size))


def _to_units(fraction) -> np.ndarray:
    """Machine fractions -> integer 1e-5 units."""
    return np.round(np.asarray(fraction) * RESOURCE_UNITS).astype(np.int64)


class Fleet(NamedTuple):
    """Machines and their machine_events.

    machine_id, platform (row of _PLATFORMS), switch: (n_machines,) int64. Events, sorted by
    time, each (n_events,) int64: event_time_us, event_machine (index into machine_id),
    event_type (MACHINE_ADD, ...), event_cpu and event_memory (capacity from the event on,
    in 1e-5 units).
    """
    machine_id: np.ndarray
    platform: np.ndarray
    switch: np.ndarray
    event_time_us: np.ndarray
    event_machine: np.ndarray
    event_type: np.ndarray
    event_cpu: np.ndarray
    event_memory: np.ndarray


def sample_fleet(rng: np.random.Generator, n_machines: int, horizon_us: int) -> Fleet:
    """Machines of a few platforms, ADDed at time 0; about one repair (REMOVE, then ADD after
    a lognormal 2-hour median) per machine-month; a few machines get a memory upgrade, an
    UPDATE event if the machine is up at that time."""
    platform = rng.choice(len(_PLATFORMS), size=n_machines, p=_PLATFORMS[:, 2])
    cpu = _to_units(_PLATFORMS[platform, 0])
    memory = _to_units(_PLATFORMS[platform, 1])
    machine_id = 100_000_000 + np.cumsum(rng.integers(1, 10_000_000, n_machines))
    switch = rng.permutation(n_machines) // _MACHINES_PER_SWITCH
    expected_removals = _REMOVALS_PER_MACHINE_DAY * horizon_us / DAY_US
    events = []
    for m in range(n_machines):
        upgraded_memory = min(RESOURCE_UNITS, 2 * int(memory[m]))
        upgrade_us = horizon_us
        if rng.random() < _UPGRADED_MACHINE_SHARE and upgraded_memory > memory[m]:
            upgrade_us = int(rng.integers(1, horizon_us))
        removals = np.sort(rng.integers(1, horizon_us, rng.poisson(expected_removals)))
        repairs = _lognormal(rng, 2 * HOUR_US, 1.0, len(removals)).astype(np.int64)
        timeline = [(0, MACHINE_ADD)]
        up_again_us = 0
        upgrade_while_up = True
        for remove_us, repair_us in zip(removals.tolist(), repairs.tolist()):
            if remove_us < up_again_us:
                continue
            timeline.append((remove_us, MACHINE_REMOVE))
            up_again_us = remove_us + max(repair_us, US_PER_S)
            upgrade_while_up &= not remove_us <= upgrade_us < up_again_us
            if up_again_us < horizon_us:
                timeline.append((up_again_us, MACHINE_ADD))
        if upgrade_us < horizon_us and upgrade_while_up:
            timeline.append((upgrade_us, MACHINE_UPDATE))
        for t, event_type in timeline:
            events.append((t, m, event_type, cpu[m],
                           upgraded_memory if t >= upgrade_us else memory[m]))
    events.sort()
    columns = np.array(events, dtype=np.int64).T
    return Fleet(machine_id, platform, switch, *columns)
