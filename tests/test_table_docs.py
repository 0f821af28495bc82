"""Every output table's columns are documented once, in pipelines/schemas.py, and that one
description reaches the documentation's table reference (docs/tables.md, filled in by
docs/hooks.py when the site is built), the Parquet files' field metadata and the BigQuery
schemas."""

import importlib.util
import pathlib

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import schemas
from pipelines.io import bigquery, sinks

REPO = pathlib.Path(__file__).resolve().parent.parent


def docs_hooks():
    """docs/hooks.py, the MkDocs hooks that generate the reference pages."""
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(schemas.TABLES))
def test_every_table_and_column_has_a_description(name):
    schema = schemas.TABLES[name]
    assert schemas.description(schema), f"{name}: no table description"
    undocumented = [f.name for f in schema if not schemas.description(f)]
    assert not undocumented, f"{name}: columns without a description: {undocumented}"


def test_the_table_reference_lists_every_table_and_column():
    reference = docs_hooks().table_reference()
    for name, schema in schemas.TABLES.items():
        assert f"## `{name}` {{#{name}}}" in reference
        for field in schema:
            assert f"| `{field.name}` |" in reference, (name, field.name)
    field = schemas.PLACEMENT_SUMMARY.field("empty_hosts_pct_vs_best_fit_pp")
    assert (f"| `empty_hosts_pct_vs_best_fit_pp` | float64 | yes | "
            f"{schemas.description(field)} |") in reference
    usage = schemas.USAGE.field("cpu_usage_distribution")
    assert "| `cpu_usage_distribution` | list&lt;float64&gt; | yes |" in reference
    assert schemas.description(usage) in reference


def test_the_table_page_is_filled_in_when_the_site_is_built():
    hooks = docs_hooks()
    page = (REPO / "docs" / "tables.md").read_text(encoding="utf-8")
    assert page.count(hooks.TABLE_MARKER) == 1
    built = hooks.on_page_markdown(page, page=None, config=None, files=None)
    assert hooks.TABLE_MARKER not in built
    assert hooks.table_reference() in built


def test_a_new_column_reaches_the_reference_with_no_other_step(monkeypatch):
    # Nothing generated is committed: the page is made from the schemas at every build.
    extra = schemas.table("one row per test", [
        schemas.column("widgets_pct", pa.float64(), "widgets, % of | the pool", False)])
    monkeypatch.setattr(schemas, "TABLES", {**schemas.TABLES, "test_table": extra})
    reference = docs_hooks().table_reference()
    assert "## `test_table` {#test_table}\n\nOne row per test." in reference
    assert "| `widgets_pct` | float64 | no | widgets, % of \\| the pool |" in reference


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
