"""A binary min-heap of (time, host) pairs in two int64 arrays, for numba."""

import numba


@numba.njit(cache=True, inline="always", _nrt=False)
def heap_less(times, hosts, a, b):
    return times[a] < times[b] or (times[a] == times[b] and hosts[a] < hosts[b])


@numba.njit(cache=True, inline="always", _nrt=False)
def heap_swap(times, hosts, a, b):
    times[a], times[b] = times[b], times[a]
    hosts[a], hosts[b] = hosts[b], hosts[a]


@numba.njit(cache=True, inline="always", _nrt=False)
def heap_push(times, hosts, n, time_us, host):
    """Pushes (time_us, host) on the heap of n entries; returns n + 1."""
    times[n] = time_us
    hosts[n] = host
    i = n
    while i > 0:
        parent = (i - 1) // 2
        if not heap_less(times, hosts, i, parent):
            break
        heap_swap(times, hosts, i, parent)
        i = parent
    return n + 1


@numba.njit(cache=True, inline="always", _nrt=False)
def heap_pop(times, hosts, n):
    """Removes the least entry of the heap of n entries; returns n - 1."""
    n -= 1
    times[0] = times[n]
    hosts[0] = hosts[n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and heap_less(times, hosts, child + 1, child):
            child += 1
        if not heap_less(times, hosts, child, i):
            break
        heap_swap(times, hosts, i, child)
        i = child
    return n


@numba.njit(cache=True, _nrt=False)
def sort_pairs(times, hosts, n):
    """Sorts the first n (time, host) pairs in place (heapsort: no allocation)."""
    for i in range(n // 2 - 1, -1, -1):
        _sift_down_max(times, hosts, i, n)
    for end in range(n - 1, 0, -1):
        heap_swap(times, hosts, 0, end)
        _sift_down_max(times, hosts, 0, end)


@numba.njit(cache=True, inline="always", _nrt=False)
def _sift_down_max(times, hosts, i, n):
    while True:
        child = 2 * i + 1
        if child >= n:
            return
        if child + 1 < n and heap_less(times, hosts, child, child + 1):
            child += 1
        if not heap_less(times, hosts, i, child):
            return
        heap_swap(times, hosts, i, child)
        i = child
