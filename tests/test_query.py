"""`fleetcast query`: SQL over a run's Parquet tables with DuckDB, as the README and the
documentation show it."""

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
from tests.helpers import REPO, write_manifest

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


# The pages that print `fleetcast query` commands for a user to type.
PAGES_WITH_QUERIES = ("README.md", "docs/getting-started.md", "docs/stages/placement.md")


def printed_queries(page: str):
    """The `fleetcast query` commands of a page's bash blocks as printed (`fleetcast` or
    `.venv/bin/fleetcast`, continued over lines), split as bash would split them; the
    synopsis (`fleetcast query RESULTS_DIR ...`) left out."""
    text = (REPO / page).read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        lines = [line for line in block.splitlines() if not line.startswith("#")]
        for command in re.split(r"\n(?=(?:\.venv/bin/)?fleetcast )", "\n".join(lines)):
            words = shlex.split(command, comments=True)
            if (words[:2] in (["fleetcast", "query"], [".venv/bin/fleetcast", "query"])
                    and words[2] != "RESULTS_DIR"):
                commands.append(words)
    return commands


@pytest.mark.parametrize("page", PAGES_WITH_QUERIES)
def test_the_printed_queries_run_on_the_tables_schemas(page, tmp_path):
    # Every table as `fleetcast run` declares it (no rows): the queries' columns exist.
    for name, schema in schemas.TABLES.items():
        (tmp_path / name).mkdir()
        pq.write_table(schema.empty_table(), tmp_path / name / "part-0.parquet")
    write_manifest(tmp_path)
    commands = printed_queries(page)
    assert commands, f"{page} prints no fleetcast query command"
    for command in commands:
        assert command[2].startswith("results/"), command
        result = subprocess.run([FLEETCAST, "query", str(tmp_path), *command[3:]],
                                capture_output=True, text=True)
        assert result.returncode == 0, (command, result.stderr)


def test_getting_started_prints_the_three_demo_queries():
    demo = [c for c in printed_queries("docs/getting-started.md") if c[2] == "results/demo"]
    tables = [re.search(r"FROM (\w+)", c[3]).group(1) for c in demo]
    assert tables == ["overcommit_machine_metrics", "placement_summary", "dead_letters"]


def test_a_filter_on_nan_sees_every_row(tmp_path):
    """NaN is left out of Parquet's min/max statistics: a query engine that prunes row groups
    by them (DuckDB 2.0) misses the NaN rows of `WHERE isnan(x)`."""
    table = tmp_path / "overcommit_summary"
    table.mkdir()
    nan = float("nan")
    pq.write_table(pa.table({"p": ["a", "b"] * 4, "x": [1, nan, nan, 2, 3, nan, 4, 5]}),
                   table / "part-0.parquet")
    write_manifest(tmp_path)
    assert query(str(tmp_path), "SELECT count(*) AS n FROM overcommit_summary "
                 "WHERE isnan(x)").to_pylist() == [{"n": 3}]
    assert query(str(tmp_path), "SELECT count(*) AS n FROM overcommit_summary "
                 "WHERE p = 'b' AND NOT isnan(x)").to_pylist() == [{"n": 2}]
