"""`fleetcast synth` owns only what it wrote (docs/reliability.md, "fleetcast synth"): a
second synth into a directory replaces the first one's trace whole, never a file it did not
write; two fleetcast commands into one directory never interleave; a killed synth leaves the
previous trace, and the next one cleans up; every argument beyond its bound is refused in one
line before anything is written."""

import gzip
import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

import synthetic
from pipelines import cli
from pipelines.io import publish, root_files
from synthetic import ownership
from synthetic.constants import TABLES
from tests.helpers import REPO, run_cli, run_text_config, snapshot, tiny_config

SMALL = ["--machines", "2", "--days", "0.2"]


def synth(out, *args) -> int:
    return cli.main(["synth", "--out", str(out), *SMALL, *args])


def trace_files(out) -> set:
    """Every file under `out` but fleetcast's state directory, relative to `out`."""
    return set(snapshot(out))


def manifest_files(out) -> set:
    return set(json.loads((out / ownership.MANIFEST).read_text())["files"])


def printed_rows(printed: str) -> dict:
    """{table: rows} as `fleetcast synth` prints them."""
    rows = dict(line.split()[:2] for line in printed.splitlines() if line.endswith(" rows"))
    return {table: int(n.replace(",", "")) for table, n in rows.items()}


def rows_in(paths) -> int:
    """The rows of trace files (JSON lines, CSV with a header, Parquet), each read whole."""
    total = 0
    for path in paths:
        if str(path).endswith(".parquet"):
            total += pq.read_metadata(path).num_rows
            continue
        with gzip.open(path, "rt") as handle:
            lines = handle.read().splitlines()
        total += len(lines) - str(path).endswith(".csv.gz")
    return total


def globbed_rows(out, layout: str) -> dict:
    """{table: rows} of the trace files the configs' globs match (TABLE/* or TABLE-*), but
    a user's README."""
    pattern = "{0}/*" if layout == "tables" else "{0}-*"
    return {table: rows_in(p for p in out.glob(pattern.format(table)) if p.name != "README")
            for table in TABLES}


def test_a_second_synth_replaces_the_first_trace_whole_and_a_run_reads_only_it(
        tmp_path, capsys):
    out = tmp_path / "trace"
    assert synth(out, "--shards", "4") == 0
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert synth(out, "--shards", "2", "--seed", "1") == 0
    rows = printed_rows(capsys.readouterr().out)
    paths = "\n".join(f'  {table} {{ path: "{out}/{table}/*" }}' for table in TABLES)
    tables = run_text_config(f'name: "t"\ngoogle_v3 {{\n{paths}\n}}', tmp_path / "results")
    read = tables["source_counts"].set_index("table")["read"]
    assert {table: read[table] for table in TABLES} == rows
    assert trace_files(out) == manifest_files(out) | {ownership.MANIFEST, "notes.txt"}
    assert {path.split("-of-")[1] for path in manifest_files(out)} == {"00002.json.gz"}
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("first, second, layout", [
    (["--format", "json"], ["--format", "parquet"], "tables"),
    (["--format", "csv", "--shards", "3"], ["--format", "csv", "--shards", "5"], "tables"),
    (["--layout", "tables"], ["--layout", "public", "--shards", "2"], "public"),
    (["--layout", "public", "--shards", "4"], ["--layout", "public", "--shards", "2"],
     "public")])
def test_any_change_of_format_shards_or_layout_leaves_only_the_new_trace(
        tmp_path, capsys, first, second, layout):
    out = tmp_path / "trace"
    assert synth(out, *first) == 0
    user_files = {"notes.txt": "mine", "instance_events/README": "mine too"}
    for name, text in user_files.items():
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_text(text)
    capsys.readouterr()
    assert synth(out, *second, "--seed", "2") == 0
    rows = printed_rows(capsys.readouterr().out)
    assert globbed_rows(out, layout) == rows
    assert trace_files(out) == manifest_files(out) | {ownership.MANIFEST, *user_files}
    assert {name: (out / name).read_text() for name in user_files} == user_files
    assert not (out / publish.STATE_DIR / ownership.WORK_DIR).exists()


def test_a_users_file_named_like_a_shard_is_refused_and_unchanged(tmp_path, capsys):
    out = tmp_path / "trace"
    shard = out / "instance_events" / "instance_events-00000-of-00004.json.gz"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"my own data")
    assert synth(out) == 2
    assert capsys.readouterr().err == (
        f"fleetcast: synth: {shard}: in the way of the new trace, and no "
        "fleetcast_synth_manifest.json says fleetcast synth wrote it; move it away or choose "
        "another --out\n")
    assert shard.read_bytes() == b"my own data"
    assert trace_files(out) == {"instance_events/instance_events-00000-of-00004.json.gz"}


def test_a_trace_without_a_synth_manifest_is_refused_naming_a_file(tmp_path, capsys):
    """An older fleetcast's trace (or one a user copied there): a new trace beside it would
    be read with it, whatever its shards."""
    out = tmp_path / "trace"
    synthetic.generate(str(out), machines=2, days=0.2, shards=4)  # what synth did before
    before = snapshot(out)
    capsys.readouterr()
    assert synth(out, "--shards", "2") == 2
    first = out / "collection_events" / "collection_events-00000-of-00004.json.gz"
    assert capsys.readouterr().err == (
        f"fleetcast: synth: {first}: a trace file that no fleetcast_synth_manifest.json lists "
        "(an older fleetcast's, or not fleetcast's), which a run would read with the new "
        f"trace: remove the trace's files from {out} or choose another --out\n")
    assert snapshot(out) == before


def test_a_damaged_synth_manifest_is_refused(tmp_path, capsys):
    out = tmp_path / "trace"
    assert synth(out) == 0
    (out / ownership.MANIFEST).write_text('{"files": ["x"]}')
    before = snapshot(out)
    capsys.readouterr()
    assert synth(out, "--seed", "1") == 2
    assert capsys.readouterr().err == (
        f"fleetcast: synth: {out / ownership.MANIFEST}: damaged fleetcast synth manifest (not "
        f"a fleetcast synth manifest of format 1), so which files in {out} synth wrote is "
        "unknown: delete the trace's files and the manifest, or choose another --out\n")
    assert snapshot(out) == before


def test_an_out_that_is_a_file_or_holds_a_file_where_a_table_folder_goes_is_refused(
        tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    assert synth(a_file) == 2
    assert capsys.readouterr().err == f"fleetcast: synth: --out {a_file}: a file, not a directory\n"
    out = tmp_path / "trace"
    out.mkdir()
    (out / "instance_usage").write_text("mine")
    assert synth(out) == 2
    assert capsys.readouterr().err == (
        f"fleetcast: synth: {out / 'instance_usage'}: in the way of the new trace, and no "
        "fleetcast_synth_manifest.json says fleetcast synth wrote it; move it away or choose "
        "another --out\n")
    assert a_file.read_text() == (out / "instance_usage").read_text() == "mine"
    assert trace_files(out) == {"instance_usage"}


CORES = os.cpu_count() or 1


@pytest.mark.parametrize("args, message", [
    (["--processes", str(4 * CORES + 1)],
     f"processes must be at most {4 * CORES} processes: 4 x this machine's {CORES} cores (more "
     f"only share the cores, each a forked copy of the sampled trace); got {4 * CORES + 1}"),
    (["--machines", "100001"],
     "machines must be at most 100,000 machines: 8 x a Google 2019 cell; got 100001"),
    (["--days", "inf"], "days must be finite and positive, got inf"),
    (["--days", "3651"],
     "days must be at most 3,650 days (10 years): longer than any trace; got 3651.0"),
    (["--seed", "-1"], "seed must be at least 0, got -1"),
    (["--seed", str(2**63)], "seed must be at most 9,223,372,036,854,775,807: a config's "
     f"synthetic.seed is an int64; got {2**63}"),
    (["--shards", "10001"], "shards must be at most 10,000 shards: a shard is a Beam element "
     "and, in the output, a file per table; got 10001"),
    (["--arrival_rate", "inf"], "arrival_rate_per_machine_hour must be finite and positive, "
     "got inf"),
    (["--request_scale", "401"], "request_scale must be at most 400: at 400 the smallest "
     "typical request is already the 0.2 machine a task requests at most; got 401.0"),
    (["--machines", "100000", "--days", "3650"],
     "100,000 machines x 3650 days at 0.25 collections per machine-hour are 3.65e+08 "
     "machine-days at the default rate (0.25), and this machine's memory holds ~")],
    ids=["processes", "machines", "infinite_days", "days", "negative_seed", "seed", "shards",
         "arrival_rate", "request_scale", "memory"])
def test_an_argument_beyond_its_bound_is_refused_in_one_line_before_anything_is_written(
        tmp_path, capsys, args, message):
    out = tmp_path / "trace"
    assert cli.main(["synth", "--out", str(out), *args]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"fleetcast: synth: {message}") and error.count("\n") == 1, error
    assert not out.exists()


def _slow_synth(tmp_path, out, *args):
    """A `fleetcast synth` subprocess that pauses 0.3 s after writing each file."""
    runner = tmp_path / "slow_synth.py"
    runner.write_text(
        "import sys, time\n"
        "from pipelines import cli\n"
        "from synthetic import writers\n"
        "close = writers._ShardWriter.close\n"
        "def slow(self):\n"
        "    close(self)\n"
        "    time.sleep(0.3)\n"
        "writers._ShardWriter.close = slow\n"
        "sys.exit(cli.main(sys.argv[1:]))\n")
    return subprocess.Popen([sys.executable, str(runner), "synth", "--out", str(out), *SMALL,
                             *args], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _wait_for(condition, process, what: str):
    deadline = time.time() + 60
    while not condition():
        assert process.poll() is None and time.time() < deadline, f"never {what}"
        time.sleep(0.02)


def assert_whole_trace(out):
    """The manifest lists exactly the trace files there, each whole and of its size."""
    recorded = json.loads((out / ownership.MANIFEST).read_text())["files"]
    assert trace_files(out) - {ownership.MANIFEST} == set(recorded)
    for relative, size in recorded.items():
        assert (out / relative).stat().st_size == size
        if relative.endswith(".gz"):
            with gzip.open(out / relative) as handle:
                handle.read()  # raises on a cut or corrupt file
    assert not (out / publish.STATE_DIR / ownership.WORK_DIR).exists()


def test_a_second_command_into_the_directory_is_refused_while_a_synth_writes(tmp_path,
                                                                              capsys):
    out = tmp_path / "trace"
    holder = _slow_synth(tmp_path, out, "--shards", "3")
    lock = out / publish.STATE_DIR / root_files.LOCK
    _wait_for(lambda: f"pid {holder.pid} " in (lock.read_text() if lock.exists() else ""),
              holder, "locked")
    assert synth(out, "--seed", "1") == 2
    error = capsys.readouterr().err
    assert error.startswith(f"fleetcast: synth: {out}: another fleetcast command is writing into "
                            f"this directory (pid {holder.pid} on ") and error.count("\n") == 1
    assert "fleetcast synth); wait for it to end or write elsewhere" in error
    assert run_cli(tiny_config(tmp_path), out) == cli.EXIT_RUN_FAILED  # nor a run
    assert holder.wait(timeout=120) == 0
    assert_whole_trace(out)
    assert {path.split("-of-")[1] for path in manifest_files(out)} == {"00003.json.gz"}


def test_a_synth_killed_while_writing_leaves_the_previous_trace_and_the_next_cleans_up(
        tmp_path):
    out = tmp_path / "trace"
    assert synth(out, "--shards", "4") == 0
    before = snapshot(out)
    process = _slow_synth(tmp_path, out, "--shards", "2", "--seed", "1")
    staged = out / publish.STATE_DIR / ownership.WORK_DIR / "trace"
    _wait_for(lambda: any(staged.rglob("*.json.gz")), process, "wrote a file")
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert snapshot(out) == before
    assert synth(out, "--shards", "2", "--seed", "1") == 0
    assert_whole_trace(out)
    assert {path.split("-of-")[1] for path in manifest_files(out)} == {"00002.json.gz"}


def test_a_synth_interrupted_while_publishing_is_finished_by_the_next(tmp_path, monkeypatch):
    out = tmp_path / "trace"
    assert synth(out, "--shards", "4") == 0
    renamed = []

    def rename_then_stop(source, target):
        if len(renamed) == 3:
            raise KeyboardInterrupt  # as a kill in the middle of the renames
        renamed.append(target)
        root_files.rename(source, target)
    monkeypatch.setattr(ownership, "rename", rename_then_stop)
    assert synth(out, "--shards", "2") == cli.EXIT_INTERRUPTED
    monkeypatch.undo()
    assert len(renamed) == 3 and ownership.MANIFEST in trace_files(out)
    # The next synth publishes the interrupted one's plan first (else the -of-00002 files
    # renamed so far, which no manifest lists, would be refused), then its own trace.
    assert synth(out, "--shards", "3") == 0
    assert_whole_trace(out)
    assert {path.split("-of-")[1] for path in manifest_files(out)} == {"00003.json.gz"}
