"""`fleetcast query`: SQL over a run's Parquet tables with DuckDB, as the README shows it."""

import pathlib
import re
import shlex
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import schemas
from pipelines.query import QueryError, query, table_files
from tests.helpers import write_manifest

FLEETCAST = str(pathlib.Path(sys.executable).parent / "fleetcast")


@pytest.fixture
def results(tmp_path):
    """A results directory of two tables, one of them in two files, and a stray file."""
    summary = tmp_path / "placement_summary"
    summary.mkdir()
    pq.write_table(pa.table({"policy": ["best_fit", "nilas"], "empty_hosts_pct": [20.0, 25.5],
                             "defrag": ["none", "none"]}), summary / "part-0.parquet")
    pq.write_table(pa.table({"policy": ["lava"], "empty_hosts_pct": [24.0],
                             "defrag": ["lars_lifetime"]}), summary / "part-1.parquet")
    dead = tmp_path / "dead_letters"
    dead.mkdir()
    pq.write_table(pa.table({"source": ["a", "a", "b"], "reason": ["x", "x", "y"]}),
                   dead / "part-0.parquet")
    (tmp_path / "notes.txt").write_text("not a table")
    write_manifest(tmp_path)
    return tmp_path


def test_every_table_directory_is_a_view(results):
    assert sorted(table_files(str(results))) == ["dead_letters", "placement_summary"]
    got = query(str(results), "SELECT policy, empty_hosts_pct FROM placement_summary "
                              "WHERE defrag = 'none' ORDER BY empty_hosts_pct DESC")
    assert got.to_pylist() == [{"policy": "nilas", "empty_hosts_pct": 25.5},
                               {"policy": "best_fit", "empty_hosts_pct": 20.0}]
    counts = query(str(results), "SELECT source, reason, count(*) AS n FROM dead_letters "
                                 "GROUP BY ALL ORDER BY n DESC")
    assert counts.to_pylist() == [{"source": "a", "reason": "x", "n": 2},
                                  {"source": "b", "reason": "y", "n": 1}]


@pytest.mark.parametrize("sql, message", [
    ("SELECT nope FROM dead_letters", "nope"),
    ("SELECT * FROM no_such_table", "no_such_table"),
])
def test_bad_sql_names_the_problem(results, sql, message):
    with pytest.raises(QueryError, match=message):
        query(str(results), sql)


def test_a_directory_without_tables_is_reported(tmp_path):
    with pytest.raises(QueryError, match="no successful fleetcast run manifest"):
        query(str(tmp_path), "SELECT 1")
    with pytest.raises(QueryError, match="no such results directory"):
        query(str(tmp_path / "absent"), "SELECT 1")


def test_the_command_prints_a_table_or_csv(results):
    sql = "SELECT policy FROM placement_summary ORDER BY policy"
    printed = subprocess.run([FLEETCAST, "query", str(results), sql], capture_output=True,
                             text=True, check=True).stdout
    assert printed.split() == ["policy", "best_fit", "lava", "nilas"]
    csv = subprocess.run([FLEETCAST, "query", str(results), sql, "--format", "csv"],
                         capture_output=True, text=True, check=True).stdout
    assert csv.splitlines() == ['"policy"', '"best_fit"', '"lava"', '"nilas"']
    bad = subprocess.run([FLEETCAST, "query", str(results), "SELECT nope FROM dead_letters"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "nope" in bad.stderr


def readme_queries():
    """The `fleetcast query` commands of the README, split as bash would split them."""
    readme = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, re.S)
                 if "fleetcast query results/demo" in b)
    return [shlex.split(command) for command in re.split(r"\n(?=fleetcast )", "\n".join(
        line for line in block.splitlines() if not line.startswith("#")))]


def test_the_readme_queries_run_on_the_tables_schemas(tmp_path):
    # The tables as `fleetcast run` declares them (no rows): the queries' columns exist.
    for name in ("overcommit_machine_metrics", "placement_summary", "dead_letters"):
        (tmp_path / name).mkdir()
        pq.write_table(schemas.TABLES[name].empty_table(), tmp_path / name / "part-0.parquet")
    write_manifest(tmp_path)
    commands = readme_queries()
    assert len(commands) == 3
    for command in commands:
        assert command[:3] == ["fleetcast", "query", "results/demo"]
        result = subprocess.run([FLEETCAST, "query", str(tmp_path), *command[3:]],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
