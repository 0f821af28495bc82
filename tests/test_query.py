"""`fleetcast query`: SQL over a run's Parquet tables with DuckDB, as the README and the
documentation show it."""

import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import cli, schemas
from pipelines.io import bigquery
from pipelines.query import QueryError, _connect, query, table_files
from tests.helpers import REPO, snapshot, write_manifest

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


def test_a_folder_of_runs_lists_them_and_a_file_says_it_is_one(results, tmp_path_factory):
    parent = tmp_path_factory.mktemp("runs")
    shutil.copytree(results, parent / "a")
    shutil.copytree(results, parent / "sweep" / "b")
    shutil.copytree(results, parent / "sweep" / "b" / "deeper" / "c")  # 3 levels: not listed
    with pytest.raises(QueryError) as error:
        query(str(parent), "SELECT 1")
    assert str(error.value) == (f"{parent}: holds no run itself, but 2 below it; give one of "
                                f"them: {parent / 'a'}, {parent / 'sweep' / 'b'}")
    config = parent / "demo.textproto"
    config.write_text('name: "demo"')
    with pytest.raises(QueryError, match=r"demo.textproto: a file, not a results directory "
                                         r"\(give the --output_dir of a `fleetcast run`"):
        query(str(config), "SELECT 1")


def test_the_pragmas_duckdb_runs_as_queries_are_selects(results):
    assert query(str(results), "PRAGMA show_tables").column("name").to_pylist() == [
        "dead_letters", "placement_summary"]
    columns = query(str(results), "PRAGMA table_info('placement_summary')")
    assert columns.column("name").to_pylist() == ["policy", "empty_hosts_pct", "defrag"]
    assert query(str(results), "PRAGMA version").num_rows == 1


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
def test_printed_commands_run_in_a_shell_without_the_venv_activated(page):
    # A command on a real path is typed as .venv/bin/fleetcast; a bare `fleetcast` line is
    # a synopsis (CONFIG, RESULTS_DIR, ...), which nobody pastes as it is.
    text = (REPO / page).read_text(encoding="utf-8")
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            words = line.split("#", 1)[0].split()
            if words[:1] == ["fleetcast"] and len(words) > 2:
                assert not re.search(r"(?:results|configs)/", words[2]), (page, line)


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


@pytest.fixture
def elsewhere(tmp_path_factory):
    """A directory outside the results, with a Parquet file of its own."""
    directory = tmp_path_factory.mktemp("elsewhere")
    pq.write_table(pa.table({"secret": [1]}), directory / "other.parquet")
    return directory


REFUSED = "query runs one read-only SELECT statement: "
DENIED = "PermissionException: Permission Error: Cannot access file "
# Each SQL that would write, attach, load an extension, change a setting or read a file that
# no table lists, and what its refusal says; {results}, {shard}, {elsewhere} are paths.
ATTACKS = [
    ("COPY placement_summary TO '{elsewhere}/copy.csv'",
     REFUSED + "COPY refused (COPY placement_summary TO '"),
    ("COPY (SELECT 'x' AS policy) TO '{shard}' (FORMAT parquet, USE_TMP_FILE false)",
     REFUSED + "COPY refused (COPY (SELECT 'x' AS policy) TO "),
    ("ATTACH '{elsewhere}/db.duckdb' AS db; CREATE TABLE db.t AS SELECT 1",
     REFUSED + "ATTACH refused (ATTACH '"),
    ("CREATE TABLE copied AS SELECT * FROM placement_summary", REFUSED + "CREATE refused"),
    ("INSERT INTO placement_summary VALUES ('x', 1.0, 'none')", REFUSED + "INSERT refused"),
    ("INSTALL httpfs", REFUSED + "LOAD refused (INSTALL httpfs)"),
    ("LOAD parquet", REFUSED + "LOAD refused (LOAD parquet)"),
    ("SELECT * FROM read_csv_auto('/etc/passwd')", DENIED + '"/etc/passwd"'),
    ("SELECT * FROM read_parquet('{elsewhere}/other.parquet')",
     DENIED + '"{elsewhere}/other.parquet"'),
    ("SELECT * FROM read_text('{results}/notes.txt')",  # in the results, in no table
     DENIED + '"{results}/notes.txt"'),
    ("SET enable_external_access = true", REFUSED + "SET refused"),
    ("PRAGMA enable_external_access = true", REFUSED + "SET refused"),
    ("SET lock_configuration = false", REFUSED + "SET refused"),
    ("RESET allowed_paths", REFUSED + "SET refused"),
    ("PRAGMA enable_checkpoint_on_shutdown", REFUSED + "PRAGMA refused"),
    ("EXPLAIN ANALYZE COPY placement_summary TO '{elsewhere}/plan.csv'",
     REFUSED + "EXPLAIN refused"),
    ("SELECT 1; COPY placement_summary TO '{elsewhere}/second.csv'",
     REFUSED + "COPY refused (COPY placement_summary TO '"),
    ("SELECT 1; SELECT 2", REFUSED + "the SQL holds 2 statements"),
    ("", REFUSED + "the SQL holds none"),
    (" \n\t", REFUSED + "the SQL holds none"),
    ("-- a comment;", REFUSED + "the SQL holds none"),
]


@pytest.mark.parametrize("sql, message", ATTACKS)
def test_a_query_that_is_not_a_select_of_the_tables_is_refused(results, elsewhere, capsys,
                                                                sql, message):
    paths = {"results": results, "shard": results / "placement_summary" / "part-0.parquet",
             "elsewhere": elsewhere}
    before = snapshot(results), snapshot(elsewhere)
    shard = paths["shard"].read_bytes()
    assert cli.main(["query", str(results), sql.format(**paths)]) == cli.EXIT_CONFIG_ERROR
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("fleetcast: " + message.format(**paths))
    assert (snapshot(results), snapshot(elsewhere)) == before
    assert paths["shard"].read_bytes() == shard


def test_the_connection_itself_opens_only_the_tables_files(results, elsewhere):
    """Beneath the statement check: DuckDB refuses other paths and any change of setting."""
    connection = _connect(str(results))
    try:
        with pytest.raises(duckdb.PermissionException, match="other.parquet"):
            connection.sql(f"SELECT * FROM read_parquet('{elsewhere}/other.parquet')")
        for setting in ("allowed_paths = ['/etc/passwd']", "autoload_known_extensions = true",
                        "lock_configuration = false"):
            with pytest.raises(duckdb.InvalidInputException, match="locked"):
                connection.execute(f"SET {setting}")
        assert connection.sql("SELECT count(*) FROM placement_summary").fetchall() == [(3,)]
    finally:
        connection.close()


# Rows from the millionth on fail: a result read whole fails, one read as far as shown does
# not (DuckDB computes a few thousand rows ahead of the reader).
FAILS_LATE = ("SELECT CASE WHEN range >= 1000000 THEN error('read too far') ELSE range END "
              "AS n FROM range(3000000)")


def test_a_text_table_reads_the_result_no_further_than_it_shows(results, capsys):
    assert cli.main(["query", str(results), FAILS_LATE, "--max_rows", "3"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        " n", " 0", " 1", " 2",
        "(more rows not shown: --max_rows 3; --format csv prints every row)"]
    assert cli.main(["query", str(results), FAILS_LATE, "--max_rows", "0"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "n", "(more rows not shown: --max_rows 0; --format csv prints every row)"]
    assert cli.main(["query", str(results), "SELECT * FROM placement_summary WHERE false"]) == 0
    assert capsys.readouterr().out == "policy  empty_hosts_pct  defrag\n(no rows)\n"


def test_csv_prints_every_row_as_it_is_computed(results, capsys):
    sql = "SELECT range AS n, [range, range] AS pair FROM range(100000)"  # two batches
    assert cli.main(["query", str(results), sql, "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ['"n","pair"', '0,"[0, 0]"'] and len(lines) == 100001
    assert lines[-1] == '99999,"[99999, 99999]"'
    assert cli.main(["query", str(results), f"{sql} WHERE false", "--format", "csv"]) == 0
    assert capsys.readouterr().out == '"n","pair"\n'
    assert cli.main(["query", str(results), FAILS_LATE, "--format", "csv"]) == 2
    # One line, whichever of DuckDB's threads reports first: the error, or its interruption
    # of the others ("INTERRUPT Error: Interrupted!", seen on a busy 2-core machine).
    printed = capsys.readouterr()
    assert printed.err in ("fleetcast: Invalid Input Error: read too far\n",
                           "fleetcast: INTERRUPT Error: Interrupted!\n")
    assert printed.out.startswith('"n"\n0\n1\n')


@pytest.mark.parametrize("value", ["-5", "x", "1.5"])
def test_max_rows_is_a_number_of_rows(results, capsys, value):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["query", str(results), "SELECT 1", "--max_rows", value])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"fleetcast query: error: argument --max_rows: '{value}' is not a number of rows "
        "(0 to 2^63 - 1)")


def test_a_bigquery_result_prints_as_a_local_one(monkeypatch, capsys):
    monkeypatch.setattr(bigquery, "query", lambda dataset, sql: pa.table(
        {"dataset": [dataset] * 3, "sql": [sql] * 3}))
    assert cli.main(["query", "bq://p.fleet", "SELECT 1", "--max_rows", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "dataset      sql", "p.fleet SELECT 1", "p.fleet SELECT 1",
        "(more rows not shown: --max_rows 2; --format csv prints every row)"]
    assert cli.main(["query", "bq://p.fleet", "SELECT 1", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ['"dataset","sql"'] + [
        '"p.fleet","SELECT 1"'] * 3
