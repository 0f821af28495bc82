"""SQL over a run's tables with DuckDB (`fleetcast query RESULTS_DIR "SQL"`).

Every table of the run in a local results directory becomes a view named after the table,
over exactly the Parquet files the run's manifest lists (pipelines/io/publish.py; a
directory without a successful manifest is refused), so a query joins and aggregates the
run's tables directly, without copying them:

    SELECT policy, empty_hosts_pct FROM placement_summary WHERE defrag = 'none'

The query is read-only: one SELECT statement (DESCRIBE, SHOW, SUMMARIZE, FROM ... and
the PRAGMAs DuckDB runs as a query, such as table_info, are SELECTs too) on a DuckDB that
opens those files and no other path, loads no extension and whose settings are locked; any
other statement is refused before it runs. Its result streams in Arrow record batches.

`bq://PROJECT.DATASET` names the output dataset of a run that wrote to BigQuery instead: the
SQL runs in BigQuery with that dataset as its default (pipelines/io/bigquery.py), after the
same check that a successful fleetcast run published it.
"""

import contextlib
import os
import re
from typing import Dict, Iterator, List

import duckdb
import pyarrow as pa

from pipelines.io import manifests
from pipelines.io.failures import RunFailed

BIGQUERY_PREFIX = "bq://"
BATCH_ROWS = 65_536  # rows per record batch of a streamed result
_ONE_SELECT = "query runs one read-only SELECT statement"


class QueryError(ValueError):
    """A results directory without tables, or SQL that DuckDB rejects or fleetcast refuses."""


def table_files(results_dir: str) -> Dict[str, List[str]]:
    """{table name: its Parquet files} of the run in `results_dir`, from its manifest."""
    if os.path.isfile(results_dir):
        raise QueryError(f"{results_dir}: a file, not a results directory (give the "
                         "--output_dir of a `fleetcast run`; a config's default is "
                         "results/<its name>)")
    if not os.path.isdir(results_dir):
        raise QueryError(f"{results_dir}: no such results directory")
    try:
        runs = manifests.runs_below(results_dir) if manifests.read(results_dir) is None else []
        if runs:
            raise QueryError(f"{results_dir}: holds no run itself, but {len(runs)} below it; "
                             f"give one of them: {', '.join(runs)}")
        manifest = manifests.require(results_dir)
        return {name: manifests.table_files(results_dir, manifest, name)
                for name in sorted(manifest["tables"])}
    except RunFailed as e:
        raise QueryError(str(e)) from None


def _literal(text: str) -> str:
    """`text` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _connect(results_dir: str) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per table of `results_dir`, that opens
    those tables' files and no other path (external access off), installs and loads no
    extension, and whose settings the SQL cannot change (locked). DuckDB lets it write those
    files too: only `_statement`'s check keeps a query off them."""
    tables = {name: [os.path.abspath(f) for f in files]
              for name, files in table_files(results_dir).items()}
    connection = duckdb.connect(config={"autoinstall_known_extensions": False,
                                        "autoload_known_extensions": False})
    try:
        every_file = [f for files in tables.values() for f in files]
        connection.execute(f"SET allowed_paths = [{', '.join(map(_literal, every_file))}]")
        connection.execute("SET enable_external_access = false")
        for name, files in tables.items():
            _create_view(connection, name, files, results_dir)
        connection.execute("SET lock_configuration = true")
    except BaseException:
        connection.close()
        raise
    return connection


def _create_view(connection, name: str, files: List[str], results_dir: str):
    """The view `name` over the Parquet `files` (their columns by name)."""
    quoted_name = name.replace('"', '""')
    try:
        connection.execute(f"CREATE VIEW \"{quoted_name}\" AS SELECT * FROM read_parquet("
                           f"[{', '.join(map(_literal, files))}], union_by_name = true)")
    except duckdb.Error as e:
        raise QueryError(f"table {name} of {results_dir}: {type(e).__name__}: {e}") from None


def _reason(error: duckdb.Error) -> str:
    """DuckDB's `error`, its type and message; a refused file access says why."""
    reason = f"{type(error).__name__}: {error}"
    if isinstance(error, duckdb.PermissionException):
        return f"{reason}; fleetcast query reads the files of the run's tables and no other"
    return reason


def _excerpt(statement) -> str:
    """The text of `statement` on one line, shortened; what DuckDB derived it from when the
    SQL does not spell it (a PIVOT without IN (...) creates a type)."""
    text = re.sub(r"\s+", " ", statement.query).strip()
    if not text:
        return "implied by the SQL, as by a PIVOT without IN (...)"
    return text if len(text) <= 100 else text[:99] + "…"


def _statement(connection: duckdb.DuckDBPyConnection, sql: str):
    """The one statement of `sql`; QueryError when `sql` holds none, more than one, or any
    that is not a SELECT (what keeps a query from writing, attaching, loading or setting)."""
    try:
        statements = connection.extract_statements(sql)
    except duckdb.Error as e:
        raise QueryError(_reason(e)) from None
    for statement in statements:
        if statement.type != duckdb.StatementType.SELECT:
            raise QueryError(f"{_ONE_SELECT}: {statement.type.name} refused "
                             f"({_excerpt(statement)})")
    if not statements:
        raise QueryError(f"{_ONE_SELECT}: the SQL holds none")
    if len(statements) > 1:
        raise QueryError(f"{_ONE_SELECT}: the SQL holds {len(statements)} statements")
    return statements[0]


def _checked(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    """The batches of `reader`; QueryError when DuckDB fails while it computes them."""
    try:
        yield from reader
    except (OSError, pa.ArrowException) as e:  # DuckDB's error through Arrow's stream
        raise QueryError(str(e)) from None


def _bigquery(dataset: str, sql: str) -> pa.Table:
    from google.api_core.exceptions import GoogleAPIError

    from pipelines.io import bigquery
    try:
        return bigquery.query(dataset, sql)
    except ValueError as e:  # RunFailed included
        raise QueryError(str(e)) from None
    except GoogleAPIError as e:
        raise QueryError(f"BigQuery: {e}") from None


@contextlib.contextmanager
def open_result(results_dir: str, sql: str,
                batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatchReader]:
    """The result of `sql` over the run's tables as Arrow record batches of at most
    `batch_rows` rows, computed as they are read (a BigQuery result arrives whole), while the
    context is open. QueryError, also while reading, for SQL that is refused or fails."""
    if results_dir.startswith(BIGQUERY_PREFIX):
        yield _bigquery(results_dir[len(BIGQUERY_PREFIX):], sql).to_reader(batch_rows)
        return
    with contextlib.closing(_connect(results_dir)) as connection:
        statement = _statement(connection, sql)
        try:
            reader = connection.execute(statement).to_arrow_reader(batch_rows)
        except duckdb.Error as e:
            raise QueryError(_reason(e)) from None
        yield pa.RecordBatchReader.from_batches(reader.schema, _checked(reader))


def query(results_dir: str, sql: str) -> pa.Table:
    """The result of `sql` over the run's tables, as an Arrow table."""
    with open_result(results_dir, sql) as result:
        return result.read_all()


def text_table(result: pa.RecordBatchReader, max_rows: int) -> str:
    """The first `max_rows` rows of `result` as a text table (a header of column names, a
    row per line), with a last line saying so when `result` has more rows; reads at most one
    batch past them."""
    batches, rows = [], 0
    for batch in result:
        batches.append(batch)
        rows += batch.num_rows
        if rows > max_rows:
            break
    shown = pa.Table.from_batches(batches, result.schema).slice(0, max_rows)
    if shown.num_rows:
        text = shown.to_pandas().to_string(index=False)
    else:  # pandas prints an empty frame as "Empty DataFrame ..."
        text = "  ".join(result.schema.names)
    if rows > max_rows:
        return (f"{text}\n(more rows not shown: --max_rows {max_rows}; --format csv prints "
                "every row)")
    return text if rows else f"{text}\n(no rows)"
