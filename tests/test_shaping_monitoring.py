"""Per-minute monitoring ([Pace18] §V): per-step usage synthesised from 5-minute windows'
mean and maximum (`sub_window_steps`), and a 60-s step with one-step shaping through
`fleetcast run` on a hand-made trace."""

import numpy as np
import pytest

from policies.shaping.workload import sub_window_steps
from tests.helpers import loaded_tables_text, one_instance_rows, read_table, run_cli


def test_sub_window_steps_keep_each_windows_mean_and_maximum():
    rng = np.random.default_rng(1)
    maximum = rng.uniform(0.1, 2.0, (500, 2))
    mean = maximum * rng.uniform(0.3, 1.0, (500, 2))
    steps = np.full(500, 5)
    minutes = sub_window_steps(mean, maximum, steps, np.random.default_rng(0)).reshape(500, 5, 2)
    np.testing.assert_allclose(minutes.mean(axis=1), mean, rtol=1e-12)
    np.testing.assert_array_equal(minutes.max(axis=1), maximum)
    assert (minutes >= 0).all()
    # Seeded: the same draws give the same minutes; the minutes vary within a window.
    again = sub_window_steps(mean, maximum, steps, np.random.default_rng(0)).reshape(500, 5, 2)
    np.testing.assert_array_equal(minutes, again)
    assert (minutes.min(axis=1) < mean).mean() > 0.9


def test_a_peak_shorter_than_a_step_keeps_the_maximum():
    # 5 steps of mean 0.1 cannot reach a maximum of 1: the peak step is 1, the others 0.
    # A window of one step is its maximum; a flat window (mean = maximum) stays flat.
    minutes = sub_window_steps(np.array([[0.1, 0.5], [0.3, 0.3], [0.2, 0.2]]),
                               np.array([[1.0, 0.5], [0.6, 0.9], [0.2, 0.2]]),
                               np.array([5, 1, 3]), np.random.default_rng(0))
    np.testing.assert_array_equal(np.sort(minutes[:5, 0]), [0, 0, 0, 0, 1.0])
    np.testing.assert_array_equal(minutes[:5, 1], np.full(5, 0.5))
    np.testing.assert_array_equal(minutes[5], [0.6, 0.9])
    np.testing.assert_array_equal(minutes[6:], np.full((3, 2), 0.2))


def _tables(tmp_path):
    """One instance requesting 1 x 1 for two 5-minute windows: (avg, max) CPU (0.4, 0.7) and
    (0.2, 0.3), memory (0.5, 0.5) flat."""
    return loaded_tables_text(tmp_path, one_instance_rows([(0.4, 0.7, 0.5, 0.5),
                                                           (0.2, 0.3, 0.5, 0.5)]))


@pytest.mark.parametrize("options, steps, cpu_used", [
    # 5-minute steps on each window's maximum.
    ("", 2, (0.7 + 0.3) / 2),
    # Per-minute steps holding each window's maximum.
    ("step_s: 60 sub_window_usage: REPEAT", 10, (0.7 + 0.3) / 2),
    # Per-minute synthesised steps: the windows' means are kept.
    ("step_s: 60 sub_window_usage: SYNTHESISED", 10, (0.4 + 0.2) / 2)])
def test_per_minute_monitoring_through_the_cli(tmp_path, options, steps, cpu_used):
    config = tmp_path / "minutes.textproto"
    config.write_text(f'name: "minutes"\n{_tables(tmp_path)}\nshaping {{\n'
                      "  policy: BASELINE policy: PESSIMISTIC forecaster: ORACLE k1: 0 k2: 0\n"
                      "  shaping_interval_steps: 1 host_shape { cpu: 1 memory: 1 } "
                      f"host_count: 1\n  {options}\n}}\n")
    assert run_cli(config, tmp_path / "out") == 0
    apps = read_table(tmp_path / "out" / "shaping_applications").set_index("policy")
    assert apps.loc["baseline", "runtime_s"] == 600
    # The baseline allocates 1 CPU: its slack is 1 - the mean CPU used.
    assert apps.loc["baseline", "cpu_slack_pct"] == pytest.approx(100 * (1 - cpu_used))
    runs = read_table(tmp_path / "out" / "shaping_runs").set_index("policy")
    assert runs.loc["baseline", "steps"] == steps
    # Shaping every step with the oracle: the allocation is each step's usage, no slack.
    assert apps.loc["pessimistic", "cpu_slack_pct"] == pytest.approx(0, abs=1e-9)
