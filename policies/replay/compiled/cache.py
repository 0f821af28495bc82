"""The host exit cache of the compiled engine: `HostExitCache` with exact curves
(policies/replay/lifetime_source.py), a host repredicted in O(1) unless one of its VMs
arrived, left or moved to its next curve interval."""

import numba
import numpy as np

from policies.replay.compiled.heap import heap_pop, heap_push
from policies.replay.compiled.slots import (
    BATCHES,
    HEAP_N,
    INTERVAL_US,
    N_DIRTY,
    NONE,
    PREDICTIONS,
    Q_HEAD,
    Q_TAIL,
)


@numba.njit(cache=True)
def remaining_on_curve(vm, now, arrival, row_of_vm, cell_us, end_us, column):
    """The VM's remaining lifetime (µs) on its curve interval at `now` (moving forward)."""
    c = column[vm]
    uptime = now - arrival[vm]
    while end_us[c] < uptime:
        c += 1
    column[vm] = c
    return cell_us[row_of_vm[vm], c]


@numba.njit(cache=True)
def refresh(now, cursor, params, occupancy, host_exit, head, next_vm, vm_exit, fresh,
            last_pred, max_rem, next_end, stale, dirty, mark, dirty_stack, due_list,
            queue_time, queue_host, heap_time, heap_host, vm_rem, column, vm_end, arrival_all,
            row_of_vm, cell_us, end_us):
    """`HostExitCache.refresh(now)` with exact curves: the used hosts touched since, due by
    the interval, or whose exit estimate passed, repredicted."""
    interval = params[INTERVAL_US]
    num_hosts = occupancy.shape[0]
    n_due = 0
    if interval == 0:
        for h in range(num_hosts):
            if occupancy[h] > 0:
                due_list[n_due] = h
                n_due += 1
        for k in range(cursor[N_DIRTY]):
            dirty[dirty_stack[k]] = False
        cursor[N_DIRTY] = 0
    else:
        for k in range(cursor[N_DIRTY]):
            h = dirty_stack[k]
            dirty[h] = False
            if not mark[h]:
                mark[h] = True
                due_list[n_due] = h
                n_due += 1
        cursor[N_DIRTY] = 0
        head_pos = cursor[Q_HEAD]
        while head_pos < cursor[Q_TAIL] and queue_time[head_pos] <= now:
            h = queue_host[head_pos]
            if last_pred[h] + interval == queue_time[head_pos] and not mark[h]:
                mark[h] = True
                due_list[n_due] = h
                n_due += 1
            head_pos += 1
        cursor[Q_HEAD] = head_pos
        while cursor[HEAP_N] > 0 and heap_time[0] < now:
            time_us, h = heap_time[0], heap_host[0]
            cursor[HEAP_N] = heap_pop(heap_time, heap_host, cursor[HEAP_N])
            if host_exit[h] == time_us and not mark[h]:
                mark[h] = True
                due_list[n_due] = h
                n_due += 1
    repredicted = 0
    for k in range(n_due):
        h = due_list[k]
        mark[h] = False
        if occupancy[h] == 0:
            continue
        repredicted += 1
        repredict(h, now, occupancy, host_exit, head, next_vm, fresh, last_pred, max_rem,
                  next_end, stale, vm_rem, column, vm_end, arrival_all, row_of_vm, cell_us, end_us)
        cursor[PREDICTIONS] += occupancy[h]
        if interval > 0:
            schedule(h, now + interval, cursor, host_exit, queue_time, queue_host,
                     heap_time, heap_host)
    if repredicted:
        cursor[BATCHES] += 1
        if interval > 0:
            compact(cursor, interval, num_hosts, occupancy, host_exit, last_pred,
                    queue_time, queue_host, heap_time, heap_host)


@numba.njit(cache=True)
def repredict(h, now, occupancy, host_exit, head, next_vm, fresh, last_pred, max_rem,
              next_end, stale, vm_rem, column, vm_end, arrival_all, row_of_vm, cell_us, end_us):
    """Host h's exit estimate at `now`: now + the largest remaining lifetime of its VMs,
    looking up only its fresh VMs unless one left or moved to its next interval."""
    every_vm = stale[h] or now > next_end[h]
    if every_vm:
        largest, end = -1, np.int64(1 << 62)
    else:
        largest, end = max_rem[h], next_end[h]
    v = head[h]
    while v >= 0 and (every_vm or fresh[v]):
        if fresh[v] or vm_end[v] < now:
            # A new VM, or one past its interval: look its curve up (else it is unchanged).
            vm_rem[v] = remaining_on_curve(v, now, arrival_all, row_of_vm, cell_us, end_us,
                                           column)
            vm_end[v] = arrival_all[v] + end_us[column[v]]
            fresh[v] = False
        if vm_rem[v] > largest:
            largest = vm_rem[v]
        if vm_end[v] < end:
            end = vm_end[v]
        v = next_vm[v]
    stale[h] = False
    max_rem[h] = largest
    next_end[h] = end
    host_exit[h] = now + largest
    last_pred[h] = now


@numba.njit(cache=True)
def schedule(h, due_us, cursor, host_exit, queue_time, queue_host, heap_time, heap_host):
    """Host h is due again at `due_us` (FIFO), or when its exit estimate passes if that is
    earlier (heap), as `HostExitCache._schedule` records a reprediction."""
    tail = cursor[Q_TAIL]
    if tail == queue_time.shape[0]:
        # Shift the live entries to the front (the compaction keeps at most all hosts).
        live = tail - cursor[Q_HEAD]
        queue_time[:live] = queue_time[cursor[Q_HEAD]:tail].copy()
        queue_host[:live] = queue_host[cursor[Q_HEAD]:tail].copy()
        cursor[Q_HEAD], tail = 0, live
    queue_time[tail] = due_us
    queue_host[tail] = h
    cursor[Q_TAIL] = tail + 1
    if host_exit[h] < due_us:
        cursor[HEAP_N] = heap_push(heap_time, heap_host, cursor[HEAP_N], host_exit[h], h)


@numba.njit(cache=True)
def compact(cursor, interval, num_hosts, occupancy, host_exit, last_pred, queue_time,
            queue_host, heap_time, heap_host):
    """Drops superseded entries as `HostExitCache._schedule` does, past 4 per host."""
    if cursor[HEAP_N] > 4 * num_hosts:
        n = 0
        for h in range(num_hosts):
            if occupancy[h] > 0:
                n = heap_push(heap_time, heap_host, n, host_exit[h], h)
        cursor[HEAP_N] = n
    if cursor[Q_TAIL] - cursor[Q_HEAD] > 4 * num_hosts:
        hosts = np.flatnonzero(last_pred != NONE)
        due = last_pred[hosts] + interval
        order = np.argsort(due, kind="mergesort")  # stable: host order among equal times
        n = hosts.shape[0]
        queue_time[:n] = due[order]
        queue_host[:n] = hosts[order]
        cursor[Q_HEAD], cursor[Q_TAIL] = 0, n
