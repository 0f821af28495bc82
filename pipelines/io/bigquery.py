"""fleetcast's own tables in BigQuery, on the google-cloud-bigquery client library
(docs/reliability.md, "BigQuery output").

Writing: a run stages a BigQuery table's shards as it stages a Parquet one (sinks.py), and
only when the whole run has succeeded does `Publisher.publish` load each into a staging table
`_fleetcast_staging_<run id>_<table>` of the dataset and replace the target with one copy job,
then append the run's manifest row to `<dataset>.fleetcast_manifest`. A failed run loads
nothing; only tables fleetcast wrote are ever deleted. Beam's BigQuery IO is not used: in batch
it needs a Cloud Storage temp location, replaces each table while the run still runs, and
cannot be pointed at another endpoint.

Reading: `ReadBigQueryTable` (fleetcast's tables) and `ReadBigQueryRows` (trace tables and
queries) read through the Storage Read API, one session per table, its streams in parallel as
Arrow record batches, only the columns the run uses; `dry_run_bytes` is what a query would scan
(`fleetcast estimate`). BIGQUERY_EMULATOR_HOST (REST) and FLEETCAST_BIGQUERY_STORAGE_HOST
(Storage Read gRPC, host:port) point the clients at an emulator, with anonymous credentials.
"""

import contextlib
import datetime
import io
import json
import os
from typing import Dict, List, NamedTuple, Optional, Sequence

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions

from configs.checks import BIGQUERY_DATASET, BIGQUERY_TABLE
from pipelines import schemas
from pipelines.io.failures import RunFailed
from pipelines.io.publish import read_parquet_dir
from pipelines.io.root_files import files_under

EMULATOR_HOST = "BIGQUERY_EMULATOR_HOST"
STORAGE_HOST = "FLEETCAST_BIGQUERY_STORAGE_HOST"
MANIFEST_TABLE = "fleetcast_manifest"
STAGING_PREFIX = "_fleetcast_staging_"
_BATCH_ROWS = 1 << 18
# A run checks its datasets before any compute; a dead endpoint fails it in a minute, not ten.
_CHECK_DEADLINE_S = 60
_STAGING_TTL_S = 7 * 24 * 3600

_TYPES = {
    pa.int64(): "INTEGER",
    pa.int32(): "INTEGER",
    pa.float64(): "FLOAT",
    pa.float32(): "FLOAT",
    pa.string(): "STRING",
    pa.bool_(): "BOOLEAN",
}

MANIFEST_SCHEMA = schemas.table("One row per fleetcast run published into this dataset.", [
    schemas.column("run_id", pa.string(), "Run id (UTC start time and a random suffix).",
                   nullable=False),
    schemas.column("name", pa.string(), "The config's name."),
    schemas.column("config", pa.string(), "The run config, protobuf text format."),
    schemas.column("fleetcast_version", pa.string(), "fleetcast version that ran it."),
    schemas.column("started_at", pa.string(), "Start time, UTC, ISO 8601."),
    schemas.column("finished_at", pa.string(), "Publication time, UTC, ISO 8601."),
    schemas.column("success", pa.bool_(), "Always true: failed runs publish nothing."),
    schemas.column("tables", pa.string(),
                   "JSON object: table name -> {\"rows\": rows published}."),
])


class TableRef(NamedTuple):
    """A BigQuery table: its project (None: the client's default), dataset and name."""

    project: Optional[str]
    dataset: str
    table: str

    @property
    def id(self) -> str:
        """"project.dataset.table" (or "dataset.table": the client's default project)."""
        return ".".join(part for part in self if part)

    @property
    def path(self) -> str:
        """The Storage Read API's resource name."""
        return f"projects/{self.project}/datasets/{self.dataset}/tables/{self.table}"


def parse_table(name: str) -> TableRef:
    """A TableRef of "dataset.table", "project:dataset.table" or "project.dataset.table"."""
    match = BIGQUERY_TABLE.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not a BigQuery table name")
    return TableRef(match["project"], match["dataset"], match["table"])


def parse_dataset(name: str) -> TableRef:
    """The dataset "dataset", "project:dataset" or "project.dataset" as a TableRef of no
    table (its `id` is "project.dataset")."""
    match = BIGQUERY_DATASET.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not a BigQuery dataset name")
    return TableRef(match["project"], match["dataset"], "")


def in_dataset(dataset: TableRef, table: str) -> TableRef:
    return dataset._replace(table=table)


def client(project: Optional[str] = None):
    """A BigQuery client; at BIGQUERY_EMULATOR_HOST with anonymous credentials when set."""
    from google.cloud import bigquery
    credentials = None
    if os.environ.get(EMULATOR_HOST):
        from google.auth.credentials import AnonymousCredentials
        credentials = AnonymousCredentials()
    return bigquery.Client(project=project, credentials=credentials)


def read_client():
    """A BigQuery Storage Read API client; at FLEETCAST_BIGQUERY_STORAGE_HOST when set."""
    from google.cloud import bigquery_storage
    host = os.environ.get(STORAGE_HOST)
    if not host:
        return bigquery_storage.BigQueryReadClient()
    import grpc
    from google.cloud.bigquery_storage_v1.services.big_query_read.transports import (
        BigQueryReadGrpcTransport,
    )
    return bigquery_storage.BigQueryReadClient(
        transport=BigQueryReadGrpcTransport(channel=grpc.insecure_channel(host)))


def bigquery_schema(schema: pa.Schema) -> dict:
    """The BigQuery table schema (API form) of an Arrow schema; a field's description
    (pipelines.schemas.column) becomes its BigQuery description."""
    fields = []
    for field in schema:
        if pa.types.is_list(field.type):
            fields.append({"name": field.name, "type": _TYPES[field.type.value_type],
                           "mode": "REPEATED"})
        else:
            fields.append({"name": field.name, "type": _TYPES[field.type],
                           "mode": "NULLABLE" if field.nullable else "REQUIRED"})
        if schemas.description(field):
            fields[-1]["description"] = schemas.description(field)
    return {"fields": fields}


def schema_fields(schema: pa.Schema):
    from google.cloud import bigquery
    return [bigquery.SchemaField.from_api_repr(f) for f in bigquery_schema(schema)["fields"]]


def _load_job_config(schema: pa.Schema):
    from google.cloud import bigquery
    parquet_options = bigquery.ParquetOptions()
    parquet_options.enable_list_inference = True  # a Parquet LIST is a REPEATED field
    return bigquery.LoadJobConfig(
        source_format=bigquery.SourceFormat.PARQUET, schema=schema_fields(schema),
        parquet_options=parquet_options,
        create_disposition=bigquery.CreateDisposition.CREATE_IF_NEEDED,
        write_disposition=bigquery.WriteDisposition.WRITE_APPEND)


class _Target(NamedTuple):
    ref: TableRef
    schema: pa.Schema
    staged_dir: str


class Publisher:
    """The BigQuery tables one run writes: where their shards are staged, and their
    publication once the run succeeded.

    Args:
      local_root: a directory (local or gs://) of the run's staging area for the shards.
      run_id: the run's id; names the dataset staging tables.
    """

    def __init__(self, local_root: str, run_id: str):
        self.local_root = local_root.rstrip("/")
        self.run_id = run_id
        self.targets: Dict[str, _Target] = {}

    def stage(self, table: str, schema: pa.Schema) -> str:
        """The directory where the run writes the shards of BigQuery table `table`."""
        ref = parse_table(table)
        if ref.id in self.targets:
            raise RunFailed(f"{table}: two outputs of the run write this BigQuery table")
        staged_dir = FileSystems.join(self.local_root, f"bigquery-{len(self.targets)}")
        self.targets[ref.id] = _Target(ref, schema, staged_dir)
        return staged_dir

    def staged_table(self, table: str, columns=None) -> Optional[pa.Table]:
        """The rows this run staged for BigQuery table `table` (before it publishes)."""
        return read_parquet_dir(self.targets[parse_table(table).id].staged_dir, columns)

    def _staging_ref(self, target: _Target) -> TableRef:
        return target.ref._replace(table=f"{STAGING_PREFIX}{self.run_id}_{target.ref.table}")

    def check_writable(self):
        """Fails (naming the dataset) unless every target dataset exists and this run can
        create tables in it: before any compute."""
        from google.api_core.exceptions import NotFound
        from google.cloud.bigquery import DEFAULT_RETRY
        retry = DEFAULT_RETRY.with_deadline(_CHECK_DEADLINE_S)
        for dataset in sorted({target.ref._replace(table="") for target in
                               self.targets.values()}, key=lambda ref: ref.id):
            probe = in_dataset(dataset, f"{STAGING_PREFIX}{self.run_id}_probe")
            bq = client(dataset.project)
            try:
                bq.get_dataset(dataset.id, retry=retry)
            except NotFound:
                raise RunFailed(f"BigQuery dataset {dataset.id} does not exist: create it "
                                "first (bq mk)") from None
            try:
                bq.create_table(_table_object(probe, MANIFEST_SCHEMA), retry=retry)
                bq.delete_table(probe.id, not_found_ok=True, retry=retry)
            except Exception as e:  # pylint: disable=broad-except
                raise RunFailed(f"BigQuery dataset {dataset.id}: cannot create tables in it "
                                f"({type(e).__name__}: {e})") from None

    def load(self) -> Dict[str, TableRef]:
        """Loads every target's shards into its staging table: {target id: staging ref}."""
        loaded = {}
        for table_id, target in self.targets.items():
            staging = self._staging_ref(target)
            bq = client(staging.project)
            bq.delete_table(staging.id, not_found_ok=True)
            # A run killed while it loads leaves its staging tables to BigQuery to expire.
            bq.create_table(_table_object(staging, target.schema, expires_in_s=_STAGING_TTL_S))
            files = files_under(target.staged_dir)
            config = _load_job_config(target.schema)
            if files and FileSystems.get_scheme(files[0]) == "gs":
                bq.load_table_from_uri(files, staging.id, job_config=config).result()
            else:
                for path in files:
                    with FileSystems.open(path) as handle:
                        bq.load_table_from_file(handle, staging.id, job_config=config).result()
            loaded[table_id] = staging
        return loaded

    def publish(self) -> Dict[str, int]:
        """Loads every target and replaces it by its staging table (copy jobs), then drops
        the staging tables: {target id: rows}. Nothing is replaced unless every load
        succeeded."""
        from google.cloud import bigquery
        try:
            rows = {}
            for table_id, staging in self.load().items():
                bq = client(staging.project)
                bq.copy_table(staging.id, table_id, job_config=bigquery.CopyJobConfig(
                    write_disposition=bigquery.WriteDisposition.WRITE_TRUNCATE)).result()
                rows[table_id] = bq.get_table(table_id).num_rows
            return rows
        finally:
            for target in self.targets.values():
                staging = self._staging_ref(target)
                client(staging.project).delete_table(staging.id, not_found_ok=True)


def _table_object(ref: TableRef, schema: pa.Schema, expires_in_s: Optional[int] = None):
    from google.cloud import bigquery
    table = bigquery.Table(ref.id if ref.project else f"{client().project}.{ref.id}",
                           schema=schema_fields(schema))
    table.description = schemas.description(schema) or None
    if expires_in_s is not None:
        table.expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(
            seconds=expires_in_s)
    return table


def read_manifest(dataset: str) -> Optional[dict]:
    """The last manifest row of a fleetcast output dataset (None: no run published)."""
    from google.api_core.exceptions import NotFound
    ref = in_dataset(parse_dataset(dataset), MANIFEST_TABLE)
    try:
        rows = client(ref.project).list_rows(ref.id).to_arrow(
            create_bqstorage_client=False).to_pylist()
    except NotFound:
        return None
    if not rows:
        return None
    last = max(rows, key=lambda row: (row["finished_at"], row["run_id"]))
    return {**last, "tables": json.loads(last["tables"])}


def require_manifest(dataset: str) -> dict:
    manifest = read_manifest(dataset)
    if manifest is None or not manifest["success"]:
        raise RunFailed(f"BigQuery dataset {dataset}: no {MANIFEST_TABLE} row of a successful "
                        "fleetcast run; its tables may be partial or not fleetcast's")
    return manifest


def publish_dataset(publisher: Publisher, dataset: str, run_fields: dict) -> dict:
    """Publishes a BigQuery-output run: its tables, then the removal of the previous run's
    tables this run did not write, then its manifest row (last). Returns the manifest."""
    dataset_ref = parse_dataset(dataset)
    previous = read_manifest(dataset) or {"tables": {}}
    rows = publisher.publish()
    tables = {ref.table: {"rows": rows[table_id]} for table_id, ref in
              ((table_id, parse_table(table_id)) for table_id in rows)
              if ref._replace(table="") == dataset_ref._replace(project=ref.project)}
    bq = client(dataset_ref.project)
    for stale in sorted(set(previous["tables"]) - set(tables)):
        bq.delete_table(in_dataset(dataset_ref, stale).id, not_found_ok=True)
    manifest = {**run_fields, "success": True, "tables": tables}
    row = {**manifest, "tables": json.dumps(tables, sort_keys=True)}
    manifest_ref = in_dataset(dataset_ref, MANIFEST_TABLE)
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([row], schema=MANIFEST_SCHEMA), buffer)
    buffer.seek(0)
    bq.load_table_from_file(buffer, manifest_ref.id,
                            job_config=_load_job_config(MANIFEST_SCHEMA)).result()
    return manifest


_ACTIVE: List[Publisher] = []


@contextlib.contextmanager
def publishing(publisher: Publisher):
    """While building a pipeline, every BigQuery sink stages its shards with `publisher`."""
    _ACTIVE.append(publisher)
    try:
        yield publisher
    finally:
        _ACTIVE.pop()


def staged_dir(table: str, schema: pa.Schema) -> str:
    """Where a BigQuery sink built now writes its shards (inside a run only)."""
    if not _ACTIVE:
        raise RuntimeError(f"{table}: BigQuery tables are written by a fleetcast run "
                           "(pipelines.run.run), which publishes them when it succeeds")
    return _ACTIVE[-1].stage(table, schema)


def _read_streams(table: str, columns: List[str], max_streams: int,
                  project: Optional[str] = None):
    """A table → (stream name, serialized Arrow schema) of one Storage Read session, billed
    to `project` (default: the client's), which need not own the table (a public one)."""
    from google.cloud import bigquery_storage
    billed = project or client().project
    ref = parse_table(table)
    if ref.project is None:
        ref = ref._replace(project=billed)
    session = read_client().create_read_session(
        parent=f"projects/{billed}",
        read_session=bigquery_storage.types.ReadSession(
            table=ref.path, data_format=bigquery_storage.types.DataFormat.ARROW,
            read_options=bigquery_storage.types.ReadSession.TableReadOptions(
                selected_fields=columns)),
        max_stream_count=max_streams)
    schema = session.arrow_schema.serialized_schema
    return [(stream.name, schema) for stream in session.streams]


def _query_streams(sql: str, max_streams: int, project: Optional[str] = None):
    """Runs `sql` (standard SQL) in `project` → the read streams of its result table
    (BigQuery keeps a query's result in an anonymous table for about a day)."""
    job = client(project).query(sql)
    job.result()
    result = job.destination
    return _read_streams(f"{result.project}.{result.dataset_id}.{result.table_id}", [],
                         max_streams, project)


def _read_stream(stream_and_schema, schema: Optional[pa.Schema] = None):
    """One read stream → tables of about _BATCH_ROWS rows, conformed to `schema` if given."""
    from pipelines.io.sinks import conform, row_groups  # sinks imports this module
    stream, serialized_schema = stream_and_schema
    arrow_schema = pa.ipc.read_schema(pa.py_buffer(serialized_schema))
    batches = (pa.Table.from_batches([pa.ipc.read_record_batch(
        pa.py_buffer(response.arrow_record_batch.serialized_record_batch), arrow_schema)])
        for response in read_client().read_rows(stream))
    for table in row_groups(batches, _BATCH_ROWS):
        yield table if schema is None else conform(table, schema)


class ReadBigQueryTable(beam.PTransform):
    """A BigQuery table → PCollection[pa.Table] conformed to `schema` (only its columns are
    read), in parallel over the streams of one Storage Read session."""

    def __init__(self, table: str, schema: pa.Schema, max_streams: int = 16):
        super().__init__()
        self._table = table
        self._schema = schema
        self._max_streams = max_streams

    def expand(self, pbegin):
        return (pbegin
                | "Table" >> beam.Create([self._table])
                | "Streams" >> beam.FlatMap(_read_streams, self._schema.names,
                                            self._max_streams)
                | "Spread" >> beam.Reshuffle()
                | "ReadStream" >> beam.FlatMap(_read_stream, self._schema))


class ReadBigQueryRows(beam.PTransform):
    """A trace table in BigQuery → PCollection[pa.Table] of its rows as BigQuery types them
    (records as structs, repeated fields as lists): a table read by the Storage Read API with
    only `columns` (top-level; all if empty), or the result of a standard-SQL `query`, which
    runs once when the pipeline starts. Neither needs a Cloud Storage temp location. Reads
    and queries are billed to the pipeline's --project (else the client's default project)."""

    def __init__(self, table: Optional[str] = None, query: Optional[str] = None,
                 columns: Sequence[str] = (), max_streams: int = 16):
        super().__init__()
        if (table is None) == (query is None):
            raise ValueError("give exactly one of table and query")
        self._table, self._query = table, query
        self._columns = list(columns)
        self._max_streams = max_streams

    def expand(self, pbegin):
        project = pbegin.pipeline.options.view_as(GoogleCloudOptions).project
        if self._table is not None:
            streams = (pbegin | "Table" >> beam.Create([self._table])
                       | "Streams" >> beam.FlatMap(_read_streams, self._columns,
                                                   self._max_streams, project))
        else:
            streams = (pbegin | "Query" >> beam.Create([self._query])
                       | "RunQuery" >> beam.FlatMap(_query_streams, self._max_streams,
                                                    project))
        return (streams
                | "Spread" >> beam.Reshuffle()
                | "ReadStream" >> beam.FlatMap(_read_stream))


def sql_name(table: str) -> str:
    """`table` ("project:dataset.table" and the other forms) quoted for standard SQL."""
    ref = parse_table(table)
    return f"`{ref.id}`"


def projection_sql(table: str, columns: Sequence[str] = ()) -> str:
    """The query that scans what reading `columns` (all if empty) of `table` reads."""
    selected = ", ".join(f"`{name}`" for name in columns) or "*"
    return f"SELECT {selected} FROM {sql_name(table)}"


def dry_run_bytes(sql: str, project: Optional[str] = None) -> int:
    """Bytes BigQuery would process to run `sql` (standard SQL) in `project`: a dry run,
    which runs and bills nothing."""
    from google.cloud import bigquery
    job = client(project).query(sql, job_config=bigquery.QueryJobConfig(
        dry_run=True, use_query_cache=False))
    return int(job.total_bytes_processed or 0)


def query(dataset: str, sql: str) -> pa.Table:
    """`sql` run in a fleetcast output dataset (its tables by their bare names)."""
    from google.cloud import bigquery
    require_manifest(dataset)
    ref = parse_dataset(dataset)
    bq = client(ref.project)
    job = bq.query(sql, job_config=bigquery.QueryJobConfig(
        default_dataset=f"{ref.project or bq.project}.{ref.dataset}"))
    return job.result().to_arrow(create_bqstorage_client=False)
