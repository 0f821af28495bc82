"""The shaping simulator's options for [Pace18]'s evaluation semantics (its simulator's
choices where the text is silent; docs/stages/shaping.md), each on a hand-made cluster with
exact allocations, kills and finish times: the memory failure model (CPU compressible),
growth granted only from free resources, elastic progress, and beta's uncertainty as a
standard deviation in absolute units; and the options through `fleetcast run`."""

import numpy as np
import pytest

from policies.shaping.cluster.cluster import Cluster
from policies.shaping.cluster.simulator import simulate
from policies.shaping.forecasters import ArimaUsageForecaster, OracleForecaster, forecast_workload
from policies.shaping.shapers.baseline import Baseline
from policies.shaping.shapers.optimistic import Optimistic
from policies.shaping.workload import Workload
from predictors.peak.arima import fit_forecast
from tests.helpers import loaded_tables_text, read_table, run_cli

INTERVAL = 4


def _fitted(policy, workload, interval=INTERVAL):
    return policy.fit(workload, forecast_workload(workload, OracleForecaster(
        interval_steps=interval)), interval)


def _cpu_jump_then_memory_jump():
    """One host of 10 CPUs / 100 memory; one application of one component requesting 4 x 4
    for 8 steps, using 1 x 1 except 3 CPUs at ages 4-7 and 3 memory at age 6. Optimistic,
    K1 = K2 = 0, with the forecasts of a flat series (they miss both jumps): it is allocated
    1 x 1 from admission."""
    flat = np.ones((8, 2))
    jumps = flat.copy()
    jumps[4:, 0] = 3.0
    jumps[6, 1] = 3.0

    def workload_of(series):
        return Workload.from_series(300, [0], [0], [1], [[4, 4]], [False], [series])

    workload = workload_of(jumps)
    policy = _fitted(Optimistic(), workload)
    policy.peak_ = _fitted(Optimistic(), workload_of(flat)).peak_
    return workload, Cluster.homogeneous(10, 100, 1), policy


def test_memory_failure_model_throttles_cpu_and_kills_on_memory():
    workload, cluster, policy = _cpu_jump_then_memory_jump()
    component = simulate(workload, cluster, policy, INTERVAL, failure_model="component",
                         unshaped_after_failures=1)
    # CPU 3 > 1 at age 4 kills it (4 steps lost); readmitted at step 5 unshaped, done at 13.
    assert list(component.lost_steps) == [4] and list(component.finish_step) == [13]
    memory = simulate(workload, cluster, policy, INTERVAL, failure_model="memory",
                      unshaped_after_failures=1)
    # CPU is throttled to its allocation of 1 at ages 4 and 5; memory 3 > 1 at age 6 kills
    # it (6 steps lost); readmitted at step 7 at its requests, it finishes at 15.
    assert list(memory.failures) == [1] and list(memory.failed_components) == [1]
    assert list(memory.lost_steps) == [6] and list(memory.finish_step) == [15]
    # CPU used: 6 x 1 (throttled) then 4 x 1 + 4 x 3 unshaped; allocated 6 x 1 + 8 x 4.
    np.testing.assert_array_equal(memory.used[:, 0], [6 + 16])
    np.testing.assert_array_equal(memory.allocated[:, 0], [6 + 32])
    host = simulate(workload, cluster, policy, INTERVAL, failure_model="host")
    assert host.failures.sum() == 0 and list(host.finish_step) == [8]


def _two_growing_memory_apps():
    """One host of 10 CPUs / 10 memory. A (step 0) and B (step 1) request 1 CPU x 8 memory
    and use 0.5 CPU and 2 memory for 8 steps, then 8 memory for 12 steps. Optimistic with
    the oracle, K1 = K2 = 0: both are admitted on their requests and allocated 2 memory (the
    peak of their first interval); at the shaping step 8 both want 8 (A from age 8, B from
    age 8 at step 9)."""
    usage = np.column_stack([np.full(20, 0.5), np.r_[np.full(8, 2.0), np.full(12, 8.0)]])
    workload = Workload.from_series(300, [0, 1], [0, 0], [1, 1], [[1, 8], [1, 8]],
                                    [False, False], [usage, usage])
    return workload, Cluster.homogeneous(10, 10, 1), _fitted(Optimistic(), workload)


def test_growth_if_free_grants_in_component_order_and_the_short_one_is_killed():
    workload, cluster, policy = _two_growing_memory_apps()
    result = simulate(workload, cluster, policy, INTERVAL, failure_model="memory",
                      unshaped_after_failures=1, growth="if_free")
    # Step 8: 10 - 2 - 2 = 6 memory free: A's growth of 6 is granted, B's is not (B keeps
    # 2). Step 9: B uses 8 > 2 and is killed with 8 steps done; it waits for A's 8 memory
    # (A done at 20) and runs unshaped, at its requests, from 20 to 40.
    assert list(result.failures) == [0, 1] and list(result.lost_steps) == [0, 8]
    assert list(result.start_step) == [0, 1] and list(result.finish_step) == [20, 40]
    # Memory allocated: A 8 x 2 + 12 x 8; B 8 x 2 (ages 0-7), then 20 x 8 unshaped.
    np.testing.assert_array_equal(result.allocated[:, 1], [16 + 96, 16 + 160])


def test_growth_always_overcommits_the_host_which_kills_on_memory():
    workload, cluster, policy = _two_growing_memory_apps()
    result = simulate(workload, cluster, policy, INTERVAL, failure_model="memory",
                      unshaped_after_failures=1, growth="always")
    # Both are granted 8 at step 8 (16 of 10 allocated); at step 9 they use 8 + 8 > 10
    # memory and the host kills one of them (same priority: the seeded order).
    assert result.failures.sum() == 1 and result.failed_components.sum() == 1
    assert sorted(result.lost_steps) == [0, 8] or sorted(result.lost_steps) == [0, 9]


def _elastic_application():
    """One host of 6 CPUs. B (app 0): one core component of 2 CPUs for 4 steps. A (app 1): a
    core and two elastic components of 2 CPUs, 10 steps each, all using 1 CPU except the core
    one's 1.5 at age 9. Both are submitted at step 0; the baseline allocates the requests, so
    A's second elastic component waits for B's 2 CPUs."""
    core = np.column_stack([np.r_[np.ones(9), 1.5], np.ones(10)])
    flat = np.ones((10, 2))
    workload = Workload.from_series(300, [0, 0], [0, 0], [1, 3], [[2, 1]] * 4,
                                    [False, False, True, True],
                                    [np.ones((4, 2)), core, flat, flat])
    return workload, Cluster.homogeneous(6, 10, 1), Baseline().fit(workload)


def test_elastic_progress_speeds_an_application_up_with_its_running_components():
    workload, cluster, policy = _elastic_application()
    fixed = simulate(workload, cluster, policy, INTERVAL)
    # Fixed lengths: A ends with its core component at step 10.
    assert list(fixed.finish_step) == [4, 10]
    progress = simulate(workload, cluster, policy, INTERVAL, elastic_progress=True)
    # A's work is 3 x 10 component-steps: 2 a step for steps 0-3 (8), then 3 a step from
    # step 4, when B's CPUs free the second elastic component: 30 reached in step 11.
    assert list(progress.finish_step) == [4, 12]
    assert progress.component_steps == 4 + 12 + 12 + 8
    # The core component replays its series from age 10: ages 0-9, 0, 1 (1.5 once).
    np.testing.assert_array_equal(progress.used[:, 0], [4, 9 + 1.5 + 2 + 12 + 8])


def test_elastic_progress_takes_back_a_killed_elastic_components_work():
    """One host of 100 CPUs, the component failure model. One application: a core and an
    elastic component of 4 x 4 for 10 steps, using 1 x 1 except the elastic one's 3 CPUs at
    age 3; optimistic, K1 = K2 = 0, with the forecasts of flat series: both allocated 1 x 1.
    Its work is 2 x 10 = 20 component-steps."""
    flat = np.ones((10, 2))
    jump = flat.copy()
    jump[3, 0] = 3.0

    def workload_of(series):
        return Workload.from_series(300, [0], [0], [2], [[4, 4]] * 2, [False, True], series)

    workload = workload_of([flat, jump])
    policy = _fitted(Optimistic(), workload)
    policy.peak_ = _fitted(Optimistic(), workload_of([flat, flat])).peak_
    cluster = Cluster.homogeneous(100, 100, 1)
    fixed = simulate(workload, cluster, policy, INTERVAL, failure_model="component")
    assert list(fixed.finish_step) == [10]  # the core component's length
    result = simulate(workload, cluster, policy, INTERVAL, failure_model="component",
                      elastic_progress=True)
    # Every 4 steps the elastic component runs ages 0-2 (+2 x 3) and is killed at age 3
    # (-3 taken back, +1 for the core one): +4 by steps 3, 7, 11 and 15, then 18 and 20 in
    # steps 16 and 17. Killed 4 times, 3 steps lost each; the application never fails.
    assert list(result.finish_step) == [18]
    assert list(result.failures) == [0] and list(result.failed_components) == [4]
    assert list(result.lost_steps) == [12]


def test_std_uncertainty_is_k2_times_the_absolute_forecasts_standard_deviation():
    """With uncertainty 'std', beta's dynamic term K2 x request x std(ratio) is K2 x the
    standard deviation of the same ARIMA fitted on the usage itself (request 4)."""
    rng = np.random.default_rng(0)
    usage = np.column_stack([4 * np.clip(0.5 + np.cumsum(rng.normal(0, 0.05, 30)), 0, 1),
                             np.full(30, 2.0)])
    workload = Workload.from_series(300, [0], [0], [1], [[4, 4]], [False], [usage])
    forecaster = ArimaUsageForecaster(interval_steps=1, uncertainty="std")
    forecasts = forecast_workload(workload, forecaster)
    targets = [Optimistic(k1=0.0, k2=k2).fit(workload, forecasts, 1).targets(
        np.zeros(18, dtype=np.int64), np.arange(12, 30))[:, 0] for k2 in (0.0, 2.0)]
    absolute = np.array([np.sqrt(fit_forecast(usage[None, age - 10:age, 0], 1)[1][0, 0])
                         for age in range(12, 30)])
    below = targets[1] < 4  # the cap at the request hides the term
    assert below.sum() >= 10
    np.testing.assert_allclose((targets[1] - targets[0])[below], 2 * absolute[below],
                               rtol=1e-9)


@pytest.mark.parametrize("growth", ["sometimes"])
def test_unknown_growth_is_refused(growth):
    workload, cluster, policy = _two_growing_memory_apps()
    with pytest.raises(ValueError, match="growth"):
        simulate(workload, cluster, policy, INTERVAL, growth=growth)


def _growing_memory_tables(tmp_path):
    """_two_growing_memory_apps as canonical tables: collections 1 (step 0) and 2 (step 1),
    one instance each requesting 1 CPU x 8 memory, 20 five-minute windows of max 0.5 CPU and
    max memory 2 (8 windows) then 8 (12 windows)."""
    step_us = 300 * 1_000_000
    instances, usage = [], []
    for collection, start in ((1, 0), (2, 1)):
        instances.append({"instance_id": f"{collection}:0", "collection_id": collection,
                          "instance_index": 0, "start_time": start * step_us,
                          "end_time": (start + 20) * step_us, "cpu_request": 1.0,
                          "memory_request": 8.0, "priority": 0})
        usage += [{"instance_id": f"{collection}:0", "start_time": (start + s) * step_us,
                   "end_time": (start + s + 1) * step_us, "machine_id": 1,
                   "cpu_limit": 1.0, "memory_limit": 8.0, "max_cpu": 0.5,
                   "max_memory": 2.0 if s < 8 else 8.0} for s in range(20)]
    return loaded_tables_text(tmp_path, {"instances": instances, "usage": usage})


@pytest.mark.parametrize("options, failures, finish_s", [
    # [Pace18]'s simulator's semantics: B's growth is refused, B is killed by its memory limit
    # at step 9 and runs unshaped after A (turnarounds: A 20 steps, B 40 - 1).
    ("failure_model: MEMORY_LIMIT growth: IF_FREE", [0, 1], [20 * 300, 39 * 300]),
    # Growth always granted and the host kill: one of the two fails (the seeded order).
    ("failure_model: MEMORY_LIMIT", None, None)])
def test_the_semantics_options_through_the_cli(tmp_path, options, failures, finish_s):
    config = tmp_path / "semantics.textproto"
    config.write_text(f'name: "semantics"\n{_growing_memory_tables(tmp_path)}\nshaping {{\n'
                      "  policy: BASELINE policy: OPTIMISTIC forecaster: ORACLE k1: 0 k2: 0\n"
                      "  shaping_interval_steps: 4 host_shape { cpu: 10 memory: 10 } "
                      f"host_count: 1\n  {options}\n}}\n")
    assert run_cli(config, tmp_path / "out") == 0
    apps = read_table(tmp_path / "out" / "shaping_applications")
    optimistic = apps[apps.policy == "optimistic"].sort_values("app_id")
    if failures is None:
        assert optimistic.failures.sum() == 1
    else:
        assert list(optimistic.failures) == failures
        assert list(optimistic.turnaround_s) == finish_s
    baseline = apps[apps.policy == "baseline"].sort_values("app_id")
    assert list(baseline.turnaround_s) == [20 * 300, 39 * 300] and baseline.failures.sum() == 0


def test_elastic_progress_oracle_forecasts_the_replayed_series():
    """elastic_progress replays a series cyclically, so the oracle's peak over an interval
    that crosses the series' end holds its next start. One host of 4 x 4; one application:
    a core component of 4 x 4 for 6 steps using 1 x 1 except 3 memory at age 0, and an
    elastic one of 8 x 8 that never fits, so the core one does the 2 x 6 steps of work alone
    (series ages 0-5, 0-5). Oracle, K1 = K2 = 0, shaping every 4 steps, memory failure
    model: at step 4 (age 4) the allocation is the peak over ages 4, 5, 0, 1: 3."""
    core = np.column_stack([np.ones(6), np.r_[3.0, np.ones(5)]])
    workload = Workload.from_series(300, [0], [0], [2], [[4, 4], [8, 8]], [False, True],
                                    [core, np.ones((6, 2))])
    cluster = Cluster.homogeneous(4, 4, 1)
    forecaster = OracleForecaster(interval_steps=INTERVAL, cyclic=True)
    policy = Optimistic().fit(workload, forecast_workload(workload, forecaster), INTERVAL)
    result = simulate(workload, cluster, policy, INTERVAL, failure_model="memory",
                      elastic_progress=True)
    assert list(result.failed_components) == [0] and list(result.finish_step) == [12]
    np.testing.assert_array_equal(policy.targets(np.zeros(6, dtype=np.int64),
                                                 np.arange(6))[:, 1], [3, 1, 1, 3, 3, 3])
    # Forecasts that end with the series (no replay) leave the step-6 wrap at 1: killed.
    ending = OracleForecaster(interval_steps=INTERVAL)
    policy = Optimistic().fit(workload, forecast_workload(workload, ending), INTERVAL)
    result = simulate(workload, cluster, policy, INTERVAL, failure_model="memory",
                      elastic_progress=True, max_steps=7)
    assert list(result.failed_components) == [1]
