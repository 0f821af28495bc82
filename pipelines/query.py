"""SQL over a run's tables with DuckDB (`fleetcast query RESULTS_DIR "SQL"`).

Every table of the run in a local results directory becomes a view named after the table,
over exactly the Parquet files the run's manifest lists (pipelines/io/publish.py; a
directory without a successful manifest is refused), so a query joins and aggregates the
run's tables directly, without copying them:

    SELECT policy, empty_hosts_pct FROM placement_summary WHERE defrag = 'none'

`bq://PROJECT.DATASET` names the output dataset of a run that wrote to BigQuery instead: the
SQL runs in BigQuery with that dataset as its default (pipelines/io/bigquery.py), after the
same check that a successful fleetcast run published it.
"""

import os
from typing import Dict, List

import duckdb
import pyarrow as pa

from pipelines.io import manifests
from pipelines.io.failures import RunFailed


class QueryError(ValueError):
    """A results directory without tables, or SQL that DuckDB rejects."""


def table_files(results_dir: str) -> Dict[str, List[str]]:
    """{table name: its Parquet files} of the run in `results_dir`, from its manifest."""
    if not os.path.isdir(results_dir):
        raise QueryError(f"{results_dir}: no such results directory")
    try:
        manifest = manifests.require(results_dir)
        return {name: manifests.table_files(results_dir, manifest, name)
                for name in sorted(manifest["tables"])}
    except RunFailed as e:
        raise QueryError(str(e)) from None


def connect(results_dir: str) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per table of `results_dir`."""
    connection = duckdb.connect()
    for name, files in table_files(results_dir).items():
        quoted_name = name.replace('"', '""')
        quoted_files = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        try:
            connection.execute(f"CREATE VIEW \"{quoted_name}\" AS SELECT * FROM "
                               f"read_parquet([{quoted_files}], union_by_name = true)")
        except duckdb.Error as e:
            connection.close()
            raise QueryError(f"table {name} of {results_dir}: {type(e).__name__}: {e}") from None
    return connection


BIGQUERY_PREFIX = "bq://"


def _bigquery(dataset: str, sql: str) -> pa.Table:
    from google.api_core.exceptions import GoogleAPIError

    from pipelines.io import bigquery
    try:
        return bigquery.query(dataset, sql)
    except ValueError as e:  # RunFailed included
        raise QueryError(str(e)) from None
    except GoogleAPIError as e:
        raise QueryError(f"BigQuery: {e}") from None


def query(results_dir: str, sql: str) -> pa.Table:
    """The result of `sql` over the run's tables, as an Arrow table."""
    if results_dir.startswith(BIGQUERY_PREFIX):
        return _bigquery(results_dir[len(BIGQUERY_PREFIX):], sql)
    connection = connect(results_dir)
    try:
        relation = connection.sql(sql)
        # A statement without a result (e.g. CREATE TABLE) gives no relation.
        return relation.to_arrow_table() if relation is not None else pa.table({})
    except duckdb.Error as e:
        raise QueryError(f"{type(e).__name__}: {e}") from None
    finally:
        connection.close()
