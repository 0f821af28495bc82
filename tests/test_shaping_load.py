"""Load as a parameter of a shaping experiment ([Pace18] §IV-A): the arrival-rate scale, the
target offered load, and the offered load and mean queue length that `shaping_runs` reports
beside every speed-up; on a hand-made trace through `fleetcast run`."""

import types

import numpy as np
import pytest

from pipelines.io.failures import RunFailed
from pipelines.stages.shaping.runs import with_load
from policies.shaping.metrics import offered_load
from policies.shaping.workload import Workload
from tests.helpers import loaded_tables_text, read_table, run_cli

STEP_US = 300 * 1_000_000


def _three_apps():
    """Three one-component applications submitted at steps 0, 10 and 20, each requesting
    0.5 CPU x 0.25 memory for 10 steps."""
    return Workload.from_series(300, [0, 10, 20], [0, 0, 0], [1, 1, 1], [[0.5, 0.25]] * 3,
                                [False] * 3, [np.full((10, 2), 0.2)] * 3)


def test_offered_load_and_arrival_rate_scale():
    workload = _three_apps()
    # CPU work 3 x 0.5 x 10 = 15 over 1 CPU x 3 applications x 10 steps between submissions.
    assert offered_load(workload, np.array([[1.0, 1.0]])) == 0.5
    assert offered_load(workload, np.array([[1.0, 1.0], [1.0, 1.0]])) == 0.25
    faster = workload.with_arrival_rate(4.0)
    assert list(faster.submit_step) == [0, 2, 5]
    assert offered_load(faster, np.array([[1.0, 1.0]])) == 2.0
    assert workload.with_arrival_rate(1.0) is workload
    assert list(workload.with_arrival_rate(0.5).submit_step) == [0, 20, 40]
    assert np.isnan(offered_load(workload.select_apps(np.array([0])), np.ones((1, 2))))


def _tables(tmp_path):
    instances, usage = [], []
    for collection, start in ((1, 0), (2, 10), (3, 20)):
        instances.append({"instance_id": f"{collection}:0", "collection_id": collection,
                          "instance_index": 0, "start_time": start * STEP_US,
                          "end_time": (start + 10) * STEP_US, "cpu_request": 0.5,
                          "memory_request": 0.25, "priority": 0})
        usage += [{"instance_id": f"{collection}:0", "machine_id": 1,
                   "start_time": (start + s) * STEP_US, "end_time": (start + s + 1) * STEP_US,
                   "cpu_limit": 0.5, "memory_limit": 0.25, "max_cpu": 0.2, "max_memory": 0.2}
                  for s in range(10)]
    return loaded_tables_text(tmp_path, {"instances": instances, "usage": usage})


@pytest.mark.parametrize("load, offered, queue", [
    # The trace's arrivals: one application at a time, nothing waits.
    ("", 0.5, 0.0),
    # Submissions at 0, 5 and 10: the first two run together, none waits.
    ("arrival_rate_scale: 2", 1.0, 0.0),
    # Submissions at 0, 2 and 5: the third waits from step 5 until the first ends at 10,
    # 5 application-steps in a run of 20 steps.
    ("target_offered_load: 2", 2.0, 0.25)])
def test_load_through_the_cli(tmp_path, load, offered, queue):
    config = tmp_path / "load.textproto"
    config.write_text(f'name: "load"\n{_tables(tmp_path)}\nshaping {{\n'
                      "  policy: BASELINE policy: PESSIMISTIC forecaster: ORACLE k1: 0 k2: 0\n"
                      "  shaping_interval_steps: 2 host_shape { cpu: 1 memory: 1 } "
                      f"host_count: 1\n  {load}\n}}\n")
    assert run_cli(config, tmp_path / "out") == 0
    runs = read_table(tmp_path / "out" / "shaping_runs").set_index("policy")
    assert list(runs.offered_load) == [offered, offered]
    assert runs.loc["baseline", "mean_queue_length"] == queue
    assert list(runs.baseline_mean_queue_length) == [queue, queue]


def test_load_fields_are_checked_by_name(tmp_path, capsys):
    config = tmp_path / "both.textproto"
    config.write_text('name: "both"\nsynthetic {}\nshaping { policy: BASELINE '
                      "host_shape { cpu: 1 memory: 1 } host_count: 1 arrival_rate_scale: 2 "
                      "target_offered_load: 1 }\n")
    assert run_cli(config, tmp_path / "out") == 2
    assert ("shaping.arrival_rate_scale: cannot be set with target_offered_load (set one of "
            "the two)") in capsys.readouterr().err
    config.write_text('name: "zero"\nsynthetic {}\nshaping { policy: BASELINE '
                      "host_shape { cpu: 1 memory: 1 } host_count: 1 arrival_rate_scale: 0 }\n")
    assert run_cli(config, tmp_path / "out") == 2
    assert "shaping.arrival_rate_scale: must be > 0, got 0.0" in capsys.readouterr().err
    config.write_text('name: "neg"\nsynthetic {}\nshaping { policy: BASELINE '
                      "host_shape { cpu: 1 memory: 1 } host_count: 1 target_offered_load: 1 "
                      "target_offered_load: -1 }\n")
    assert run_cli(config, tmp_path / "out") == 2
    assert ("shaping.target_offered_load[1]: must be at least 0.001 (a thousandth of the "
            "trace's arrival rate or of the cluster's capacity spreads the submissions over a "
            "thousand times their span) and at most 1,000 (a thousand times the trace's "
            "arrival rate or the cluster's capacity queues nearly every application for the "
            "whole run); got -1") in capsys.readouterr().err
    config.write_text('name: "tiny"\nsynthetic {}\nshaping { policy: BASELINE '
                      "host_shape { cpu: 1 memory: 1 } host_count: 1 "
                      "arrival_rate_scale: 1e-300 }\n")
    assert run_cli(config, tmp_path / "out") == 2
    assert ("shaping.arrival_rate_scale: must be at least 0.001: a thousandth of the trace's "
            "arrival rate") in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_load_that_spreads_submissions_out_of_range_fails_naming_the_field():
    workload = types.SimpleNamespace(num_apps=2, submit_step=np.array([0, 10 ** 6]))
    config = types.SimpleNamespace(arrival_rate_scale=1e-4)
    with pytest.raises(RunFailed, match=r"^shaping.arrival_rate_scale: spreads the workload's "
                                        r"submissions over 10,000,000,000 steps, more than "):
        with_load(workload, config, None, None)


def test_a_load_sweep_runs_every_policy_at_every_load(tmp_path):
    """Two target loads: each has its baseline, and speed-ups compare runs of one load."""
    config = tmp_path / "sweep.textproto"
    config.write_text(f'name: "sweep"\n{_tables(tmp_path)}\nshaping {{\n'
                      "  policy: BASELINE policy: PESSIMISTIC forecaster: ORACLE k1: 0 k2: 0\n"
                      "  shaping_interval_steps: 2 host_shape { cpu: 1 memory: 1 } "
                      "host_count: 1 target_offered_load: 0.5 target_offered_load: 2\n}\n")
    assert run_cli(config, tmp_path / "out") == 0
    runs = read_table(tmp_path / "out" / "shaping_runs")
    assert sorted(zip(runs.target_offered_load, runs.policy, runs.offered_load)) == [
        (0.5, "baseline", 0.5), (0.5, "pessimistic", 0.5), (2.0, "baseline", 2.0),
        (2.0, "pessimistic", 2.0)]
    by_load = runs.set_index(["target_offered_load", "policy"])
    assert by_load.loc[(0.5, "pessimistic"), "baseline_mean_queue_length"] == 0.0
    assert by_load.loc[(2.0, "pessimistic"), "baseline_mean_queue_length"] == 0.25
    summary = read_table(tmp_path / "out" / "shaping_summary")
    assert sorted(set(summary.target_offered_load)) == [0.5, 2.0]
    apps = read_table(tmp_path / "out" / "shaping_applications")
    assert len(apps) == 3 * 4 and sorted(set(apps.target_offered_load)) == [0.5, 2.0]
