"""The blocked host index against brute force, and the fast replay against the reference on
pools large enough for the index to split its Best-Fit order into several blocks."""

import numpy as np
import pytest

from fleetcast_testing.reference.placement_simulator import simulate_reference
from policies.best_fit import BestFit
from policies.la import LifetimeAlignment
from policies.lava import Lava
from policies.nilas import Nilas
from policies.quantized_best_fit import QuantizedBestFit
from policies.replay import host_index
from policies.replay.host_index import NO_HOST, HostGroups
from policies.replay.lifetime_source import OracleLifetimes
from policies.replay.pool import PoolSpec, PoolState
from policies.replay.simulator import PlacementTrace, simulate

S = 1_000_000
GROUPS = ("a", "b", None)


@pytest.fixture(params=["default_blocks", "tiny_blocks"])
def block_size(request, monkeypatch):
    """The index's own block sizes, or blocks of 2 to 4 hosts: many blocks per group even
    in small pools, so that splits, merges and skipped blocks happen all the time."""
    if request.param == "tiny_blocks":
        monkeypatch.setattr(host_index, "_BLOCK_MAX", 4)
        monkeypatch.setattr(host_index, "_BLOCK_MIN", 2)


def brute_force_best_fit(pool, group_of, group, demand, lo_us=None, hi_us=None):
    """The host of `group` with the least (score, host) that fits `demand` and whose exit
    estimate is in [lo_us, hi_us), by scanning every host."""
    best = None
    for host in range(pool.num_hosts):
        exit_us = pool.host_exit_us[host]
        if (group_of[host] == group and pool.available[host] and pool.fits(host, demand)
                and (lo_us is None or lo_us <= exit_us) and (hi_us is None or exit_us < hi_us)):
            key = (pool.score(host), host)
            best = key if best is None or key < best else best
    return NO_HOST if best is None else best[1]


@pytest.mark.parametrize("num_dims", [1, 2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_index_answers_like_a_scan_of_every_host_after_random_changes(num_dims, seed,
                                                                     block_size):
    rng = np.random.default_rng(seed)
    num_hosts = 150
    capacity = rng.choice([16.0, 32.0, 48.0], (num_hosts, num_dims))
    # Coarse demands: many hosts with equal scores (ties go to the lowest host id).
    shapes = rng.choice([1.0, 2.0, 4.0, 8.0], (12, num_dims))
    pool = PoolState(PoolSpec(capacity, tuple(f"d{d}" for d in range(num_dims))),
                     smallest_demand=shapes.min(axis=0))
    group_of = list(rng.choice(len(GROUPS), num_hosts))
    group_of = [GROUPS[g] for g in group_of]
    groups = HostGroups(pool, group_of, track_exit=True)
    live = {}
    next_vm = 0
    for step in range(6000):
        action = rng.random()
        if action < 0.55:
            host = int(rng.integers(num_hosts))
            demand = tuple(shapes[rng.integers(len(shapes))])
            if not pool.fits(host, demand):
                continue
            pool.place(next_vm, host, demand, int(rng.integers(0, 100)) * S)
            live[next_vm] = demand
            next_vm += 1
        elif action < 0.93 and live:
            vm = list(live)[rng.integers(len(live))]
            host = pool.remove(vm, live.pop(vm))
        elif action < 0.97:
            host = int(rng.integers(num_hosts))
            group_of[host] = GROUPS[rng.integers(len(GROUPS))]
        elif action < 0.985:
            host = int(rng.integers(num_hosts))
            pool.available[host] = not pool.available[host]
        else:
            # A reprediction: new exit estimates of a few hosts and nothing else.
            host = None
            repredicted = sorted(set(rng.integers(num_hosts, size=3).tolist()))
            for h in repredicted:
                pool.host_exit_us[h] = int(rng.integers(0, 100)) * S
            groups.update_exits(repredicted)
        if host is not None:
            groups.update(host, group_of[host])
        if step % 5:
            continue
        demand = tuple(shapes[rng.integers(len(shapes))])
        group = GROUPS[rng.integers(2)]
        index = groups.index(group)
        weighted_size = pool.weighted_size(demand)
        assert index.best_fit(demand, weighted_size) == brute_force_best_fit(
            pool, group_of, group, demand)
        lo_us, hi_us = sorted(rng.integers(0, 100, 2) * S)
        lo_us = None if rng.random() < 0.2 else int(lo_us)
        hi_us = None if rng.random() < 0.2 else int(hi_us) + S
        assert index.best_fit_in_exit_range(demand, weighted_size, lo_us, hi_us) == \
            brute_force_best_fit(pool, group_of, group, demand, lo_us, hi_us)
        members = [h for h in range(num_hosts) if group_of[h] == group and pool.available[h]]
        assert index.exit_order == sorted((pool.host_exit_us[h], h) for h in members)


@pytest.mark.parametrize("make_policy, reference, options", [
    (BestFit, "best_fit", {}),
    (QuantizedBestFit, "pbfr", {}),
    (LifetimeAlignment, "la", {}),
    (Nilas, "nilas", {}),
    (Lava, "lava", {}),
    (lambda: Lava(strict_recycling=True), "lava_strict_recycling", {"strict_recycling": True}),
], ids=["best_fit", "pbfr", "la_binary", "nilas", "lava", "lava_strict_recycling"])
def test_fast_replay_makes_the_reference_decisions_on_a_larger_pool(make_policy, reference,
                                                                   options, block_size):
    rng = np.random.default_rng(4)
    num_vms, num_hosts = 2500, 90
    lifetime_s = np.clip(10 ** rng.normal(3.5, 1.0, num_vms), 60, 10 * 86400).round()
    arrival_s = np.cumsum(rng.exponential(40, num_vms)) // 60 * 60
    demand = np.column_stack([rng.choice([1.0, 2.0, 4.0, 8.0], num_vms),
                              rng.choice([1.75, 3.5, 7.0, 14.0, 28.0], num_vms)])
    trace = PlacementTrace((arrival_s * S).astype(np.int64),
                           ((arrival_s + lifetime_s) * S).astype(np.int64), demand)
    pool = PoolSpec.from_shape((16.0, 64.0), num_hosts)
    lifetimes = OracleLifetimes(trace.lifetime_s())
    fast = simulate(trace, pool, make_policy(), lifetimes, warmup_s=0,
                    sample_period_s=86400).host_of_vm
    expected = simulate_reference(trace, pool, reference, lifetimes, **options)
    np.testing.assert_array_equal(fast, expected)
    # Busy enough that the used hosts fill several index blocks.
    assert len(np.unique(fast[fast >= 0])) > 60
