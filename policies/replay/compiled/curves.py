"""A VM's lifetime curve in the compiled engine: its remaining lifetime at a time, and how
long that stays within a bound (see `slots` for the `vms` table)."""

import numba
import numpy as np

from policies.replay.compiled.slots import ARRIVED, COLUMN, NO_END, REM, ROW


@numba.njit(cache=True, inline="always", _nrt=False)
def look_up(row, now, vms, cell_us, end_us):
    """The remaining lifetime (µs) of the VM in `row` and its curve interval at `now`."""
    c = interval_at(row, now, vms, end_us)
    vms[COLUMN, row] = c
    vms[REM, row] = cell_us[vms[ROW, row], c]


@numba.njit(cache=True, inline="always", _nrt=False)
def remaining_at(row, time_us, vms, cell_us, end_us):
    """The remaining lifetime (µs) of the VM in `row` at `time_us`, not before its last
    look-up."""
    return cell_us[vms[ROW, row], interval_at(row, time_us, vms, end_us)]


@numba.njit(cache=True, inline="always", _nrt=False)
def interval_at(row, time_us, vms, end_us):
    """The curve interval of the VM in `row` at `time_us`, not before its last look-up
    (intervals only move forward)."""
    c = vms[COLUMN, row]
    uptime = time_us - vms[ARRIVED, row]
    while end_us[c] < uptime:
        c += 1
    return c


@numba.njit(cache=True, inline="always", _nrt=False)
def valid_until(row, largest, vms, cell_us, end_us):
    """The time (µs) up to which the VM in `row` keeps its block's `largest` remaining
    lifetime: stays at it if it has it at its last look-up, at most it otherwise. Its
    remaining lifetime changes only when its curve interval does, at `end_us` past arrival."""
    curve, c, n = vms[ROW, row], vms[COLUMN, row], end_us.shape[0]
    if vms[REM, row] == largest:
        c += 1
        while c < n and cell_us[curve, c] == largest:
            c += 1
    else:
        while c < n and cell_us[curve, c] <= largest:
            c += 1
    if c == n:
        return np.int64(NO_END)
    return vms[ARRIVED, row] + (end_us[c - 1] if c > 0 else -1)
