"""The compiled engine's event loop: exits, LAVA's timers and arrivals in the Python
engine's order, Best-Fit and NILAS decisions, the pool's updates."""

import numba
import numpy as np

from policies.replay.compiled.cache import add_due, refresh
from policies.replay.compiled.curves import remaining_at
from policies.replay.compiled.heap import heap_pop
from policies.replay.compiled.lava import (
    lava_bind,
    lava_class,
    lava_on_timer,
    lava_placed,
    lava_removed,
    select_lava,
)
from policies.replay.compiled.nilas import select
from policies.replay.compiled.rows import add_row, drop_row, host_of_row, position
from policies.replay.compiled.slots import (
    ADMITS,
    ARRIVAL,
    ARRIVED,
    BEST_FIT,
    BLOCK_ROWS,
    COLUMN,
    CUT,
    DUE,
    EXIT,
    EXIT_POS,
    FAILED,
    FIRST_BLOCK,
    FRESH_N,
    LAST_PRED,
    LAVA,
    LIVE,
    MAX_REM,
    METRICS_US,
    N_TOUCHED,
    NEXT_BLOCK,
    NO_END,
    NOW,
    PLACED_SEQ,
    PLACEMENTS,
    POLICY,
    REPREDICT,
    ROW,
    STALE,
    STRICT,
    TAKEN_OVER,
    TAKEOVER_REFRESH,
    TAKEOVER_US,
    TIMERS_N,
    VM,
    WINDOW,
)
from policies.replay.pool import NO_EXIT_US


@numba.njit(cache=True, _nrt=False)
def run_until(until_us, cursor, params, weights, replayed, arrivals, arrival_exits,
              true_exits, exit_times, exit_vms, arrival_all, row_of_vm, d0, d1, lim0, lim1,
              room0, room1, occupancy, host_exit, vms, slot_of, placed_window, hosts,
              block_links, free_blocks, decisions, due_list, queue_time, queue_host,
              heap_time, heap_host, cell_us, end_us, lava_host, recycle_0, recycle_1,
              vm_classes, timer_time, timer_host, lava_bounds, buckets):
    w0, w1 = weights[0], weights[1]
    admits = params[ADMITS] == 1
    n_arrivals, n_exits = replayed.shape[0], exit_times.shape[0]
    never = np.int64(NO_END)
    lava = params[POLICY] == LAVA
    while True:
        i = cursor[ARRIVAL]
        pos = cursor[EXIT_POS]
        next_arrival = arrivals[i] if i < n_arrivals else never
        next_exit = exit_times[pos] if pos < n_exits else never
        # The take-over from Best-Fit (simulator._Replay.run): once the arrivals and exits
        # before it are done, the cache refreshes at its time and LAVA binds to the pool.
        if cursor[TAKEN_OVER] == 0 and i >= params[CUT] and params[TAKEOVER_US] <= until_us \
                and next_exit >= params[TAKEOVER_US]:
            now = params[TAKEOVER_US]
            if params[TAKEOVER_REFRESH]:
                refresh(now, cursor, params, occupancy, host_exit, vms, hosts, block_links,
                        due_list, queue_time, queue_host, heap_time, heap_host, cell_us,
                        end_us)
            if lava:
                lava_bind(now, cursor, occupancy, host_exit, vms, hosts, block_links,
                          room0, room1, lava_host, recycle_0, recycle_1, timer_time,
                          timer_host, lava_bounds)
            cursor[TAKEN_OVER] = 1
            continue
        lava_on = lava and cursor[TAKEN_OVER] == 1
        next_timer = timer_time[0] if cursor[TIMERS_N] > 0 else never
        # At equal times: exits, then LAVA's timers, then arrivals (simulator's event order).
        if next_exit <= until_us and next_exit <= next_timer and next_exit <= next_arrival:
            cursor[EXIT_POS] = pos + 1
            vm = exit_vms[pos]
            if slot_of[vm] >= 0:
                seq = vms[PLACED_SEQ, slot_of[vm]]
                host = remove(vm, cursor, d0, d1, lim0, lim1, room0, room1, occupancy,
                              host_exit, vms, slot_of, hosts, block_links, free_blocks,
                              due_list, cell_us, end_us,
                              admits and placed_window[vm] < cursor[WINDOW])
                if lava_on:
                    lava_removed(seq, host, next_exit, cursor, occupancy, lava_host,
                                 timer_time, timer_host, lava_bounds)
            continue
        if next_timer <= until_us and next_timer <= next_arrival:
            host = timer_host[0]
            cursor[TIMERS_N] = heap_pop(timer_time, timer_host, cursor[TIMERS_N])
            lava_on_timer(host, next_timer, cursor, occupancy, lava_host, timer_time,
                          timer_host, lava_bounds)
            continue
        if next_arrival > until_us:
            return
        now = next_arrival
        vm = replayed[i]
        cursor[ARRIVAL] = i + 1
        cursor[NOW] = now
        if params[REPREDICT]:
            refresh(now, cursor, params, occupancy, host_exit, vms, hosts, block_links,
                    due_list, queue_time, queue_host, heap_time, heap_host, cell_us, end_us)
        policy = params[POLICY] if i >= params[CUT] else BEST_FIT
        exit_us = arrival_exits[i]
        vm_class = 0
        if policy == LAVA:
            vm_class = vm_classes[vm]
            if vm_class < 0:
                vm_class = lava_class(exit_us - now, lava_bounds)
            host = select_lava(vm, vm_class, exit_us, params[STRICT], d0, d1, room0, room1,
                               occupancy, host_exit, lava_host, w0, w1, buckets)
        else:
            host = select(policy, vm, now, exit_us, d0, d1, room0, room1, occupancy,
                          host_exit, w0, w1, buckets)
        decisions[i] = host
        counted = now >= params[METRICS_US]
        if host < 0:
            cursor[FAILED] += counted
            continue
        row = place(vm, host, exit_us, cursor, d0, d1, room0, room1, occupancy, host_exit,
                    vms, slot_of, hosts, block_links, free_blocks, arrival_all,
                    row_of_vm)
        if admits:
            placed_window[vm] = cursor[WINDOW]
        touch(host, cursor, hosts, due_list)
        if policy == LAVA:
            lava_placed(row, vm_class, host, now, cursor, room0, room1, occupancy, lava_host,
                        recycle_0, recycle_1, vms, timer_time, timer_host, lava_bounds)
        cursor[PLACEMENTS] += counted
        if true_exits[i] == now:
            seq = vms[PLACED_SEQ, row]
            remove(vm, cursor, d0, d1, lim0, lim1, room0, room1, occupancy, host_exit, vms,
                   slot_of, hosts, block_links, free_blocks, due_list, cell_us, end_us,
                   False)
            if policy == LAVA:
                lava_removed(seq, host, now, cursor, occupancy, lava_host, timer_time,
                             timer_host, lava_bounds)


@numba.njit(cache=True, inline="always", _nrt=False)
def touch(host, cursor, hosts, due_list):
    """The host is due at the next refresh, one of the touched hosts that head `due_list`."""
    if not hosts[host, DUE]:
        cursor[N_TOUCHED] = add_due(host, cursor[N_TOUCHED], hosts, due_list)


@numba.njit(cache=True, inline="always", _nrt=False)
def place(vm, host, exit_us, cursor, d0, d1, room0, room1, occupancy, host_exit, vms,
          slot_of, hosts, block_links, free_blocks, arrival_all, row_of_vm):
    """`PoolState.place`: the VM takes the next row of its host; returns the row."""
    row = add_row(host, occupancy[host], cursor, hosts, block_links, free_blocks)
    slot_of[vm] = row
    room0[host] -= d0[vm]
    room1[host] -= d1[vm]
    occupancy[host] += 1
    if exit_us > host_exit[host]:
        host_exit[host] = exit_us
    vms[VM, row] = vm
    vms[EXIT, row] = exit_us
    vms[COLUMN, row] = 0
    vms[ARRIVED, row] = arrival_all[vm]
    vms[ROW, row] = row_of_vm[vm]
    cursor[LIVE] += 1
    return row


@numba.njit(cache=True, inline="always", _nrt=False)
def remove(vm, cursor, d0, d1, lim0, lim1, room0, room1, occupancy, host_exit, vms, slot_of,
           hosts, block_links, free_blocks, due_list, cell_us, end_us, reserved):
    """`PoolState.remove` (`AdmittedPool.remove`: a `reserved` VM, counted by the admission's
    last prediction, gives no CPU back) and the cache's touch; returns the VM's host."""
    row = slot_of[vm]
    host = host_of_row(row, block_links)
    count = occupancy[host]
    fresh = position(row, block_links) >= count - hosts[host, FRESH_N]
    last_pred = hosts[host, LAST_PRED]
    gone_rem = -1 if fresh else remaining_at(row, last_pred, vms, cell_us, end_us)
    gone_exit = vms[EXIT, row] if fresh else last_pred + gone_rem
    slot_of[vm] = -1
    drop_row(host, row, count, cursor, vms, slot_of, hosts, block_links, free_blocks,
             cell_us, end_us)
    cursor[LIVE] -= 1
    count -= 1
    occupancy[host] = count
    if count == 0:
        room0[host] = lim0[host]
        room1[host] = lim1[host]
        host_exit[host] = NO_EXIT_US
        hosts[host, STALE] = 1
    else:
        if not reserved:
            room0[host] += d0[vm]
        room1[host] += d1[vm]
        if gone_exit == host_exit[host]:
            host_exit[host] = latest_exit(host, count, vms, hosts, block_links, last_pred,
                                          cell_us, end_us)
        if not fresh and gone_rem == hosts[host, MAX_REM]:
            hosts[host, STALE] = 1
    touch(host, cursor, hosts, due_list)
    return host


@numba.njit(cache=True, inline="always", _nrt=False)
def latest_exit(h, count, vms, hosts, block_links, last_pred, cell_us, end_us):
    """The latest exit estimate of host h's `count` VMs: a fresh VM's at arrival, the others'
    at the host's last reprediction."""
    first_fresh = count - hosts[h, FRESH_N]
    latest = NO_EXIT_US
    b = hosts[h, FIRST_BLOCK]
    for pos in range(count):
        row = b * BLOCK_ROWS + pos % BLOCK_ROWS
        if pos >= first_fresh:
            e = vms[EXIT, row]
        else:
            e = last_pred + remaining_at(row, last_pred, vms, cell_us, end_us)
        if e > latest:
            latest = e
        if (pos + 1) % BLOCK_ROWS == 0:
            b = block_links[b, NEXT_BLOCK]
    return latest
