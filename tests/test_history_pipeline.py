"""Customer history through the pipeline: the Beam step against the brute-force reference,
and a run whose lifetime models know the customer (variants, the age of the model, feature
importance) feeding placement replays by variant."""

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.util import assert_that

from configs import fleetcast_pb2
from fleetcast_testing.reference.history import history_statistics as reference_statistics
from pipelines import config as run_config
from pipelines import schemas
from pipelines.history import AddHistory
from pipelines.io.sinks import ReadTable
from pipelines.report import write_report
from predictors.lifetime.history import HISTORY_STATISTICS, history_column
from tests.helpers import loaded_tables_text, run_text_config

US = 10**6
DAY_S = 86400


def _random_instances(seed: int, n: int = 600) -> pd.DataFrame:
    """Instances of a few users (some only with an Azure-style subscription, some with
    neither) and logical names over 5 days, with ties, censoring, starts before the trace
    and a zero lifetime."""
    rng = np.random.default_rng(seed)
    start_us = rng.integers(0, 5 * DAY_S // 60, n) * 60 * US  # whole minutes: ties
    start_us[:20] = 0  # running when the trace began
    lifetime_us = (10 ** rng.uniform(1, 5.5, n) * US).astype(np.int64)
    lifetime_us[25] = 0
    ended = rng.random(n) > 0.1
    user = rng.choice(["u0", "u1", "u2", "u3", None], n)
    subscription = np.where(rng.random(n) < 0.5, rng.choice(["s0", "s1"], n), None)
    name = rng.choice(["a", "b", "c", "d", "e", "f", None], n)
    return pd.DataFrame({
        "instance_id": [f"{i}:0" for i in range(n)], "start_time": start_us,
        "end_time": pd.Series(start_us + lifetime_us, dtype="Int64").where(ended),
        "user": user, "subscription_id": subscription, "collection_logical_name": name})


def _as_instances(frame: pd.DataFrame) -> pa.Table:
    n = len(frame)
    columns = {f.name: (pa.array(frame[f.name], f.type) if f.name in frame
                        else pa.nulls(n, f.type)) for f in schemas.INSTANCES}
    return pa.Table.from_pydict(columns, schema=schemas.INSTANCES)


def _expected(frame: pd.DataFrame, key: pd.Series, config) -> dict:
    codes = pd.factorize(key)[0]  # -1 for a missing key
    start = frame["start_time"].to_numpy(np.int64)
    ended = frame["end_time"].notna().to_numpy()
    end = frame["end_time"].fillna(0).to_numpy(np.int64)
    return reference_statistics(
        codes, start, end, ended, (start > config.trace_start_us) & (~ended | (end > start)),
        long_lived_threshold_s=config.long_lived_threshold_s, lookback_s=config.lookback_s)


@pytest.mark.parametrize("seed,lookback_s", [(0, 0), (1, DAY_S), (2, 3 * 3600)])
def test_the_beam_step_matches_the_reference_per_key(seed, lookback_s):
    frame = _random_instances(seed)
    config = fleetcast_pb2.CustomerHistoryConfig(lookback_s=lookback_s, num_shards=3,
                                                 long_lived_threshold_s=3600)
    table = _as_instances(frame)
    # Three input tables of mixed keys: every key's rows must meet in one shard.
    pieces = [table.slice(0, 150), table.slice(150, 300), table.slice(450)]

    def check(outputs):
        got = pa.concat_tables(outputs).to_pandas().set_index("instance_id").loc[
            frame["instance_id"]]
        assert len(got) == len(frame)
        customer = frame["user"].fillna(frame["subscription_id"])
        for key, values in (("customer", customer),
                            ("logical_name", frame["collection_logical_name"])):
            expected = _expected(frame, values, config)
            for statistic in HISTORY_STATISTICS:
                column = got[history_column(key, statistic)].to_numpy(np.float64)
                np.testing.assert_allclose(column, expected[statistic], rtol=1e-9,
                                           atol=1e-12, equal_nan=True,
                                           err_msg=f"{key} {statistic}")
            # Rows without the key are null (NaN in pandas), the others have counts.
            missing = values.isna().to_numpy()
            assert np.isnan(got[history_column(key, "prior_instances")][missing]).all()
            assert not np.isnan(got[history_column(key, "prior_instances")][~missing]).any()

    with beam.Pipeline(runner="DirectRunner") as pipeline:
        outputs = (pipeline | beam.Create(pieces) | AddHistory(config)
                   | beam.combiners.ToList())
        assert_that(outputs, lambda lists: check(lists[0]))


def test_a_named_customer_column_is_used_alone():
    frame = _random_instances(3)
    config = fleetcast_pb2.CustomerHistoryConfig(customer_column="subscription_id",
                                                 logical_name=False, num_shards=2)

    def check(outputs):
        got = pa.concat_tables(outputs).to_pandas().set_index("instance_id").loc[
            frame["instance_id"]]
        expected = _expected(frame, frame["subscription_id"], config)
        np.testing.assert_array_equal(got["customer_prior_instances"],
                                      expected["prior_instances"])
        assert got["logical_name_prior_instances"].isna().all()

    with beam.Pipeline(runner="DirectRunner") as pipeline:
        outputs = (pipeline | beam.Create([_as_instances(frame)]) | AddHistory(config)
                   | beam.combiners.ToList())
        assert_that(outputs, lambda lists: check(lists[0]))


def _customer_instances(n: int = 2400, seed: int = 0) -> list:
    """Instances over 8 days whose lifetime only the user tells: user u lives about
    10^(2 + 0.25 u) s (100 s to ~18 h); hosts fit 10 of them."""
    rng = np.random.default_rng(seed)
    user = rng.integers(0, 12, n)
    start_s = np.sort(rng.uniform(600, 8 * DAY_S, n))
    end_s = start_s + 10 ** (2 + 0.25 * user + rng.normal(0, 0.1, n))
    ended = end_s < 8 * DAY_S
    return [{"instance_id": f"{i}:0", "collection_id": i, "instance_index": 0,
             "start_time": int(s * US), "end_time": int(e * US) if done else None,
             "cpu_request": 0.1, "memory_request": 0.1, "priority": 0,
             "scheduling_class": 1, "user": f"user{u}", "pool": "cell"}
            for i, (s, e, done, u) in enumerate(zip(start_s, end_s, ended, user))]


RUN_CONFIG = """
customer_history {{ long_lived_threshold_s: 3600 num_shards: 2 }}
lifetime_model {{
  split_time_us: {split_us} lifetime_cap_s: 86400 la_threshold_s: 3600
  long_lived_threshold_s: 3600 evaluation_period_s: 86400
  num_trees: 60 learning_rate: 0.2 early_stopping_rounds: 0
  train_no_uptime_ablation: false train_kaplan_meier: false
  train_uptime_long_lived_classifier: false num_uptime_quantiles: 4 num_shards: 2
  variant {{ name: "no_customer" feature: "start_hour_of_day" feature: "scheduling_class" }}
  variant {{ name: "customer" feature: "start_hour_of_day" feature: "scheduling_class"
            feature: "customer_prior_long" feature: "customer_lifetime_p50_s" }}
}}
placement {{
  policy: BEST_FIT policy: NILAS
  lifetime_source {{ oracle: true }}
  lifetime_source {{ uptime_model: true model_variant: "customer" }}
  lifetime_source {{ uptime_model: true model_variant: "no_customer" }}
  host_shape {{ cpu: 1 memory: 1 }} host_count: 40
  start_time_us: {split_us} warmup_s: 43200 sample_period_s: 1800 stranding_every: 0
}}
output {{ num_shards: 1 }}
"""


def test_models_that_know_the_customer_by_variant(tmp_path):
    split_us = 5 * DAY_S * US
    text = (loaded_tables_text(tmp_path, {"instances": _customer_instances()})
            + RUN_CONFIG.format(split_us=split_us))
    tables = run_text_config(text, tmp_path / "out")
    models = tables["lifetime_models"]
    assert sorted(zip(models["variant"], models["name"])) == [
        ("customer", "la_classifier"), ("customer", "uptime"),
        ("no_customer", "la_classifier"), ("no_customer", "uptime")]
    assert all(path.endswith(f"/models/{v}/{n}")
               for path, v, n in zip(models["path"], models["variant"], models["name"]))
    auc = tables["lifetime_la_classifier"].set_index("variant")["auc"]
    assert auc["customer"] > 0.95 and auc["customer"] > auc["no_customer"] + 0.2
    concordance = tables["lifetime_concordance"].set_index(["variant", "model"])["c_index"]
    assert concordance["customer", "uptime"] > concordance["no_customer", "uptime"] + 0.2
    # The age of the model: one row per model and day of the 3 test days.
    by_period = tables["lifetime_by_period"]
    assert sorted(set(by_period["period"])) == [0, 1, 2]
    day0 = by_period[(by_period["period"] == 0) & (by_period["model"] == "la_classifier")]
    assert (day0["period_start_us"] == split_us).all()
    assert day0["instances"].sum() == 2 * sum(
        split_us <= r["start_time"] < split_us + DAY_S * US for r in _customer_instances())
    importance = tables["lifetime_feature_importance"]
    top = importance[importance["variant"] == "customer"].sort_values("gain").groupby(
        "model").tail(1)
    assert set(top["feature"]) <= {"customer_prior_long", "customer_lifetime_p50_s"}
    np.testing.assert_allclose(importance.groupby(["variant", "model"])["gain_fraction"].sum(),
                               1.0)
    # Placement replays each variant's model under its own label.
    sources = set(tables["placement_summary"]["lifetime_source"])
    assert {"oracle", "uptime_model@customer", "uptime_model@no_customer"} <= sources
    # The report names each model by its variant and draws the age of the models.
    page = write_report(str(tmp_path / "out")).read_text()
    assert "la_classifier@customer" in page and "la_classifier@no_customer" in page
    assert 'id="lifetime_aging"' in page
    # ... and reads the sweep as an ablation, in the config's order.
    assert ("Ablation over 2 feature variants, in the config&#x27;s order: no_customer → "
            "customer.") in page
    assert "<td>+ customer_prior_long, customer_lifetime_p50_s</td>" in page


@pytest.mark.parametrize("edit,field,message", [
    ("variant { name: \"a\" } variant { name: \"a\" }", "lifetime_model.variant[1].name",
     "names another variant too"),
    ("variant { name: \"Big\" }", "lifetime_model.variant[0].name", "plain name"),
    ("variant { name: \"a\" feature: \"shoe_size\" }", "lifetime_model.variant[0].feature[0]",
     "unknown feature 'shoe_size'"),
    ("feature: \"priority\" variant { name: \"a\" }", "lifetime_model.feature",
     "give each variant's features in it"),
])
def test_bad_variants_name_the_field(tmp_path, edit, field, message):
    text = (loaded_tables_text(tmp_path, {"instances": _customer_instances(10)})
            + f"lifetime_model {{ {edit} }}")
    problems = run_config.validate(run_config.parse_config(text))
    assert any(p.field == field and message in p.reason for p in problems), problems


@pytest.mark.parametrize("variants,source,message", [
    ("variant { name: \"a\" } variant { name: \"b\" }", "uptime_model: true",
     "is required: the lifetime stage trains variants a, b"),
    ("variant { name: \"a\" }", "uptime_model: true model_variant: \"c\"",
     "names no lifetime_model.variant (a)"),
    ("", "oracle: true model_variant: \"a\"", "is only for a model source"),
])
def test_a_model_source_names_a_variant(tmp_path, variants, source, message):
    text = (loaded_tables_text(tmp_path, {"instances": _customer_instances(10)})
            + f"lifetime_model {{ {variants} }} placement {{ policy: NILAS "
              f"lifetime_source {{ {source} }} host_shape {{ cpu: 1 memory: 1 }} "
              "host_count: 2 }")
    problems = run_config.validate(run_config.parse_config(text))
    assert any(p.field == "placement.lifetime_source[0].model_variant" and message in p.reason
               for p in problems), problems


def test_a_table_written_before_the_history_columns_loads_them_as_null(tmp_path):
    rows = _customer_instances(5)
    old = pa.Table.from_pylist(rows, schema=schemas.INSTANCES)
    old = old.select([n for n in old.column_names if not n.startswith(("customer_",
                                                                        "logical_name_"))])
    (tmp_path / "old").mkdir()
    pq.write_table(old, tmp_path / "old" / "part-0.parquet")
    location = fleetcast_pb2.DataLocation(parquet=str(tmp_path / "old"))

    def check(tables):
        table = pa.concat_tables(tables)
        assert table.num_rows == 5 and table.schema.equals(schemas.INSTANCES)
        assert table.column("customer_prior_instances").null_count == 5

    with beam.Pipeline(runner="DirectRunner") as pipeline:
        loaded = (pipeline | ReadTable(location, schemas.INSTANCES) | beam.combiners.ToList())
        assert_that(loaded, lambda lists: check(lists[0]))
