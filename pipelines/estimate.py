"""`fleetcast estimate CONFIG`: what a config's BigQuery reads will scan, before it runs.

Every BigQuery read of a run is listed with the standard SQL that scans what it reads:
- a trace table (`bigquery_table`) is read by the Storage Read API with only the columns the
  source parses (`google_v3.BIGQUERY_COLUMNS`): the same columns, selected;
- a trace query (`bigquery_query`) runs as written;
- a loaded fleetcast table (a LoadOrWrite `input`) is read with the columns the run uses.

Each SQL is sent as a dry run, which BigQuery answers with the bytes it would process and
bills nothing. On-demand queries are billed by those bytes; Storage Read API reads are billed
by the bytes of the columns read, which the dry run of the same projection measures. Users keep
the bill down with a query that selects a machine subset and a time range (see
configs/google_2019_bigquery.textproto), since the trace's tables are not partitioned.
"""

from typing import Iterator, List, NamedTuple, Optional, Sequence

from google.protobuf import descriptor

from configs import fleetcast_pb2
from pipelines import run as run_pipeline
from pipelines import schemas
from pipelines.io import bigquery

TIB = 1 << 40


class BigQueryRead(NamedTuple):
    """One BigQuery read of a run: the config field that reads it and the standard SQL that
    scans what it reads."""

    field: str  # the config field that reads it
    sql: str  # standard SQL scanning what the read reads


class Estimate(NamedTuple):
    """A read and the bytes its dry run says it would process."""

    read: BigQueryRead
    bytes: int


def _load_or_write_inputs(message, path: str = "") -> Iterator[tuple]:
    """(field path, field name, LoadOrWrite) of every LoadOrWrite with an input in `message`."""
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        values = value if field.label == descriptor.FieldDescriptor.LABEL_REPEATED else [value]
        for i, item in enumerate(values):
            name = (f"{path}{field.name}[{i}]"
                    if field.label == descriptor.FieldDescriptor.LABEL_REPEATED
                    else f"{path}{field.name}")
            if isinstance(item, fleetcast_pb2.LoadOrWrite):
                if item.HasField("input"):
                    yield name, field.name, item
            else:
                yield from _load_or_write_inputs(item, name + ".")


def _source_reads(config) -> List[BigQueryRead]:
    if config.WhichOneof("source") != "google_v3":
        return []  # the other sources read files only
    from pipelines.sources import google_v3
    reads = []
    for name, columns in google_v3.BIGQUERY_COLUMNS.items():
        table_input = getattr(config.google_v3, name)
        field = f"google_v3.{name}"
        which = table_input.WhichOneof("input")
        if which == "bigquery_table":
            reads.append(BigQueryRead(f"{field}.bigquery_table", bigquery.projection_sql(
                table_input.bigquery_table, columns)))
        elif which == "bigquery_query":
            reads.append(BigQueryRead(f"{field}.bigquery_query", table_input.bigquery_query))
    return reads


def bigquery_reads(config) -> List[BigQueryRead]:
    """Every BigQuery read of `config` (a validated RunConfig), in config order."""
    reads = _source_reads(config)
    for path, name, load in _load_or_write_inputs(config):
        location = load.input
        if location.WhichOneof("location") != "bigquery_table":
            continue
        columns: Optional[Sequence[str]] = None
        if name in schemas.CANONICAL:
            columns = (run_pipeline.loaded_columns(config, name)
                       or schemas.CANONICAL[name].names)
        reads.append(BigQueryRead(f"{path}.input.bigquery_table", bigquery.projection_sql(
            location.bigquery_table, columns or ())))
    return reads


def estimate(config, project: Optional[str] = None) -> List[Estimate]:
    """Dry-runs every BigQuery read of `config` in `project` (default: the client's); a dry
    run that fails (BigQuery rejects the SQL, no credentials) raises ValueError naming the
    read's field and the reason."""
    estimates = []
    for read in bigquery_reads(config):
        try:
            estimates.append(Estimate(read, bigquery.dry_run_bytes(read.sql, project)))
        except Exception as e:  # pylint: disable=broad-except
            message = getattr(e, "message", None) or str(e)
            raise ValueError(f"{read.field}: the dry run failed: {message}") from None
    return estimates


def _size(num_bytes: int) -> str:
    for unit, scale in (("TiB", TIB), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.2f} {unit}"
    return f"{num_bytes} B"


def format_estimates(estimates: Sequence[Estimate], usd_per_tib: float) -> str:
    """One line per read (field, bytes, the SQL), then the total and its on-demand price."""
    if not estimates:
        return "no BigQuery reads: this config reads files only (nothing is billed by BigQuery)"
    lines = []
    for item in estimates:
        lines.append(f"{item.read.field}: {item.bytes:,} bytes ({_size(item.bytes)})")
        lines.append(f"    {' '.join(item.read.sql.split())}")
    total = sum(item.bytes for item in estimates)
    lines.append(f"total: {total:,} bytes ({_size(total)}), "
                 f"about ${total / TIB * usd_per_tib:,.2f} "
                 f"at ${usd_per_tib:g} per TiB on demand (a dry run bills nothing)")
    return "\n".join(lines)
