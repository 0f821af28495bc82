"""SQL over a run's tables with DuckDB (`fleetcast query RESULTS_DIR "SQL"`).

Every table directory of a local results directory (DIR/<table>/*.parquet, as `fleetcast run`
writes them) becomes a view named after the table, so a query joins and aggregates the run's
tables directly, without copying them:

    SELECT policy, empty_hosts_pct FROM placement_summary WHERE defrag = 'none'
"""

import os
from typing import Dict

import duckdb
import pyarrow as pa


class QueryError(ValueError):
    """A results directory without tables, or SQL that DuckDB rejects."""


def table_dirs(results_dir: str) -> Dict[str, str]:
    """{table name: Parquet glob} of every table directory under `results_dir`."""
    if not os.path.isdir(results_dir):
        raise QueryError(f"{results_dir}: no such results directory")
    tables = {}
    for name in sorted(os.listdir(results_dir)):
        directory = os.path.join(results_dir, name)
        if os.path.isdir(directory) and any(f.endswith(".parquet") for f in os.listdir(directory)):
            tables[name] = os.path.join(directory, "*.parquet")
    if not tables:
        raise QueryError(f"{results_dir}: no tables (directories of .parquet files); run a "
                         "config first")
    return tables


def connect(results_dir: str) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per table of `results_dir`."""
    connection = duckdb.connect()
    for name, pattern in table_dirs(results_dir).items():
        quoted_name = name.replace('"', '""')
        quoted_path = pattern.replace("'", "''")
        connection.execute(f"CREATE VIEW \"{quoted_name}\" AS SELECT * FROM "
                           f"read_parquet('{quoted_path}', union_by_name = true)")
    return connection


def query(results_dir: str, sql: str) -> pa.Table:
    """The result of `sql` over the run's tables, as an Arrow table."""
    connection = connect(results_dir)
    try:
        relation = connection.sql(sql)
        # A statement without a result (e.g. CREATE TABLE) gives no relation.
        return relation.to_arrow_table() if relation is not None else pa.table({})
    except duckdb.Error as e:
        raise QueryError(f"{type(e).__name__}: {e}") from None
    finally:
        connection.close()
