"""The config schema: generated code never drifts; errors name the field at fault."""

import glob
import os
import pathlib
import subprocess
import sys

import pytest

from pipelines import config as run_config

REPO = pathlib.Path(__file__).resolve().parent.parent


def test_generated_module_matches_the_proto(tmp_path):
    subprocess.run([sys.executable, str(REPO / "scripts" / "gen_proto.py"), "--out",
                    str(tmp_path)], check=True, capture_output=True)
    generated = tmp_path / "configs" / "fleetcast_pb2.py"
    # The descriptor embedded in the module is the schema; compare it byte for byte. (The
    # file's header names the compiler version, which may differ between machines.)
    source = generated.read_text()
    committed = (REPO / "configs" / "fleetcast_pb2.py").read_text()

    def serialized_descriptor(text):
        start = text.index("AddSerializedFile(") + len("AddSerializedFile(")
        return text[start:text.index(")\n", start)]

    assert serialized_descriptor(source) == serialized_descriptor(committed), (
        "configs/fleetcast_pb2.py is stale: run `python scripts/gen_proto.py`")


@pytest.mark.parametrize("path", sorted(glob.glob(str(REPO / "configs" / "*.textproto"))))
def test_shipped_configs_are_valid(path, monkeypatch):
    monkeypatch.chdir(REPO)  # configs name paths relative to the repository root
    config = run_config.load_config(path, check_inputs=False)
    assert run_config.validate(config, check_inputs=False) == []


def _problems(text, check_inputs=False):
    return [str(p) for p in run_config.validate(run_config.parse_config(text),
                                                check_inputs=check_inputs)]


def test_syntax_error_names_line_and_field():
    with pytest.raises(run_config.ConfigError) as error:
        run_config.parse_config('synthetic {\n  machine: 3\n}', "bad.textproto")
    message = str(error.value)
    assert "bad.textproto" in message and "line 2" in message and "machine" in message


def test_missing_source_is_reported():
    assert _problems("") == [
        "source: no source (google_v3, azure_v1, azure_packing_2020, synthetic, google_2011) "
        "and no loaded canonical table"]


def test_missing_input_path_fails_fast(tmp_path):
    text = f'google_v3 {{ instance_events {{ path: "{tmp_path}/nothing-*.json.gz" }} }}'
    problems = _problems(text, check_inputs=True)
    assert problems == [f"google_v3.instance_events.path: no file matches "
                        f"'{tmp_path}/nothing-*.json.gz'"]


def test_load_config_reports_missing_file(tmp_path):
    with pytest.raises(run_config.ConfigError, match="config file does not exist"):
        run_config.load_config(str(tmp_path / "absent.textproto"))


@pytest.mark.parametrize("text, expected", [
    ("synthetic { machines: 0 }", "synthetic.machines: must be > 0, got 0"),
    ("synthetic {} overcommit { metric { cpu_percentile: 95 } fortune_teller { name: 'x' "
     "oracle {} } }", None),
    ("synthetic {} overcommit { metric { cpu_percentile: 42 } }",
     "overcommit.metric.cpu_percentile: must be one of 0, 10, ..., 100 or 91..99, got 42"),
    ("synthetic {} overcommit { filter { priority_range { lower_bound: 5 upper_bound: 1 } } }",
     "overcommit.filter.priority_range: lower_bound 5 > upper_bound 1"),
    ("synthetic {} overcommit { fortune_teller { name: 'a' oracle {} } fortune_teller { "
     "name: 'a' predictor { borg_default {} } } }",
     "overcommit.fortune_teller[1].name: 'a' is used twice"),
    ("synthetic {} overcommit { fortune_teller { name: 'p' predictor { max_of { predictors { "
     "rc_like { percentile: 120 } } } } } }",
     "overcommit.fortune_teller[0].predictor.max_of.predictors[0].rc_like.percentile: must be "
     "in [0, 100], got 120.0"),
    ("synthetic {} overcommit { fortune_teller { name: 'p' } }",
     "overcommit.fortune_teller[0]: names neither oracle nor predictor"),
    ("synthetic {} overcommit { metric { avg_cpu: true } fortune_teller { name: 'p' "
     "predictor { borg_default {} } } }",
     "overcommit.fortune_teller: predictors are scored against the first oracle teller: add "
     "one, e.g. fortune_teller { name: \"oracle\" oracle {} }"),
    ("synthetic {} overcommit { fortune_teller { name: 'o' oracle {} } }",
     "overcommit.metric: is required with fortune_teller: avg_cpu, max_cpu, cpu_percentile, "
     "avg_memory or max_memory"),
    ("synthetic {} overcommit { scheduler { by_machine_id: true } }",
     "overcommit.fortune_teller: is required: the overcommit stages run only with fortune "
     "tellers"),
    ("synthetic {} overcommit { metric { avg_cpu: true } fortune_teller { name: 'o' oracle {} "
     "} fortune_teller { name: 'a' predictor { arima { min_fit_samples: 1 } } } }",
     "overcommit.fortune_teller[1].predictor.arima.min_fit_samples: must be in [2, "
     "num_history_samples 120], got 1"),
    ("synthetic {} overcommit { metric { avg_cpu: true } fortune_teller { name: 'o' oracle {} "
     "} fortune_teller { name: 'a' predictor { arima { order { p: 1 d: 1 q: 1 } } } } }",
     "overcommit.fortune_teller[1].predictor.arima.order[0]: must be (p, 1, 0): the "
     "closed-form ARIMA (predictors/peak/arima.py) has one difference and no moving-average "
     "term, got (1, 1, 1)"),
    ("synthetic {} shaping { policy: PESSIMISTIC forecaster: ARIMA k1: 0 k2: 0 "
     "arima_order { p: 2 d: 0 q: 0 } host_shape { cpu: 1 memory: 1 } host_count: 1 }",
     "shaping.arima_order[0]: must be (p, 1, 0): the closed-form ARIMA "
     "(predictors/peak/arima.py) has one difference and no moving-average term, got (2, 0, 0)"),
    ("synthetic {} overcommit { metric { avg_cpu: true } fortune_teller { name: 'o' oracle {} "
     "} fortune_teller { name: 'g' predictor { gaussian_process { pattern_length: 23 } } } }",
     "overcommit.fortune_teller[1].predictor.gaussian_process.pattern_length: must be in [1, "
     "min_fit_samples - 2 = 22] (two training patterns), got 23"),
    ("synthetic {} overcommit { metric { avg_cpu: true } fortune_teller { name: 'o' oracle {} "
     "} fortune_teller { name: 'n' predictor { n_sigma { num_history_samples: 1 } } } }",
     "overcommit.fortune_teller[1].predictor.n_sigma.num_history_samples: must be >= 2 (a "
     "standard deviation needs two), got 1"),
    ("synthetic {} overcommit { metric { avg_cpu: true step_s: 0 } fortune_teller { name: 'o' "
     "oracle {} } }",
     "overcommit.metric.step_s: must be > 0, got 0"),
    ("synthetic {} overcommit { metric { avg_cpu: true } reset_and_shift { random_shift { "
     "lower_bound: 0 } } fortune_teller { name: 'o' oracle {} } }",
     "overcommit.reset_and_shift.random_shift.upper_bound: is required"),
    ("overcommit { scheduled_usage { input { parquet: '/data/scheduled' } } fortune_teller { "
     "name: 'o' oracle { horizon_s: 0 } } }", None),
    ("azure_v1 { vmtable: 'x' } overcommit { fortune_teller { name: 'o' oracle {} } }",
     "overcommit.fortune_teller: needs a usage table: the source gives none and usage is not "
     "loaded"),
    ("azure_v1 { vm_cpu_readings: 'x' } overcommit { metric { cpu_percentile: 90 } "
     "fortune_teller { name: 'o' oracle {} } }",
     "overcommit.metric.cpu_percentile: the Azure V1 trace has only avg_cpu and max_cpu"),
    ("azure_v1 { vm_cpu_readings: 'x' } overcommit { metric { max_cpu: true } "
     "fortune_teller { name: 'o' oracle {} } }",
     "overcommit.scheduler: the Azure V1 trace has no machines: set scheduler.at_random"),
    ("azure_v1 { vmtable: 'x' } placement { policy: BEST_FIT lifetime_source { oracle: true } }",
     "placement.host_shape: is required: this trace has no hosts"),
    ("synthetic {} placement { policy: LAVA lifetime_source { noisy_oracle_accuracy: 1.5 } }",
     "placement.lifetime_source[0].noisy_oracle_accuracy: must be in [0, 1], got 1.5"),
    ("synthetic {} placement { policy: LAVA lifetime_source { uptime_model: true } }",
     "placement.lifetime_source[0]: uptime_model needs a lifetime_model stage"),
    ("synthetic {} placement { policy: LA lifetime_source { oracle: true } "
     "la_class_threshold_s: 600 la_class_threshold_s: 60 }",
     "placement.la_class_threshold_s: must be positive and strictly increasing, got "
     "[600.0, 60.0]"),
    ("synthetic {} placement { policy: LAVA lifetime_source { oracle: true } "
     "lava_recycle_fraction: 0 }",
     "placement.lava_recycle_fraction: must be in (0, 1], got 0.0"),
    ("synthetic {} placement { policy: NILAS lifetime_source { oracle: true } "
     "lars { order: LIFETIME } }",
     "placement.lars.empty_hosts_threshold_pct: is required"),
    ("synthetic {} placement { policy: NILAS lifetime_source { oracle: true } "
     "lars { empty_hosts_threshold_pct: 5 max_inflight: 0 order: BASELINE } }",
     "placement.lars.max_inflight: must be > 0, got 0"),
    ("synthetic {} placement { policy: BEST_FIT lifetime_source { oracle: true } "
     "start_time_us: 10 end_time_us: 5 }",
     "placement.end_time_us: is before start_time_us (5 < 10)"),
    ("synthetic {} lifetime_model { train_fraction: 1 }",
     "lifetime_model.train_fraction: must be in (0, 1), got 1.0"),
    ("synthetic {} output { bigquery_dataset: 'a.b.c' }",
     "output.bigquery_dataset: must be 'dataset' or 'project:dataset' by BigQuery's naming "
     "rules, got 'a.b.c'"),
    ("usage { input { bigquery_table: 'nodot' } } overcommit { fortune_teller { name: 'o' "
     "oracle {} } }",
     "usage.input.bigquery_table: must be 'dataset.table' or 'project:dataset.table' by "
     "BigQuery's naming rules, got 'nodot'"),
])
def test_validation_names_the_field(text, expected):
    problems = _problems(text)
    if expected is None:
        assert problems == []
    else:
        assert expected in problems, problems


def test_cli_validate_exits_2_and_names_the_field(tmp_path):
    path = tmp_path / "bad.textproto"
    path.write_text("synthetic { days: -1 }")
    result = subprocess.run([sys.executable, "-m", "pipelines.cli", "validate", str(path)],
                            capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 2
    assert "synthetic.days: must be > 0, got -1.0" in result.stderr
