"""[Pace18]'s simulator's usage curves (policies/shaping/random_walk_usage.py): equal to a
per-component, per-second brute-force construction on the same increments; each curve's
per-second mean is its target; the stage's option replaces the trace's usage and keeps each
component's mean."""

import numpy as np
import pytest

from pipelines import cli
from policies.shaping.random_walk_usage import (
    JUMP_PROBABILITY,
    SMOOTHING_S,
    draw_increments,
    random_walk_steps,
    steps_from_increments,
)
from policies.shaping.workload import Workload
from tests.helpers import loaded_tables_text, one_instance_rows, read_table, run_cli


def _reference(increments, lengths, step_s, target):
    """Per component: walk, trailing mean, [0, 1] by its range, f by bisection on the
    per-second curve, each step's maximum; plus the per-second scaled curves."""
    steps, curves, begin = [], [], 0
    for length, goal in zip(lengths, target):
        seconds = increments[begin:begin + length * step_s]
        begin += length * step_s
        walk = np.cumsum(seconds)
        smooth = np.array([walk[max(0, i - SMOOTHING_S + 1):i + 1].mean()
                           for i in range(len(walk))])
        if not np.any(seconds != 0):
            curve = np.full(len(walk), goal)
        else:
            x = (smooth - smooth.min()) / (smooth.max() - smooth.min())
            if np.mean(x > 0) <= goal:  # out of reach: 1 wherever above the minimum
                curves.append((x > 0).astype(float))
                steps.append(curves[-1].reshape(-1, step_s).max(axis=1))
                continue
            low, high = 0.0, 1e6
            for _ in range(200):
                middle = (low + high) / 2
                low, high = (middle, high) if np.minimum(middle * x, 1).mean() < goal \
                    else (low, middle)
            curve = np.minimum(low * x, 1.0)
        curves.append(curve)
        steps.append(curve.reshape(-1, step_s).max(axis=1))
    return np.concatenate(steps), curves


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_steps_equal_a_per_second_brute_force(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, 12)
    target = rng.uniform(0.05, 0.95, 12)
    increments = draw_increments(lengths * 60, rng)
    steps = steps_from_increments(increments, lengths, 60, target)
    expected, curves = _reference(increments, lengths, 60, target)
    np.testing.assert_allclose(steps, expected, atol=1e-9)
    # Each curve's mean over its seconds is its target, where a factor reaches it.
    reached = [abs(c.mean() - t) < 1e-9 or c.mean() < t for c, t in zip(curves, target)]
    assert all(reached) and sum(abs(c.mean() - t) < 1e-9 for c, t in zip(curves, target)) >= 8


def test_a_component_without_a_jump_is_flat_at_its_target():
    lengths = np.array([3, 2])
    increments = np.zeros(5 * 60)
    increments[200] = 1.5  # the second component's walk: up 1.5 at its 21st second
    steps = steps_from_increments(increments, lengths, 60, np.array([0.3, 0.5]))
    assert list(steps[:3]) == [0.3, 0.3, 0.3]
    # Second component: 0 for 20 s, a 10-s ramp, then 1.5 for 90 s; mean 0.5 of min(f x, 1)
    # over 120 s: x = 0 for 20 s, k/10 for k = 1..9, then 1 for 91 s, so f = 1 clips nothing
    # and mean = (4.5 + 91) / 120 > 0.5: f < 1, the maxima are f, f.
    expected, _ = _reference(increments, lengths, 60, np.array([0.3, 0.5]))
    np.testing.assert_allclose(steps, expected, atol=1e-12)
    assert steps[3] == steps[4] < 1.0


def test_same_seed_same_curves_and_jump_rate():
    lengths = np.full(50, 600)
    first = random_walk_steps(lengths, 60, np.full(50, 0.4), np.random.default_rng(7))
    again = random_walk_steps(lengths, 60, np.full(50, 0.4), np.random.default_rng(7))
    assert np.array_equal(first, again)
    increments = draw_increments(lengths * 60, np.random.default_rng(7))
    assert np.mean(increments != 0) == pytest.approx(JUMP_PROBABILITY, rel=0.02)


def test_the_workload_keeps_each_applications_mean_and_shares_its_curve():
    series = [np.column_stack([np.full(30, 0.2), np.full(30, 0.5)]),
              np.column_stack([np.linspace(0, 0.8, 45), np.full(45, 0.1)]),
              np.column_stack([np.full(20, 0.3), np.full(20, 0.3)])]
    request = [[0.4, 1.0], [1.0, 0.2], [0.6, 0.6]]
    # Applications: {0} and {1, 2} (components of 45 and 20 steps).
    workload = Workload.from_series(60, [0, 3], [0, 0], [1, 2], request,
                                    [False, False, False], series)
    walked = workload.with_random_walk_usage(np.random.default_rng(0))
    assert walked.usage.shape == (95, 2) and list(walked.offset) == [0, 30, 75]
    assert np.all(walked.usage <= np.repeat(workload.request, workload.length, 0) + 1e-12)
    fraction = walked.usage / np.repeat(workload.request, workload.length, 0)
    # The third component replays the first 20 steps of its application's curve.
    np.testing.assert_allclose(fraction[75:95], fraction[30:50], rtol=1e-12)
    # Per-step maxima of a curve whose per-second mean is the target: at least the target
    # (application 1's: over its 65 steps, cpu (0.4 x 45 + 0.5 x 20) / 65).
    assert np.all(fraction[:30].mean(axis=0) >= [0.5 - 1e-9, 0.5 - 1e-9])
    assert np.all(fraction[30:75].mean(axis=0) >= [(0.4 * 45 + 0.5 * 20) / 65 - 1e-9,
                                                   (0.5 * 45 + 0.5 * 20) / 65 - 1e-9])


def test_simulator_options_through_the_cli(tmp_path):
    # One instance requesting 1 x 1 for two 5-minute windows of maximum CPU 0.7 and 0.3,
    # memory 0.5: its mean usage over request is (0.5, 0.5). Three times as long, per-minute
    # random-walk usage with that mean, the oracle and ARIMA(0, 1, 1).
    rows = one_instance_rows([(0.7, 0.7, 0.5, 0.5), (0.3, 0.3, 0.5, 0.5)])
    config = tmp_path / "walk.textproto"
    config.write_text(
        f'name: "walk"\n{loaded_tables_text(tmp_path, rows)}'
        "\nshaping {\n  policy: BASELINE policy: PESSIMISTIC forecaster: ORACLE "
        "forecaster: ARIMA_011 k1: 0 k1: 1 k2: 0\n  step_s: 60 shaping_interval_steps: 1 "
        "usage_model: RANDOM_WALK runtime_scale: 3 failure_model: MEMORY_LIMIT\n"
        "  host_shape { cpu: 1 memory: 1 } host_count: 1\n}\n")
    assert run_cli(config, tmp_path / "out") == 0
    apps = read_table(tmp_path / "out" / "shaping_applications")
    baseline = apps[apps.policy == "baseline"].iloc[0]
    assert baseline.runtime_s == 3 * 600
    # Per-minute maxima of curves whose per-second means are 0.5: the slack is at most 50 %.
    assert 0 < baseline.cpu_slack_pct <= 50 + 1e-9
    assert 0 < baseline.memory_slack_pct <= 50 + 1e-9
    runs = read_table(tmp_path / "out" / "shaping_runs")
    oracle = runs[(runs.forecaster == "oracle") & (runs.k1 == 0)].iloc[0]
    assert oracle.failed_applications_pct == 0 and oracle.mean_memory_slack_pct < 1e-9
    granted = runs[(runs.forecaster == "arima_011") & (runs.k1 == 1)].iloc[0]
    assert granted.turnaround_speedup_vs_baseline == 1 and granted.failed_applications_pct == 0


@pytest.mark.parametrize("field, value, problem", [
    ("arima_011_history_samples", 1, "must be >= 2 (one difference), got 1"),
    ("runtime_scale", 0, "must be > 0, got 0")])
def test_a_wrong_option_names_its_field(tmp_path, capsys, field, value, problem):
    config = tmp_path / "bad.textproto"
    config.write_text('name: "bad"\nsynthetic { machines: 2 days: 1 }\nshaping {\n'
                      "  policy: BASELINE forecaster: ARIMA_011 k1: 0 k2: 0 "
                      f"host_shape {{ cpu: 1 memory: 1 }} host_count: 1 {field}: {value}\n}}\n")
    assert cli.main(["validate", str(config)]) == cli.EXIT_CONFIG_ERROR
    assert capsys.readouterr().err == f"fleetcast: {config}: shaping.{field}: {problem}\n"
