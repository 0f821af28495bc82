"""LAVA (policies/lava.py) in the compiled engine: its selection, and its host states,
classes, deadlines and residual counts kept as `Lava` keeps them."""

import numba
import numpy as np

from policies.replay.compiled.heap import heap_push
from policies.replay.compiled.nilas import level_range, temporal_cost
from policies.replay.compiled.slots import (
    BLOCK_ROWS,
    CLASS,
    DEADLINE,
    EMPTY,
    FIRST_BLOCK,
    NEXT_BLOCK,
    NO_END,
    NONE,
    OPEN,
    PLACED_SEQ,
    RECYCLING,
    RESIDUAL_CUT,
    RESIDUALS,
    SEQ,
    STATE,
    TIMER,
    TIMERS_N,
)


@numba.njit(cache=True, _nrt=False)
def lava_class(remaining_us, lava_bounds):
    """LAVA's class index of a predicted remaining lifetime (`Lava.lifetime_class`)."""
    return np.searchsorted(lava_bounds[:-1], remaining_us, side="right")


@numba.njit(cache=True, _nrt=False)
def select_lava(vm, vm_class, exit_us, strict, d0, d1, room0, room1, occupancy, host_exit,
                lava_host, w0, w1, buckets):
    """[Ling25ext] App. I Algorithm 3 as `Lava.select`: the first tier with a fitting host -
    recycling hosts of a higher class (closest class first), open hosts of the VM's class,
    any other used host (not, with `strict`, a recycling one of the VM's class or lower),
    empty hosts - and in it the lowest temporal cost, then Best-Fit."""
    a0, a1 = d0[vm], d1[vm]
    best, best_tier, best_class, best_score = -1, 4, 0, 0.0
    # The delta_t range [low, high) of the best host's temporal cost (`select`'s).
    low, high = NO_END, NO_END
    for h in range(room0.shape[0]):
        if not (a0 <= room0[h] and a1 <= room1[h]):
            continue
        if occupancy[h] == 0:
            tier, host_class = 3, 0
        else:
            state, host_class = lava_host[h, STATE], lava_host[h, CLASS]
            if state == RECYCLING and host_class > vm_class:
                tier = 0
            elif state == OPEN and host_class == vm_class:
                tier, host_class = 1, 0
            elif strict and state == RECYCLING:
                continue
            else:
                tier, host_class = 2, 0
        # A worse tier or class cannot win; in the best's, the temporal cost is searched for
        # only when delta_t is below the best's range (an empty host's cost is 0).
        if tier > best_tier or (tier == best_tier and host_class > best_class):
            continue
        delta = exit_us - host_exit[h] if tier < 3 else 0
        score = w0 * room0[h] + w1 * room1[h]
        if tier < best_tier or host_class < best_class or delta < low:
            low, high = level_range(temporal_cost(delta, buckets), buckets)
            best, best_tier, best_class, best_score = h, tier, host_class, score
        elif delta < high and score < best_score:
            best, best_score = h, score
    return best


@numba.njit(cache=True, _nrt=False)
def lava_over_threshold(h, room0, room1, recycle_0, recycle_1):
    return room0[h] < recycle_0[h] or room1[h] < recycle_1[h]


@numba.njit(cache=True, _nrt=False)
def lava_set_deadline(h, now, lava_host, cursor, timer_time, timer_host, lava_bounds):
    """`Lava._set_deadline`: the class's bound from now; one pending timer per host."""
    deadline = now + lava_bounds[lava_host[h, CLASS]]
    lava_host[h, DEADLINE] = deadline
    pending = lava_host[h, TIMER]
    if pending == NONE or pending > deadline:
        lava_arm(h, deadline, lava_host, cursor, timer_time, timer_host)


@numba.njit(cache=True, _nrt=False)
def lava_arm(h, time_us, lava_host, cursor, timer_time, timer_host):
    lava_host[h, TIMER] = time_us
    n = cursor[TIMERS_N]
    if n == timer_time.shape[0]:
        # Full: keep the pending timers only (the others would be skipped as stale).
        n = 0
        for host in range(lava_host.shape[0]):
            if lava_host[host, TIMER] != NONE and host != h:
                n = heap_push(timer_time, timer_host, n, lava_host[host, TIMER], host)
    cursor[TIMERS_N] = heap_push(timer_time, timer_host, n, time_us, h)


@numba.njit(cache=True, _nrt=False)
def lava_make_all_residual(h, cursor, occupancy, lava_host):
    lava_host[h, RESIDUAL_CUT] = cursor[SEQ]
    lava_host[h, RESIDUALS] = occupancy[h]


@numba.njit(cache=True, _nrt=False)
def lava_bind(now, cursor, occupancy, host_exit, vms, hosts, block_links, room0, room1,
              lava_host, recycle_0, recycle_1, timer_time, timer_host, lava_bounds):
    """`Lava.bind`: hosts holding VMs open in the class of their longest predicted remaining
    lifetime (recycling if over the threshold), their VMs numbered."""
    for h in range(occupancy.shape[0]):
        if occupancy[h] == 0:
            continue
        # Numbered in host order: a residual cut taken later covers them all either way.
        b = hosts[h, FIRST_BLOCK]
        for pos in range(occupancy[h]):
            cursor[SEQ] += 1
            vms[PLACED_SEQ, b * BLOCK_ROWS + pos % BLOCK_ROWS] = cursor[SEQ]
            if (pos + 1) % BLOCK_ROWS == 0:
                b = block_links[b, NEXT_BLOCK]
        lava_host[h, STATE] = OPEN
        lava_host[h, CLASS] = lava_class(host_exit[h] - now, lava_bounds)
        lava_set_deadline(h, now, lava_host, cursor, timer_time, timer_host, lava_bounds)
        if lava_over_threshold(h, room0, room1, recycle_0, recycle_1):
            lava_host[h, STATE] = RECYCLING
            lava_make_all_residual(h, cursor, occupancy, lava_host)


@numba.njit(cache=True, _nrt=False)
def lava_placed(row, vm_class, h, now, cursor, room0, room1, occupancy, lava_host,
                recycle_0, recycle_1, vms, timer_time, timer_host, lava_bounds):
    """`Lava.placed` of the VM in `row`."""
    cursor[SEQ] += 1
    vms[PLACED_SEQ, row] = cursor[SEQ]
    if lava_host[h, STATE] == EMPTY:
        lava_host[h, STATE] = OPEN
        lava_host[h, CLASS] = vm_class
    if lava_host[h, STATE] == OPEN:
        lava_set_deadline(h, now, lava_host, cursor, timer_time, timer_host, lava_bounds)
        if lava_over_threshold(h, room0, room1, recycle_0, recycle_1):
            lava_host[h, STATE] = RECYCLING
            lava_make_all_residual(h, cursor, occupancy, lava_host)


@numba.njit(cache=True, _nrt=False)
def lava_removed(seq, h, now, cursor, occupancy, lava_host, timer_time, timer_host,
                 lava_bounds):
    """`Lava.removed` of the VM of placement number `seq`: an emptied host is EMPTY; a
    recycling host whose last residual VM left drops a class, and its VMs become residual."""
    if occupancy[h] == 0:
        lava_host[h, STATE] = EMPTY
        lava_host[h, DEADLINE] = NONE
        lava_host[h, RESIDUALS] = 0
        return
    if lava_host[h, STATE] == RECYCLING and seq <= lava_host[h, RESIDUAL_CUT]:
        lava_host[h, RESIDUALS] -= 1
        if lava_host[h, RESIDUALS] == 0:
            lava_host[h, CLASS] = max(lava_host[h, CLASS] - 1, 0)
            lava_make_all_residual(h, cursor, occupancy, lava_host)
            lava_set_deadline(h, now, lava_host, cursor, timer_time, timer_host, lava_bounds)


@numba.njit(cache=True, _nrt=False)
def lava_on_timer(h, now, cursor, occupancy, lava_host, timer_time, timer_host,
                  lava_bounds):
    """`Lava.on_timer`: a host still used at its deadline moves up a class, recycling."""
    if lava_host[h, TIMER] != now:
        return
    lava_host[h, TIMER] = NONE
    if lava_host[h, STATE] == EMPTY:
        return
    if lava_host[h, DEADLINE] > now:
        lava_arm(h, lava_host[h, DEADLINE], lava_host, cursor, timer_time, timer_host)
        return
    lava_host[h, CLASS] = min(lava_host[h, CLASS] + 1, lava_bounds.shape[0] - 1)
    lava_host[h, STATE] = RECYCLING
    lava_make_all_residual(h, cursor, occupancy, lava_host)
    lava_set_deadline(h, now, lava_host, cursor, timer_time, timer_host, lava_bounds)
