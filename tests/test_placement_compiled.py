"""The compiled replay engine (policies/replay/compiled/) makes the Python engine's
decisions and samples, exactly, on random pools: Best-Fit, NILAS and LAVA (its strict
ablation, given classes), oracle and exact-curve
lifetimes, warm-up VMs, both warm starts, refresh intervals 0 and 15 minutes, stranding; and
what it does not support replays in Python."""

import tracemalloc

import numpy as np
import pytest

from policies.best_fit import BestFit
from policies.la import LifetimeAlignment
from policies.lars import Lars
from policies.lava import Lava
from policies.nilas import TEMPORAL_COST_BUCKETS_S, Nilas
from policies.replay import compiled
from policies.replay.compiled.curves import valid_until
from policies.replay.compiled.nilas import level_range, temporal_cost
from policies.replay.compiled.slots import (
    ARRIVED,
    BLOCK_ROWS,
    COLUMN,
    HOST_COLUMNS,
    NO_END,
    REM,
    VM_COLUMNS,
)
from policies.replay.lifetime_source import NoisyOracleLifetimes, OracleLifetimes
from policies.replay.metrics import InflationMix
from policies.replay.pool import PoolSpec, PoolState
from policies.replay.simulator import (
    BEST_FIT_UNTIL_METRICS,
    POLICY_FROM_START,
    PlacementTrace,
    simulate,
)
from predictors.lifetime.curves import LifetimeCurves
from tests.helpers import assert_same_replays as assert_same
from tests.helpers import random_pool

S = 1_000_000


def curves_for(small_model, trace, seed):
    """The small model's exact curves, each VM of `trace` given a random row's features."""
    model, features = small_model
    rows = np.random.default_rng(seed).integers(0, len(features), len(trace))
    return LifetimeCurves(model, features[rows])


def both_engines(trace, pool, make_policy, lifetimes, **options):
    """(python result, compiled result) of one replay."""
    return tuple(simulate(trace, pool, make_policy(), lifetimes, engine=engine, **options)
                 for engine in ("python", "auto"))


def lava_strict():
    return Lava(strict_recycling=True)


@pytest.mark.parametrize("make_policy", [BestFit, Nilas, Lava, lava_strict],
                         ids=["best_fit", "nilas", "lava", "lava_strict_recycling"])
@pytest.mark.parametrize("warm_start", [POLICY_FROM_START, BEST_FIT_UNTIL_METRICS])
@pytest.mark.parametrize("refresh_interval_s", [900.0, 0.0])
def test_compiled_engine_equals_python_on_random_pools(
        small_model, make_policy, warm_start, refresh_interval_s):
    for seed in range(4):
        trace, pool = random_pool(seed, num_vms=500, num_hosts=10,
                                  zero_lifetime_fraction=0.05 * (seed % 2))
        for lifetimes in (OracleLifetimes(trace.lifetime_s()),
                          curves_for(small_model, trace, seed)):
            policy = make_policy()
            uses_cache = lifetimes.repredicts and policy.uses_exit_estimates
            assert compiled.supports(policy, lifetimes, None, PoolState(pool), uses_cache)
            # Starts after 2 hours of arrivals: VMs alive then are the warm-up's.
            python, fast = both_engines(
                trace, pool, make_policy, lifetimes, start_us=2 * 3600 * S,
                end_us=int(trace.arrival_us.max()) + 3600 * S, warmup_s=6 * 3600.0,
                sample_period_s=1800.0, refresh_interval_s=refresh_interval_s,
                inflation_mix=InflationMix.from_demand(trace.demand), stranding_every=3,
                warm_start=warm_start)
            assert python.summary["warmup_vms"] > 0 and python.summary["placements"] > 50
            assert_same(python, fast)


def test_lava_with_given_classes_equals_python(small_model):
    for seed in range(3):
        trace, pool = random_pool(seed, num_vms=500, num_hosts=10)
        classes = np.random.default_rng(seed).integers(0, 4, len(trace))
        for lifetimes in (OracleLifetimes(trace.lifetime_s()),
                          curves_for(small_model, trace, seed)):
            python, fast = both_engines(
                trace, pool, lambda classes=classes: Lava(vm_classes=classes), lifetimes,
                start_us=2 * 3600 * S, warmup_s=6 * 3600.0, sample_period_s=1800.0)
            assert_same(python, fast)


def test_a_take_over_after_the_end_still_refreshes_as_in_python(small_model):
    trace, pool = random_pool(3, num_vms=300, num_hosts=8)
    lifetimes = curves_for(small_model, trace, 3)
    python, fast = both_engines(trace, pool, Nilas, lifetimes, start_us=3600 * S,
                                warmup_s=30 * 86400.0, warm_start=BEST_FIT_UNTIL_METRICS)
    assert python.summary["prediction_batches"] > 0
    assert_same(python, fast)


def test_what_the_compiled_engine_does_not_support_replays_in_python(small_model):
    trace, pool = random_pool(0)
    state = PoolState(pool)
    oracle = OracleLifetimes(trace.lifetime_s())
    noisy = NoisyOracleLifetimes(trace.lifetime_s(), accuracy=0.6)
    assert compiled.supports(Nilas(), oracle, None, state, uses_cache=False)
    # A repredicting source other than exact curves, LA, LARS, three dimensions.
    assert not compiled.supports(Nilas(), noisy, None, state, uses_cache=True)
    assert not compiled.supports(LifetimeAlignment((7200,)), oracle, None, state,
                                 uses_cache=False)
    assert not compiled.supports(Nilas(), oracle, Lars(30.0), state, uses_cache=False)
    three = PoolState(PoolSpec(np.ones((2, 3)), ("cpu", "memory", "disk")))
    assert not compiled.supports(BestFit(), oracle, None, three, uses_cache=False)
    # Best-Fit reads no exit estimate: no cache, any source.
    assert compiled.supports(BestFit(), noisy, None, state, uses_cache=False)
    options = dict(warmup_s=3600.0, sample_period_s=1800.0)
    python, auto = both_engines(trace, pool, Nilas, noisy, **options)
    assert_same(python, auto)
    with pytest.raises(ValueError, match="engine must be one of"):
        simulate(trace, pool, Nilas(), oracle, engine="numba")


def crowded_pool(seed, num_vms=3000, num_hosts=4):
    """Small VMs on large hosts: ~50 live VMs a host, so a host's VMs span several blocks of
    the compiled engine (`slots.BLOCK_ROWS`) and leave from the middle of its chain."""
    rng = np.random.default_rng(seed)
    lifetime_s = np.clip(10 ** rng.normal(3.5, 1.0, num_vms), 60, 30 * 86400).round()
    demand = np.column_stack([rng.choice([1.0, 2.0], num_vms),
                              rng.choice([2.0, 4.0, 8.0], num_vms)])
    busy_cores = 0.8 * num_hosts * 64
    gap_s = np.mean(demand[:, 0] * lifetime_s) / busy_cores
    arrival_s = (np.cumsum(rng.exponential(gap_s, num_vms)) - 86400) // 60 * 60
    trace = PlacementTrace((arrival_s * S).astype(np.int64),
                           ((arrival_s + lifetime_s) * S).astype(np.int64), demand)
    return trace, PoolSpec(np.tile([64.0, 256.0], (num_hosts, 1)))


def most_live_vms_on_a_host(trace, result):
    """The most VMs any host held at any arrival (no migrations: a VM stays on its host)."""
    placed = result.host_of_vm >= 0
    most = 0
    for t in trace.arrival_us[placed][::25]:
        alive = placed & (trace.arrival_us <= t) & (trace.exit_us > t)
        most = max(most, np.bincount(result.host_of_vm[alive]).max(initial=0))
    return most


@pytest.mark.parametrize("make_policy", [Nilas, Lava], ids=["nilas", "lava"])
def test_hosts_of_many_blocks_equal_python(small_model, make_policy):
    for seed in range(2):
        trace, pool = crowded_pool(seed)
        python, fast = both_engines(
            trace, pool, make_policy, curves_for(small_model, trace, seed),
            start_us=0, warmup_s=6 * 3600.0, sample_period_s=1800.0, refresh_interval_s=900.0)
        assert most_live_vms_on_a_host(trace, python) > 2 * BLOCK_ROWS
        assert python.summary["predictions"] > 0
        assert_same(python, fast)


def test_a_vms_curve_keeps_its_blocks_largest_until_the_first_interval_that_breaks_it():
    """`valid_until` against the definition, on random step curves: the last µs from the VM's
    current interval on at which its remaining lifetime is still the block's largest (if it
    has it now) or at most it (if not)."""
    rng = np.random.default_rng(0)
    end_us = np.append(np.cumsum(rng.integers(1, 50, 9)), NO_END).astype(np.int64)
    for _ in range(300):
        cells = rng.integers(0, 6, (1, len(end_us))).astype(np.int64)
        vms = np.zeros((VM_COLUMNS, 1), np.int64)
        vms[ARRIVED, 0] = rng.integers(0, 1000)
        vms[COLUMN, 0] = rng.integers(0, len(end_us))
        vms[REM, 0] = cells[0, vms[COLUMN, 0]]
        largest = vms[REM, 0] + rng.integers(0, 2)
        has_it = vms[REM, 0] == largest
        expected = NO_END
        start = end_us[vms[COLUMN, 0] - 1] + 1 if vms[COLUMN, 0] > 0 else 0
        for uptime_us in range(start, int(end_us[-2]) + 2):
            value = cells[0, np.searchsorted(end_us, uptime_us, side="left")]
            if not (value == largest if has_it else value <= largest):
                expected = vms[ARRIVED, 0] + uptime_us - 1
                break
        assert valid_until(0, largest, vms, cells, end_us) == expected


def test_a_temporal_cost_levels_range_holds_exactly_its_deltas():
    buckets = np.array(TEMPORAL_COST_BUCKETS_S, np.int64) * S
    deltas = np.concatenate([buckets - 1, buckets, buckets + 1, [-5 * S, 0, 10 ** 13]])
    for delta in deltas:
        level = temporal_cost(delta, buckets)
        low, high = level_range(level, buckets)
        assert low <= delta < high
        for other in deltas:
            assert (low <= other < high) == (temporal_cost(other, buckets) == level)


@pytest.mark.parametrize("rows", [1, 7, 1000])
def test_host_rows_are_whole_cache_lines(rows):
    """A reprediction reads a host's cache state as one 64-byte line: the table starts on a
    line and its rows are 8 int64, zeroed."""
    hosts = compiled._cache_lines((rows, HOST_COLUMNS))
    assert hosts.ctypes.data % 64 == 0 and hosts.strides == (64, 8)
    assert hosts.shape == (rows, 8) and hosts.dtype == np.int64 and not hosts.any()


def test_a_compiled_replay_holds_at_most_80_bytes_per_vm():
    """Beyond its trace and lifetimes, a replay's memory that grows with its VMs is a few
    arrays indexed by VM (arrivals, predicted exits, exit stream, slots, decisions), none of
    them a copy of the trace's columns."""
    trace, pool = random_pool(3, num_vms=80_000, num_hosts=400)
    lifetimes = OracleLifetimes(trace.lifetime_s())
    options = dict(warmup_s=0, sample_period_s=86400)
    simulate(trace, pool, BestFit(), lifetimes, **options)  # compiled before measuring
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = simulate(trace, pool, BestFit(), lifetimes, **options)
        peak_bytes = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert (result.host_of_vm >= 0).all()
    assert peak_bytes / len(trace) <= 80


def test_a_replay_says_when_it_is_loading_the_compiled_engine(monkeypatch):
    """The progress line names the engine's loading while the first call runs, not a replay
    stuck at 0 %."""
    from pipelines.stages.placement.replays import describe_progress
    from policies.replay.simulator import ReplayProgress
    trace, pool = random_pool(0)
    seen = []
    advance = compiled.CompiledReplay.advance

    def watched(engine, until_us):
        seen.append((state.loading_engine, describe_progress(state, 0, 1)))
        advance(engine, until_us)

    monkeypatch.setattr(compiled.CompiledReplay, "advance", watched)
    monkeypatch.setattr(compiled, "loaded", lambda: False)  # as on a fresh process
    state = ReplayProgress()
    simulate(trace, pool, Nilas(), OracleLifetimes(trace.lifetime_s()), progress=state,
             warmup_s=3600)
    assert seen and all(loading for loading, _ in seen)
    assert "loading the compiled placement engine" in seen[0][1]
    assert not state.loading_engine and "% of the replay window" in describe_progress(
        state, 0, 1)
