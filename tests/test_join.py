"""The usage/event as-of join: exact on hand-made cases, equal to brute force on random ones."""

import numpy as np
import pytest

from fleetcast_testing.reference import join as reference
from pipelines.io.readers import RowChunk
from pipelines.sources import google_v3, join


def test_factorize_codes_follow_sorted_key_order():
    codes, first = join.factorize(np.array([5, 1, 5, 1, 3]), np.array([0, 2, 0, 1, 9]))
    # Sorted distinct keys: (1,1) (1,2) (3,9) (5,0).
    assert codes.tolist() == [3, 1, 3, 0, 2]
    assert sorted(codes[first].tolist()) == [0, 1, 2, 3]


def test_latest_at_or_before_hand_made():
    event_key = np.array([0, 0, 0, 1])
    event_time = np.array([10, 20, 20, 5])
    tiebreak = np.array([0, 3, 1, 0])  # at time 20 the event with tiebreak 3 wins
    query_key = np.array([0, 0, 0, 0, 1, 2])
    query_time = np.array([9, 10, 25, 20, 100, 100])
    got = join.latest_at_or_before(event_key, event_time, query_key, query_time, (tiebreak,))
    assert got.tolist() == [-1, 0, 1, 1, 3, -1]


@pytest.mark.parametrize("seed", range(30))
def test_latest_at_or_before_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    m, n = rng.integers(0, 60), rng.integers(0, 60)
    # Few keys and times: many repeated updates and ties; queries before any event and for
    # keys with no events at all; rows in random order.
    event_key, event_time = rng.integers(0, 6, m), rng.integers(0, 15, m)
    tiebreak = (rng.integers(0, 3, m), rng.random(m).round(1))
    query_key, query_time = rng.integers(0, 8, n), rng.integers(-3, 18, n)
    fast = join.latest_at_or_before(event_key, event_time, query_key, query_time, tiebreak)
    slow = reference.latest_at_or_before(event_key, event_time, query_key, query_time, tiebreak)
    np.testing.assert_array_equal(fast, slow)


def _events(rows):
    table, dead = google_v3.InstanceEventParser().parse(RowChunk(rows, [None] * len(rows)))
    assert dead.num_rows == 0
    return table


def _usage(rows):
    table, dead = google_v3.InstanceUsageParser().parse(RowChunk(rows, [None] * len(rows)))
    assert dead.num_rows == 0
    return table


def _event(time, type_, cpus, memory, collection=1, index=0, priority=200):
    return dict(time=time, type=type_, collection_id=collection, instance_index=index,
                machine_id=7, resource_request=dict(cpus=cpus, memory=memory),
                priority=priority, scheduling_class=1, collection_type=0, alloc_collection_id=0)


def _window(start, collection=1, index=0):
    return dict(start_time=start, end_time=start + 300, collection_id=collection,
                instance_index=index, machine_id=7, average_usage=dict(cpus=0.01, memory=0.02))


def test_join_usage_takes_request_in_force_and_dead_letters_the_rest():
    events = _events([
        _event(100, 0, 0.1, 0.2),
        _event(100, 3, 0.1, 0.2, priority=210),  # same time, later type: wins
        _event(400, 10, 0.0, 0.2),               # no cpus: never the request
        _event(700, 10, 0.4, 0.3),               # vertical scaling update
        _event(50, 0, 0.5, 0.5, index=1),        # another instance: never mixed in
    ])
    usage = _usage([_window(t) for t in (0, 100, 400, 700, 1000)] + [_window(0, index=2)])
    joined, dead = google_v3.join_usage(events, usage)
    rows = sorted(joined.to_pylist(), key=lambda r: r["start_time"])
    assert [(r["start_time"], r["cpu_limit"], r["memory_limit"], r["priority"]) for r in rows] \
        == [(100, 0.1, 0.2, 210), (400, 0.1, 0.2, 210), (700, 0.4, 0.3, 200),
            (1000, 0.4, 0.3, 200)]
    assert {r["instance_id"] for r in rows} == {"1:0"}
    assert dead.num_rows == 2  # the window before any event, and the instance with none
    assert set(dead.column("table").to_pylist()) == {"instance_usage"}


@pytest.mark.parametrize("seed", range(5))
def test_join_usage_equals_brute_force_on_random_tables(seed):
    rng = np.random.default_rng(seed)
    m, n = 300, 400
    event_rows = [
        _event(int(rng.integers(0, 50)) * 10, int(rng.choice([0, 3, 9, 10])),
               float(rng.choice([0.0, 0.1, 0.2, 0.3])), float(rng.choice([0.0, 0.1, 0.5])),
               collection=int(rng.integers(0, 4)), index=int(rng.integers(0, 5)))
        for _ in range(m)]
    window_rows = [_window(int(rng.integers(0, 60)) * 10, collection=int(rng.integers(0, 5)),
                           index=int(rng.integers(0, 5)))
                   for _ in range(n)]
    events, usage = _events(event_rows), _usage(window_rows)
    joined, dead = google_v3.join_usage(events, usage)
    assert joined.num_rows + dead.num_rows == n
    got = sorted((r["instance_id"], r["start_time"], r["cpu_limit"], r["memory_limit"])
                 for r in joined.to_pylist())
    expected = []
    for w in window_rows:
        best = None
        for e in event_rows:
            if ((e["collection_id"], e["instance_index"]) == (w["collection_id"],
                                                               w["instance_index"])
                    and e["time"] <= w["start_time"] and e["resource_request"]["cpus"] > 0
                    and e["resource_request"]["memory"] > 0):
                rank = (e["time"], e["type"], e["resource_request"]["cpus"],
                        e["resource_request"]["memory"])
                if best is None or rank > best[0]:
                    best = (rank, e)
        if best is not None:
            expected.append((f"{w['collection_id']}:{w['instance_index']}", w["start_time"],
                             best[1]["resource_request"]["cpus"],
                             best[1]["resource_request"]["memory"]))
    assert got == sorted(expected)
    assert dead.num_rows == n - len(expected)
