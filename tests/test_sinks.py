"""Sinks: declared schemas reach Parquet and BigQuery (the BigQuery tables' staging, offline;
tests/test_bigquery_emulator.py loads them into an emulator)."""

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import config as run_config
from pipelines import run as run_pipeline
from pipelines import schemas
from pipelines.io import bigquery, sinks


def _without_descriptions(fields):
    return [{k: v for k, v in field.items() if k != "description"} for field in fields]


def test_bigquery_schema_of_arrow_schema():
    assert _without_descriptions(bigquery.bigquery_schema(schemas.USAGE)["fields"][:6]) == [
        {"name": "machine_id", "type": "INTEGER", "mode": "NULLABLE"},
        {"name": "instance_id", "type": "STRING", "mode": "REQUIRED"},
        {"name": "start_time", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "end_time", "type": "INTEGER", "mode": "REQUIRED"},
        {"name": "cpu_limit", "type": "FLOAT", "mode": "REQUIRED"},
        {"name": "memory_limit", "type": "FLOAT", "mode": "REQUIRED"},
    ]
    distribution = [f for f in bigquery.bigquery_schema(schemas.USAGE)["fields"]
                    if f["name"] == "cpu_usage_distribution"]
    assert _without_descriptions(distribution) == [{"name": "cpu_usage_distribution",
                                                     "type": "FLOAT", "mode": "REPEATED"}]


def test_bigquery_output_stages_every_table_with_its_declared_schema(tmp_path):
    config = run_config.parse_config(
        f'azure_v1 {{ vmtable: "{tmp_path}/vmtable.csv" }} '
        'output { bigquery_dataset: "my-project:fleet" }')
    (tmp_path / "vmtable.csv").write_text("")
    assert run_config.validate(config) == []
    pipeline = beam.Pipeline()
    output = run_pipeline.OutputSpec.of(config, str(tmp_path))
    publisher = bigquery.Publisher(str(tmp_path / "staged"), "run")
    with bigquery.publishing(publisher):
        outputs = run_pipeline.build(pipeline, config, output, str(tmp_path))
    # Shards in the run's staging area until it publishes, one directory per table.
    assert sorted(publisher.targets) == sorted(f"my-project.fleet.{name}" for name in outputs)
    for name in outputs:
        target = publisher.targets[f"my-project.fleet.{name}"]
        assert target.schema == schemas.TABLES[name]
        assert target.staged_dir.startswith(str(tmp_path / "staged"))
    assert len({t.staged_dir for t in publisher.targets.values()}) == len(outputs)


def test_a_bigquery_sink_outside_a_run_is_refused():
    with pytest.raises(RuntimeError, match="written by a fleetcast run"):
        beam.Pipeline() | beam.Create([]) | sinks.WriteTable(
            schemas.USAGE, bigquery_table="my-project:fleet.usage")


def test_parquet_sink_conforms_tables_to_the_declared_schema(tmp_path):
    # Columns out of order, an int where a float is declared, an extra column.
    table = pa.table({"rejected": [1], "kept": [2], "read": [3], "table": ["t"],
                      "parts": pa.nulls(1, pa.string()), "source": ["s"], "extra": [0.5]})
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create([table])
             | sinks.WriteTable(schemas.SOURCE_COUNTS, parquet_dir=str(tmp_path / "counts")))
    written = pq.read_table(str(tmp_path / "counts"))
    assert written.schema.equals(schemas.SOURCE_COUNTS, check_metadata=False)
    assert written.to_pylist() == [{"source": "s", "table": "t", "read": 3, "kept": 2,
                                    "rejected": 1, "parts": None}]


def test_parquet_shards_gather_small_tables_into_row_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(sinks._WriteShard, "ROW_GROUP_ROWS", 5)
    tables = [pa.table({"source": ["s"] * n, "table": [f"t{n}"] * n, "read": list(range(n)),
                        "kept": [0] * n, "rejected": [0] * n, "parts": ["0-1 of 2"] * n})
              for n in (2, 2, 3, 1, 0, 4)]
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create(tables)
             | sinks.WriteTable(schemas.SOURCE_COUNTS, parquet_dir=str(tmp_path / "counts"),
                                num_shards=1))
    (path,) = (tmp_path / "counts").glob("*.parquet")
    written = pq.ParquetFile(path)
    # 12 rows: row groups close once they hold >= 5 rows, the rest makes the last one.
    groups = [written.metadata.row_group(i).num_rows
              for i in range(written.metadata.num_row_groups)]
    assert sum(groups) == 12 and all(n >= 5 for n in groups[:-1]) and len(groups) <= 3
    assert sorted(map(repr, written.read().to_pylist())) == sorted(
        repr(row) for t in tables for row in t.to_pylist())


def test_parquet_dictionaries_only_for_repeating_columns(tmp_path):
    rows = 1000
    table = pa.table({
        "predictor": ["rc_like", "n_sigma"] * (rows // 2),             # 2 distinct
        "machine_id": [7] * rows,                                     # 1 distinct
        "time": [i // 2 for i in range(rows)],                        # exactly half distinct
        "predicted_peak": [i / 7 for i in range(rows)],               # all distinct
        "oracle": pa.array([None] * rows, pa.float64()),              # no values
        "distribution": [[0.5, 0.5] for i in range(rows)],            # nested: measurements
    })
    assert sinks.repeating_columns(table) == ["predictor", "machine_id", "time", "oracle"]
    assert sinks.repeating_columns(table.slice(0, 1)) == ["oracle"]
    # Judged on the first rows only: the first two values of "time" here differ.
    assert "time" not in sinks.repeating_columns(table.slice(1), sample_rows=2)
    target = sinks.ParquetTarget(table.schema, str(tmp_path / "t"))
    with beam.Pipeline() as pipeline:
        _ = ({"t": pipeline | beam.Create([table.slice(0, 600), table.slice(600)])}
             | sinks.WriteParquetShards({"t": target}, num_shards=1))
    (path,) = (tmp_path / "t").glob("*.parquet")
    metadata = pq.ParquetFile(path).metadata
    encodings = {metadata.schema.column(i).path: metadata.row_group(0).column(i).encodings
                 for i in range(metadata.num_columns)}
    dictionary = {name for name, used in encodings.items()
                  if any("DICTIONARY" in e for e in used)}
    assert dictionary == {"predictor", "machine_id", "time", "oracle"}
    assert pq.read_table(path).sort_by("predicted_peak").equals(table)


def test_conform_names_missing_columns():
    with pytest.raises(ValueError, match=r"lacks columns \['reason', 'raw'\]"):
        sinks.conform(pa.table({"source": ["s"], "table": ["t"]}), schemas.DEAD_LETTERS)


def test_load_or_write_round_trips_a_canonical_table(tmp_path):
    import pandas as pd
    from apache_beam.testing.util import assert_that, equal_to

    from tests.helpers import run_text_config, sorted_frame

    copy = tmp_path / "copy" / "usage"
    first = run_text_config(
        f'synthetic {{ machines: 2 days: 0.2 seed: 5 }} usage {{ output {{ parquet: "{copy}" }} }}',
        tmp_path / "first")
    assert len(first["usage"]) > 100
    written = pq.read_table(str(copy))
    pd.testing.assert_frame_equal(sorted_frame(written.to_pandas()), sorted_frame(first["usage"]))
    expected = [repr(row) for row in written.to_pylist()]
    location = run_config.parse_config(f'usage {{ input {{ parquet: "{copy}" }} }}').usage.input
    with beam.Pipeline() as pipeline:
        rows = (pipeline | sinks.ReadTable(location, schemas.USAGE)
                | beam.FlatMap(lambda table: [repr(row) for row in table.to_pylist()]))
        assert_that(rows, equal_to(expected))
    # A run that loads the table does not write it again (it is stored where it was read),
    # and without a source it has no machines, instances or source counts to write: an
    # earlier run's files there are removed, not left to pass for this run's.
    stale = tmp_path / "second" / "instances"
    stale.mkdir(parents=True)
    (stale / "part-00000-of-00001.parquet").write_bytes(b"old")
    second = run_text_config(f'usage {{ input {{ parquet: "{copy}" }} }}', tmp_path / "second")
    for absent in ("usage", "machines", "instances", "source_counts"):
        assert absent not in second and not (tmp_path / "second" / absent).exists()
    assert second["dead_letters"].empty
