"""The lifetime stage end to end: examples, dead letters, split, model files, evaluation tables,
the notebook; on hand-made instances with a planted signal and on the real Azure sample."""

import gzip
import itertools
import json
import os

import matplotlib.image
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines import config as run_config
from pipelines import schemas
from pipelines.stages.lifetime.examples import trace_span
from pipelines.stages.lifetime.models import load_model, read_model_files
from pipelines.stages.lifetime.training import train_and_evaluate
from predictors.lifetime.boosting import time_validation_mask
from predictors.lifetime.evaluation import (
    DEFAULT_RECALLS,
    concordance_table,
    decision_thresholds_at_recall,
    long_lived_by_age,
    long_lived_metrics,
)
from predictors.lifetime.examples import (
    default_uptime_ages_s,
)
from predictors.lifetime.kaplan_meier import KaplanMeierLifetimeModel
from predictors.lifetime.la_classifier import LaClassifier
from predictors.lifetime.uptime_classifier import UptimeLongLivedClassifier
from predictors.lifetime.uptime_model import UptimeLifetimeModel
from tests.helpers import run_text_config
from tests.lifetime_cases import (
    AGES_S,
    BAD,
    CAP_S,
    LIFETIME_CONFIG,
    TRAIN_FRACTION,
    expected_split,
    hand_made_instances,
    reference_examples,
    write_instances,
)

US = 10**6
DAY_S = 86400
NOTEBOOK = os.path.join(os.path.dirname(__file__), "..", "notebooks", "lifetime.ipynb")
@pytest.fixture(scope="module")
def hand_made_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lifetime")
    frame = hand_made_instances()
    directory = write_instances(frame, root / "input_instances")
    output = root / "out"
    tables = run_text_config(f'instances {{ input {{ parquet: "{directory}" }} }}\n'
                             + LIFETIME_CONFIG, output)
    return frame, tables, output


def test_examples_equal_a_per_row_reference_at_absolute_ages(hand_made_run):
    frame, tables, _ = hand_made_run
    split_us, observation_end, parts, view_end = expected_split(frame, CAP_S, TRAIN_FRACTION)
    expected = reference_examples(frame, parts, view_end, split_us, observation_end, CAP_S)
    got = tables["lifetime_examples"]
    assert list(got.columns) == schemas.LIFETIME_EXAMPLES.names
    keys = ["split", "instance_id", "uptime_s"]
    got = got.sort_values(keys).reset_index(drop=True)
    expected = expected.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(got[expected.columns], expected, check_exact=False,
                                  rtol=1e-12)
    assert default_uptime_ages_s(CAP_S) == AGES_S
    assert set(got["uptime_s"]) == set(AGES_S)
    assert got["censored"].sum() > 0  # test instances alive for more than a day at the end
    assert set(got["instance_id"]) <= {f"ok{i}" for i in range(len(frame))}


def test_split_table_accounts_for_every_valid_instance(hand_made_run):
    frame, tables, _ = hand_made_run
    split_us, observation_end, parts, view_end = expected_split(frame, CAP_S, TRAIN_FRACTION)
    split = tables["lifetime_split"].set_index("split")
    assert list(tables["lifetime_split"].columns) == schemas.LIFETIME_SPLIT.names
    assert list(split.index) == ["train", "train_recent", "test", "started_before_trace"]
    for part, rows in parts.items():
        finished = int(np.count_nonzero(rows & ~np.isnan(view_end)))
        assert split.loc[part, "instances"] == rows.sum(), part
        assert split.loc[part, "finished"] == finished, part
        assert split.loc[part, "censored"] == rows.sum() - finished, part
    examples = tables["lifetime_examples"]["split"].value_counts()
    assert split.loc["train", "examples"] == examples["train"]
    assert split.loc["test", "examples"] == examples["test"]
    assert split.loc["started_before_trace", "instances"] == 20
    assert (split["split_time_us"] == split_us).all()
    assert split.loc["test", "observation_end_us"] == observation_end
    assert split.loc["train", "observation_end_us"] == split_us


def test_bad_instances_are_dead_letters_and_unlearnable_ones_exclusions(hand_made_run):
    frame, tables, _ = hand_made_run
    excluded = tables["exclusions"]
    excluded = excluded[excluded["stage"] == "lifetime"]
    assert dict(zip(excluded["reason"], excluded["rows"])) == {
        BAD["zero"]: 2, BAD["featureless"]: 2}
    dead = tables["dead_letters"]
    dead = dead[dead["source"] == "lifetime"]
    assert len(dead) == 2 and set(dead["table"]) == {"instances"}
    for row in dead.itertuples():
        raw = json.loads(row.raw)
        assert row.reason == BAD[raw["instance_id"].rstrip("01")]
        original = frame.set_index("instance_id").loc[raw["instance_id"]]
        assert raw["start_time"] == original["start_time"]
        assert raw["end_time"] == original["end_time"]


def _validation_part(frame):
    """The latest-starting 10 % of the regressors' training instances, seen at the split."""
    split_us, _, parts, view_end = expected_split(frame, CAP_S, TRAIN_FRACTION)
    table = pa.Table.from_pandas(frame, preserve_index=False).to_pandas()
    table["end_time"] = pd.array(view_end, dtype="Int64")
    train = table[parts["train"]].reset_index(drop=True)
    return train[time_validation_mask(train["start_time"].to_numpy(np.float64), 0.1)]


def _test_part(frame):
    """The test instances as the stage reads them (Arrow → pandas), with the split."""
    split_us, observation_end, parts, _ = expected_split(frame, CAP_S, TRAIN_FRACTION)
    table = pa.Table.from_pandas(frame, preserve_index=False).to_pandas()
    return table[parts["test"]].reset_index(drop=True), observation_end


def test_models_load_from_their_files_and_reproduce_the_evaluation(hand_made_run):
    frame, tables, output = hand_made_run
    models = tables["lifetime_models"].set_index("name")
    assert list(tables["lifetime_models"].columns) == schemas.LIFETIME_MODELS.names
    assert list(models.index) == ["uptime", "no_uptime", "uptime_lifetime_fractions",
                                  "kaplan_meier", "la_classifier", "uptime_long_lived"]
    assert models["augmentation"].tolist()[:3] == ["ABSOLUTE_AGES", "ABSOLUTE_AGES",
                                                   "LIFETIME_FRACTIONS"]
    assert models["augmentation"].iloc[3:].isna().all()
    assert all(p.startswith(str(output / "models")) for p in models["path"])
    loaded = {name: load_model(path) for name, path in models["path"].items()}
    classes = [UptimeLifetimeModel, UptimeLifetimeModel, UptimeLifetimeModel,
               KaplanMeierLifetimeModel, LaClassifier, UptimeLongLivedClassifier]
    assert [type(m) for m in loaded.values()] == classes
    assert not loaded["no_uptime"].use_uptime
    assert models.loc["uptime", "features"][-1] == "log10_uptime_s"
    assert models.loc["uptime", "train_examples"] == (
        tables["lifetime_examples"]["split"] == "train").sum()
    assert models.loc["kaplan_meier", "num_trees"] is None or np.isnan(
        models.loc["kaplan_meier", "num_trees"])
    # The local loader, without Beam, reads the same files.
    local = UptimeLifetimeModel.load(models.loc["uptime", "path"])
    test, observation_end = _test_part(frame)
    uptime_s = np.linspace(0, 2 * DAY_S, len(test))
    np.testing.assert_array_equal(local.predict_remaining(test, uptime_s),
                                  loaded["uptime"].predict_remaining(test, uptime_s))

    concordance = concordance_table(loaded, test, observation_end_us=observation_end,
                                    cap_s=CAP_S)
    pd.testing.assert_frame_equal(concordance, tables["lifetime_concordance"][
        concordance.columns].astype(concordance.dtypes.to_dict()))
    # The decisions come from the validation slice of the training period, never the test:
    # a predicted lifetime for the regressor, a probability for the uptime classifier.
    validation = _validation_part(frame)
    for model_name in ("uptime", "uptime_long_lived"):
        decisions = decision_thresholds_at_recall(
            loaded[model_name], validation, AGES_S, target_recall=0.7,
            observation_end_us=expected_split(frame, CAP_S, TRAIN_FRACTION)[0],
            threshold_s=43200)
        long_lived = long_lived_metrics(
            loaded[model_name], test, observation_end_us=observation_end, threshold_s=43200,
            decision_threshold_s=decisions[0], recalls=DEFAULT_RECALLS)
        by_age = long_lived_by_age(loaded[model_name], test, AGES_S, decisions,
                                   observation_end_us=observation_end, threshold_s=43200)
        for name, expected in (("lifetime_long_lived", long_lived),
                               ("lifetime_f1_by_age", by_age)):
            table = tables[name]
            table = table[table["model"] == model_name].reset_index(drop=True)
            assert (table["target_recall"] == 0.7).all(), name
            assert len(table) == len(expected), name
            for column in expected.columns:
                np.testing.assert_allclose(table[column].to_numpy(np.float64),
                                           expected[column].to_numpy(np.float64), rtol=0,
                                           err_msg=f"{model_name} {name}.{column}")
    assert (tables["lifetime_f1_by_age"].query("model == 'uptime_long_lived'")[
        "decision_threshold"].between(0, 1)).all()


def test_model_files_of_another_kind_or_feature_set_are_clear_errors(hand_made_run, tmp_path):
    frame, tables, _ = hand_made_run
    paths = tables["lifetime_models"].set_index("name")["path"]
    with pytest.raises(ValueError, match="'la_classifier' model, expected"):
        UptimeLifetimeModel.from_files(read_model_files(paths["la_classifier"]))
    test, _ = _test_part(frame)
    with pytest.raises(ValueError, match="collection_logical_name"):
        load_model(paths["uptime"]).predict_remaining(
            test.drop(columns=["collection_logical_name"]), 0.0)
    with pytest.raises(ValueError, match="metadata.json is missing"):
        load_model(str(tmp_path))


def test_evaluation_tables_have_their_columns_and_the_planted_signal(hand_made_run):
    frame, tables, _ = hand_made_run
    for name in ("lifetime_long_lived", "lifetime_la_classifier", "lifetime_f1_by_age",
                 "lifetime_f1_by_uptime", "lifetime_error_histogram", "lifetime_concordance"):
        assert list(tables[name].columns) == schemas.TABLES[name].names, name
    test, observation_end = _test_part(frame)
    n_finished = int(test["end_time"].notna().sum())

    f1 = tables["lifetime_f1_by_uptime"]
    assert len(f1) == 4 * 10 and (f1["n"] == n_finished).all()
    assert f1["leaks_lifetime"].all() and (f1["decision_threshold_s"] == 43200).all()
    for name, rows in f1.groupby("model"):
        assert rows["quantile"].tolist() == list(range(10)), name
    histogram = tables["lifetime_error_histogram"]
    for name, rows in histogram.groupby("model"):
        assert rows["initial_count"].sum() == n_finished, name
        assert rows["with_repredictions_count"].sum() == 10 * n_finished, name
        assert rows["initial_fraction"].sum() == pytest.approx(1.0)
    for name in ("lifetime_long_lived", "lifetime_la_classifier", "lifetime_f1_by_age",
                 "lifetime_f1_by_uptime"):
        values = tables[name][["precision", "recall", "f1"]].to_numpy()
        assert ((values >= 0) & (values <= 1)).all(), name

    # By absolute age: every regressor at every age of the grid, on the test VMs alive then.
    by_age = tables["lifetime_f1_by_age"]
    duration_s = (test["end_time"].astype("float64").fillna(observation_end)
                  - test["start_time"]).to_numpy() / US
    for name, rows in by_age.groupby("model"):
        assert rows["uptime_s"].tolist() == list(AGES_S), name
        alive = [int(np.count_nonzero(duration_s > a)) for a in AGES_S]
        assert (rows["n"].to_numpy() <= alive).all() and rows["n"].iloc[0] > 0, name
        assert (rows["decision_threshold"] <= 43200).all(), name
    # With absolute ages, the model tells long jobs from short ones at 1 minute of uptime.
    uptime = by_age[by_age["model"] == "uptime"].set_index("uptime_s")
    assert uptime.loc[60, "auc"] > 0.9
    assert uptime.loc[60, "max_predicted_remaining_s"] > 43200 / 2

    # The job name decides the lifetime: the models rank and classify well.
    c_index = tables["lifetime_concordance"].set_index("model")["c_index"]
    assert c_index["uptime"] > 0.85 and c_index["la_classifier"] > 0.8
    long_lived = tables["lifetime_long_lived"].set_index("model")
    assert long_lived.loc["uptime", "auc"] > 0.95
    assert long_lived.loc["uptime", "n_positive"] > 20
    la = tables["lifetime_la_classifier"].iloc[0]
    assert la["auc"] > 0.95 and la["threshold_s"] == 7200
    # Repredicting from uptime beats subtracting the uptime from the arrival prediction.
    errors = histogram.set_index(["model", "error_lower"])["with_repredictions_fraction"]
    large = {m: errors[m][errors[m].index >= 1.0].sum() for m in ("uptime", "no_uptime")}
    assert large["uptime"] < 0.5 * large["no_uptime"]


@pytest.mark.slow
def test_notebook_draws_the_figures_from_the_outputs(hand_made_run, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    import nbformat

    _, _, output = hand_made_run
    monkeypatch.setenv("FLEETCAST_RESULTS", str(output))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3", resources={
        "metadata": {"path": os.path.dirname(NOTEBOOK)}}).execute()
    for name in ("lifetime_f1_vs_uptime", "lifetime_error_histogram",
                 "lifetime_model_comparison"):
        path = output / f"{name}.png"
        assert path.stat().st_size > 10_000, name
        pixels = matplotlib.image.imread(str(path))
        assert pixels.shape[0] > 300 and pixels.shape[1] > 500, name
        assert pixels[..., :3].std() > 0.05, name  # not a blank canvas


def test_a_training_period_shorter_than_the_cap_is_a_clear_error():
    frame = hand_made_instances(n=200)
    config = run_config.parse_config("synthetic {}\n" + LIFETIME_CONFIG).lifetime_model
    config.lifetime_cap_s = 8 * DAY_S
    table = pa.Table.from_pandas(frame, preserve_index=False)
    with pytest.raises(ValueError, match="no training instance started lifetime_cap_s"):
        list(train_and_evaluate((None, {"instances": [table], "span": [trace_span(table, 0)],
                                        "cut": [(table.num_rows, None)]}), config, "unused"))


@pytest.mark.parametrize("block, problem", [
    ('feature: "bogus"', "lifetime_model.feature[0]: unknown feature 'bogus'"),
    ('kaplan_meier_stratum_feature: "cpu_request"',
     "lifetime_model.kaplan_meier_stratum_feature[0]: 'cpu_request' is not a categorical"),
    ("num_leaves: 1", "lifetime_model.num_leaves: must be >= 2"),
    ("validation_fraction: 1", "lifetime_model.validation_fraction: must be in [0, 1)"),
    ("min_remaining_s: 100 lifetime_cap_s: 10",
     "lifetime_model.min_remaining_s: must not exceed lifetime_cap_s 10"),
    ("la_target_recall: 1.5", "lifetime_model.la_target_recall: must be in [0, 1]"),
    ("num_threads: 0", "lifetime_model.num_threads: must be > 0"),
    ('examples { input { parquet: "x" } }', "lifetime_model.examples: only output"),
])
def test_config_errors_name_the_lifetime_field(block, problem):
    config = run_config.parse_config(f"synthetic {{}} lifetime_model {{ {block} }}")
    problems = [str(p) for p in run_config.validate(config)]
    assert any(p.startswith(problem) for p in problems), problems


@pytest.fixture(scope="module")
def azure_run(tmp_path_factory, azure_vmtable):
    root = tmp_path_factory.mktemp("azure")
    # Every 5th VM of the 3.5 days keeps the test quick (deployment sizes shrink with it).
    subset = root / "vmtable.csv.gz"
    with gzip.open(azure_vmtable, "rt") as source, gzip.open(subset, "wt") as sample:
        sample.writelines(itertools.islice(source, 0, None, 5))
    tables = run_text_config(f"""
        azure_v1 {{ vmtable: "{subset}" }}
        lifetime_model {{
          train_fraction: 0.6 lifetime_cap_s: 86400 num_threads: 1
          num_trees: 60 learning_rate: 0.2 early_stopping_rounds: 0
          long_lived_threshold_s: 43200 num_shards: 4
        }}""", root / "out")
    return pd.read_csv(subset, header=None), tables


@pytest.mark.real_data
@pytest.mark.slow
def test_azure_sample_examples_split_and_evaluation(azure_run):
    raw, tables = azure_run
    assert len(tables["dead_letters"]) == 0
    split = tables["lifetime_split"].set_index("split")
    assert split["instances"].sum() == len(raw)
    assert split.loc["started_before_trace", "instances"] == 0
    # Finished VMs give an example at each age of the grid they live past (at least at 0);
    # censored ones only where a full day is left.
    examples = tables["lifetime_examples"]
    for part in ("train", "test"):
        rows = examples[examples["split"] == part]
        finished = rows[~rows["censored"]]
        assert (finished["uptime_s"] == 0).sum() == split.loc[part, "finished"], part
        assert len(rows) == split.loc[part, "examples"], part
    assert set(examples["uptime_s"]) == {0, 60, 300, 900, 1800, 3600, 7200, 14400, 28800,
                                         57600}
    assert examples["log10_remaining_s"].max() == pytest.approx(np.log10(86400))

    # Bars measured on this subset: C-index 0.65 (uptime), 0.54 (Kaplan-Meier per VM size);
    # LA AUC 0.80; long-lived (> 12 h) AUC 0.76; F1 0 at arrival, 0.74 past 60 % uptime
    # (with the fixed 12-hour decision and the paper's fractional examples).
    c_index = tables["lifetime_concordance"].set_index("model")["c_index"]
    assert c_index["uptime"] > 0.6 and c_index["uptime"] > c_index["kaplan_meier"]
    assert tables["lifetime_la_classifier"]["auc"].iloc[0] > 0.72
    long_lived = tables["lifetime_long_lived"].set_index("model")
    assert long_lived.loc["uptime", "auc"] > 0.65
    f1 = tables["lifetime_f1_by_uptime"]
    uptime_f1 = f1[f1["model"] == "uptime"].sort_values("quantile")["f1"].to_numpy()
    assert uptime_f1[12:].mean() > uptime_f1[0] + 0.3  # Fig. 9: F1 rises with uptime
    for path in tables["lifetime_models"]["path"]:
        assert load_model(path).feature_names, path
