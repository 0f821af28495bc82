"""The compiled engine's event loop: exits, LAVA's timers and arrivals in the Python
engine's order, Best-Fit and NILAS decisions, the pool's updates."""

import numba
import numpy as np

from policies.replay.compiled.cache import refresh
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
from policies.replay.compiled.slots import (
    ARRIVAL,
    BEST_FIT,
    CUT,
    EXIT_POS,
    FAILED,
    LAVA,
    LIVE,
    METRICS_US,
    NOW,
    N_DIRTY,
    PLACEMENTS,
    POLICY,
    REPREDICT,
    STRICT,
    TAKEN_OVER,
    TAKEOVER_REFRESH,
    TAKEOVER_US,
    TIMERS_N,
)
from policies.replay.pool import NO_EXIT_US


@numba.njit(cache=True)
def run_until(until_us, cursor, params, weights, replayed, arrivals, arrival_exits,
              true_exits, exit_times, exit_vms, d0, d1, lim0, lim1, room0, room1, occupancy,
              host_exit, head, next_vm, prev_vm, vm_host, vm_exit, fresh, decisions,
              last_pred, max_rem, next_end, stale, dirty, mark, dirty_stack, due_list,
              queue_time, queue_host, heap_time, heap_host, vm_rem, column, vm_end, arrival_all,
              row_of_vm, cell_us, end_us, lava_host, recycle_0, recycle_1, vm_seq, vm_classes,
              timer_time, timer_host, lava_bounds, buckets):
    w0, w1 = weights[0], weights[1]
    n_arrivals, n_exits = replayed.shape[0], exit_times.shape[0]
    never = np.int64(1 << 62)
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
                refresh(now, cursor, params, occupancy, host_exit, head, next_vm, vm_exit,
                        fresh, last_pred, max_rem, next_end, stale, dirty, mark, dirty_stack,
                        due_list, queue_time, queue_host, heap_time, heap_host, vm_rem,
                        column, vm_end, arrival_all, row_of_vm, cell_us, end_us)
            if lava:
                lava_bind(now, cursor, occupancy, host_exit, head, next_vm, room0, room1,
                          lava_host, recycle_0, recycle_1, vm_seq, timer_time, timer_host,
                          lava_bounds)
            cursor[TAKEN_OVER] = 1
            continue
        lava_on = lava and cursor[TAKEN_OVER] == 1
        next_timer = timer_time[0] if cursor[TIMERS_N] > 0 else never
        # At equal times: exits, then LAVA's timers, then arrivals (simulator's event order).
        if next_exit <= until_us and next_exit <= next_timer and next_exit <= next_arrival:
            cursor[EXIT_POS] = pos + 1
            vm = exit_vms[pos]
            if vm_host[vm] >= 0:
                host = remove(vm, cursor, d0, d1, lim0, lim1, room0, room1, occupancy,
                              host_exit, head, next_vm, prev_vm, vm_host, vm_exit, fresh,
                              last_pred, max_rem, stale, dirty, dirty_stack, vm_rem)
                if lava_on:
                    lava_removed(vm, host, next_exit, cursor, occupancy, lava_host, vm_seq,
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
            refresh(now, cursor, params, occupancy, host_exit, head, next_vm, vm_exit, fresh,
                    last_pred, max_rem, next_end, stale, dirty, mark, dirty_stack, due_list,
                    queue_time, queue_host, heap_time, heap_host, vm_rem, column, vm_end,
                    arrival_all, row_of_vm, cell_us, end_us)
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
        room0[host] -= d0[vm]
        room1[host] -= d1[vm]
        occupancy[host] += 1
        vm_host[vm] = host
        vm_exit[vm] = exit_us
        fresh[vm] = True
        if exit_us > host_exit[host]:
            host_exit[host] = exit_us
        next_vm[vm] = head[host]
        prev_vm[vm] = -1
        if head[host] >= 0:
            prev_vm[head[host]] = vm
        head[host] = vm
        cursor[LIVE] += 1
        touch(host, cursor, dirty, dirty_stack)
        if policy == LAVA:
            lava_placed(vm, vm_class, host, now, cursor, room0, room1, occupancy, lava_host,
                        recycle_0, recycle_1, vm_seq, timer_time, timer_host, lava_bounds)
        cursor[PLACEMENTS] += counted
        if true_exits[i] == now:
            remove(vm, cursor, d0, d1, lim0, lim1, room0, room1, occupancy, host_exit, head,
                   next_vm, prev_vm, vm_host, vm_exit, fresh, last_pred, max_rem, stale,
                   dirty, dirty_stack, vm_rem)
            if policy == LAVA:
                lava_removed(vm, host, now, cursor, occupancy, lava_host, vm_seq,
                             timer_time, timer_host, lava_bounds)


@numba.njit(cache=True)
def touch(host, cursor, dirty, dirty_stack):
    if not dirty[host]:
        dirty[host] = True
        dirty_stack[cursor[N_DIRTY]] = host
        cursor[N_DIRTY] += 1


@numba.njit(cache=True)
def remove(vm, cursor, d0, d1, lim0, lim1, room0, room1, occupancy, host_exit, head,
           next_vm, prev_vm, vm_host, vm_exit, fresh, last_pred, max_rem, stale, dirty,
           dirty_stack, vm_rem):
    """`PoolState.remove` and the cache's touch."""
    host = vm_host[vm]
    vm_host[vm] = -1
    if prev_vm[vm] >= 0:
        next_vm[prev_vm[vm]] = next_vm[vm]
    else:
        head[host] = next_vm[vm]
    if next_vm[vm] >= 0:
        prev_vm[next_vm[vm]] = prev_vm[vm]
    cursor[LIVE] -= 1
    occupancy[host] -= 1
    if occupancy[host] == 0:
        room0[host] = lim0[host]
        room1[host] = lim1[host]
        host_exit[host] = NO_EXIT_US
        stale[host] = True
    else:
        room0[host] += d0[vm]
        room1[host] += d1[vm]
        gone_exit = vm_exit[vm] if fresh[vm] else last_pred[host] + vm_rem[vm]
        if gone_exit == host_exit[host]:
            latest = NO_EXIT_US
            v = head[host]
            while v >= 0:
                e = vm_exit[v] if fresh[v] else last_pred[host] + vm_rem[v]
                if e > latest:
                    latest = e
                v = next_vm[v]
            host_exit[host] = latest
        if not fresh[vm] and vm_rem[vm] == max_rem[host]:
            stale[host] = True
    touch(host, cursor, dirty, dirty_stack)
    return host
