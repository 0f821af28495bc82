"""Limits: every size, count, step, interval and duration of a config is bounded by what a run
can hold, and the validator says why; where the bound depends on the data, the run fails
naming the field as soon as the data shows it, before allocating. Empty inputs are refused,
and an overcommit filter that keeps nothing warns (`fleetcast` as users run it)."""

import re
import time

import pytest

from pipelines import cli
from pipelines import config as run_config
from pipelines.stages.shaping import runs as shaping_runs
from tests.helpers import REPO, read_table

SYNTHETIC_SHAPING = (REPO / "configs" / "synthetic_shaping.textproto").read_text()
# A tiny Azure V1 trace: 3 VMs with 40 five-minute readings each (times in s).
READINGS = "".join(f"{300 * t},vm{v},1.0,{10 + t % 7}.0,{5 + v}.0\n"
                   for v in range(3) for t in range(40))
VMTABLE = ("vm0,s,d,0,12000,50,10,40,Interactive,2,4\n"
           "vm1,s,d,0,11700,50,10,40,Delay-insensitive,4,8\n"
           "vm2,s,d,300,9000,50,10,40,Interactive,2,4\n")
ORACLE = 'fortune_teller { name: "oracle" oracle { horizon_s: 3600 } }'

# The issue's reproductions in configs/synthetic_shaping.textproto, and the one line each
# must now give.
REPRODUCTIONS = [
    ("shaping_interval_steps: 1000000000",
     "shaping.shaping_interval_steps: must be at most 1,440 steps (a day of 1-minute steps): "
     "each usage series keeps a forecast path of 2 x interval - 1 steps (32 bytes each) for "
     "every interval of its life; got 1000000000"),
    ("sampled_applications: 2000000000",
     "shaping.sampled_applications: must be at most 1,000,000 applications: each costs ~800 "
     "bytes in every simulation, so 2,000,000,000 would need ~1.6 TB"),
    ("step_s: 9223372036854775807",
     "shaping.step_s: must be at most 86,400 s (a day): a step is one usage window, 300 s in "
     "the Google and Azure traces; got 9223372036854775807"),
]


def _shaping_config(tmp_path, line: str):
    """configs/synthetic_shaping.textproto with `line` in its shaping block (replacing the
    field's line if it has one), written as a user would."""
    name = line.split(":")[0]
    text = re.sub(rf"\n  {name}: [^\n]*", "", SYNTHETIC_SHAPING)
    path = tmp_path / "shaping.textproto"
    path.write_text(text.replace("  host_count: 2\n", f"  host_count: 2\n  {line}\n"))
    return path


def _azure_config(tmp_path, stages: str):
    """The tiny Azure V1 trace with `stages`, as a config file."""
    (tmp_path / "readings.csv").write_text(READINGS)
    (tmp_path / "vmtable.csv").write_text(VMTABLE)
    path = tmp_path / "tiny.textproto"
    path.write_text(f'name: "tiny"\nazure_v1 {{ vmtable: "{tmp_path}/vmtable.csv" '
                    f'vm_cpu_readings: "{tmp_path}/readings.csv" }}\n{stages}\n')
    return path


def _problems(text: str):
    return [str(p) for p in run_config.validate(run_config.parse_config(text),
                                                check_inputs=False)]


@pytest.mark.parametrize("line, problem", REPRODUCTIONS)
def test_validate_refuses_each_reproduction_naming_the_field(tmp_path, capsys, line, problem):
    config = _shaping_config(tmp_path, line)
    assert cli.main(["validate", str(config)]) == cli.EXIT_CONFIG_ERROR
    assert capsys.readouterr().err == f"fleetcast: {config}: {problem}\n"


@pytest.mark.parametrize("line, problem", REPRODUCTIONS)
def test_run_refuses_each_reproduction_before_any_compute(tmp_path, capsys, line, problem):
    config, out = _shaping_config(tmp_path, line), tmp_path / "out"
    started = time.time()
    assert cli.main(["run", str(config), "--output_dir", str(out), "-q"]) == (
        cli.EXIT_CONFIG_ERROR)
    assert time.time() - started < 5
    assert capsys.readouterr().err == f"fleetcast: {config}: {problem}\n"
    assert not out.exists()


SHAPING = "synthetic {} shaping { policy: BASELINE host_shape { cpu: 1 memory: 1 } %s }"


@pytest.mark.parametrize("text, problem", [
    (SHAPING % "host_count: 2 step_s: 0", "shaping.step_s: must be > 0, got 0"),
    (SHAPING % "host_count: 2 step_s: -300", "shaping.step_s: must be > 0, got -300"),
    (SHAPING % "host_count: 2 shaping_interval_steps: 0",
     "shaping.shaping_interval_steps: must be > 0, got 0"),
    (SHAPING % "host_count: 2 shaping_interval_steps: -12",
     "shaping.shaping_interval_steps: must be > 0, got -12"),
    (SHAPING % "host_count: 2 sampled_applications: -1",
     "shaping.sampled_applications: must be >= 0, got -1"),
    (SHAPING % "host_count: 2 sampled_applications: 1000000", None),
    (SHAPING % "host_count: 2 seed: -1", "shaping.seed[0]: must be >= 0, got -1"),
    (SHAPING % "host_count: 1000000000",
     "shaping.host_count: must be at most 100,000 hosts: 400 x [Pace18]'s 250; the scheduler scans "
     "them at every placement; got 1000000000"),
    (SHAPING % "host_count: 2 max_time_after_last_submit_s: 9223372036854775807",
     "shaping.max_time_after_last_submit_s: must be at most 315,360,000 s (10 years): longer "
     "than any trace; in µs, added to trace times, it must fit an int64; got "
     "9223372036854775807"),
    ("synthetic {} shaping { policy: PESSIMISTIC forecaster: ORACLE k1: inf k2: 0 }",
     "shaping.k1[0]: must be finite and >= 0, got inf"),
    ("synthetic {} shaping { policy: BASELINE policy: PESSIMISTIC forecaster: ORACLE "
     + " ".join(f"k1: {i}" for i in range(100)) + " k2: 0 k2: 1 "
     + " ".join(f"seed: {i}" for i in range(50)) + " }",
     "shaping: forecaster x k1 x k2 x policy x seed x target_offered_load gives 10,050 "
     "simulations, at most 10,000 (each simulates the whole workload)"),
    (f"synthetic {{}} overcommit {{ metric {{ avg_cpu: true step_s: 9223372036854775807 }} "
     f"{ORACLE} }}",
     "overcommit.metric.step_s: must be at most 86,400 s (a day): a step merges each task's "
     "usage windows in it (300 s long) into one sample; got 9223372036854775807"),
    ("synthetic {} overcommit { metric { avg_cpu: true step_s: 60 } fortune_teller { "
     "name: 'o' oracle { horizon_s: 172800 } } }",
     "overcommit.fortune_teller[0].oracle.horizon_s: must be at most 120,960 s (2,016 steps "
     "of metric.step_s 60 s): the oracle holds a float64 band of horizon_s / step_s values per "
     "machine step; got 172800"),
    (f"synthetic {{}} overcommit {{ metric {{ avg_cpu: true }} {ORACLE} fortune_teller {{ "
     "name: 'r' predictor { rc_like { num_history_samples: 1000000000 } } } }",
     "overcommit.fortune_teller[1].predictor.rc_like.num_history_samples: must be at most "
     "2,016 samples (a week of 5-minute samples): a predictor keeps a float64 window of this "
     "many values per step or task sample; got 1000000000"),
    (f"synthetic {{}} overcommit {{ metric {{ avg_cpu: true }} {ORACLE} fortune_teller {{ "
     "name: 'a' predictor { arima { order { p: 100000 d: 1 q: 0 } } } } }",
     "overcommit.fortune_teller[1].predictor.arima.order[0].p: must be at most 48: 4 hours of "
     "5-minute lags; an ARIMA fit solves a p x p system per window of at least 2p + 2 samples; "
     "got 100000"),
    (f"synthetic {{}} overcommit {{ metric {{ avg_cpu: true }} reset_and_shift {{ "
     f"random_shift {{ lower_bound: 0 upper_bound: 9223372036854775807 }} }} {ORACLE} }}",
     "overcommit.reset_and_shift.random_shift.upper_bound: must be within "
     "315,360,000,000,000 µs (10 years) of the trace start (times are µs; sums of them must "
     "stay within int64); got 9223372036854775807"),
    ("synthetic {} lifetime_model { num_trees: 1000000000 }",
     "lifetime_model.num_trees: must be at most 100,000 trees: 50 x the paper's 2,000; every "
     "tree is in the model file and in every prediction; got 1000000000"),
    ("synthetic {} lifetime_model { uptime_examples_per_instance: 0 }",
     "lifetime_model.uptime_examples_per_instance: must be > 0, got 0"),
    ("synthetic {} placement { policy: BEST_FIT lifetime_source { oracle: true } "
     "host_count: 0 }", "placement.host_count: must be > 0, got 0"),
    ("synthetic {} placement { policy: BEST_FIT lifetime_source { oracle: true } seed: -1 }",
     "placement.seed: must be >= 0, got -1"),
    ("synthetic { machines: 20 days: 1000 }",
     "synthetic: machines x days (x arrival_rate_per_machine_hour / 0.25) must be at most "
     "12,000 machine-days (a Google cell-day): the generator holds the whole trace in memory, "
     "~100 kB per machine-day, so 20,000 would need ~2 GB"),
])
def test_sizes_counts_and_durations_are_bounded(text, problem):
    assert _problems(text) == ([problem] if problem else [])


def test_validate_refuses_an_empty_bigquery_query(tmp_path, capsys):
    config = tmp_path / "query.textproto"
    config.write_text('google_v3 { instance_events { bigquery_query: "" } }\n')
    assert cli.main(["validate", str(config)]) == cli.EXIT_CONFIG_ERROR
    assert capsys.readouterr().err == (
        f"fleetcast: {config}: google_v3.instance_events.bigquery_query: is empty: give a "
        "SQL query\n")


@pytest.mark.parametrize("text, problem", [
    ('google_v3 { instance_events { bigquery_query: " " } }',
     "google_v3.instance_events.bigquery_query: is empty: give a SQL query"),
    ('google_v3 { instance_events { bigquery_table: "" } }',
     "google_v3.instance_events.bigquery_table: is empty: give 'dataset.table' or "
     "'project:dataset.table'"),
    ('google_v3 { instance_events { path: "" } }',
     "google_v3.instance_events.path: is empty: give a file pattern (local or gs://)"),
    ('synthetic {} usage { input { parquet: "" } }',
     "usage.input.parquet: is empty: give a Parquet dataset directory (local or gs://)"),
    ('synthetic {} usage { output { bigquery_table: "" } }',
     "usage.output.bigquery_table: is empty: give 'dataset.table' or 'project:dataset.table'"),
    ('synthetic {} output { parquet_dir: "" }',
     "output.parquet_dir: is empty: give a directory (local or gs://), or leave it unset for "
     "--output_dir"),
    ('synthetic {} output { bigquery_dataset: "" }',
     "output.bigquery_dataset: is empty: give 'dataset' or 'project:dataset'"),
])
def test_empty_inputs_and_outputs_are_refused(text, problem):
    assert _problems(text) == [problem]


def test_a_step_shorter_than_the_usage_windows_fails_before_building_the_series(
        tmp_path, capsys):
    config, out = _shaping_config(tmp_path, "step_s: 1"), tmp_path / "out"
    assert cli.main(["run", str(config), "--output_dir", str(out), "-q"]) == (
        cli.EXIT_RUN_FAILED)
    assert capsys.readouterr().err.endswith(
        "fleetcast: run failed: shaping.step_s: 1 s makes the 14,903 usage windows 4,367,259 "
        "series steps (293 per window, 16 bytes each and more in the forecasts): step_s must "
        "be the windows' length (300 s)\n")
    assert not (out / "shaping_runs").exists()


def test_forecasts_larger_than_the_bound_fail_naming_the_interval(tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.setattr(shaping_runs, "MAX_FORECAST_BYTES", 1_000)
    config = _azure_config(tmp_path, "shaping { policy: PESSIMISTIC forecaster: ORACLE k1: 0 "
                           "k2: 0 host_shape { cpu: 8 memory: 16 } host_count: 2 cpu_only: true "
                           "shaping_interval_steps: 12 }")
    assert cli.main(["run", str(config), "--output_dir", str(tmp_path / "out"), "-q"]) == (
        cli.EXIT_RUN_FAILED)
    # 3 series of 40, 39 and 29 steps: 4 + 4 + 3 fits of 23 steps.
    assert capsys.readouterr().err.endswith(
        "fleetcast: run failed: shaping.shaping_interval_steps: 12-step intervals make the "
        "forecasts of the 3 usage series ~8.1 kB per forecaster (11 fits, each a path of 2 x "
        "12 - 1 steps of 32 bytes), more than 1 kB: shorten the interval\n")


@pytest.mark.slow
def test_a_lifetime_cap_longer_than_the_trace_fails_naming_the_field(tmp_path, capsys):
    config = tmp_path / "lifetime.textproto"
    config.write_text('name: "lt" synthetic { machines: 2 days: 0.5 } '
                      "lifetime_model { lifetime_cap_s: 2592000 num_trees: 5 }\n")
    assert cli.main(["run", str(config), "--output_dir", str(tmp_path / "out"), "-q"]) == (
        cli.EXIT_RUN_FAILED)
    assert capsys.readouterr().err.endswith(
        "fleetcast: run failed: lifetime_model.lifetime_cap_s: no training instance started "
        "lifetime_cap_s (2592000 s) before the split at 30492180310 µs, so no label is known; "
        "lower lifetime_cap_s or raise train_fraction\n")


def test_a_replay_with_too_many_samples_fails_naming_the_sample_period(tmp_path, capsys):
    config = _azure_config(tmp_path, "placement { policy: BEST_FIT lifetime_source { oracle: "
                           "true } host_shape { cpu: 8 memory: 16 } sample_period_s: 1 "
                           "end_time_us: 2000000000000 }")
    assert cli.main(["run", str(config), "--output_dir", str(tmp_path / "out"), "-q"]) == (
        cli.EXIT_RUN_FAILED)
    assert capsys.readouterr().err.endswith(
        "fleetcast: run failed: placement.sample_period_s: 1 s over pool 'azure''s replay "
        "window [0, 2000000000000] µs gives 1,827,201 metric samples per replay, more than "
        "1,000,000 (each a pass over the hosts and a placement_timeseries row): raise "
        "sample_period_s or narrow the window (start_time_us, end_time_us)\n")


@pytest.mark.parametrize("filter_, warning", [
    ("start_time: 100000000000", "start_time: 100000000000 (times are µs from the trace start)"),
    ("machine_id: 7", "machine_id: 7"),  # the Azure trace has no machines
])
def test_a_filter_that_keeps_no_usage_window_warns(tmp_path, capsys, filter_, warning):
    out = tmp_path / "out"
    config = _azure_config(tmp_path, f"overcommit {{ filter {{ {filter_} }} metric {{ "
                           "avg_cpu: true } scheduler { at_random { num_machines: 1 seed: 0 } "
                           f"}} {ORACLE} }}")
    assert cli.main(["run", str(config), "--output_dir", str(out), "-q"]) == 0
    assert (f"WARNING overcommit.filter kept 0 of 120 usage windows: {warning}; every "
            "overcommit table is empty\n") in capsys.readouterr().err
    assert read_table(out / "overcommit_counts").to_dict("records") == [
        {"step": "filter", "read": 120, "kept": 0, "filtered": 120, "rejected": 0}]
    assert len(read_table(out / "overcommit_timeseries")) == 0


def test_a_filter_that_keeps_windows_does_not_warn(tmp_path, capsys):
    config = _azure_config(tmp_path, "overcommit { filter { start_time: 6000000000 } "
                           "metric { avg_cpu: true } scheduler { at_random { num_machines: 1 "
                           f"seed: 0 }} }} {ORACLE} }}")
    assert cli.main(["run", str(config), "--output_dir", str(tmp_path / "out"), "-q"]) == 0
    assert "overcommit.filter" not in capsys.readouterr().err
