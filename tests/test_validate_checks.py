"""`fleetcast validate` catches what a run would fail on or silently lose (issue 51): a
feature named twice, history features without the customer_history that fills them, a split
with no instance to test (or train) on, a customer column the source never fills,
customer_history that no stage reads; `fleetcast run` refuses an unknown --runner before it
builds anything; and an evaluation row with no instance says n = 0 with null metrics."""

import gzip
import pathlib
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from pipelines import commands
from predictors.lifetime.evaluation import binary_classification_metrics, f1_by_uptime

FLEETCAST = pathlib.Path(sys.executable).parent / "fleetcast"
REPO = pathlib.Path(__file__).parent.parent
# 0.25 days: the synthetic trace ends at 21,600,000,000 µs.
SOURCE = "synthetic { machines: 2 days: 0.25 seed: 1 }\n"
CONFIG = "c.textproto"


def fleetcast(tmp_path, *args):
    """Runs the installed `fleetcast` executable in `tmp_path` as a user would."""
    return subprocess.run([str(FLEETCAST), *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)


def validate(tmp_path, text: str):
    (tmp_path / CONFIG).write_text(text)
    return fleetcast(tmp_path, "validate", CONFIG)


def lifetime(fields: str, history: str = "") -> str:
    return f"{SOURCE}{history}lifetime_model {{ lifetime_cap_s: 3600 {fields} }}\n"


@pytest.mark.parametrize("text, problem", [
    (lifetime('feature: "priority" feature: "user" feature: "priority"'),
     "lifetime_model.feature[2]: names 'priority' a second time (first at feature[0]): a "
     "model takes each feature once"),
    (lifetime('variant { name: "a" feature: "user" } '
              'variant { name: "b" feature: "priority" feature: "user" feature: "priority" }'),
     "lifetime_model.variant[1].feature[2]: names 'priority' a second time (first at "
     "feature[0]): a model takes each feature once"),
    (lifetime('feature: "priority" feature: "customer_prior_instances"'),
     "lifetime_model.feature[1]: 'customer_prior_instances' is a customer-history column, "
     "null in every row without a customer_history block: add customer_history { }"),
    (lifetime('variant { name: "a" feature: "customer_lifetime_p50_s" }'),
     "lifetime_model.variant[0].feature[0]: 'customer_lifetime_p50_s' is a customer-history "
     "column, null in every row without a customer_history block: add customer_history { }"),
    (lifetime('feature: "customer_prior_long" feature: "logical_name_prior_long"',
              "customer_history { logical_name: false }\n"),
     "lifetime_model.feature[1]: 'logical_name_prior_long' is null in every row with "
     "customer_history.logical_name false: set it to true"),
    (lifetime("split_time_us: 21600000000"),
     "lifetime_model.split_time_us: must be before the trace's end at 21600000000 µs, or no "
     "instance is left to test on; got 21600000000"),
    (lifetime("split_time_us: 0"),
     "lifetime_model.split_time_us: must be after trace_start_us 0 (the instances starting "
     "at or before it have no known lifetime), or no instance is left to train on; got 0"),
    (lifetime("train_fraction: 1"),
     "lifetime_model.train_fraction: must be in (0, 1), got 1.0"),
])
def test_refused_naming_the_field(tmp_path, text, problem):
    result = validate(tmp_path, text)
    assert result.returncode == 2, result.stdout
    assert result.stderr == f"fleetcast: {CONFIG}: {problem}\n"
    assert result.stdout == ""


@pytest.mark.parametrize("text, warning", [
    (lifetime("", 'customer_history { customer_column: "subscription_id" }\n'),
     "customer_history.customer_column: the synthetic trace never fills subscription_id (it "
     "fills user), so every customer_* column is null"),
    ('google_v3 { instance_events { path: "events.json" } machine_events { path: '
     '"events.json" } }\ncustomer_history { }\nlifetime_model { }\n',
     "customer_history: the Google v3 trace as configured fills no customer column (user, "
     "subscription_id), so every customer_* column is null"),
    (f"{SOURCE}customer_history {{ }}\n",
     "customer_history: no stage reads its customer_* and logical_name_* columns (the run has "
     "no lifetime_model); they only fill the instances table"),
    (lifetime('variant { name: "a" feature: "priority" } variant { name: "b" feature: "user" }',
              "customer_history { }\n"),
     "customer_history: no stage reads its customer_* and logical_name_* columns (no "
     "lifetime_model feature list names one); they only fill the instances table"),
])
def test_warned_naming_the_field(tmp_path, text, warning):
    (tmp_path / "events.json").write_text("")
    result = validate(tmp_path, text)
    assert result.returncode == 0, result.stderr
    assert result.stderr == f"fleetcast: warning: {CONFIG}: {warning}\n"
    assert result.stdout.startswith(f"{CONFIG}: valid config 'c'")


@pytest.mark.parametrize("text", [
    # Every feature (customer history's included), or some history features, read it.
    lifetime("", "customer_history { }\n"),
    lifetime('variant { name: "a" feature: "priority" } variant { name: "b" feature: '
             '"customer_prior_long" feature: "logical_name_prior_long" }',
             "customer_history { }\n"),
    # The last µs of the trace still leaves instances to test on.
    lifetime("split_time_us: 21599999999"),
    lifetime("split_time_us: 1 trace_start_us: -5"),
])
def test_no_false_refusal_or_warning(tmp_path, text):
    result = validate(tmp_path, text)
    assert (result.returncode, result.stderr) == (0, "")


def test_a_loaded_instances_table_may_carry_the_history_columns(tmp_path):
    result = validate(tmp_path, 'instances { input { parquet: "earlier/instances" } }\n'
                                'lifetime_model { feature: "customer_prior_long" '
                                'split_time_us: 864000000000 }\n')
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"fleetcast: warning: {CONFIG}: instances.input.parquet: no file matches "
        "'earlier/instances/*' (the config is valid; `fleetcast run` fails until the input "
        "is there)\n")


def test_every_shipped_config_still_validates():
    configs = sorted(str(p.relative_to(REPO)) for p in (REPO / "configs").glob("*.textproto"))
    result = fleetcast(REPO, "validate", *configs)
    assert result.returncode == 0, result.stderr
    assert "customer_history" not in result.stderr and "split_time_us" not in result.stderr
    assert result.stdout.count(": valid config ") == len(configs)


RUNNERS = ("the runners: DirectRunner, FlinkRunner, SparkRunner, DataflowRunner, "
           "apache_beam.runners.dask.dask_runner.DaskRunner (docs/runners.md)")


@pytest.mark.parametrize("runner, problem", [
    ("FlinkRuner", "unknown runner"),
    ("DaskRunner", "unknown runner"),
    ("apache_beam.runners.dask.dask_runner.DaskRunnr",
     "module apache_beam.runners.dask.dask_runner has no DaskRunnr"),
    ("apache_beam.runners.nowhere.Runner",
     "cannot import the runner: No module named 'apache_beam.runners.nowhere'"),
])
def test_an_unknown_runner_is_one_line_listing_the_runners(tmp_path, runner, problem):
    (tmp_path / CONFIG).write_text(SOURCE)
    result = fleetcast(tmp_path, "run", CONFIG, "--output_dir", "out", f"--runner={runner}")
    assert result.returncode == 2
    assert result.stderr == f"fleetcast: --runner={runner}: {problem}; {RUNNERS}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [CONFIG]  # nothing built or written


@pytest.mark.parametrize("runner", ["DirectRunner", "direct", "dataflow", "PrismRunner",
                                    "apache_beam.runners.dask.dask_runner.DaskRunner"])
def test_every_runner_beam_knows_passes(runner):
    commands.check_beam_args([f"--runner={runner}"])


def test_metrics_without_an_instance_are_null_with_n_0():
    none = np.array([], dtype=bool)
    row = binary_classification_metrics(none, np.array([]), 0.5)
    by_uptime = f1_by_uptime(np.array([]), np.zeros((0, 2)), np.zeros((0, 2)))
    for frame in (row, by_uptime):
        assert (frame["n"] == 0).all()
        table = pa.Table.from_pandas(frame)
        for metric in ("precision", "recall", "f1"):
            assert table.column(metric).null_count == len(frame), metric
    # With instances, a zero denominator is still 0 (nothing predicted long).
    row = binary_classification_metrics(np.array([True, False]), np.array([0.1, 0.2]), 0.5)
    assert row[["precision", "recall", "f1"]].iloc[0].tolist() == [0.0, 0.0, 0.0]


def _google_2011_jobs(tmp_path, split_us: int) -> str:
    """A JOBS config over two hand-made job_events parts whose last event is at 5e9 µs."""
    (tmp_path / "job_events").mkdir(exist_ok=True)
    for number, times in ((0, (600_000_000, 1_000_000_000)), (1, (2_000_000_000, 5_000_000_000,
                                                                  2**63 - 1))):
        with gzip.open(tmp_path / "job_events" / f"part-{number:05d}-of-00500.csv.gz",
                       "wt") as f:
            f.write("".join(f"{t},,{i},1,user,0,name,lname\n" for i, t in enumerate(times)))
    return (f'google_2011 {{ unit: JOBS job_events: "job_events/part-*-of-00500.csv.gz" }}\n'
            f"lifetime_model {{ lifetime_cap_s: 3600 split_time_us: {split_us} }}\n")


def test_a_split_at_or_after_a_real_traces_last_event_is_refused(tmp_path):
    result = validate(tmp_path, _google_2011_jobs(tmp_path, 5_000_000_000))
    assert result.returncode == 2, result.stdout
    assert result.stderr == (
        f"fleetcast: {CONFIG}: lifetime_model.split_time_us: must be before the trace's last "
        "event (in google_2011.job_events part-00001-of-00500.csv.gz) at 5000000000 µs, or no "
        "instance is left to test on; got 5000000000\n")
    passed = validate(tmp_path, _google_2011_jobs(tmp_path, 4_999_999_999))
    assert passed.returncode == 0, passed.stderr
