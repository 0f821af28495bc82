"""Writing fleetcast tables: Parquet datasets (default) or BigQuery tables.

Every table has a declared Arrow schema (pipelines.schemas.TABLES). A PCollection of Arrow
tables is conformed to that schema, then written as <dir>/part-SSSSS-of-NNNNN.parquet; a
BigQuery table <dataset>.<name> is written as such shards too, in the run's staging area,
and loaded into BigQuery when the run succeeds (pipelines/io/bigquery.py).

Parquet goes through fleetcast's own shard writer rather than Beam's WriteToParquetBatched:
Beam 2.77's file sinks lose every row on the DaskRunner (each recomputation of the sink's side
inputs opens a new temporary directory, so the finalize step renames nothing). The shard
writer needs only GroupByKey and ParDo, writes the same files on every runner, and works on any
file system Beam knows (local, gs://, hdfs://, s3://).
"""

import uuid
import zlib
from typing import Dict, NamedTuple

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from pipelines import progress, schemas
from pipelines.io import bigquery, manifests, publish, spill
from pipelines.io.failures import RunFailed


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly the columns of `schema`, in its order and types."""
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise ValueError(f"table lacks columns {missing} of its declared schema")
    return pa.Table.from_arrays([table.column(f.name).cast(f.type) for f in schema],
                                schema=schema)


def shard_of_table(table: pa.Table, num_shards: int) -> int:
    """A shard for a table from its content, so reruns place every table the same way."""
    head = table.slice(0, 8).to_pylist()
    return zlib.crc32(repr((table.num_rows, head)).encode()) % num_shards


def shard_file_name(shard: int, num_shards: int) -> str:
    return f"part-{shard:05d}-of-{num_shards:05d}.parquet"


class ParquetTarget(NamedTuple):
    """Where one table's Parquet dataset goes: its declared schema and its directory."""

    schema: pa.Schema
    directory: str


def row_groups(tables, min_rows: int):
    """The rows of `tables` (None and empty tables skipped) concatenated into tables of at
    least `min_rows` rows, but the last."""
    pending, pending_rows = [], 0
    for table in tables:
        if table is None or not table.num_rows:
            continue
        pending.append(table)
        pending_rows += table.num_rows
        if pending_rows >= min_rows:
            yield pa.concat_tables(pending)
            pending, pending_rows = [], 0
    if pending:
        yield pa.concat_tables(pending)


def repeating_columns(table: pa.Table, sample_rows: int = 1 << 16):
    """Names of the flat columns worth a Parquet dictionary: those with at most one distinct
    value in two among the first `sample_rows` rows. A dictionary of mostly unique values (a
    usage, the measurements in a distribution list) costs writing time and file size, then
    falls back anyway."""
    sample = table.slice(0, sample_rows)
    names = []
    for name in sample.column_names:
        column = sample.column(name)
        if pa.types.is_nested(column.type):
            continue
        if (pa.types.is_null(column.type)
                or pc.count_distinct(column).as_py() * 2 <= sample.num_rows):
            names.append(name)
    return names


class _WriteShard(beam.DoFn):
    """((table name, shard), tables) → one Parquet file (an empty one for a shard with no
    tables).

    Tables stream into the file, gathered into row groups of about ROW_GROUP_ROWS rows (a
    row group per small table would make the file slow to write and to read), so a shard
    need not fit in memory; the first row group decides which columns get a dictionary. The
    file is written under a temporary name and renamed, so a retried shard replaces, never
    mixes.
    """

    ROW_GROUP_ROWS = 1 << 20

    def __init__(self, targets: Dict[str, ParquetTarget], num_shards: int):
        self._targets = targets
        self._num_shards = num_shards

    def process(self, element):
        (name, shard), tables = element
        target = self._targets[name]
        path = FileSystems.join(target.directory, shard_file_name(shard, self._num_shards))
        temporary = f"{path}.tmp-{uuid.uuid4().hex}"
        rows = 0
        with FileSystems.create(temporary) as handle:
            sink, writer = pa.PythonFile(handle, mode="w"), None
            try:
                for group in row_groups(map(spill.load, tables), self.ROW_GROUP_ROWS):
                    if writer is None:
                        writer = pq.ParquetWriter(sink, target.schema, compression="snappy",
                                                  use_dictionary=repeating_columns(group))
                    writer.write_table(group)
                    rows += group.num_rows
                if writer is None:
                    writer = pq.ParquetWriter(sink, target.schema, compression="snappy")
            finally:
                if writer is not None:
                    writer.close()
        if FileSystems.exists(path):
            FileSystems.delete([path])
        FileSystems.rename([temporary], [path])
        progress.count(f"{name}.rows_written", rows)
        yield path, rows


def _conform_and_shard(table: pa.Table, name: str, schema: pa.Schema, num_shards: int,
                       spill_to):
    table = conform(table, schema)
    return (name, shard_of_table(table, num_shards)), spill.spilled(table, spill_to)


class WriteParquetShards(beam.PTransform):
    """{table name: PCollection[pa.Table]} → `num_shards` Parquet files per table in its
    target directory; outputs (file path, rows) per file.

    Every table of a run goes through one of these, so writing N tables costs one
    GroupByKey and a handful of steps rather than N copies of them (Beam's per-step costs
    dominate small runs). Each table is conformed and keyed by shard where it is produced:
    a Flatten materialises its inputs on the portable runners, so the tables cross it once,
    already keyed, on their way to the GroupByKey.
    """

    def __init__(self, targets: Dict[str, ParquetTarget], num_shards: int,
                 staged: bool = True):
        super().__init__()
        # Within a run, into its staging area: the run publishes the files when it succeeds
        # (directories of BigQuery tables are staging places already: staged=False).
        self._targets = {name: target._replace(directory=publish.staged_dir(target.directory))
                         for name, target in targets.items()} if staged else dict(targets)
        self._num_shards = num_shards

    def expand(self, tables_by_name):
        targets, n = self._targets, self._num_shards
        # Large tables are grouped through files of the run (pipelines/io/spill.py).
        spill_to = spill.spill_to()
        keyed = [tables | f"Shard{name}" >> beam.Map(_conform_and_shard, name,
                                                       targets[name].schema, n, spill_to)
                 for name, tables in tables_by_name.items()]
        # Every shard gets a file, so an empty table still has its schema on disk.
        # From one created element (the DaskRunner translates Create, not Impulse).
        pipeline = next(iter(tables_by_name.values())).pipeline
        every_shard = (pipeline
                       | "Start" >> beam.Create([None])
                       | "EveryShard" >> beam.FlatMap(
                           lambda _: [((name, i), None) for name in sorted(targets)
                                      for i in range(n)]))
        return ((*keyed, every_shard)
                | "Flatten" >> beam.Flatten()
                | "GroupByShard" >> beam.GroupByKey()
                | "WriteShards" >> beam.ParDo(_WriteShard(targets, n)))


class WriteTable(beam.PTransform):
    """PCollection[pa.Table] → one Parquet dataset directory or one BigQuery table.

    Args:
      schema: the table's declared Arrow schema; every element is conformed to it.
      parquet_dir: the dataset directory (local or gs://); files are part-*.parquet in it.
      bigquery_table: "project:dataset.table" or "dataset.table".
      num_shards: Parquet files per table.
    """

    def __init__(self, schema: pa.Schema, parquet_dir: str = None, bigquery_table: str = None,
                 num_shards: int = 4):
        super().__init__()
        if (parquet_dir is None) == (bigquery_table is None):
            raise ValueError("give exactly one of parquet_dir and bigquery_table")
        self.schema = schema
        self.parquet_dir = parquet_dir
        self.bigquery_table = bigquery_table
        self.num_shards = num_shards

    @classmethod
    def to_location(cls, location, schema: pa.Schema):
        """The sink of a configured DataLocation (e.g. a LoadOrWrite output)."""
        if location.WhichOneof("location") == "parquet":
            return cls(schema, parquet_dir=location.parquet)
        return cls(schema, bigquery_table=location.bigquery_table)

    def expand(self, tables):
        if self.parquet_dir is not None:
            return {"table": tables} | "WriteParquet" >> WriteParquetShards(
                {"table": ParquetTarget(self.schema, self.parquet_dir)}, self.num_shards)
        target = ParquetTarget(self.schema, bigquery.staged_dir(self.bigquery_table,
                                                                self.schema))
        return {"table": tables} | "WriteBigQuery" >> WriteParquetShards(
            {"table": target}, self.num_shards, staged=False)


class WriteTables(beam.PTransform):
    """{table name: PCollection[pa.Table]} → the Parquet datasets <parquet_dir>/<name> (one
    sink for all of them), or the BigQuery tables <bigquery_dataset>.<name>; every table
    conformed to its declared schema in pipelines.schemas.TABLES."""

    def __init__(self, parquet_dir: str = None, bigquery_dataset: str = None,
                 num_shards: int = 4):
        super().__init__()
        if (parquet_dir is None) == (bigquery_dataset is None):
            raise ValueError("give exactly one of parquet_dir and bigquery_dataset")
        self.parquet_dir = parquet_dir
        self.bigquery_dataset = bigquery_dataset
        self.num_shards = num_shards

    def expand(self, tables_by_name):
        if self.bigquery_dataset is not None:
            targets = {name: ParquetTarget(schemas.TABLES[name], bigquery.staged_dir(
                f"{self.bigquery_dataset}.{name}", schemas.TABLES[name]))
                for name in tables_by_name}
            return tables_by_name | "WriteBigQuery" >> WriteParquetShards(
                targets, self.num_shards, staged=False)
        targets = {name: ParquetTarget(schemas.TABLES[name],
                                       FileSystems.join(self.parquet_dir, name))
                   for name in tables_by_name}
        return tables_by_name | "WriteParquet" >> WriteParquetShards(targets, self.num_shards)


def _parquet_batches(readable_file, schema: pa.Schema, batch_rows: int = 1 << 18):
    """The rows of one Parquet file as tables of `schema` (only its columns are read).

    Batches are large: stages split each one by key (machine, shard), and every piece is a
    Beam element with its own per-element costs."""
    with readable_file.open() as handle:
        parquet = pq.ParquetFile(handle)
        absent = [f for f in schema if f.name not in parquet.schema_arrow.names]
        missing = [f.name for f in absent if schemas.DERIVED not in (f.metadata or {})]
        path = readable_file.metadata.path
        if missing:
            raise RunFailed(f"{path}: lacks the columns {', '.join(missing)} of the table's "
                            "schema")
        present = [name for name in schema.names if name in parquet.schema_arrow.names]
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=present):
            if batch.num_rows:
                table = pa.Table.from_batches([batch])
                for f in absent:  # derived columns of a table written before they existed
                    table = table.append_column(f, pa.nulls(table.num_rows, f.type))
                yield _loaded(table, schema, path)


def _loaded(table: pa.Table, schema: pa.Schema, path: str) -> pa.Table:
    """`table`, read from `path`, conformed to `schema`; RunFailed naming the file and the
    column whose values do not fit its type (a float end_time of inf or 2^63 in an int64
    column, say)."""
    failures = (pa.ArrowInvalid, pa.ArrowNotImplementedError)
    try:
        return conform(table, schema)
    except failures:
        for f in schema:
            try:
                table.column(f.name).cast(f.type)
            except failures as e:
                raise RunFailed(f"{path}: column {f.name} ({table.schema.field(f.name).type}) "
                                f"does not convert to the table's {f.type}: {e}") from None
        raise


class ReadTable(beam.PTransform):
    """A table written by WriteTable (Parquet dir or BigQuery table) → PCollection[pa.Table].

    Args:
      location: a DataLocation.
      schema: the table's declared schema; every element is conformed to it.
      columns: read only these columns of `schema` (all when None): Parquet reads nothing
        else from disk.
    """

    def __init__(self, location, schema: pa.Schema, columns=None):
        super().__init__()
        self._location = location
        self._schema = (schema if columns is None
                        else pa.schema([schema.field(name) for name in columns]))

    def expand(self, pbegin):
        if self._location.WhichOneof("location") == "parquet":
            # fileio + pyarrow rather than ReadFromParquetBatched, which the DaskRunner does
            # not translate (it would read nothing). A table of a fleetcast run is the files
            # its manifest lists, any other directory its *.parquet files, checked complete
            # before the pipeline runs (manifests.parquet_files_of).
            files = manifests.parquet_files_of(self._location.parquet)
            return (
                pbegin
                | "Files" >> beam.Create(files)
                | "Match" >> fileio.MatchAll()
                | "Open" >> fileio.ReadMatches()
                | "Spread" >> beam.Reshuffle()
                | "ReadParquet" >> beam.FlatMap(_parquet_batches, self._schema))
        return pbegin | "ReadBigQuery" >> bigquery.ReadBigQueryTable(
            self._location.bigquery_table, self._schema)
