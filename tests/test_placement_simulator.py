"""The placement replay: invariants, fast == reference decisions, warm-up, repredictions."""

import numpy as np
import pytest

from fleetcast_testing.reference.placement_simulator import simulate_reference
from policies.best_fit import BestFit
from policies.class_first_fit import ClassFirstFit
from policies.la import LA_MULTI_CLASS_THRESHOLDS_S, LifetimeAlignment
from policies.lars import Lars
from policies.lava import Lava
from policies.nilas import Nilas
from policies.quantized_best_fit import QuantizedBestFit
from policies.replay.lifetime_source import NoisyOracleLifetimes, OracleLifetimes
from policies.replay.pool import PoolSpec, peak_demand
from policies.replay.simulator import (
    BEST_FIT_UNTIL_METRICS,
    FAILED,
    NOT_REPLAYED,
    PlacementTrace,
    simulate,
)
from tests.helpers import check_replay, random_pool

S = 1_000_000
HOUR = 3600 * S

# (fast policy factory, reference policy name, reference options)
POLICIES = [
    (BestFit, "best_fit", {}),
    (QuantizedBestFit, "pbfr", {}),
    (lambda: QuantizedBestFit(long_lived_num_buckets=5), "pbfr", {"long_lived_num_buckets": 5}),
    (LifetimeAlignment, "la", {}),
    (lambda: LifetimeAlignment(LA_MULTI_CLASS_THRESHOLDS_S), "la",
     {"la_thresholds_s": LA_MULTI_CLASS_THRESHOLDS_S}),
    (lambda: ClassFirstFit(600), "class_first_fit", {"time_unit_s": 600}),
    (Nilas, "nilas", {}),
    (Lava, "lava", {}),
    (lambda: Lava(strict_recycling=True), "lava_strict_recycling", {}),
]
POLICY_IDS = ["best_fit", "pbfr", "dpbfr", "la_binary", "la", "class_first_fit", "nilas",
              "lava", "lava_strict_recycling"]



def sources(trace, seed):
    return {"oracle": OracleLifetimes(trace.lifetime_s()),
            "noisy": NoisyOracleLifetimes(trace.lifetime_s(), accuracy=0.6, seed=seed)}


@pytest.mark.parametrize("make_policy, reference, options", POLICIES, ids=POLICY_IDS)
@pytest.mark.parametrize("source", ["oracle", "noisy"])
@pytest.mark.parametrize("zero_lifetime_fraction", [0.0, 0.15])
def test_fast_replay_makes_the_reference_decisions(make_policy, reference, options, source,
                                                  zero_lifetime_fraction):
    for seed in range(3):
        trace, pool = random_pool(seed, zero_lifetime_fraction=zero_lifetime_fraction)
        lifetimes = sources(trace, seed)[source]
        fast = simulate(trace, pool, make_policy(), lifetimes, start_us=0, warmup_s=0,
                        refresh_interval_s=0, sample_period_s=86400).host_of_vm
        expected = simulate_reference(trace, pool, reference, lifetimes, start_us=0, **options)
        np.testing.assert_array_equal(fast, expected)
        assert len(np.unique(fast[fast >= 0])) > 2



@pytest.mark.parametrize("make_policy", [p[0] for p in POLICIES], ids=POLICY_IDS)
def test_capacity_holds_and_every_arrival_is_placed_or_failed(make_policy):
    trace, pool = random_pool(11, num_vms=400, num_hosts=6)
    end_us = int(trace.exit_us.max()) + S
    policy = make_policy()
    result = simulate(trace, pool, policy, sources(trace, 11)["noisy"], start_us=0,
                      end_us=end_us, warmup_s=0, sample_period_s=end_us / S - 1)
    host_of_vm = result.host_of_vm
    # Class First-Fit keeps classes apart and the strict-recycling ablation's recycling hosts
    # refuse VMs of their class or higher: both may fail a VM that fits some host; LAVA
    # (Algorithm 3) may not.
    keeps_apart = isinstance(policy, ClassFirstFit) or getattr(policy, "strict_recycling",
                                                                False)
    check_replay(trace, pool, host_of_vm, 0, end_us, not keeps_apart)
    replayed = trace.arrival_us >= 0
    assert np.all(host_of_vm[replayed] != NOT_REPLAYED)
    assert result.summary["failed_placements"] == np.sum(host_of_vm[replayed] == FAILED) > 0
    assert result.summary["placements"] == np.sum(host_of_vm[replayed] >= 0)
    # The last sample is after every exit: exits freed exactly what was placed.
    series = result.timeseries
    assert series["time_us"][-1] >= trace.exit_us.max()
    assert series["cpu_allocated_pct"][-1] == 0.0 and series["memory_allocated_pct"][-1] == 0.0
    assert series["empty_hosts"][-1] == pool.num_hosts and series["live_vms"][-1] == 0


def test_warm_up_vms_are_placed_by_best_fit_and_metrics_start_after_warm_up():
    trace, pool = random_pool(5)
    alive = (trace.arrival_us < 0) & (trace.exit_us > 0)
    assert alive.sum() > 5
    lifetimes = OracleLifetimes(trace.lifetime_s())
    runs = {policy.name: simulate(trace, pool, policy, lifetimes, start_us=0, warmup_s=3600,
                                  sample_period_s=600)
            for policy in (BestFit(), Nilas(), Lava())}
    for result in runs.values():
        np.testing.assert_array_equal(result.host_of_vm[alive], runs["best_fit"].host_of_vm[alive])
        assert np.all(result.host_of_vm[(trace.arrival_us < 0) & ~alive] == NOT_REPLAYED)
        assert result.timeseries["time_us"][0] == HOUR
        assert np.all(np.diff(result.timeseries["time_us"]) == 600 * S)
        assert result.summary["warmup_vms"] == alive.sum()


def crafted_warm_start_pool():
    """Two hosts of 10; VM 0 (6, 1 h) and VM 1 (5, 10 h) open hosts 0 and 1. VM 2 (3, 5 h):
    Best-Fit takes the fuller host 0, NILAS host 1 (same exit). VM 3 (1, 10 h): Best-Fit
    takes host 0 (1 free) if VM 2 is there; NILAS takes host 1 (host 0 exits sooner)."""
    arrival_s = np.array([0, 10, 20, 40])
    lifetime_s = np.array([3600, 36000, 18000, 36000])
    trace = PlacementTrace(arrival_s * S, (arrival_s + lifetime_s) * S,
                           np.repeat([[6.0], [5.0], [3.0], [1.0]], 2, axis=1))
    return trace, PoolSpec.from_shape((10.0, 10.0), 2)


@pytest.mark.parametrize("policy, warm_start, expected", [
    (BestFit, {}, [0, 1, 0, 0]),
    (BestFit, {"warm_start": BEST_FIT_UNTIL_METRICS}, [0, 1, 0, 0]),
    (Nilas, {}, [0, 1, 1, 1]),
    # Best-Fit places VM 2 (before the metrics start at 30 s), NILAS then places VM 3.
    (Nilas, {"warm_start": BEST_FIT_UNTIL_METRICS}, [0, 1, 0, 1]),
])
def test_warm_start_places_by_best_fit_until_metrics_then_the_policy(policy, warm_start,
                                                                    expected):
    trace, pool = crafted_warm_start_pool()
    result = simulate(trace, pool, policy(), OracleLifetimes(trace.lifetime_s()), start_us=0,
                      end_us=90 * S, warmup_s=30, sample_period_s=60, **warm_start)
    np.testing.assert_array_equal(result.host_of_vm, expected)
    assert result.policy == policy.name
    assert result.summary["warm_start_vms"] == (3 if warm_start else 0)
    assert result.summary["placements"] == 1 and result.timeseries["time_us"][0] == 30 * S


@pytest.mark.parametrize("make_policy", [Nilas, Lava, LifetimeAlignment])
def test_warm_start_arrivals_before_metrics_land_where_best_fit_puts_them(make_policy):
    # Starts empty (no VM before 0): only the warm start decides the first hours.
    trace, pool = random_pool(5, num_vms=400, num_hosts=16)
    trace = PlacementTrace(trace.arrival_us - trace.arrival_us.min(),
                           trace.exit_us - trace.arrival_us.min(), trace.demand)
    lifetimes = OracleLifetimes(trace.lifetime_s())
    switch_us = 4 * HOUR
    before = trace.arrival_us < switch_us
    runs = {warm_start: simulate(trace, pool, make_policy(), lifetimes, warmup_s=4 * 3600,
                                 sample_period_s=600, warm_start=warm_start)
            for warm_start in ("policy_from_start", BEST_FIT_UNTIL_METRICS)}
    best_fit = simulate(trace, pool, BestFit(), lifetimes, warmup_s=4 * 3600,
                        sample_period_s=600).host_of_vm
    warm = runs[BEST_FIT_UNTIL_METRICS]
    np.testing.assert_array_equal(warm.host_of_vm[before], best_fit[before])
    assert warm.summary["warm_start_vms"] == before.sum() > 50
    # The test can fail: from the start, the policy places those arrivals differently; and
    # after the switch it decides, not Best-Fit.
    assert np.any(runs["policy_from_start"].host_of_vm[before] != best_fit[before])
    assert np.any(warm.host_of_vm[~before] != best_fit[~before])
    check_replay(trace, pool, warm.host_of_vm, 0, int(trace.arrival_us.max()))
    assert warm.timeseries["time_us"][0] == switch_us
    for result in runs.values():
        assert result.summary["placements"] + result.summary["failed_placements"] == np.sum(
            ~before & (trace.arrival_us <= warm.timeseries["time_us"][-1]))


def test_warm_start_binds_lars_and_a_repredicting_source_at_the_switch():
    trace, pool = random_pool(6, num_vms=400)
    switch_us = 3 * HOUR
    source = CountingSource(trace.lifetime_s())
    lars = Lars(50, check_period_s=600)
    result = simulate(trace, pool, Nilas(), source, start_us=0, warmup_s=3 * 3600,
                      refresh_interval_s=0, sample_period_s=600, lars=lars,
                      warm_start=BEST_FIT_UNTIL_METRICS)
    assert lars.drains and min(drain.time_us for drain in lars.drains) >= switch_us
    # Every arrival is predicted at uptime 0, and one batch at the switch repredicts every
    # VM then placed (warm-up and warm start), at its uptime then.
    assert np.all(source.calls[1][1] == 0) and len(source.calls[1][0]) == np.sum(
        trace.arrival_us >= 0)
    alive = ((trace.arrival_us < switch_us) & (trace.exit_us > switch_us)
             & (result.host_of_vm >= 0))
    vms, uptime_s = next((vms, uptime) for vms, uptime in source.calls
                         if len(vms) and np.all(uptime == (switch_us - trace.arrival_us[vms]) / S))
    np.testing.assert_array_equal(np.sort(vms), np.flatnonzero(alive))


def test_replay_is_deterministic():
    trace, pool = random_pool(8)
    runs = [simulate(trace, pool, Lava(), NoisyOracleLifetimes(trace.lifetime_s(), 0.5, 3),
                     warmup_s=0) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].host_of_vm, runs[1].host_of_vm)
    for name, values in runs[0].timeseries.items():
        np.testing.assert_array_equal(values, runs[1].timeseries[name])


def test_censored_vms_exit_at_the_trace_end_so_never_within_the_replay():
    trace = PlacementTrace.from_arrays([0, 10 * S, 20 * S], [5 * S, np.nan, np.nan],
                                       np.ones((3, 2)), end_us=100 * S)
    np.testing.assert_array_equal(trace.exit_us, [5 * S, 100 * S, 100 * S])
    result = simulate(trace, PoolSpec.from_shape((4.0, 4.0), 2), BestFit(),
                      OracleLifetimes(trace.lifetime_s()), end_us=99 * S, warmup_s=0,
                      sample_period_s=30)
    assert list(result.timeseries["live_vms"]) == [1, 2, 2, 2]


class CountingSource:
    """Repredicting source that records every call: remaining = fixed lifetime - uptime."""

    repredicts = True

    def __init__(self, lifetime_s):
        self.lifetime_s = np.asarray(lifetime_s, float)
        self.calls = []

    def predict_remaining_s(self, vm_index, uptime_s):
        self.calls.append((np.array(vm_index), np.array(uptime_s)))
        return np.maximum(self.lifetime_s[vm_index] - uptime_s, 0.0)


class ExitReadingBestFit(BestFit):
    """Best-Fit's decisions, repredicted as for a policy that reads exit estimates."""

    uses_exit_estimates = True


@pytest.mark.parametrize("predicted_lifetime_0_s, refresh_interval_s, batch_at_2h", [
    (36000, 36000, [1, 2]),        # host 1 changed (VM 2 placed at 120 s)
    (3600, 36000, [0, 1, 2]),      # ... and host 0's estimate (1h) has passed
    (36000, 1800, [0, 1, 2]),      # ... and host 0's last reprediction is over 30 min old
])
def test_host_exit_cache_repredicts_changed_expired_and_due_hosts(
        predicted_lifetime_0_s, refresh_interval_s, batch_at_2h):
    # VM 0 on host 0; VMs 1 and 2 on host 1; VM 3 (60 s) on host 0 at 2h; VM 4 at 2h01.
    arrival_s = np.array([0, 60, 120, 7200, 7260])
    lifetime_s = np.array([36000, 36000, 36000, 60, 60])
    trace = PlacementTrace(arrival_s * S, (arrival_s + lifetime_s) * S,
                           np.array([[6.0, 6.0], [5.0, 5.0], [4.5, 4.5], [1.0, 1.0], [1.0, 1.0]]))
    source = CountingSource([predicted_lifetime_0_s, 36000, 36000, 60, 60])
    result = simulate(trace, PoolSpec.from_shape((10.0, 10.0), 2), ExitReadingBestFit(), source,
                      warmup_s=0, refresh_interval_s=refresh_interval_s, sample_period_s=86400)
    np.testing.assert_array_equal(result.host_of_vm, [0, 1, 1, 0, 0])
    batches = [sorted(vms.tolist()) for vms, _ in source.calls]
    # Every arrival at uptime 0 in one batch; then before each decision, the hosts due.
    assert batches == [[0, 1, 2, 3, 4], [0], [1], batch_at_2h, [0]]
    np.testing.assert_array_equal(source.calls[3][1], [7200, 7140, 7080][-len(batch_at_2h):])
    assert result.summary["prediction_batches"] == 4


def test_one_shot_policy_predicts_at_arrival_only():
    trace, pool = random_pool(2, num_vms=100)
    source = CountingSource(trace.lifetime_s())
    simulate(trace, pool, LifetimeAlignment(), source, start_us=0, warmup_s=0,
             refresh_interval_s=0)
    assert all(np.all(uptime == 0) for _, uptime in source.calls)


def test_pool_sized_from_peak_demand():
    arrival = np.array([0, 5, 10]) * S
    exit_ = np.array([10, 15, 20]) * S
    demand = np.array([[4.0, 1.0], [4.0, 1.0], [4.0, 1.0]])
    np.testing.assert_array_equal(peak_demand(arrival, exit_, demand), [8.0, 2.0])
    assert PoolSpec.from_peak_demand((10.0, 10.0), arrival, exit_, demand, 0.8).num_hosts == 1
    assert PoolSpec.from_peak_demand((10.0, 10.0), arrival, exit_, demand, 0.5).num_hosts == 2


@pytest.mark.parametrize("arrival, exit_, demand, message", [
    ([0, 10], [5, 5], [[1, 1], [1, 1]], "exits before"),
    ([0], [5], [[-1, 1]], "non-negative"),
    ([0, 1], [5], [[1, 1], [1, 1]], "need arrival_us"),
])
def test_bad_traces_are_rejected(arrival, exit_, demand, message):
    with pytest.raises(ValueError, match=message):
        PlacementTrace(np.array(arrival), np.array(exit_), np.array(demand, float))
