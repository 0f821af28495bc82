"""The compiled replay engine (policies/replay/compiled/) makes the Python engine's
decisions and samples, exactly, on random pools: Best-Fit, NILAS and LAVA (its strict
ablation, given classes), oracle and exact-curve
lifetimes, warm-up VMs, both warm starts, refresh intervals 0 and 15 minutes, stranding; and
what it does not support replays in Python."""

import numpy as np
import pytest

from policies.best_fit import BestFit
from policies.la import LifetimeAlignment
from policies.lars import Lars
from policies.lava import Lava
from policies.nilas import Nilas
from policies.replay import compiled
from policies.replay.lifetime_source import NoisyOracleLifetimes, OracleLifetimes
from policies.replay.metrics import InflationMix
from policies.replay.pool import PoolSpec, PoolState
from policies.replay.simulator import BEST_FIT_UNTIL_METRICS, POLICY_FROM_START, simulate
from predictors.lifetime.curves import LifetimeCurves
from tests.test_placement_model_sources import small_model  # noqa: F401 (a fixture)
from tests.test_placement_simulator import random_pool

S = 1_000_000


def curves_for(small_model, trace, seed):  # noqa: F811
    """The small model's exact curves, each VM of `trace` given a random row's features."""
    model, features = small_model
    rows = np.random.default_rng(seed).integers(0, len(features), len(trace))
    return LifetimeCurves(model, features[rows])


def both_engines(trace, pool, make_policy, lifetimes, **options):
    """(python result, compiled result) of one replay."""
    return tuple(simulate(trace, pool, make_policy(), lifetimes, engine=engine, **options)
                 for engine in ("python", "auto"))


def assert_same(python, fast):
    np.testing.assert_array_equal(python.host_of_vm, fast.host_of_vm)
    assert python.timeseries.keys() == fast.timeseries.keys()
    for name, values in python.timeseries.items():
        np.testing.assert_array_equal(values, fast.timeseries[name], err_msg=name)
    assert python.summary.keys() == fast.summary.keys()
    for name, value in python.summary.items():
        np.testing.assert_equal(fast.summary[name], value, err_msg=name)


def lava_strict():
    return Lava(strict_recycling=True)


@pytest.mark.parametrize("make_policy", [BestFit, Nilas, Lava, lava_strict],
                         ids=["best_fit", "nilas", "lava", "lava_strict_recycling"])
@pytest.mark.parametrize("warm_start", [POLICY_FROM_START, BEST_FIT_UNTIL_METRICS])
@pytest.mark.parametrize("refresh_interval_s", [900.0, 0.0])
def test_compiled_engine_equals_python_on_random_pools(  # noqa: F811 (small_model)
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


def test_lava_with_given_classes_equals_python(small_model):  # noqa: F811
    for seed in range(3):
        trace, pool = random_pool(seed, num_vms=500, num_hosts=10)
        classes = np.random.default_rng(seed).integers(0, 4, len(trace))
        for lifetimes in (OracleLifetimes(trace.lifetime_s()),
                          curves_for(small_model, trace, seed)):
            python, fast = both_engines(
                trace, pool, lambda: Lava(vm_classes=classes), lifetimes,
                start_us=2 * 3600 * S, warmup_s=6 * 3600.0, sample_period_s=1800.0)
            assert_same(python, fast)


def test_a_take_over_after_the_end_still_refreshes_as_in_python(small_model):  # noqa: F811
    trace, pool = random_pool(3, num_vms=300, num_hosts=8)
    lifetimes = curves_for(small_model, trace, 3)
    python, fast = both_engines(trace, pool, Nilas, lifetimes, start_us=3600 * S,
                                warmup_s=30 * 86400.0, warm_start=BEST_FIT_UNTIL_METRICS)
    assert python.summary["prediction_batches"] > 0
    assert_same(python, fast)


def test_what_the_compiled_engine_does_not_support_replays_in_python(small_model):  # noqa: F811
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
