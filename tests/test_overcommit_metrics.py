"""Overcommit metrics of paper 004 §5.1.3 on hand-made arrays."""

import numpy as np

from predictors.machine_samples import MachineSamples
from predictors.overcommit_metrics import (cdf_quantiles, cell_savings, machine_metrics,
                                           step_metrics, total_limit, total_usage)


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


def test_cell_savings_weighs_machines_by_limit_unlike_the_machine_average():
    # Machine 0 saves 50 % of a limit of 10, machine 1 saves 10 % of 90 (absent at step 2).
    limit = np.array([[10.0, 10.0, 10.0], [90.0, 90.0, np.nan]])
    predicted = np.array([[5.0, 5.0, 5.0], [81.0, 81.0, np.nan]])
    oracle = np.array([[4.0, 4.0, 4.0], [80.0, 80.0, np.nan]])
    cell = cell_savings(limit, predicted, oracle)
    np.testing.assert_allclose(cell.per_step, [0.14, 0.14, 0.5])
    np.testing.assert_allclose(cell.overall, (14 + 14 + 5) / (100 + 100 + 10))
    per_machine = [machine_metrics(*machine).savings_ratio
                   for machine in zip(limit, predicted, oracle)]
    np.testing.assert_allclose(np.mean(per_machine), 0.3)


def test_cell_savings_ignores_machines_without_an_oracle_value():
    limit = np.array([[10.0, 10.0], [10.0, 10.0]])
    predicted = np.array([[9.0, 9.0], [5.0, 5.0]])
    oracle = np.array([[1.0, 1.0], [1.0, np.nan]])
    cell = cell_savings(limit, predicted, oracle)
    np.testing.assert_allclose(cell.per_step, [0.3, 0.1])


def test_cdf_quantiles_skip_nan():
    quantiles = cdf_quantiles([np.nan, *range(11)], quantiles=(0.1, 0.5, 0.99))
    np.testing.assert_allclose(list(quantiles.values()), [1.0, 5.0, 9.9])
    assert list(quantiles) == [0.1, 0.5, 0.99]
