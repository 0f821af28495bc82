"""The Google v3 trace read from BigQuery (tables by their columns, queries) and
`fleetcast estimate`: the projection is complete, a run on the trace's tables in a local
BigQuery emulator equals the run on its JSON files, and the estimate dry-runs each read.

The emulator keeps no anonymous result tables (a query's result cannot be read back through
its Storage Read API), so the query path is checked against fakes of the two clients: it runs
the query once and reads its result table.
"""

import gzip
import json
import pathlib
import subprocess
import sys

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

import synthetic
from pipelines import estimate
from pipelines.config import parse_config
from pipelines.io import bigquery
from pipelines.sources import google_v3
from tests import bigquery_emulator
from tests.helpers import assert_same_rows, read_table

FLEETCAST = pathlib.Path(sys.executable).parent / "fleetcast"
PROJECT = bigquery_emulator.PROJECT
PARSERS = {"instance_events": google_v3.InstanceEventParser(),
           "instance_usage": google_v3.InstanceUsageParser(),
           "collection_events": google_v3.CollectionEventParser(),
           "machine_events": google_v3.MachineEventParser("cell")}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """A small synthetic v3 trace as JSON shards and as Parquet (same rows)."""
    root = tmp_path_factory.mktemp("v3")
    synthetic.generate(str(root / "json"), machines=3, days=0.5, seed=5, shards=2)
    synthetic.generate(str(root / "parquet"), machines=3, days=0.5, seed=5, shards=2,
                       file_format="parquet")
    return root


def _json_rows(trace, table):
    rows = []
    for path in sorted((trace / "json" / table).glob("*.json.gz")):
        with gzip.open(path, "rt") as lines:
            rows.extend(json.loads(line) for line in lines)
    return rows


@pytest.mark.parametrize("table", sorted(google_v3.BIGQUERY_COLUMNS))
def test_the_projected_columns_are_all_that_the_parser_reads(trace, table):
    columns = google_v3.BIGQUERY_COLUMNS[table]
    rows = _json_rows(trace, table)
    assert rows and set(columns) <= set().union(*map(set, rows))
    parser = PARSERS[table]
    for row in rows:
        projected = {name: value for name, value in row.items() if name in columns}
        assert parser.parse_row(projected) == parser.parse_row(row)


def test_estimate_lists_every_bigquery_read_with_the_sql_it_dry_runs():
    usage_table = "google.com:google-cluster-data:clusterdata_2019_a.instance_usage"
    config = parse_config(f"""
        google_v3 {{
          instance_usage {{ bigquery_table: "{usage_table}" }}
          instance_events {{ bigquery_query: "SELECT * FROM t WHERE machine_id < 10" }}
          machine_events {{ path: "m/*.json.gz" }}
        }}
        instances {{ output {{ parquet: "x" }} }}
        overcommit {{ metric {{ cpu_percentile: 90 }} scheduler {{ by_machine_id: true }}
                     fortune_teller {{ name: "o" oracle {{ horizon_s: 3600 }} }}
                     scheduled_usage {{ input {{ bigquery_table: "{PROJECT}:fleet.sched" }} }} }}
        usage {{ input {{ bigquery_table: "{PROJECT}:fleet.usage" }} }}
    """)
    reads = estimate.bigquery_reads(config)
    usage_columns = ", ".join(f"`{c}`" for c in google_v3.BIGQUERY_COLUMNS["instance_usage"])
    assert reads[:2] == [
        estimate.BigQueryRead(
            "google_v3.instance_events.bigquery_query", "SELECT * FROM t WHERE machine_id < 10"),
        estimate.BigQueryRead(
            "google_v3.instance_usage.bigquery_table",
            f"SELECT {usage_columns} FROM "
            "`google.com:google-cluster-data.clusterdata_2019_a.instance_usage`")]
    fields = [read.field for read in reads[2:]]
    assert fields == ["usage.input.bigquery_table",  # RunConfig's field order
                      "overcommit.scheduled_usage.input.bigquery_table"]
    # The overcommit stage reads only some usage columns of a loaded usage table.
    assert "`cpu_usage_distribution`" in reads[2].sql and "`avg_memory`" not in reads[2].sql
    assert reads[3].sql == f"SELECT * FROM `{PROJECT}.fleet.sched`"
    text = estimate.format_estimates(
        [estimate.Estimate(read, 2 ** 40) for read in reads[:2]], usd_per_tib=6.25)
    assert text.splitlines()[-1].startswith(
        "total: 2,199,023,255,552 bytes (2.00 TiB), about $12.50 at $6.25 per TiB")
    assert estimate.format_estimates([], 6.25).startswith("no BigQuery reads")


class _FakeJob:
    class destination:  # noqa: N801 (a TableReference's attributes)
        project, dataset_id, table_id = "p", "_anon", "result1"

    def __init__(self, project, sql, runs):
        runs.append((project, sql))

    def result(self):
        return self


def test_a_query_runs_once_and_its_result_table_is_read(monkeypatch):
    runs, sessions = [], []

    class FakeClient:
        def __init__(self, project):
            self.project = project

        def query(self, sql):
            return _FakeJob(self.project, sql, runs)

    table = pa.table({"a": [1, 2, 3]})
    monkeypatch.setattr(bigquery, "client", lambda project=None: FakeClient(project))
    monkeypatch.setattr(bigquery, "_read_streams", lambda name, columns, max_streams, project: (
        sessions.append((name, columns, project)) or [("s0", None), ("s1", None)]))
    monkeypatch.setattr(bigquery, "_read_stream", lambda stream: [table.slice(0, 1)]
                        if stream[0] == "s0" else [table.slice(1)])
    options = PipelineOptions(["--project=billed"])
    with beam.Pipeline(options=options) as pipeline:
        rows = (pipeline | bigquery.ReadBigQueryRows(query="SELECT a FROM t")
                | beam.FlatMap(lambda t: t.column("a").to_pylist()))
        assert_that(rows, equal_to([1, 2, 3]))
    assert runs == [("billed", "SELECT a FROM t")]
    assert sessions == [("p._anon.result1", [], "billed")]


def _bigquery_field(field: pa.Field):
    """A BigQuery SchemaField of a column of the synthetic Parquet trace."""
    from google.cloud.bigquery import SchemaField
    kind = field.type
    if pa.types.is_list(kind):
        return SchemaField(field.name, "FLOAT64", mode="REPEATED")
    if pa.types.is_struct(kind):
        return SchemaField(field.name, "RECORD", fields=[_bigquery_field(kind.field(i))
                                                         for i in range(kind.num_fields)])
    name = ("INT64" if pa.types.is_integer(kind) else "FLOAT64" if pa.types.is_floating(kind)
            else "BOOL" if pa.types.is_boolean(kind) else "STRING")
    return SchemaField(field.name, name)


@pytest.fixture(scope="module")
def emulator_trace(trace, tmp_path_factory):
    """The trace's four tables in dataset `clusterdata` of an emulator; yields the trace's
    directory."""
    from google.cloud.bigquery import Table
    log = tmp_path_factory.mktemp("bqemulator") / "bqemulator.log"
    with bigquery_emulator.running(log):
        client = bigquery.client()
        client.create_dataset("clusterdata")
        for name in google_v3.BIGQUERY_COLUMNS:
            table = pa.concat_tables(pq.read_table(path) for path in
                                     sorted((trace / "parquet" / name).glob("*.parquet")))
            ref = f"{PROJECT}.clusterdata.{name}"
            client.create_table(Table(ref, schema=[_bigquery_field(f) for f in table.schema]))
            rows = table.to_pylist()
            for start in range(0, len(rows), 5000):
                assert client.insert_rows_json(ref, rows[start:start + 5000]) == []
        yield trace


def _fleetcast(cwd, *args):
    done = subprocess.run([str(FLEETCAST), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _config(inputs: dict) -> str:
    tables = "\n".join(f"  {name} {{ {kind}: {json.dumps(value)} }}"
                       for name, (kind, value) in inputs.items())
    return f'name: "cell"\ngoogle_v3 {{\n{tables}\n  num_shards: 4\n}}\n'


@pytest.mark.emulator
@pytest.mark.slow
def test_a_run_on_the_trace_in_bigquery_equals_the_run_on_its_json_files(
        emulator_trace, tmp_path):
    trace = emulator_trace
    names = sorted(google_v3.BIGQUERY_COLUMNS)
    (tmp_path / "files.textproto").write_text(_config(
        {name: ("path", str(trace / "json" / name / "*.json.gz")) for name in names}))
    (tmp_path / "bigquery.textproto").write_text(_config(
        {name: ("bigquery_table", f"{PROJECT}:clusterdata.{name}") for name in names}))
    _fleetcast(tmp_path, "run", "files.textproto", "--output_dir", "files", "-q")
    _fleetcast(tmp_path, "run", "bigquery.textproto", "--output_dir", "bq", "-q")
    for name in ("machines", "instances", "usage", "dead_letters", "source_counts"):
        files = pa.Table.from_pandas(read_table(tmp_path / "files" / name),
                                     preserve_index=False)
        from_bigquery = pa.Table.from_pandas(read_table(tmp_path / "bq" / name),
                                             preserve_index=False)
        if name == "dead_letters":  # a BigQuery row has no raw line to keep
            files, from_bigquery = (t.drop_columns(["raw"]) for t in (files, from_bigquery))
        if name == "source_counts":  # a BigQuery table is no set of numbered parts
            assert set(from_bigquery.column("parts").to_pylist()) == {None}
            files, from_bigquery = (t.drop_columns(["parts"]) for t in (files, from_bigquery))
        assert_same_rows(files, from_bigquery)
    assert read_table(tmp_path / "bq" / "usage").shape[0] > 1000
    done = _fleetcast(tmp_path, "estimate", "bigquery.textproto")
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if not line.startswith(" ")] == [
        f"google_v3.{name}.bigquery_table" for name in
        ("instance_events", "instance_usage", "collection_events", "machine_events")] + [
        "total"]


@pytest.mark.emulator
@pytest.mark.parametrize("table", sorted(google_v3.COLUMNAR))
def test_rows_read_from_bigquery_pass_the_columnar_checks(emulator_trace, table):
    """BigQuery's Arrow (its struct and list types) is what the columnar checks cover: every
    row of the clean trace passes them, none falls back to the per-row parser."""
    def check(tables):
        parser = google_v3.COLUMNAR[table]()
        rows = 0
        for batch in pa.concat_tables(tables).to_batches():
            good, rejected = parser.parse(batch)
            assert not rejected.any()
            rows += good.num_rows
        assert rows == len(_json_rows(emulator_trace, table))

    with beam.Pipeline() as pipeline:
        tables = (pipeline | bigquery.ReadBigQueryRows(
            table=f"{PROJECT}:clusterdata.{table}", columns=google_v3.BIGQUERY_COLUMNS[table])
                  | beam.combiners.ToList())
        assert_that(tables, lambda found: check(found[0]))


@pytest.mark.emulator
@pytest.mark.slow
def test_estimate_names_the_field_of_a_read_bigquery_rejects(emulator_trace, tmp_path):
    (tmp_path / "bad.textproto").write_text(_config({
        "instance_events": ("bigquery_table", f"{PROJECT}:clusterdata.instance_events"),
        "instance_usage": ("bigquery_query",
                           f"SELECT no_such_column FROM `{PROJECT}.clusterdata.instance_usage`")}))
    done = subprocess.run([str(FLEETCAST), "estimate", "bad.textproto"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "google_v3.instance_usage.bigquery_query: the dry run failed" in done.stderr
    assert "no_such_column" in done.stderr
