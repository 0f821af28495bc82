"""Semantics of the shaping simulator and its policies ([Pace18] §III-B, Algorithm 1) on
hand-made clusters with known answers, and the vectorized step against the per-component
reference on random workloads."""

import numpy as np
import pytest

from fleetcast_testing.reference.shaping_simulator import algorithm_1_reference, simulate_reference
from fleetcast_testing.shaping_workloads import random_workload
from policies.shaping.cluster import simulator as simulator_module
from policies.shaping.cluster.cluster import Cluster
from policies.shaping.cluster.simulator import Simulation, simulate
from policies.shaping.forecasters import OracleForecaster, forecast_workload
from policies.shaping.shapers.base import RunningComponents
from policies.shaping.shapers.baseline import Baseline
from policies.shaping.shapers.optimistic import Optimistic
from policies.shaping.shapers.pessimistic import Pessimistic, algorithm_1
from policies.shaping.workload import Workload

INTERVAL = 4


def _fitted(policy, workload, interval=INTERVAL):
    return policy.fit(workload, forecast_workload(workload, OracleForecaster()), interval)


def _two_growing_apps():
    """One host of 10 CPUs. A (submitted at 0) and B (at 1) request 8 CPUs each and use 2
    for 8 steps, then 8 for 12 steps. Baseline: B waits for A. Shaped with the oracle: A is
    allocated 2 on admission (its peak over 4 steps), so B is admitted at step 1, also at 2;
    at the shaping step 8 both need 8 (A from step 8, B from step 9)."""
    usage = np.column_stack([np.r_[np.full(8, 2.0), np.full(12, 8.0)], np.full(20, 0.5)])
    return (Workload.from_series(300, [0, 1], [0, 0], [1, 1], [[8, 1], [8, 1]],
                                 [False, False], [usage, usage]),
            Cluster.homogeneous(10, 100, 1))


def test_baseline_queues_and_never_preempts():
    workload, cluster = _two_growing_apps()
    result = simulate(workload, cluster, _fitted(Baseline(), workload), INTERVAL)
    assert list(result.start_step) == [0, 20]
    assert list(result.finish_step) == [20, 40]
    assert result.failures.sum() == result.preemptions.sum() == result.lost_steps.sum() == 0


def test_optimistic_overloads_the_host_and_fails_an_application():
    workload, cluster = _two_growing_apps()
    result = simulate(workload, cluster, _fitted(Optimistic(), workload), INTERVAL)
    # Step 9: 8 + 8 CPUs used on 10: the OS kills one of the two (same priority: random).
    assert result.failures.sum() == 1
    assert result.preemptions.sum() == 0
    assert result.lost_steps.sum() in (8, 9)  # B (age 8) or A (age 9) loses its work


def test_pessimistic_preempts_the_later_application_which_loses_its_work():
    workload, cluster = _two_growing_apps()
    result = simulate(workload, cluster, _fitted(Pessimistic(), workload), INTERVAL)
    assert list(result.failures) == [0, 0]
    # Algorithm 1 at step 8: A (first in FIFO) keeps 8, B's core no longer fits: B is
    # preempted with 7 steps done, resubmitted, and restarts from zero when A finishes.
    assert list(result.preemptions) == [0, 1]
    assert list(result.lost_steps) == [0, 7]
    assert list(result.finish_step) == [20, 40]
    assert list(result.start_step) == [0, 1]


def test_component_failure_model_fails_a_component_over_its_own_allocation():
    """One host of 100 CPUs (never overloaded). App 0 (at step 0): a core and an elastic
    component; app 1 (at step 10): two core components; all request 4 and use 1 for 8
    steps, except app 0's elastic component, which uses 3 at age 5. Optimistic, K1 = K2 =
    0, with the forecasts of the flat series (a forecast that misses the jump): every
    allocation is 1, so the elastic component uses 3 > 1 at age 5."""
    flat = np.ones((8, 2))
    jump = flat.copy()
    jump[5, 0] = 3.0

    def workload_of(series):
        return Workload.from_series(300, [0, 10], [0, 0], [2, 2], [[4, 4]] * 4,
                                    [False, True, False, False], series)

    workload = workload_of([flat, jump, flat, flat])
    policy = _fitted(Optimistic(), workload)
    policy.peak_ = _fitted(Optimistic(), workload_of([flat] * 4)).peak_
    cluster = Cluster.homogeneous(100, 100, 1)
    host = simulate(workload, cluster, policy, INTERVAL)
    assert host.failures.sum() == host.failed_components.sum() == 0  # 4 of 100 CPUs used
    component = simulate(workload, cluster, policy, INTERVAL, failure_model="component")
    # The elastic component alone fails at step 5 (5 steps of work lost) and restarts from
    # zero; its application finishes with its core component; app 1 is untouched.
    assert list(component.failures) == [0, 0]
    assert list(component.failed_components) == [1, 0]
    assert list(component.lost_steps) == [5, 0]
    assert list(component.finish_step) == [8, 18]
    with pytest.raises(ValueError, match="failure_model"):
        simulate(workload, cluster, policy, INTERVAL, failure_model="rack")


def _jump_then_flat():
    """One host of 5 CPUs, the component failure model, optimistic with K1 = K2 = 0 and the
    forecasts of flat series (they miss A's jump). A (step 0) and B (step 1) request 4 x 4
    and use 1 x 1 for 8 steps, except A's CPU: 3 at age 5. Both are allocated 1 x 1, so B
    is admitted at step 1 beside A (4 + 4 > 5 would not fit on the requests)."""
    flat = np.ones((8, 2))
    jump = flat.copy()
    jump[5, 0] = 3.0

    def workload_of(series):
        return Workload.from_series(300, [0, 1], [0, 0], [1, 1], [[4, 4]] * 2,
                                    [False, False], series)

    workload = workload_of([jump, flat])
    policy = _fitted(Optimistic(), workload)
    policy.peak_ = _fitted(Optimistic(), workload_of([flat, flat])).peak_
    return workload, Cluster.homogeneous(5, 100, 1), policy


def test_a_failed_application_finishes_unshaped_on_its_retry():
    workload, cluster, policy = _jump_then_flat()
    result = simulate(workload, cluster, policy, INTERVAL, failure_model="component",
                      unshaped_after_failures=1)
    # A uses 3 > 1 at step 5 and fails with 5 steps done; it is readmitted at step 6 on
    # its request, allocated 4 x 4 (1 + 4 <= 5 beside B), also at the shaping steps 8 and
    # 12, and finishes 8 steps later. B runs shaped from step 1 to 9.
    assert list(result.failures) == [1, 0]
    assert list(result.lost_steps) == [5, 0]
    assert list(result.start_step) == [0, 1]
    assert list(result.finish_step) == [14, 9]
    np.testing.assert_allclose(result.allocated[0], [5 * 1 + 8 * 4] * 2)
    np.testing.assert_allclose(result.allocated[1], [8, 8])


def test_without_the_retry_rule_the_failure_replays_forever():
    workload, cluster, policy = _jump_then_flat()
    result = simulate(workload, cluster, policy, INTERVAL, max_steps=100,
                      failure_model="component")
    # Every attempt is shaped again and fails at age 5: admitted at steps 0, 6, 12, ...,
    # failed at 5, 11, 17, ..., 95 (the run ends at step 100).
    assert list(result.finish_step) == [-1, 9]
    assert list(result.failures) == [16, 0]
    assert list(result.lost_steps) == [80, 0]


@pytest.mark.parametrize("policy_class", [Optimistic, Pessimistic])
def test_the_retry_rule_ends_the_livelock_on_random_workloads(policy_class):
    """Forecasts of other series (a forecaster that errs both ways): under the component
    model the old rule leaves applications unfinished at the end of the run; with the
    retry rule every application finishes, failing at most once."""
    rng = np.random.default_rng(5)
    workload = random_workload(60, rng, submit_span=30)
    policy = _fitted(policy_class(k1=0.05), workload)
    policy.peak_ = np.roll(policy.peak_, 7, axis=0)
    cluster = Cluster.homogeneous(16, 64, 3)
    kwargs = dict(max_steps=3000, failure_model="component")
    old = simulate(workload, cluster, policy, INTERVAL, **kwargs)
    new = simulate(workload, cluster, policy, INTERVAL, unshaped_after_failures=1, **kwargs)
    assert np.any(old.finish_step < 0)
    assert np.all(new.finish_step >= 0)
    assert new.failures.max() == 1 and new.failures.sum() > 0
    assert new.steps < 3000


def test_the_retry_rule_needs_the_set_number_of_failures():
    workload, cluster, policy = _jump_then_flat()
    result = simulate(workload, cluster, policy, INTERVAL, failure_model="component",
                      unshaped_after_failures=3)
    # Fails at 5, 11 and 17 (shaped), then runs unshaped from step 18 to 26.
    assert list(result.failures) == [3, 0]
    assert list(result.finish_step) == [26, 9]


def test_algorithm_1_order_core_first_youngest_elastic_preempted_fifo():
    # One host of 10 x 10. App 0: core 4, elastic components alive 5 and 1 steps (3 each);
    # app 1: core 4; app 2: core 2.
    running = RunningComponents(
        component=np.array([0, 1, 2, 3, 4]), host=np.zeros(5, dtype=np.int64),
        app=np.array([0, 0, 0, 1, 2]), elastic=np.array([False, True, True, False, False]),
        age=np.array([9, 5, 1, 3, 2]), app_order=np.array([0, 0, 0, 1, 2]),
        target=np.array([[4, 1], [3, 1], [3, 1], [4, 1], [2, 1]], dtype=np.float64),
        capacity=np.array([[10.0, 10.0]]))
    apps, components = algorithm_1(running)
    # 10 - 4 (core) - 3 (older elastic) = 3; the younger elastic would leave 0 (<= 0):
    # preempted alone. App 1's core needs 4 of 3: fully preempted. App 2 fits in 3.
    assert apps == [1]
    assert components == [2]
    decision = Pessimistic().reshape(running)
    assert list(decision.preempted_apps) == [1] and list(decision.preempted_components) == [2]


def test_algorithm_1_fifo_order_decides_who_is_preempted():
    running = RunningComponents(
        component=np.array([0, 1]), host=np.zeros(2, dtype=np.int64), app=np.array([0, 1]),
        elastic=np.array([False, False]), age=np.array([1, 50]), app_order=np.array([1, 0]),
        target=np.array([[6.0, 1.0], [6.0, 1.0]]), capacity=np.array([[10.0, 10.0]]))
    # App 1 comes first in the scheduling order: app 0 is preempted.
    assert algorithm_1(running) == ([0], [])


def test_pessimistic_fast_path_equals_algorithm_1_on_random_states():
    rng = np.random.default_rng(3)
    for _ in range(300):
        n, hosts = int(rng.integers(1, 30)), int(rng.integers(1, 5))
        running = RunningComponents(
            component=np.arange(n), host=rng.integers(0, hosts, n),
            app=np.sort(rng.integers(0, 8, n)), elastic=rng.random(n) < 0.5,
            age=rng.integers(0, 20, n), app_order=np.zeros(n, dtype=np.int64),
            target=rng.uniform(0, 3, (n, 2)), capacity=rng.uniform(5, 25, (hosts, 2)))
        running = RunningComponents(**{**running.__dict__, "app_order": running.app})
        apps, components = algorithm_1(running)
        decision = Pessimistic().reshape(running)
        assert list(decision.preempted_apps) == apps
        assert list(decision.preempted_components) == components


@pytest.mark.parametrize("integer", [False, True])
def test_algorithm_1_equals_the_one_component_at_a_time_reference(integer):
    """Random states; integer targets make free capacities hit exactly 0, where core
    (< 0) and elastic (<= 0) takes differ."""
    rng = np.random.default_rng(4 + integer)
    for _ in range(400):
        n, hosts = int(rng.integers(1, 40)), int(rng.integers(1, 5))
        target = rng.integers(0, 4, (n, 2)) * 1.0 if integer else rng.uniform(0, 3, (n, 2))
        app = np.sort(rng.integers(0, 10, n))
        running = RunningComponents(
            component=np.arange(n), host=rng.integers(0, hosts, n), app=app,
            elastic=rng.random(n) < 0.5, age=rng.integers(0, 5, n),
            app_order=rng.permutation(10)[app], target=target,
            capacity=rng.integers(3, 20, (hosts, 2)) * 1.0)
        assert algorithm_1(running) == algorithm_1_reference(running)


class _CheckedSimulation(Simulation):
    """Asserts at every step that allocations never exceed a host's capacity and (with
    `usage_within`) that usage never does either."""

    usage_within = False

    def advance(self, t):
        placed = self.host >= 0
        for r in range(2):
            allocated = np.bincount(self.host[placed], self.allocation[placed, r],
                                    minlength=len(self.capacity))
            assert np.all(allocated <= self.capacity[:, r] * (1 + 1e-9)), t
            if self.usage_within:
                use = self.workload.usage[self.workload.offset[placed] + self.age[placed], r]
                assert np.all(np.bincount(self.host[placed], use, minlength=len(
                    self.capacity)) <= self.capacity[:, r] * (1 + 1e-9)), t
        super().advance(t)


@pytest.mark.parametrize("seed", range(4))
def test_invariants_on_random_workloads(seed):
    rng = np.random.default_rng(seed)
    workload = random_workload(150, rng, submit_span=60)
    cluster = Cluster.homogeneous(16, 64, 4)
    baseline = _CheckedSimulation(workload, cluster, _fitted(Baseline(), workload),
                                  INTERVAL).run()
    assert baseline.failures.sum() == baseline.preemptions.sum() == 0
    assert baseline.failed_components.sum() == baseline.preempted_components.sum() == 0
    checked = _CheckedSimulation(workload, cluster, _fitted(Pessimistic(), workload),
                                 INTERVAL)
    checked.usage_within = True
    pessimistic = checked.run()
    # Oracle, K1 = K2 = 0: the pessimistic shaper never lets usage exceed capacity.
    assert pessimistic.failures.sum() == pessimistic.failed_components.sum() == 0
    assert np.all(baseline.finish_step >= 0) and np.all(pessimistic.finish_step >= 0)


def test_optimistic_fails_where_pessimistic_does_not_on_a_loaded_cluster():
    rng = np.random.default_rng(7)
    workload = random_workload(300, rng, submit_span=30)
    cluster = Cluster.homogeneous(16, 64, 3)
    optimistic = simulate(workload, cluster, _fitted(Optimistic(), workload), INTERVAL)
    pessimistic = simulate(workload, cluster, _fitted(Pessimistic(), workload), INTERVAL)
    assert optimistic.failures.sum() > 0
    assert pessimistic.failures.sum() == 0


@pytest.mark.parametrize("policy", [Baseline, Optimistic, Pessimistic])
def test_vectorized_step_equals_the_per_component_reference(policy):
    rng = np.random.default_rng(11)
    workload = random_workload(120, rng, submit_span=40)
    cluster = Cluster.homogeneous(12, 48, 3)
    fast = simulate(workload, cluster, _fitted(policy(), workload), INTERVAL, seed=5)
    slow = simulate_reference(workload, cluster, _fitted(policy(), workload), INTERVAL, seed=5)
    for name in ("finish_step", "start_step", "failures", "preemptions", "failed_components",
                 "preempted_components", "lost_steps"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=name)
    np.testing.assert_allclose(fast.allocated, slow.allocated, rtol=1e-12)
    np.testing.assert_allclose(fast.used, slow.used, rtol=1e-12)
    assert fast.component_steps == slow.component_steps


def test_elastic_marking_keeps_the_first_component_core():
    rng = np.random.default_rng(0)
    workload = random_workload(200, rng, elastic_fraction=1.0)
    counts = np.diff(workload.app_start)
    assert not workload.elastic[workload.app_start[:-1]].any()
    assert workload.elastic.sum() == (counts - 1).sum()
    assert not random_workload(50, rng, elastic_fraction=0.0).elastic.any()


def test_sampled_workload_reuses_series_and_is_seeded():
    workload = random_workload(40, np.random.default_rng(0))
    a = workload.sampled(500, np.random.default_rng(1))
    b = workload.sampled(500, np.random.default_rng(1))
    assert a.num_apps == 500
    np.testing.assert_array_equal(a.offset, b.offset)
    np.testing.assert_array_equal(a.submit_step, b.submit_step)
    assert set(a.offset) <= set(workload.offset)
    assert np.all(np.diff(a.submit_step) >= 0)


def test_place_all_equals_first_fit_one_after_the_other_on_random_cases():
    """place_all's shortcuts never change its answer: the hosts of sequential first fit, or
    None with `free` restored (to rounding), on random free room (some hosts overcommitted)
    and demands."""
    from policies.shaping.cluster.scheduler import first_fit, place_all

    rng = np.random.default_rng(0)
    for _ in range(3000):
        free = rng.choice([-0.5, 0.0, 0.1, 0.25, 0.5, 1.0], size=(rng.integers(1, 5), 2))
        demand = rng.choice([0.05, 0.1, 0.25, 0.5], size=(rng.integers(0, 6), 2))
        expected_free, expected = free.copy(), []
        for d in demand:
            host = first_fit(expected_free, d)
            if host < 0:
                expected, expected_free = None, free.copy()
                break
            expected.append(host)
            expected_free[host] -= d
        got_free = free.copy()
        got = place_all(got_free, demand)
        assert (got is None) == (expected is None)
        if got is not None:
            assert list(got) == expected
        np.testing.assert_allclose(got_free, expected_free, rtol=0, atol=1e-12)


@pytest.mark.parametrize("failure_model, growth, elastic_progress", [
    ("host", "always", False), ("component", "always", False), ("memory", "if_free", True),
    ("memory", "always", False), ("host", "if_free", True)])
def test_the_compiled_usage_step_equals_the_array_path(monkeypatch, failure_model, growth,
                                                       elastic_progress):
    # Random workloads on a tight cluster, so that steps with and without kills both occur;
    # the array path alone (the compiled step made to decline every step) is the reference.
    rng = np.random.default_rng(3)
    workload = random_workload(150, rng, submit_span=40).with_elastic(0.5, rng)
    cluster = Cluster.homogeneous(12, 48, 3)
    kwargs = dict(seed=2, failure_model=failure_model, growth=growth,
                  elastic_progress=elastic_progress, unshaped_after_failures=1)
    results = []
    for policy in (Optimistic(k1=0.02), Pessimistic(k1=0.02)):
        fitted = _fitted(policy, workload, 1)
        fast = simulate(workload, cluster, fitted, 1, **kwargs)
        with monkeypatch.context() as patch:
            patch.setattr(simulator_module, "usage_step", lambda *args: False)
            slow = simulate(workload, cluster, fitted, 1, **kwargs)
        for name in ("finish_step", "start_step", "failures", "preemptions", "lost_steps",
                     "failed_components", "preempted_components", "allocated", "used"):
            np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), name)
        assert fast.component_steps == slow.component_steps
        results.append(fast)
    assert sum(r.failures.sum() + r.preemptions.sum() for r in results) > 0
