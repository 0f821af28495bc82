"""Google v3 source: every format reads the same rows; every bad row is accounted for."""

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.io.readers import RowChunk
from pipelines.sources import google_v3
from tests.helpers import assert_tables_equal, run_text_config, write_gz_lines

MIN = 60_000_000


def _event(time, type_, collection, index, cpus=0.1, memory=0.2, machine=1):
    return {"time": time, "type": type_, "collection_id": collection, "instance_index": index,
            "machine_id": machine, "resource_request": {"cpus": cpus, "memory": memory},
            "priority": 200, "scheduling_class": 2, "collection_type": 0,
            "alloc_collection_id": 0, "alloc_instance_index": -1, "missing_type": None,
            "constraint": []}


def _window(start, collection, index, cpu=0.05, machine=1):
    return {"start_time": start, "end_time": start + 5 * MIN, "collection_id": collection,
            "instance_index": index, "machine_id": machine,
            "average_usage": {"cpus": cpu, "memory": 0.1},
            "maximum_usage": {"cpus": cpu * 2, "memory": 0.1},
            "cpu_usage_distribution": [cpu * i / 10 for i in range(11)],
            "tail_cpu_usage_distribution": [cpu * (0.9 + i / 100) for i in range(1, 10)]}


GOOD_EVENTS = [
    _event(0, 0, 10, 0), _event(0, 3, 10, 0), _event(30 * MIN, 6, 10, 0),
    # BigQuery's JSON export writes int64 as strings.
    {**_event(5 * MIN, 0, 10, 1), "time": str(5 * MIN), "collection_id": "10"},
    _event(5 * MIN, 3, 10, 1, machine=2),
    _event(15 * MIN, 10, 10, 1, cpus=0.3, machine=2),  # scaled up while running; no end
    _event(0, 3, 11, 0, machine=2), _event(20 * MIN, 4, 11, 0, machine=2),  # evicted ...
    _event(25 * MIN, 3, 11, 0, machine=1), _event(40 * MIN, 7, 11, 0, machine=1),  # rerun
]
BAD_EVENTS = [  # (row or raw line, reason)
    ("{not json", "unparseable JSON"),
    ("[1, 2]", "JSON row is not an object"),
    ({**_event(0, 0, 12, 0), "collection_id": None}, "missing collection_id"),
    ({**_event(0, 0, 12, 0), "time": -5}, "time is below 0: -5"),
    ({**_event(0, 0, 12, 0), "type": 42}, "unknown type 42"),
    ({**_event(0, 0, 12, 0), "resource_request": {"cpus": "abc", "memory": 0.1}},
     "resource_request.cpus is not a number: 'abc'"),
    ({**_event(0, 0, 12, 0), "resource_request": {"cpus": 0.1, "memory": -1}},
     "resource_request.memory is below 0: -1.0"),
]
GOOD_USAGE = [_window(t * 5 * MIN, 10, 0) for t in range(6)] + [
    _window(t * 5 * MIN, 10, 1, cpu=0.1, machine=2) for t in range(1, 5)] + [
    _window(0, 11, 0, machine=2), _window(25 * MIN, 11, 0)]
UNJOINABLE_USAGE = [_window(0, 99, 0)]  # no event at all for this instance
BAD_USAGE = [
    ({**_window(0, 10, 0), "end_time": 0}, "end_time 0 is not after start_time 0"),
    ({**_window(0, 10, 0), "average_usage": {"cpus": float("nan"), "memory": 0.1}},
     "average_usage.cpus is not finite: nan"),
    ({**_window(0, 10, 0), "machine_id": None}, "missing machine_id"),
    ({**_window(0, 10, 0), "cpu_usage_distribution": [0.1, 0.2]},
     "cpu_usage_distribution must hold 11 values"),
]
GOOD_MACHINES = [
    {"time": 0, "machine_id": 1, "type": 1, "switch_id": "s", "platform_id": "p1",
     "capacity": {"cpus": 0.5, "memory": 0.5}, "missing_data_reason": None},
    {"time": 0, "machine_id": 2, "type": 1, "switch_id": "s", "platform_id": "p2",
     "capacity": {"cpus": 1.0, "memory": 1.0}, "missing_data_reason": None},
]
BAD_MACHINES = [({**GOOD_MACHINES[0], "type": 9}, "unknown type 9")]
GOOD_COLLECTIONS = [
    {"time": 0, "type": 0, "collection_id": 10, "user": "alice", "collection_name": "n10",
     "collection_logical_name": "web", "vertical_scaling": 1, "scheduler": 0,
     "parent_collection_id": None, "priority": 200},
    {"time": 0, "type": 0, "collection_id": 11, "user": "bob", "collection_name": "n11",
     "collection_logical_name": "batch", "vertical_scaling": 2, "scheduler": 1,
     "parent_collection_id": 10, "priority": 100},
]
BAD_COLLECTIONS = [({"time": 0, "type": 0}, "missing collection_id")]

TABLES = {
    "instance_events": (GOOD_EVENTS, BAD_EVENTS),
    "instance_usage": (GOOD_USAGE + UNJOINABLE_USAGE, BAD_USAGE),
    "machine_events": (GOOD_MACHINES, BAD_MACHINES),
    "collection_events": (GOOD_COLLECTIONS, BAD_COLLECTIONS),
}


def _write_json_trace(root):
    for table, (good, bad) in TABLES.items():
        (root / table).mkdir(parents=True)
        lines = [json.dumps(r) for r in good]
        lines += [row if isinstance(row, str) else json.dumps(row) for row, _ in bad]
        write_gz_lines(root / table / f"{table}-000.json.gz", lines)


def _flatten(row, prefix=""):
    flat = {}
    for key, value in row.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, list) else value
    return flat


def _write_good_trace(root, fmt):
    for table, (good, _) in TABLES.items():
        (root / table).mkdir(parents=True)
        if fmt == "csv":
            pd.DataFrame([_flatten(r) for r in good]).to_csv(root / table / "part.csv",
                                                             index=False)
        else:
            rows = [{k: v for k, v in r.items() if k not in ("constraint", "missing_type")}
                    for r in good]
            rows = [{**r, "time": int(r["time"]), "collection_id": int(r["collection_id"])}
                    if "collection_id" in r and "time" in r else r for r in rows]
            pq.write_table(pa.Table.from_pylist(rows), root / table / "part.parquet")


def _config(root, ext):
    tables = "\n".join(f'  {t} {{ path: "{root}/{t}/*{ext}" }}' for t in TABLES)
    return f"google_v3 {{\n{tables}\n  num_shards: 3\n}}"


@pytest.fixture(scope="module")
def json_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace")
    _write_json_trace(root)
    return run_text_config(_config(root, ".json.gz"), root / "out")


def test_every_row_is_read_kept_or_rejected_with_its_reason(json_run):
    counts = json_run["source_counts"].set_index("table")
    dead = json_run["dead_letters"]
    for table, (good, bad) in TABLES.items():
        assert counts.loc[table, "read"] == len(good) + len(bad), table
        assert counts.loc[table, "kept"] == len(good), table
        assert counts.loc[table, "rejected"] == len(bad), table
        reasons = sorted(dead[dead.table == table].reason)
        for _, expected in bad:
            assert any(r.startswith(expected) for r in reasons), (expected, reasons)
    # The unjoinable window is rejected by the join, also with its reason and raw row.
    assert counts.loc["usage_join", "rejected"] == len(UNJOINABLE_USAGE)
    assert counts.loc["usage_join", "kept"] == len(GOOD_USAGE)
    join_dead = dead[dead.reason.str.startswith("no instance event")]
    assert len(join_dead) == 1 and json.loads(join_dead.raw.iloc[0])["collection_id"] == 99
    raw_bad_json = dead[dead.reason.str.startswith("unparseable JSON")].raw.tolist()
    assert raw_bad_json == ["{not json"]
    assert len(dead) == sum(len(bad) for _, bad in TABLES.values()) + 1


def test_instances_are_runs_from_schedule_to_terminal_event(json_run):
    instances = json_run["instances"].sort_values(["instance_id", "start_time"])
    got = [tuple(None if pd.isna(v) else v for v in (
        r.instance_id, r.machine_id, r.start_time, r.end_time, r.end_type, r.cpu_request, r.user,
        r.collection_logical_name)) for r in instances.itertuples()]
    assert got == [
        ("10:0", 1, 0, 30 * MIN, "FINISH", 0.1, "alice", "web"),
        ("10:1", 2, 5 * MIN, None, None, 0.1, "alice", "web"),
        ("11:0", 2, 0, 20 * MIN, "EVICT", 0.1, "bob", "batch"),
        ("11:0", 1, 25 * MIN, 40 * MIN, "KILL", 0.1, "bob", "batch"),
    ]
    assert set(instances.pool) == {"cell"}


def test_usage_carries_the_request_in_force(json_run):
    usage = json_run["usage"]
    scaled = usage[usage.instance_id == "10:1"].sort_values("start_time")
    assert scaled.cpu_limit.tolist() == [0.1, 0.1, 0.3, 0.3]  # the update at 15 min
    assert usage.priority.eq(200).all() and usage.scheduling_class.eq(2).all()
    first = usage[(usage.instance_id == "10:0")].sort_values("start_time").iloc[1]
    assert first.avg_cpu == 0.05 and first.max_cpu == 0.1
    assert len(first.cpu_usage_distribution) == 11
    assert len(first.tail_cpu_usage_distribution) == 9


def test_machines_keep_capacity_and_platform(json_run):
    machines = json_run["machines"].sort_values("machine_id")
    assert machines[["machine_id", "event_type", "cpu_capacity", "platform_id"]].values.tolist() \
        == [[1, "ADD", 0.5, "p1"], [2, "ADD", 1.0, "p2"]]


@pytest.mark.parametrize("fmt, ext", [("csv", ".csv"), ("parquet", ".parquet")])
def test_csv_and_parquet_give_the_same_tables_as_json(tmp_path, fmt, ext, json_run):
    _write_good_trace(tmp_path, fmt)
    tables = run_text_config(_config(tmp_path, ext), tmp_path / "out")
    assert_tables_equal(tables, json_run, ("instances", "usage", "machines"), check_dtype=False)
    assert tables["dead_letters"].reason.tolist() == [
        "no instance event with cpus > 0 and memory > 0 at or before the window start"]


def test_schedule_without_terminal_before_next_schedule_is_a_dead_letter():
    rows = [_event(0, 3, 1, 0), _event(10, 3, 1, 0), _event(20, 6, 1, 0)]
    events, _ = google_v3.InstanceEventParser().parse(RowChunk(rows, [None] * 3))
    instances, dead = google_v3.build_instances(events, google_v3.COLLECTION_EVENTS
                                                .empty_table(), "cell")
    assert instances.column("start_time").to_pylist() == [10]
    assert dead.column("reason").to_pylist() == [
        "SCHEDULE followed by another SCHEDULE of the same instance without a terminal event"]


def test_bigquery_inputs_read_the_configured_table_and_query():
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.pipeline import PipelineVisitor

    from pipelines import config as run_config
    from pipelines import run as run_pipeline
    from pipelines.io import bigquery
    from pipelines.sources.google_v3 import BIGQUERY_COLUMNS

    config = run_config.parse_config("""google_v3 {
      instance_events { bigquery_table: "google.com:google-cluster-data.clusterdata_2019_a.instance_events" }
      instance_usage { bigquery_query: "SELECT * FROM clusterdata_2019_a.instance_usage WHERE machine_id = 1" }
    }""")  # noqa: E501 (table names and a query are not wrapped)
    assert run_config.validate(config) == []
    pipeline = beam.Pipeline(options=PipelineOptions(["--project=p"]))
    _ = pipeline | run_pipeline.ReadCanonicalTables(config, "/unused")

    reads = []

    class Visitor(PipelineVisitor):
        def enter_composite_transform(self, node):
            if isinstance(node.transform, bigquery.ReadBigQueryRows):
                reads.append((node.transform._table, node.transform._query,
                              tuple(node.transform._columns)))

    pipeline.visit(Visitor())
    # A table is read by the columns the parser reads; a query as written.
    assert sorted(reads, key=str) == sorted([
        ("google.com:google-cluster-data.clusterdata_2019_a.instance_events", None,
         BIGQUERY_COLUMNS["instance_events"]),
        (None, "SELECT * FROM clusterdata_2019_a.instance_usage WHERE machine_id = 1", ())],
        key=str)


def test_batches_of_parsed_tables_are_sharded_together_each_shard_in_row_order():
    tables = [pa.table({"collection_id": [5, 7, 5, 9], "x": [0, 1, 2, 3]}),
              pa.table({"collection_id": [7, 5], "x": [4, 5]})]
    pieces = dict(google_v3.shard_by_collection(tables, 4, None))
    by_shard = {}
    for table in tables:
        for shard, rows in google_v3.shard_by_collection([table], 4, None):
            by_shard.setdefault(shard, []).extend(rows.column("x").to_pylist())
    assert {shard: rows.column("x").to_pylist() for shard, rows in pieces.items()} == by_shard
    assert sum(rows.num_rows for rows in pieces.values()) == 6
