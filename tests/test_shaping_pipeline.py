"""The shaping stage end to end on hand-made canonical tables: the workload it builds, its
dead letters, its tables; and the config's validation by field."""

import numpy as np
import pyarrow as pa
import pytest

from pipelines import config as run_config
from pipelines import schemas
from pipelines.stages.shaping.runs import unshaped_after_failures
from pipelines.stages.shaping.workload import with_usage_only_instances
from tests.helpers import run_on_loaded_tables

US = 300 * 1_000_000  # one 5-minute step in µs


def _instance(collection, index, start, cpu=0.5, memory=0.5, machine=1, priority=0):
    return {"instance_id": f"{collection}:{index}", "collection_id": collection,
            "instance_index": index, "machine_id": machine, "pool": "p",
            "start_time": start * US, "end_time": (start + 50) * US, "end_type": "FINISH",
            "cpu_request": cpu, "memory_request": memory, "priority": priority}


def _usage(collection, index, start, steps, cpu=0.2, memory=0.3):
    return [{"machine_id": 1, "instance_id": f"{collection}:{index}",
             "start_time": (start + s) * US, "end_time": (start + s + 1) * US,
             "cpu_limit": 0.5, "memory_limit": 0.5, "avg_cpu": cpu, "max_cpu": cpu + 0.01 * s,
             "avg_memory": memory, "max_memory": memory} for s in range(steps)]


SHAPING = """shaping {
  policy: BASELINE policy: OPTIMISTIC policy: PESSIMISTIC
  forecaster: ORACLE forecaster: ARIMA
  k1: 0 k1: 0.5 k2: 0 seed: 0 seed: 1
  shaping_interval_steps: 4 min_fit_samples: 8 num_history_samples: 10
  host_shape { cpu: 1 memory: 1 } host_count: 1 elastic_fraction: 0.5
}"""


@pytest.fixture(scope="module")
def shaped(tmp_path_factory):
    instances = [_instance(1, 0, 0), _instance(1, 1, 0), _instance(2, 0, 2),
                 _instance(3, 0, 3, cpu=0.0),           # zero request: app 3 rejected
                 _instance(3, 1, 3),                    # … with its sibling
                 _instance(4, 0, 4),                    # no usage: left out alone
                 _instance(4, 1, 4), _instance(5, 0, 5, cpu=2.0)]  # larger than the cluster
    usage = (_usage(1, 0, 0, 20) + _usage(1, 1, 0, 12) + _usage(2, 0, 2, 30)
             + _usage(3, 1, 3, 5) + _usage(4, 1, 4, 16) + _usage(5, 0, 5, 5))
    tables, _ = run_on_loaded_tables(tmp_path_factory.mktemp("shaping"),
                                     {"instances": instances, "usage": usage}, SHAPING,
                                     "shaping_test")
    return tables


def test_runs_cover_the_sweep_and_the_baseline_per_seed(shaped):
    runs = shaped["shaping_runs"]
    # Baseline per seed + (oracle, arima) x k1 {0, 0.5} x k2 {0} x 2 policies x 2 seeds.
    assert len(runs) == 2 + 2 * 2 * 2 * 2
    assert set(runs.applications) == {3}
    baseline = runs[runs.policy == "baseline"]
    assert list(baseline.turnaround_speedup_vs_baseline) == [1.0, 1.0]
    assert baseline.forecaster.eq("none").all() and baseline.k1.isna().all()
    assert (runs.failed_applications_pct[runs.policy != "optimistic"] == 0).all()


def test_applications_and_summary(shaped):
    apps = shaped["shaping_applications"]
    assert sorted(set(apps.app_id)) == [1, 2, 4]
    assert apps.finished.all()
    one = apps[(apps.policy == "baseline") & (apps.seed == 0)].set_index("app_id")
    assert one.loc[1, "runtime_s"] == 20 * 300 and one.loc[4, "components"] == 1
    assert (apps.turnaround_s >= apps.runtime_s).all()
    summary = shaped["shaping_summary"]
    assert {"turnaround_s", "cpu_slack_pct", "turnaround_speedup_vs_baseline",
            "failed_applications_pct"} <= set(summary.metric)
    pessimistic = summary[(summary.policy == "pessimistic") & (summary.metric == "turnaround_s")]
    assert (pessimistic.n == 6).all()  # 3 applications x 2 seeds


def test_what_shaping_does_not_model_is_counted_as_exclusions(shaped):
    excluded = shaped["exclusions"]
    assert dict(zip(excluded.reason, excluded.rows)) == {
        "zero or missing cpu_request or memory_request": 1,
        "another component of the application was rejected": 1,
        "no usage windows": 1,
        "core components do not fit the empty cluster": 1}
    assert set(excluded.stage) == {"shaping"}
    assert not len(shaped["dead_letters"])


def _problems(text):
    config = run_config.parse_config('name: "x" synthetic { machines: 2 days: 1 }\n' + text)
    return [str(p) for p in run_config.validate(config)]


def test_validation_names_the_field():
    assert _problems(SHAPING) == []
    problems = _problems(SHAPING.replace("k1: 0.5", "k1: -0.1"))
    assert problems == ["shaping.k1[1]: must be finite and >= 0, got -0.1"]
    problems = _problems(SHAPING.replace("policy: BASELINE", "policy: POLICY_UNSPECIFIED"))
    assert problems == ["shaping.policy[0]: unknown shaping policy 'policy_unspecified'; "
                        "known: baseline, optimistic, pessimistic"]
    assert any(p.startswith("shaping.forecaster") for p in
               _problems(SHAPING.replace("forecaster: ORACLE forecaster: ARIMA", "")))
    assert _problems(SHAPING.replace("host_count: 1", "")) == [
        "shaping.host_count: is required with host_shape"]
    assert _problems(SHAPING.replace("host_count: 1", "host_count: 1 failure_model: "
                                     "COMPONENT_LIMIT")) == []
    assert _problems(SHAPING.replace("host_count: 1", "host_count: 1 failure_model: "
                                     "FAILURE_MODEL_UNSPECIFIED")) == [
        "shaping.failure_model: must be one of HOST_OVERLOAD, COMPONENT_LIMIT, MEMORY_LIMIT, "
        "got FAILURE_MODEL_UNSPECIFIED"]
    assert _problems(SHAPING.replace("host_count: 1", "host_count: 1 growth: "
                                     "GROWTH_UNSPECIFIED")) == [
        "shaping.growth: must be ALWAYS or IF_FREE, got GROWTH_UNSPECIFIED"]
    assert _problems(SHAPING.replace("host_count: 1", "host_count: 1 "
                                     "unshaped_after_failures: -1")) == [
        "shaping.unshaped_after_failures: must be >= 0, got -1"]


def test_the_retry_rule_defaults_by_failure_model():
    def rule(text):
        return unshaped_after_failures(run_config.parse_config(
            'name: "x" shaping { ' + text + ' }').shaping)

    assert rule("") == rule("failure_model: HOST_OVERLOAD") == 0
    assert rule("failure_model: COMPONENT_LIMIT") == rule("failure_model: MEMORY_LIMIT") == 1
    assert rule("failure_model: COMPONENT_LIMIT unshaped_after_failures: 0") == 0
    assert rule("unshaped_after_failures: 5") == 5


def test_an_unknown_policy_name_fails_at_parse_naming_the_line():
    with pytest.raises(run_config.ConfigError, match="line 2"):
        run_config.parse_config('name: "x"\nshaping { policy: CLAIRVOYANT }')


def test_a_usage_series_without_an_instance_row_is_an_application_of_its_own():
    """The Azure CPU readings: usage rows whose VMs the instances table does not list."""
    instances = pa.Table.from_pylist(
        [{"instance_id": "listed", "start_time": 0, "end_time": 600_000_000,
          "cpu_request": 2.0, "memory_request": 4.0}], schema=schemas.INSTANCES)
    windows = [("listed", 0), ("vm-b", 600), ("vm-a", 300), ("vm-a", 0), ("vm-b", 900)]
    usage = pa.Table.from_pylist(
        [{"instance_id": vm, "start_time": t * 1_000_000, "end_time": (t + 300) * 1_000_000,
          "cpu_limit": 1.0 if vm == "vm-a" else 8.0, "memory_limit": 1.75}
         for vm, t in windows], schema=schemas.USAGE)
    added = with_usage_only_instances(instances, usage).slice(1).to_pylist()
    assert [(r["instance_id"], r["start_time"], r["end_time"], r["cpu_request"],
             r["memory_request"]) for r in added] == [
        ("vm-a", 0, 600_000_000, 1.0, 1.75), ("vm-b", 600_000_000, 1_200_000_000, 8.0, 1.75)]
    assert all(r["collection_id"] is None for r in added)
    assert with_usage_only_instances(instances, usage.slice(0, 1)) is instances
    np.testing.assert_array_equal(
        with_usage_only_instances(instances, usage).column("instance_id").to_pylist(),
        ["listed", "vm-a", "vm-b"])
