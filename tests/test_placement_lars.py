"""LARS defragmentation (paper 000/001 §4.4, App. H) in the placement replay."""

import numpy as np
import pytest

from policies.best_fit import BestFit
from policies.lars import Lars
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
