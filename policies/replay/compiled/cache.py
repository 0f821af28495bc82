"""The host exit cache of the compiled engine: `HostExitCache` with exact curves
(policies/replay/lifetime_source.py), a host repredicted in O(1) unless one of its VMs
arrived or left, or a VM's remaining lifetime may have passed its block's largest."""

import numba
import numpy as np

from policies.replay.compiled.curves import look_up, valid_until
from policies.replay.compiled.heap import heap_pop, heap_push, sort_pairs
from policies.replay.compiled.rows import row_at
from policies.replay.compiled.slots import (
    BATCHES,
    BLOCK_MAX_REM,
    BLOCK_ROWS,
    BLOCK_VALID,
    CHANGED,
    DUE,
    FIRST_BLOCK,
    FRESH_N,
    HEAP_N,
    INTERVAL_US,
    LAST_PRED,
    MAX_REM,
    MAX_REM_VALID,
    N_TOUCHED,
    NEXT_BLOCK,
    NO_END,
    NONE,
    PREDICTIONS,
    Q_HEAD,
    Q_TAIL,
    REM,
    STALE,
)


@numba.njit(cache=True, _nrt=False)
def refresh(now, cursor, params, occupancy, host_exit, vms, hosts, block_links, due_list,
            queue_time, queue_host, heap_time, heap_host, cell_us, end_us):
    """`HostExitCache.refresh(now)` with exact curves: the used hosts touched since (the
    first cursor[N_TOUCHED] of `due_list`), due by the interval, or whose exit estimate
    passed, repredicted."""
    interval = params[INTERVAL_US]
    num_hosts = occupancy.shape[0]
    n_due = cursor[N_TOUCHED]
    cursor[N_TOUCHED] = 0
    if interval == 0:
        for h in range(num_hosts):
            if occupancy[h] > 0 and not hosts[h, DUE]:
                n_due = add_due(h, n_due, hosts, due_list)
    else:
        head_pos = cursor[Q_HEAD]
        while head_pos < cursor[Q_TAIL] and queue_time[head_pos] <= now:
            h = queue_host[head_pos]
            if hosts[h, LAST_PRED] + interval == queue_time[head_pos] and not hosts[h, DUE]:
                n_due = add_due(h, n_due, hosts, due_list)
            head_pos += 1
        cursor[Q_HEAD] = head_pos
        while cursor[HEAP_N] > 0 and heap_time[0] < now:
            time_us, h = heap_time[0], heap_host[0]
            cursor[HEAP_N] = heap_pop(heap_time, heap_host, cursor[HEAP_N])
            if host_exit[h] == time_us and not hosts[h, DUE]:
                n_due = add_due(h, n_due, hosts, due_list)
    repredicted = 0
    for k in range(n_due):
        h = due_list[k]
        hosts[h, DUE] = 0
        if occupancy[h] == 0:
            continue
        repredicted += 1
        repredict(h, now, occupancy[h], host_exit, vms, hosts, block_links, cell_us, end_us)
        cursor[PREDICTIONS] += occupancy[h]
        if interval > 0:
            schedule(h, now + interval, cursor, host_exit, queue_time, queue_host,
                     heap_time, heap_host)
    if repredicted:
        cursor[BATCHES] += 1
        if interval > 0:
            compact(cursor, interval, num_hosts, occupancy, host_exit, hosts, queue_time,
                    queue_host, heap_time, heap_host)


@numba.njit(cache=True, inline="always", _nrt=False)
def add_due(h, n_due, hosts, due_list):
    """Host h joins the due list of `n_due` hosts; returns their number."""
    hosts[h, DUE] = 1
    due_list[n_due] = h
    return n_due + 1


@numba.njit(cache=True, inline="always", _nrt=False)
def repredict(h, now, count, host_exit, vms, hosts, block_links, cell_us, end_us):
    """Host h's exit estimate at `now`: now + the largest remaining lifetime of its `count`
    VMs, looking up only its fresh VMs unless one left or a block's largest may have moved
    (`MAX_REM_VALID`)."""
    first_fresh = count - hosts[h, FRESH_N]
    if hosts[h, STALE] or now > hosts[h, MAX_REM_VALID]:
        largest, valid = np.int64(-1), np.int64(NO_END)
        b, base = hosts[h, FIRST_BLOCK], 0
        while base < count:
            if block_links[b, CHANGED] or block_links[b, BLOCK_VALID] < now:
                read_block(b, base, count, now, vms, block_links, cell_us, end_us)
            elif base + BLOCK_ROWS > first_fresh:
                add_fresh(b, base, count, first_fresh, now, vms, block_links, cell_us, end_us)
            largest = max(largest, block_links[b, BLOCK_MAX_REM])
            valid = min(valid, block_links[b, BLOCK_VALID])
            base += BLOCK_ROWS
            b = block_links[b, NEXT_BLOCK]
    else:
        # Only the fresh VMs are new (a changed block's summary is not read here).
        largest, valid = hosts[h, MAX_REM], hosts[h, MAX_REM_VALID]
        if first_fresh < count:
            b = row_at(h, first_fresh, count, hosts, block_links) // BLOCK_ROWS
            base = first_fresh - first_fresh % BLOCK_ROWS
            while base < count:
                fresh_rem, fresh_valid = add_fresh(b, base, count, first_fresh, now, vms,
                                                   block_links, cell_us, end_us)
                largest = max(largest, fresh_rem)
                valid = min(valid, fresh_valid)
                base += BLOCK_ROWS
                b = block_links[b, NEXT_BLOCK]
    hosts[h, FRESH_N] = 0
    hosts[h, STALE] = 0
    hosts[h, MAX_REM] = largest
    hosts[h, MAX_REM_VALID] = valid
    hosts[h, LAST_PRED] = now
    host_exit[h] = now + largest


@numba.njit(cache=True, inline="always", _nrt=False)
def read_block(b, base, count, now, vms, block_links, cell_us, end_us):
    """Block b (its first VM at position `base` of the host's `count`): its summary
    recomputed from every VM's curve at `now`."""
    block_links[b, BLOCK_MAX_REM] = -1  # the summary of no VMs
    block_links[b, BLOCK_VALID] = NO_END
    add_fresh(b, base, count, base, now, vms, block_links, cell_us, end_us)
    block_links[b, CHANGED] = 0


@numba.njit(cache=True, inline="always", _nrt=False)
def add_fresh(b, base, count, first_fresh, now, vms, block_links, cell_us, end_us):
    """The VMs of block b (its first VM at position `base`) from position `first_fresh` on
    looked up at `now` and added to its summary; returns their largest remaining lifetime
    and the time up to which the summary holds for them. The other VMs' times stay: measured
    against a largest remaining lifetime at most the new one, they are early, never late."""
    first = b * BLOCK_ROWS - base
    stop = min(count, base + BLOCK_ROWS)
    largest = np.int64(-1)
    for pos in range(max(base, first_fresh), stop):
        look_up(first + pos, now, vms, cell_us, end_us)
        largest = max(largest, vms[REM, first + pos])
    summary = max(block_links[b, BLOCK_MAX_REM], largest)
    valid = np.int64(NO_END)
    for pos in range(max(base, first_fresh), stop):
        valid = min(valid, valid_until(first + pos, summary, vms, cell_us, end_us))
    block_links[b, BLOCK_MAX_REM] = summary
    block_links[b, BLOCK_VALID] = min(block_links[b, BLOCK_VALID], valid)
    return largest, valid


@numba.njit(cache=True, inline="always", _nrt=False)
def schedule(h, due_us, cursor, host_exit, queue_time, queue_host, heap_time, heap_host):
    """Host h is due again at `due_us` (FIFO), or when its exit estimate passes if that is
    earlier (heap), as `HostExitCache._schedule` records a reprediction."""
    tail = cursor[Q_TAIL]
    if tail == queue_time.shape[0]:
        # Shift the live entries to the front (the compaction keeps at most all hosts).
        live = tail - cursor[Q_HEAD]
        for k in range(live):  # forward: the target is before the source
            queue_time[k] = queue_time[cursor[Q_HEAD] + k]
            queue_host[k] = queue_host[cursor[Q_HEAD] + k]
        cursor[Q_HEAD], tail = 0, live
    queue_time[tail] = due_us
    queue_host[tail] = h
    cursor[Q_TAIL] = tail + 1
    if host_exit[h] < due_us:
        cursor[HEAP_N] = heap_push(heap_time, heap_host, cursor[HEAP_N], host_exit[h], h)


@numba.njit(cache=True, inline="always", _nrt=False)
def compact(cursor, interval, num_hosts, occupancy, host_exit, hosts, queue_time,
            queue_host, heap_time, heap_host):
    """Drops superseded entries as `HostExitCache._schedule` does, past 4 per host."""
    if cursor[HEAP_N] > 4 * num_hosts:
        n = 0
        for h in range(num_hosts):
            if occupancy[h] > 0:
                n = heap_push(heap_time, heap_host, n, host_exit[h], h)
        cursor[HEAP_N] = n
    if cursor[Q_TAIL] - cursor[Q_HEAD] > 4 * num_hosts:
        n = 0
        for h in range(num_hosts):
            if hosts[h, LAST_PRED] != NONE:
                queue_time[n] = hosts[h, LAST_PRED] + interval
                queue_host[n] = h
                n += 1
        sort_pairs(queue_time, queue_host, n)  # by time, then host
        cursor[Q_HEAD], cursor[Q_TAIL] = 0, n
