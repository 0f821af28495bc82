"""The as-of join of usage windows with instance events, in O(n log n).

[Bashir21] App. A.5 pairs every usage window with the latest instance event at or before the
window start whose request has cpus > 0 and memory > 0. The public reference scans all events
of the instance for every window (quadratic); here both sides are sorted once by
(instance, time) and every window finds its event by binary search.

Ties: several events of one instance can share a timestamp (SUBMIT, ENABLE and SCHEDULE often
do). The event that wins is the last in the order given by `tiebreak` (fleetcast passes the
event type, then the request), so the result never depends on the order rows arrive in.
"""

from typing import Sequence

import numpy as np


def factorize(*keys: np.ndarray):
    """Dense codes for the rows' key tuples.

    Args:
      keys: equal-length arrays; row i's key is (keys[0][i], keys[1][i], ...).
    Returns:
      (codes int64[n] in [0, k), first int64[k]: the index of one row of each code).
      Codes follow the sorted order of the key tuples.
    """
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort(keys[::-1])
    new_group = np.zeros(n, dtype=bool)
    new_group[0] = True
    for key in keys:
        sorted_key = key[order]
        new_group[1:] |= sorted_key[1:] != sorted_key[:-1]
    group_of_sorted = np.cumsum(new_group) - 1
    codes = np.empty(n, np.int64)
    codes[order] = group_of_sorted
    return codes, order[new_group]


def latest_at_or_before(event_key: np.ndarray, event_time: np.ndarray,
                        query_key: np.ndarray, query_time: np.ndarray,
                        tiebreak: Sequence[np.ndarray] = ()) -> np.ndarray:
    """For every query, the index of the latest event of the same key at or before its time.

    Args:
      event_key, event_time: int64[m] (the key is any integer code, e.g. from `factorize`).
      query_key, query_time: int64[n].
      tiebreak: arrays of length m ordering events that share (key, time); the last wins.
    Returns:
      int64[n]: an index into the events, or -1 where the key has no event at or before the
      query time. O((m + n) log(m + n)).
    """
    event_key = np.asarray(event_key, np.int64)
    query_key = np.asarray(query_key, np.int64)
    if len(query_key) == 0 or len(event_key) == 0:
        return np.full(len(query_key), -1, np.int64)
    # Rank times over both sides so that (key, time-rank) packs into one int64 and a single
    # searchsorted answers every query.
    all_times = np.concatenate([np.asarray(event_time, np.int64),
                                np.asarray(query_time, np.int64)])
    unique_times, time_rank = np.unique(all_times, return_inverse=True)
    num_ranks = np.int64(len(unique_times))
    event_rank, query_rank = time_rank[:len(event_key)], time_rank[len(event_key):]
    key_offset = min(event_key.min(), query_key.min())
    packed_events = (event_key - key_offset) * num_ranks + event_rank
    packed_queries = (query_key - key_offset) * num_ranks + query_rank
    # lexsort is stable and sorts by its last key first: (key, time), then the tiebreaks.
    order = np.lexsort(tuple(np.asarray(t) for t in reversed(tiebreak)) + (packed_events,))
    sorted_packed = packed_events[order]
    position = np.searchsorted(sorted_packed, packed_queries, side="right") - 1
    found = position >= 0
    candidate = order[np.where(found, position, 0)]
    found &= event_key[candidate] == query_key
    return np.where(found, candidate, -1)
