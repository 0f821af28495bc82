"""LARS defragmentation ([Ling25] §4.4, [Ling25ext] App. H) in the placement replay."""

import numpy as np
import pytest

from policies.best_fit import BestFit
from policies.lars import Drain, Lars, migration_order, replay_drains
from policies.nilas import Nilas
from policies.replay.lifetime_source import OracleLifetimes
from policies.replay.pool import PoolSpec
from policies.replay.simulator import PlacementTrace, simulate

S = 1_000_000
MIN = 60 * S
HOUR = 3600 * S


def drain_one_host(lifetimes_min, max_inflight=1, seed=0, lifetime_order=True):
    """All VMs arrive at 0 on host 0 of 3 (2 empty, below the 70 % threshold); LARS checks
    once at 0 and drains host 0, 20-minute migrations."""
    lifetimes_min = np.asarray(lifetimes_min)
    count = len(lifetimes_min)
    trace = PlacementTrace(np.zeros(count, np.int64), (lifetimes_min * MIN).astype(np.int64),
                           np.ones((count, 2)))
    lars = Lars(empty_hosts_threshold_pct=70.0, lifetime_order=lifetime_order,
                max_inflight=max_inflight, check_period_s=30 * 86400.0, seed=seed)
    result = simulate(trace, PoolSpec.from_shape((10.0, 10.0), 3), BestFit(),
                      OracleLifetimes(trace.lifetime_s()), end_us=3 * HOUR, warmup_s=0,
                      sample_period_s=10 * 60, lars=lars)
    assert np.all(result.host_of_vm == 0)
    return result, lars


def test_lifetime_order_lets_short_vms_exit_before_their_turn():
    # One long VM and three short ones (exit after 5, 15, 25 minutes), one migration at a
    # time: the long VM migrates first (0-20 min) while two short ones exit; the third
    # is still there at 20 min and migrates.
    _, lars = drain_one_host([10_000, 5, 15, 25])
    assert (lars.migrations, lars.saved_migrations, lars.drained_hosts) == (2, 2, 1)
    assert lars.failed_migrations == 0


def test_baseline_order_never_saves_more_migrations():
    lifetimes = [10_000, 5, 15, 25, 35, 45]
    _, lifetime_order = drain_one_host(lifetimes)
    baseline = [drain_one_host(lifetimes, seed=seed, lifetime_order=False)[1].migrations
                for seed in range(8)]
    assert lifetime_order.migrations == 2                  # long (0-20), 45 min (20-40)
    assert min(baseline) >= lifetime_order.migrations
    assert max(baseline) > lifetime_order.migrations


def test_at_most_max_inflight_migrations_and_drained_host_empties():
    result, lars = drain_one_host([10_000] * 5, max_inflight=3)
    series = result.timeseries
    migrations = dict(zip(series["time_us"].tolist(), series["migrations"].tolist()))
    assert migrations[10 * MIN] == 3                       # three started at 0, still running
    assert migrations[30 * MIN] == 5                       # two more once the first finished
    assert lars.migrations == 5 and lars.saved_migrations == 0
    # Best-Fit sends every VM to host 1 (the first reservation makes it the used host).
    # Host 0 is empty after the last migration (40 min).
    assert series["empty_hosts"][series["time_us"] == 30 * MIN] == 1   # host 2
    assert series["empty_hosts"][series["time_us"] == 50 * MIN] == 2   # hosts 0 and 2
    assert series["live_vms"][-1] == 5


@pytest.mark.parametrize("kwargs", [dict(max_inflight=0), dict(check_period_s=0),
                                    dict(max_draining_hosts=0)])
def test_bad_lars_settings_are_rejected(kwargs):
    with pytest.raises(ValueError):
        Lars(empty_hosts_threshold_pct=10.0, **kwargs)


# Paired comparison: the baseline order replays the migration queue of the lifetime order's
# recorded drains (policies.lars.replay_drains).

def exits_us(exit_min):
    """True exits (µs) of VMs 0, 1, ... from minutes."""
    return (np.asarray(exit_min) * MIN).astype(np.int64)


# One host drained at 0 with VM 0 (long) and VMs 1 and 2 (exit after 5 and 15 minutes),
# one migration at a time, 20 minutes each. Migrations performed per baseline order, by
# hand: a migration frees its slot when it ends or when its VM exits.
ONE_DRAIN = [Drain(0, 0, (0, 1, 2), tuple(exits_us([10_000, 5, 15])))]
ONE_DRAIN_EXITS = exits_us([10_000, 5, 15])
PERFORMED_BY_ORDER = {
    (0, 1, 2): 1, (0, 2, 1): 1,   # 0 (0-20 min); 1 and 2 exit before their turn
    (1, 0, 2): 2,                 # 1 (0-5, exits in flight), 0 (5-25); 2 exits at 15
    (1, 2, 0): 3,                 # 1 (0-5), 2 (5-15, exits in flight), 0 (15-35)
    (2, 0, 1): 2, (2, 1, 0): 2,   # 2 (0-15), 0 (15-35); 1 exited at 5
}


def test_paired_counts_of_both_orders_on_one_drain_by_hand():
    lifetime = replay_drains(ONE_DRAIN, ONE_DRAIN_EXITS, 3 * HOUR, lifetime_order=True,
                             max_inflight=1)
    assert (lifetime.migrations, lifetime.saved_migrations, lifetime.scheduled_migrations,
            lifetime.failed_migrations, lifetime.pending) == (1, 2, 3, 0, 0)
    seen = set()
    for seed in range(12):
        order = tuple(migration_order(ONE_DRAIN[0], False, np.random.default_rng(seed)))
        seen.add(order)
        baseline = replay_drains(ONE_DRAIN, ONE_DRAIN_EXITS, 3 * HOUR, lifetime_order=False,
                                 max_inflight=1, seed=seed)
        assert baseline.migrations == PERFORMED_BY_ORDER[order]
        assert baseline.saved_migrations == 3 - baseline.migrations
        assert baseline.scheduled_migrations == 3
        assert baseline.migrations >= lifetime.migrations
        # Same counts as the closed-loop replay of that order on the same pool.
        _, closed = drain_one_host([10_000, 5, 15], seed=seed, lifetime_order=False)
        assert (closed.migrations, closed.saved_migrations) == (
            baseline.migrations, baseline.saved_migrations)
    assert len(seen) >= 4


# Two drains: host 0 at 0 (VM 0 long, VM 1 exits at 5 min), host 1 at 10 min (VM 2 long,
# VM 3 exits at 30 min); one slot, 20 minutes. Lifetime order: 0 (0-20); queue 1, 2, 3; at
# 20 VM 1 is gone, 2 migrates (20-40); at 40 VM 3 is gone.
TWO_DRAINS = [Drain(0, 0, (0, 1), tuple(exits_us([10_000, 5]))),
              Drain(10 * MIN, 1, (2, 3), tuple(exits_us([10_000, 30])))]
TWO_DRAINS_EXITS = exits_us([10_000, 5, 10_000, 30])


def test_paired_lifetime_order_on_two_drains_by_hand():
    counts = replay_drains(TWO_DRAINS, TWO_DRAINS_EXITS, 3 * HOUR, lifetime_order=True,
                           max_inflight=1, window_us=(10 * MIN, 3 * HOUR))
    assert (counts.migrations, counts.saved_migrations, counts.scheduled_migrations,
            counts.pending, counts.drained_hosts) == (2, 2, 4, 0, 2)
    assert counts.window_migrations == 1                   # VM 2's, started at 20 min
    assert counts.drain_schedule == ((0, 0), (10 * MIN, 1))
    # The replay ends at 30 min: VM 3 is still queued behind VM 2's migration.
    ended = replay_drains(TWO_DRAINS, TWO_DRAINS_EXITS, 30 * MIN, lifetime_order=True,
                          max_inflight=1)
    assert (ended.migrations, ended.saved_migrations, ended.pending) == (2, 1, 1)
    # VM 2 found no target in the recording: it fails at its turn (20 min), and VM 3, still
    # there, migrates (20-40).
    failed = replay_drains(TWO_DRAINS, TWO_DRAINS_EXITS, 3 * HOUR, lifetime_order=True,
                           max_inflight=1, failed=[(1, 2)])
    assert (failed.migrations, failed.saved_migrations, failed.failed_migrations) == (2, 1, 1)


def test_a_vm_queued_twice_is_scheduled_once():
    drains = [Drain(0, 0, (0, 1), tuple(exits_us([10_000, 10_000]))),
              Drain(5 * MIN, 1, (1,), tuple(exits_us([10_000])))]
    counts = replay_drains(drains, exits_us([10_000, 10_000]), 3 * HOUR, lifetime_order=True,
                           max_inflight=1)
    assert (counts.scheduled_migrations, counts.migrations) == (2, 2)


def random_pool_trace(seed=0, count=60):
    """VMs of 1-4 units arriving over 4 hours on hosts of 10, lifetimes 5 min to 2 days."""
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.integers(0, 4 * HOUR, count))
    lifetime = (10 ** rng.uniform(np.log10(5 * MIN), np.log10(2 * 86400 * S), count))
    demand = rng.integers(1, 5, (count, 1)).astype(float) * np.ones((1, 2))
    return PlacementTrace(arrival, arrival + lifetime.astype(np.int64), demand)


@pytest.mark.parametrize("policy", [BestFit, Nilas])
def test_paired_orders_drain_the_same_hosts_at_the_same_times(policy):
    trace = random_pool_trace()
    end_us = 6 * HOUR
    spec = PoolSpec.from_shape((10.0, 10.0), 8)
    recording = Lars(empty_hosts_threshold_pct=60.0, lifetime_order=True, max_inflight=2,
                     migration_duration_s=600.0, check_period_s=300.0)
    simulate(trace, spec, policy(), OracleLifetimes(trace.lifetime_s()), end_us=end_us,
             warmup_s=0, sample_period_s=900, lars=recording)
    assert len(recording.drains) >= 3 and recording.migrations > 0
    schedule = recording.drain_schedule
    # Each drain holds the VMs on its host then; scheduled counts them all.
    assert recording.scheduled_migrations == sum(len(d.vms) for d in recording.drains)
    assert recording.scheduled_migrations == (
        recording.migrations + recording.saved_migrations + recording.failed_migrations
        + recording.pending)
    kwargs = dict(max_inflight=2, migration_duration_s=600.0,
                  failed=recording.failed)
    lifetime = replay_drains(recording.drains, trace.exit_us, end_us, lifetime_order=True,
                             **kwargs)
    # The queue replay of the recording's own order is the recording.
    assert (lifetime.migrations, lifetime.saved_migrations, lifetime.failed_migrations,
            lifetime.pending, lifetime.scheduled_migrations) == (
        recording.migrations, recording.saved_migrations, recording.failed_migrations,
        recording.pending, recording.scheduled_migrations)
    performed = []
    for seed in range(5):
        baseline = replay_drains(recording.drains, trace.exit_us, end_us,
                                 lifetime_order=False, seed=seed, **kwargs)
        assert baseline.drain_schedule == lifetime.drain_schedule == schedule
        # The same VMs, but one drained twice in the recording (it migrated onto a host
        # drained later) is scheduled once if it is still queued at its second drain.
        assert baseline.scheduled_migrations <= lifetime.scheduled_migrations
        assert baseline.scheduled_migrations == (
            baseline.migrations + baseline.saved_migrations + baseline.failed_migrations
            + baseline.pending)
        performed.append(baseline.migrations)
    assert min(performed) >= lifetime.migrations
