"""The bounds of `fleetcast synth`'s arguments, each with its reason: `check` refuses an
argument out of bounds before the command touches its output directory. The cell's size and
length stop where a config's `synthetic` source stops (pipelines/sources/synthetic.py)."""

import os

from configs.checks import UPPER_BOUNDS, Limit, max_worker_processes, number
from pipelines.sources.validation import BYTES_PER_MACHINE_DAY, MAX_DAYS, MAX_MACHINES
from synthetic.trace import (
    DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR,
    check_positive,
    trace_horizon_us,
)

# A config's synthetic.seed is an int64: a seed beyond it names no trace a config can name.
MAX_SEED = Limit(2**63 - 1, "", "a config's synthetic.seed is an int64")
# Requests are clipped to 0.2 machine (synthetic/fleet.py); the catalog's smallest typical
# request, 0.0005 machine, reaches that at this scale.
MAX_REQUEST_SCALE = Limit(400, "", "at 400 the smallest typical request is already the "
                          "0.2 machine a task requests at most")


def check(*, machines: int, days: float, seed: int, arrival_rate_per_machine_hour,
          request_scale: float, shards: int, processes: int, **_file_options):
    """ValueError, one line naming the argument, for the first of synthetic.generate's
    arguments out of its bounds: each number finite and > 0 (seed >= 0) and at most its
    Limit, and the trace small enough for this machine's memory."""
    check_positive(machines=machines, days=days, request_scale=request_scale, shards=shards,
                   processes=processes)
    rate = (DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR / request_scale
            if arrival_rate_per_machine_hour is None else arrival_rate_per_machine_hour)
    check_positive(arrival_rate_per_machine_hour=rate)
    if seed < 0:
        raise ValueError(f"seed must be at least 0, got {seed}")
    for argument, value, limit in (
            ("machines", machines, MAX_MACHINES), ("days", days, MAX_DAYS),
            ("seed", seed, MAX_SEED), ("shards", shards, UPPER_BOUNDS["num_shards"]),
            ("processes", processes,
             max_worker_processes("a forked copy of the sampled trace")),
            ("request_scale", request_scale, MAX_REQUEST_SCALE)):
        if value > limit.maximum:
            raise ValueError(f"{argument} {limit.problem(value)}")
    trace_horizon_us(days)
    _check_memory(machines, days, rate)


def _check_memory(machines: int, days: float, rate: float):
    """ValueError when the trace would need more memory than this machine has, at the
    config's estimate per machine-day (at the default arrival rate)."""
    machine_days = machines * days * rate / DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR
    fits = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // BYTES_PER_MACHINE_DAY
    if machine_days > fits:
        raise ValueError(
            f"{machines:,} machines x {days:g} days at {rate:g} collections per machine-hour "
            f"are {machine_days:.3g} machine-days at the default rate "
            f"({DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR:g}), and this machine's memory holds "
            f"~{number(fits)}: the generator holds the whole trace in memory, "
            f"~{BYTES_PER_MACHINE_DAY // 1000} kB per machine-day")
