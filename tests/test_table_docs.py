"""Every output table's columns are documented once, in pipelines/schemas.py, and that one
description reaches the README's table reference, the Parquet files' field metadata and the
BigQuery schemas."""

import pathlib
import subprocess
import sys

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import schemas
from pipelines.io import bigquery, sinks

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import gen_table_docs  # noqa: E402  scripts/gen_table_docs.py


@pytest.mark.parametrize("name", sorted(schemas.TABLES))
def test_every_table_and_column_has_a_description(name):
    schema = schemas.TABLES[name]
    assert schemas.description(schema), f"{name}: no table description"
    undocumented = [f.name for f in schema if not schemas.description(f)]
    assert not undocumented, f"{name}: columns without a description: {undocumented}"


def test_readme_table_reference_is_up_to_date():
    # The command the README's table reference names, from the repository root.
    done = subprocess.run([sys.executable, "scripts/gen_table_docs.py", "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for name in schemas.TABLES:
        assert f"#### `{name}`" in readme
    field = schemas.PLACEMENT_SUMMARY.field("empty_hosts_pct_vs_best_fit_pp")
    assert (f"| `empty_hosts_pct_vs_best_fit_pp` | float64 | yes | "
            f"{schemas.description(field)} |") in readme


def test_check_fails_on_a_stale_reference(tmp_path, monkeypatch, capsys):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    stale = tmp_path / "README.md"
    stale.write_text(readme.replace("| the replayed pool |", "| a pool |"), encoding="utf-8")
    monkeypatch.setattr(gen_table_docs, "README", stale)
    assert gen_table_docs.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert gen_table_docs.main([]) == 0
    assert stale.read_text(encoding="utf-8") == readme


def test_parquet_files_carry_the_descriptions(tmp_path):
    names = ("placement_summary", "usage", "lifetime_models")
    with beam.Pipeline() as pipeline:
        tables = {name: pipeline | f"Create{name}" >> beam.Create(
                      [schemas.empty_table(schemas.TABLES[name])]) for name in names}
        _ = tables | sinks.WriteTables(parquet_dir=str(tmp_path), num_shards=1)
    for name in names:
        written = pq.read_schema(tmp_path / name / "part-00000-of-00001.parquet")
        assert schemas.description(written) == schemas.description(schemas.TABLES[name])
        for field in schemas.TABLES[name]:
            assert schemas.description(written.field(field.name)) == (
                schemas.description(field)), (name, field.name)


def test_bigquery_schemas_carry_the_descriptions():
    for name, schema in schemas.TABLES.items():
        fields = bigquery.bigquery_schema(schema)["fields"]
        assert [f["description"] for f in fields] == [
            schemas.description(f) for f in schema], name
        # BigQuery rejects a field description over 1,024 characters.
        assert max(len(f["description"]) for f in fields) <= 1024


def test_a_column_shared_by_tables_is_described_once():
    # _REPLAY_KEY_FIELDS: the same field object, so the same text, in both placement tables.
    for name in ("pool", "policy", "lifetime_source", "noisy_oracle_accuracy", "defrag"):
        assert (schemas.PLACEMENT_SUMMARY.field(name).metadata
                == schemas.PLACEMENT_TIMESERIES.field(name).metadata)
    assert schemas.description(pa.field("x", pa.int64())) == ""
