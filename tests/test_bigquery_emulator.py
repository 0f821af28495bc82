"""BigQuery for real: fleetcast's BigQuery sink, source, publication and `fleetcast query`
against a local BigQuery emulator (bqemulator: the REST and Storage Read APIs on DuckDB).

What the emulator cannot show: Cloud Storage loads (a gs:// staging area loads with one
load_table_from_uri job), IAM errors, and BigQuery's own SQL engine (bqemulator translates
BigQuery SQL to DuckDB with SQLGlot).
"""

import pathlib
import subprocess
import sys

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that

from pipelines import schemas
from pipelines.io import bigquery, manifests, sinks
from tests import bigquery_emulator
from tests.helpers import assert_same_rows, read_table

pytestmark = pytest.mark.emulator

FLEETCAST = pathlib.Path(sys.executable).parent / "fleetcast"
DATASET = f"{bigquery_emulator.PROJECT}:fleet"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    log = tmp_path_factory.mktemp("bqemulator") / "bqemulator.log"
    with bigquery_emulator.running(log) as env:
        bigquery.client().create_dataset("fleet", exists_ok=True)
        yield env



USAGE_ROWS = [
    {"machine_id": 1, "instance_id": "a/0", "start_time": 0, "end_time": 300_000_000,
     "cpu_limit": 0.5, "memory_limit": 0.25, "avg_cpu": 0.1, "max_cpu": float("nan"),
     "cpu_usage_distribution": [0.0, 0.1, 0.2], "tail_cpu_usage_distribution": [],
     "avg_memory": None, "max_memory": 0.2},
    {"machine_id": None, "instance_id": "b/7", "start_time": 300_000_000,
     "end_time": 600_000_000, "cpu_limit": 1.0, "memory_limit": 1.0, "avg_cpu": 0.0,
     "max_cpu": 1e-300, "cpu_usage_distribution": None,
     "tail_cpu_usage_distribution": [0.9] * 9, "avg_memory": 0.5, "max_memory": 0.5},
]


def _usage_table() -> pa.Table:
    rows = [{f.name: row.get(f.name) for f in schemas.USAGE} for row in USAGE_ROWS]
    return sinks.conform(pa.Table.from_pylist(rows), schemas.USAGE)


def test_a_table_is_staged_loaded_published_and_read_back_exactly(emulator, tmp_path):
    table_id = f"{DATASET}.usage_copy"
    publisher = bigquery.Publisher(str(tmp_path / "staged"), "run1")
    with beam.Pipeline() as pipeline, bigquery.publishing(publisher):
        _ = (pipeline | beam.Create([_usage_table(), _usage_table().slice(0, 1)])
             | sinks.WriteTable(schemas.USAGE, bigquery_table=table_id, num_shards=2))
    # Nothing reaches BigQuery before the run publishes.
    client = bigquery.client()
    assert "usage_copy" not in [t.table_id for t in client.list_tables("fleet")]
    publisher.check_writable()
    assert publisher.publish() == {f"{bigquery_emulator.PROJECT}.fleet.usage_copy": 3}
    assert [t.table_id for t in client.list_tables("fleet")
            if t.table_id.startswith(bigquery.STAGING_PREFIX)] == []
    # The declared schema, descriptions included.
    fields = client.get_table(f"{bigquery_emulator.PROJECT}.fleet.usage_copy").schema
    assert [(f.name, f.field_type, f.mode, f.description) for f in fields] == [
        (f["name"], f["type"], f["mode"], f.get("description"))
        for f in bigquery.bigquery_schema(schemas.USAGE)["fields"]]
    expected = pa.concat_tables([_usage_table(), _usage_table().slice(0, 1)])
    with beam.Pipeline() as pipeline:
        read = (pipeline | bigquery.ReadBigQueryTable(table_id, schemas.USAGE)
                | beam.combiners.ToList())
        assert_that(read, lambda tables: assert_same_rows(
            pa.concat_tables(tables[0]), expected))


def test_a_dataset_that_does_not_exist_fails_before_any_compute(emulator, tmp_path):
    publisher = bigquery.Publisher(str(tmp_path), "run2")
    publisher.stage(f"{bigquery_emulator.PROJECT}:nowhere.usage", schemas.USAGE)
    with pytest.raises(bigquery.RunFailed, match="BigQuery dataset fleetcast-test.nowhere"):
        publisher.check_writable()


# Every stage but the lifetime model's training on a tiny synthetic trace.
STAGES = """
overcommit {
  metric { cpu_percentile: 90 }
  scheduler { by_machine_id: true }
  fortune_teller { name: "oracle" oracle { horizon_s: 86400 cap_to_limit: true } }
  fortune_teller { name: "n_sigma" predictor { n_sigma { n: 5 } } }
}
placement { policy: BEST_FIT policy: NILAS lifetime_source { oracle: true }
            warmup_s: 3600 sample_period_s: 900 }
"""
SOURCE = 'synthetic { machines: 3 days: 0.5 seed: 4 }'
LOADED = "\n".join(f'{name} {{ input {{ bigquery_table: "{DATASET}.{name}" }} }}'
                   for name in ("machines", "instances", "usage"))


def fleetcast(cwd, *args):
    done = subprocess.run([str(FLEETCAST), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _parquet_tables(results: pathlib.Path):
    manifest = manifests.require(str(results))
    return {name: pa.Table.from_pandas(read_table(results / name), preserve_index=False)
            for name in manifest["tables"]}


def _bigquery_tables(names, copy_dir: pathlib.Path):
    """The tables `names` of DATASET as fleetcast's BigQuery source reads them (copied to
    Parquet by one pipeline)."""
    with beam.Pipeline() as pipeline:
        for name in names:
            _ = (pipeline | f"Read{name}" >> bigquery.ReadBigQueryTable(
                     f"{DATASET}.{name}", schemas.TABLES[name])
                 | f"Write{name}" >> sinks.WriteTable(schemas.TABLES[name],
                                                      parquet_dir=str(copy_dir / name)))
    return {name: pa.Table.from_pandas(read_table(copy_dir / name), preserve_index=False)
            for name in names}


@pytest.fixture(scope="module")
def runs(emulator, tmp_path_factory):
    """The same config run to Parquet and to BigQuery, then its stages run again on the
    canonical tables loaded from BigQuery: {"parquet", "loaded"} result directories."""
    root = tmp_path_factory.mktemp("bigquery_runs")
    (root / "parquet.textproto").write_text(f'name: "tiny"\n{SOURCE}\n{STAGES}')
    (root / "bigquery.textproto").write_text(
        f'name: "tiny"\n{SOURCE}\n{STAGES}\noutput {{ bigquery_dataset: "{DATASET}" }}')
    (root / "loaded.textproto").write_text(f'name: "loaded"\n{LOADED}\n{STAGES}')
    fleetcast(root, "run", "parquet.textproto", "--output_dir", "results/parquet", "-q")
    done = fleetcast(root, "run", "bigquery.textproto", "-q")
    assert f"Results: BigQuery dataset {DATASET}" in done.stdout
    fleetcast(root, "run", "loaded.textproto", "--output_dir", "results/loaded", "-q")
    return {"root": root, "parquet": root / "results" / "parquet",
            "loaded": root / "results" / "loaded"}


@pytest.mark.slow
def test_every_table_written_to_bigquery_reads_back_equal_to_the_parquet_run(runs, tmp_path):
    parquet = _parquet_tables(runs["parquet"])
    assert {"usage", "overcommit_timeseries", "placement_summary"} <= set(parquet)
    manifest = bigquery.require_manifest(DATASET)
    assert manifest["name"] == "tiny" and manifest["success"]
    assert manifest["tables"] == {name: {"rows": table.num_rows}
                                  for name, table in parquet.items()}
    read_back = _bigquery_tables(sorted(parquet), tmp_path)
    for name, table in parquet.items():
        assert_same_rows(sinks.conform(table, schemas.TABLES[name]), read_back[name])
    tables = [t.table_id for t in bigquery.client().list_tables("fleet")]
    assert not [t for t in tables if t.startswith(bigquery.STAGING_PREFIX)]


@pytest.mark.slow
def test_stages_on_tables_loaded_from_bigquery_give_the_parquet_runs_results(runs):
    parquet = _parquet_tables(runs["parquet"])
    loaded = _parquet_tables(runs["loaded"])
    stage_tables = [n for n in loaded if n.startswith(("overcommit_", "placement_"))]
    assert len(stage_tables) >= 6
    for name in stage_tables:
        assert_same_rows(parquet[name], loaded[name])


@pytest.mark.slow
def test_fleetcast_query_runs_sql_in_the_output_dataset(runs):
    sql = ("SELECT policy, COUNT(*) AS n FROM placement_summary GROUP BY policy "
           "ORDER BY policy")
    done = fleetcast(runs["root"], "query", f"bq://{bigquery_emulator.PROJECT}.fleet", sql,
                     "--format", "csv")
    local = fleetcast(runs["root"], "query", "results/parquet", sql, "--format", "csv")
    assert done.stdout == local.stdout and done.stdout.startswith('"policy","n"\n')
    missing = subprocess.run([str(FLEETCAST), "query", f"bq://{bigquery_emulator.PROJECT}.empty",
                              "SELECT 1"], cwd=runs["root"], capture_output=True, text=True)
    assert missing.returncode == 2
    assert "no fleetcast_manifest row of a successful fleetcast run" in missing.stderr


@pytest.mark.slow
def test_a_failed_run_leaves_the_dataset_as_it_was_and_a_new_one_removes_only_its_tables(
        runs, emulator):
    root, client = runs["root"], bigquery.client()
    client.query("CREATE TABLE fleet.notes (text STRING)").result()  # a user's table
    before = {t.table_id: client.get_table(f"{bigquery_emulator.PROJECT}.fleet.{t.table_id}")
              .num_rows for t in client.list_tables("fleet")}
    manifest = bigquery.require_manifest(DATASET)
    # Every vmtable row is rejected: the run fails after its compute, publishing nothing.
    (root / "vmtable.csv").write_text("not,a,vm\n")
    (root / "bad.textproto").write_text(
        f'azure_v1 {{ vmtable: "{root}/vmtable.csv" }}\n'
        f'output {{ bigquery_dataset: "{DATASET}" }}')
    failed = subprocess.run([str(FLEETCAST), "run", "bad.textproto", "-q"], cwd=root,
                            capture_output=True, text=True, timeout=600)
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert f"BigQuery dataset {DATASET} keeps its previous results" in failed.stderr
    after = {t.table_id: client.get_table(f"{bigquery_emulator.PROJECT}.fleet.{t.table_id}")
             .num_rows for t in client.list_tables("fleet")}
    assert after == before and bigquery.require_manifest(DATASET) == manifest
    # A successful run without the stages replaces the canonical tables, drops the stage
    # tables the last manifest lists, and leaves the user's table.
    (root / "source_only.textproto").write_text(
        f'name: "source_only"\n{SOURCE}\noutput {{ bigquery_dataset: "{DATASET}" }}')
    fleetcast(root, "run", "source_only.textproto", "-q")
    tables = {t.table_id for t in client.list_tables("fleet")}
    assert "notes" in tables and "usage" in tables
    assert not [t for t in tables if t.startswith(("overcommit_", "placement_"))]
    assert bigquery.require_manifest(DATASET)["name"] == "source_only"
