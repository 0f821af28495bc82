"""Writing fleetcast tables: Parquet datasets (default) or BigQuery tables.

Every table has a declared Arrow schema (pipelines.schemas.TABLES). A PCollection of Arrow
tables is conformed to that schema, then written as <dir>/<name>/part-SSSSS-of-NNNNN.parquet
or to the BigQuery table <dataset>.<name> with the equivalent BigQuery schema.
"""

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from pipelines import schemas

_BIGQUERY_TYPES = {
    pa.int64(): "INTEGER",
    pa.int32(): "INTEGER",
    pa.float64(): "FLOAT",
    pa.float32(): "FLOAT",
    pa.string(): "STRING",
    pa.bool_(): "BOOLEAN",
}


def bigquery_schema(schema: pa.Schema) -> dict:
    """The BigQuery table schema (as WriteToBigQuery takes it) of an Arrow schema."""
    fields = []
    for field in schema:
        if pa.types.is_list(field.type):
            fields.append({"name": field.name, "type": _BIGQUERY_TYPES[field.type.value_type],
                           "mode": "REPEATED"})
        else:
            fields.append({"name": field.name, "type": _BIGQUERY_TYPES[field.type],
                           "mode": "NULLABLE" if field.nullable else "REQUIRED"})
    return {"fields": fields}


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly the columns of `schema`, in its order and types."""
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise ValueError(f"table lacks columns {missing} of its declared schema")
    return pa.Table.from_arrays([table.column(f.name).cast(f.type) for f in schema],
                                schema=schema)


def _bigquery_rows(table: pa.Table, list_columns):
    for row in table.to_pylist():
        for name in list_columns:
            if row[name] is None:
                row[name] = []  # BigQuery REPEATED fields cannot be null.
        yield row


def clear_dir(path: str):
    """Deletes a previous run's files of a Parquet dataset (the sink truncates, like BigQuery's
    WRITE_TRUNCATE, so shards of an older run never mix with the new ones)."""
    if FileSystems.exists(path):
        FileSystems.delete([path])


class WriteTable(beam.PTransform):
    """PCollection[pa.Table] → one Parquet dataset directory or one BigQuery table.

    Args:
      schema: the table's declared Arrow schema; every element is conformed to it.
      parquet_dir: the dataset directory (local or gs://); files are part-*.parquet in it.
      bigquery_table: "project:dataset.table" or "dataset.table".
    """

    def __init__(self, schema: pa.Schema, parquet_dir: str = None, bigquery_table: str = None):
        super().__init__()
        if (parquet_dir is None) == (bigquery_table is None):
            raise ValueError("give exactly one of parquet_dir and bigquery_table")
        self.schema = schema
        self.parquet_dir = parquet_dir
        self.bigquery_table = bigquery_table

    @classmethod
    def to_location(cls, location, schema: pa.Schema):
        """The sink of a configured DataLocation (e.g. a LoadOrWrite output)."""
        if location.WhichOneof("location") == "parquet":
            return cls(schema, parquet_dir=location.parquet)
        return cls(schema, bigquery_table=location.bigquery_table)

    def expand(self, tables):
        conformed = tables | "Conform" >> beam.Map(conform, self.schema)
        if self.parquet_dir is not None:
            return conformed | "WriteParquet" >> beam.io.WriteToParquetBatched(
                file_path_prefix=FileSystems.join(self.parquet_dir, "part"),
                schema=self.schema, codec="snappy", file_name_suffix=".parquet")
        list_columns = [f.name for f in self.schema if pa.types.is_list(f.type)]
        return (
            conformed
            | "Rows" >> beam.FlatMap(_bigquery_rows, list_columns)
            | "WriteBigQuery" >> beam.io.WriteToBigQuery(
                self.bigquery_table, schema=bigquery_schema(self.schema),
                create_disposition=beam.io.BigQueryDisposition.CREATE_IF_NEEDED,
                write_disposition=beam.io.BigQueryDisposition.WRITE_TRUNCATE))


class ReadTable(beam.PTransform):
    """A table written by WriteTable (Parquet dir or BigQuery table) → PCollection[pa.Table]."""

    def __init__(self, location, schema: pa.Schema):
        super().__init__()
        self._location = location
        self._schema = schema

    def expand(self, pbegin):
        if self._location.WhichOneof("location") == "parquet":
            tables = pbegin | "ReadParquet" >> beam.io.ReadFromParquetBatched(
                FileSystems.join(self._location.parquet, "*.parquet"))
        else:
            tables = (
                pbegin
                | "ReadBigQuery" >> beam.io.ReadFromBigQuery(table=self._location.bigquery_table)
                | "Batch" >> beam.BatchElements(min_batch_size=1000, max_batch_size=50_000)
                | "ToArrow" >> beam.Map(pa.Table.from_pylist, schema=self._schema))
        return tables | "Conform" >> beam.Map(conform, self._schema)
