"""Brute-force as-of join: for every query, scan every event (O(n·m)). For tests and
benchmarks only; `pipelines.sources.join.latest_at_or_before` is the real one."""

import numpy as np


def latest_at_or_before(event_key, event_time, query_key, query_time, tiebreak=()):
    """Same contract as pipelines.sources.join.latest_at_or_before, by exhaustive comparison."""
    result = np.full(len(query_key), -1, np.int64)
    for q in range(len(query_key)):
        best, best_rank = -1, None
        for e in range(len(event_key)):
            if event_key[e] != query_key[q] or event_time[e] > query_time[q]:
                continue
            rank = (event_time[e],) + tuple(t[e] for t in tiebreak) + (e,)
            if best_rank is None or rank > best_rank:
                best, best_rank = e, rank
        result[q] = best
    return result
