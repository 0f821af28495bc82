"""Overcommit metrics of [Bashir21] §5.1.3 on hand-made arrays."""

import numpy as np

from predictors.peak.machine_samples import MachineSamples
from predictors.peak.overcommit_metrics import (
    cdf_quantiles,
    cell_savings,
    cell_sums,
    machine_metrics,
    merge_cell_sums,
    step_metrics,
    total_limit,
    total_usage,
)


def test_total_usage_caps_each_task_at_its_limit_and_total_limit_sums_limits():
    samples = MachineSamples.from_arrays(time_us=[0, 0, 300, 300], task_ids=[1, 2, 1, 2],
                                         usage=[3.0, 0.5, 1.0, 4.0], limit=[2.0, 1.0, 2.0, 5.0])
    np.testing.assert_array_equal(total_usage(samples), [2.5, 5.0])
    np.testing.assert_array_equal(total_limit(samples), [3.0, 7.0])


def test_step_metrics_by_hand():
    limit = np.array([10.0, 10.0, 10.0, 10.0, 8.0])
    predicted = np.array([9.0, 8.0, 12.0, 7.0, 0.0])
    oracle = np.array([8.0, 10.0, 11.0, np.nan, 0.0])  # step 3: no oracle value, not scored
    steps = step_metrics(limit, predicted, oracle)
    np.testing.assert_array_equal(steps.scored, [True, True, True, False, True])
    np.testing.assert_array_equal(steps.violation, [False, True, False, False, False])
    np.testing.assert_allclose(steps.severity, [0.0, 0.2, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(steps.savings, [0.1, 0.2, -0.2, 0.0, 1.0])
    metrics = machine_metrics(limit, predicted, oracle)
    assert metrics.num_steps == 4
    np.testing.assert_allclose(metrics.violation_rate, 0.25)
    np.testing.assert_allclose(metrics.mean_severity, 0.05)
    np.testing.assert_allclose(metrics.savings_ratio, (0.1 + 0.2 - 0.2 + 1.0) / 4)


def test_machine_without_scored_steps_has_nan_metrics():
    metrics = machine_metrics(np.ones(3), np.ones(3), np.full(3, np.nan))
    assert metrics.num_steps == 0 and np.isnan(metrics.violation_rate)


TIMES = np.array([0, 300, 600]) * 1_000_000


def test_cell_savings_weighs_machines_by_limit_unlike_the_machine_average():
    # Machine 0 saves 50 % of a limit of 10, machine 1 saves 10 % of 90 (absent at time 600).
    machines = [(TIMES, np.array([10.0, 10.0, 10.0]), np.array([5.0, 5.0, 5.0]),
                 np.array([4.0, 4.0, 4.0])),
                (TIMES[:2], np.array([90.0, 90.0]), np.array([81.0, 81.0]),
                 np.array([80.0, 80.0]))]
    sums = merge_cell_sums([cell_sums(*machine) for machine in machines])
    np.testing.assert_array_equal(sums.time, TIMES)
    np.testing.assert_array_equal(sums.num_machines, [2, 2, 1])
    np.testing.assert_allclose(sums.total_limit, [100.0, 100.0, 10.0])
    np.testing.assert_allclose(sums.oracle, [84.0, 84.0, 4.0])
    np.testing.assert_allclose(cell_savings(sums), [0.14, 0.14, 0.5])
    per_machine = [machine_metrics(*machine[1:]).savings_ratio for machine in machines]
    np.testing.assert_allclose(np.mean(per_machine), 0.3)


def test_cell_sums_count_a_machine_only_where_it_is_scored():
    # Machine 1 has no oracle value at time 300 (the last horizon of its data).
    first = cell_sums(TIMES[:2], np.array([10.0, 10.0]), np.array([9.0, 9.0]),
                      np.array([1.0, 1.0]))
    second = cell_sums(TIMES[:2], np.array([10.0, 10.0]), np.array([5.0, 5.0]),
                       np.array([1.0, np.nan]))
    sums = merge_cell_sums([first, merge_cell_sums([]), second])
    np.testing.assert_array_equal(sums.num_machines, [2, 1])
    np.testing.assert_allclose(cell_savings(sums), [0.3, 0.1])


def test_merging_cell_sums_in_any_grouping_gives_the_same_cell():
    rng = np.random.default_rng(0)
    parts = []
    for _ in range(6):
        times = np.sort(rng.choice(20, 8, replace=False)) * 300_000_000
        limit = rng.uniform(1, 2, 8)
        oracle = np.where(rng.random(8) < 0.2, np.nan, rng.uniform(0, 1, 8))
        parts.append(cell_sums(times, limit, limit * 0.8, oracle))
    whole = merge_cell_sums(parts)
    nested = merge_cell_sums([merge_cell_sums(parts[:2]), merge_cell_sums(parts[2:])])
    for field in whole._fields:
        np.testing.assert_allclose(getattr(nested, field), getattr(whole, field), rtol=1e-12)
    assert whole.num_machines.sum() == sum(len(p.time) for p in parts)


def test_cdf_quantiles_skip_nan():
    quantiles = cdf_quantiles([np.nan, *range(11)], quantiles=(0.1, 0.5, 0.99))
    np.testing.assert_allclose(list(quantiles.values()), [1.0, 5.0, 9.9])
    assert list(quantiles) == [0.1, 0.5, 0.99]
