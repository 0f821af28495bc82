"""Atomic results: a run stages its files and publishes them with a manifest only when it
succeeds; a killed or failed run leaves the previous results as they were; fleetcast deletes
only what its manifest says it wrote; readers refuse a directory without a successful
manifest."""

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import cli, cli_args
from pipelines.io import failures, manifests, publish, root_files, sinks
from pipelines.io.failures import RunFailed
from pipelines.query import QueryError, query
from tests.helpers import OVERCOMMIT, READINGS, REPO, read_table, run_cli, snapshot, tiny_config


def test_a_run_publishes_its_tables_with_a_manifest_written_last(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    manifest = json.loads((out / "fleetcast_manifest.json").read_text())
    assert manifest["success"] is True and manifest["name"] == "tiny"
    assert manifest["config"].startswith('name: "tiny"\nazure_v1 {')
    assert manifest["fleetcast_version"] == cli_args.version()
    assert manifest["started_at"] <= manifest["finished_at"]
    assert {name: t["rows"] for name, t in manifest["tables"].items()} == {
        "dead_letters": 0, "exclusions": 0, "instances": 2, "machines": 0,
        "source_counts": 2, "usage": 120}
    assert sorted(manifest["files"]) == sorted(
        f for table in manifest["tables"].values() for f in table["files"])
    assert len(manifest["files"]) == 6 * 4
    assert not list((out / publish.STATE_DIR).rglob("*.*"))  # nothing left staged


def _slow_run(tmp_path, config, out):
    """A `fleetcast run` subprocess whose shard writer pauses 0.5 s after every file."""
    runner = tmp_path / "slow_writer.py"
    runner.write_text(
        "import sys, time\n"
        "from pipelines import cli\n"
        "from pipelines.io import sinks\n"
        "process = sinks._WriteShard.process\n"
        "def slow(self, element):\n"
        "    for written in process(self, element):\n"
        "        time.sleep(0.5)\n"
        "        yield written\n"
        "sinks._WriteShard.process = slow\n"
        "sys.exit(cli.main(sys.argv[1:]))\n")
    return subprocess.Popen([sys.executable, str(runner), "run", str(config),
                             "--output_dir", str(out), "-q"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_a_run_killed_while_writing_leaves_the_previous_results_intact(tmp_path):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    before = snapshot(out)
    # The second run is killed while writing: some of its files exist, staged, when
    # SIGKILL comes.
    (tmp_path / "b").mkdir()
    bigger = tiny_config(tmp_path / "b", readings=READINGS * 2)
    process = _slow_run(tmp_path, bigger, out)
    staging = out / publish.STATE_DIR / "staging"
    deadline = time.time() + 120
    while not list(staging.rglob("part-*.parquet")) and time.time() < deadline:
        assert process.poll() is None, "the run ended before it was killed"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert list(staging.rglob("part-*.parquet")), "killed before it wrote anything"
    assert snapshot(out) == before
    assert query(str(out), "SELECT count(*) AS n FROM usage").to_pylist() == [{"n": 120}]
    # The next run removes what the killed one left staged and publishes its own.
    assert run_cli(bigger, out) == 0
    assert query(str(out), "SELECT count(*) AS n FROM usage").to_pylist() == [{"n": 240}]
    assert not list(staging.rglob("*.parquet"))


def test_a_manifest_write_killed_before_its_rename_leaves_no_file_after_the_next_run(
        tmp_path):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    # What write_json_atomic leaves when SIGKILL comes between its write and its rename.
    left = out / "fleetcast_manifest.json.tmp-0a1b2c3d"
    left.write_text('{"partial": ')
    mine = out / "fleetcast_manifest.json.tmp-mine"  # not a name fleetcast writes
    mine.write_text("the user's")
    assert run_cli(tiny_config(tmp_path), out) == 0
    assert not left.exists() and mine.read_text() == "the user's"


def test_a_second_run_into_the_directory_fails_at_once_naming_the_holder(tmp_path, capsys):
    out = tmp_path / "out"
    config = tiny_config(tmp_path)
    holder = _slow_run(tmp_path, config, out)
    lock = out / publish.STATE_DIR / root_files.LOCK
    deadline = time.time() + 60
    while f"pid {holder.pid} " not in (lock.read_text() if lock.exists() else ""):
        assert holder.poll() is None and time.time() < deadline, "the first run never locked"
        time.sleep(0.02)
    started = time.time()
    assert run_cli(config, out) == cli.EXIT_RUN_FAILED
    assert time.time() - started < 5
    assert (f"fleetcast: run failed: {out}: another fleetcast command is writing into this "
            f"directory (pid {holder.pid} on {socket.gethostname()}, started "
            in capsys.readouterr().err)
    # A lock left by a killed run does not block: the kernel released it.
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert f"pid {holder.pid} " in lock.read_text()
    assert run_cli(config, out) == 0
    assert query(str(out), "SELECT count(*) AS n FROM usage").to_pylist() == [{"n": 120}]


def test_user_files_stay_and_stale_tables_of_the_earlier_run_go(tmp_path):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path, extra=OVERCOMMIT + " output { num_shards: 3 }"), out) == 0
    assert (out / "overcommit_summary").is_dir()
    user_files = {"notes.txt": "mine", ".hidden": "mine too", "usage/notes.txt": "kept",
                  "overcommit_summary/sheet.csv": "a,b"}
    for name, text in user_files.items():
        (out / name).write_text(text)
    assert run_cli(tiny_config(tmp_path, extra="output { num_shards: 2 }"), out) == 0
    assert {name: (out / name).read_text() for name in user_files} == user_files
    # The overcommit tables of the first run are gone but for the user's file; no table
    # keeps a third shard of the first run.
    assert sorted(p.name for p in (out / "overcommit_summary").iterdir()) == ["sheet.csv"]
    assert not (out / "overcommit_counts").exists()
    assert sorted(p.name for p in (out / "usage").iterdir()) == [
        "notes.txt", "part-00000-of-00002.parquet", "part-00001-of-00002.parquet"]
    manifest = manifests.require(str(out))
    assert sorted(manifest["tables"]) == [
        "dead_letters", "exclusions", "instances", "machines", "source_counts", "usage"]


def test_results_of_fleetcast_before_manifests_are_replaced_not_mixed(tmp_path):
    out = tmp_path / "out"
    (out / "usage").mkdir(parents=True)
    old = pa.table({"x": [1]})
    for shard in range(6):  # an earlier fleetcast's 6 shards, without a manifest
        pq.write_table(old, out / "usage" / f"part-{shard:05d}-of-00006.parquet")
    (out / "usage" / "notes.txt").write_text("kept")
    assert run_cli(tiny_config(tmp_path), out) == 0
    assert sorted(p.name for p in (out / "usage").iterdir()) == [
        "notes.txt", *(f"part-{s:05d}-of-00004.parquet" for s in range(4))]
    assert len(read_table(out / "usage")) == 120


def test_a_file_fleetcast_did_not_write_is_never_replaced(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    before = snapshot(out)
    manifest = json.loads((out / "fleetcast_manifest.json").read_text())
    del manifest["files"]["usage/part-00000-of-00004.parquet"]  # as if a user's file
    manifest["tables"]["usage"]["files"].remove("usage/part-00000-of-00004.parquet")
    (out / "fleetcast_manifest.json").write_text(json.dumps(manifest))
    before["fleetcast_manifest.json"] = snapshot(out)["fleetcast_manifest.json"]
    assert run_cli(tiny_config(tmp_path), out) == cli.EXIT_RUN_FAILED
    assert (f"fleetcast: run failed: {out}/usage/part-00000-of-00004.parquet: exists and no "
            "fleetcast manifest says fleetcast wrote it") in capsys.readouterr().err
    assert snapshot(out) == before


def test_an_unwritable_output_fails_before_any_compute(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("a file, not a directory")
    started = time.time()
    assert run_cli(tiny_config(tmp_path), blocker / "out") == cli.EXIT_RUN_FAILED
    assert time.time() - started < 5
    assert (f"fleetcast: run failed: {blocker}/out: the output location is not writable"
            in capsys.readouterr().err)


def test_a_table_whose_every_row_is_rejected_fails_and_publishes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    before = snapshot(out)
    bad = "".join(f"{300 * t},vm0,1.0,101.0,250.0\n" for t in range(5))  # cpu % above 100
    assert run_cli(tiny_config(tmp_path, readings=bad), out) == cli.EXIT_RUN_FAILED
    err = capsys.readouterr().err
    failed = next((out / publish.STATE_DIR / "failed").iterdir())
    assert (f"fleetcast: run failed: every row of azure_v1.vm_cpu_readings was rejected: 5 "
            "of 5 (most common reason, 5 rows: maxcpu above 100 %: 101.0); nothing was "
            f"published ({out} keeps its previous results); this run's tables, dead letters "
            f"included, are in {failed}") in err
    assert snapshot(out) == before
    assert len(read_table(failed / "dead_letters")) == 5
    counts = read_table(failed / "source_counts").sort_values("table")
    assert counts[["table", "read", "kept", "rejected"]].values.tolist() == [
        ["vm_cpu_readings", 5, 0, 5], ["vmtable", 2, 2, 0]]


def test_a_full_disk_fails_the_run_saying_so_and_keeps_the_previous_results(
        tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    before = snapshot(out)

    def disk_full(self, element):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(sinks._WriteShard, "process", disk_full)
    assert run_cli(tiny_config(tmp_path), out) == cli.EXIT_RUN_FAILED
    err = capsys.readouterr().err
    assert err.startswith("fleetcast: run failed: No space left on device while running '")
    assert ("the run writes its results, and the spill files of its large tables, under the "
            "output directory until it publishes") in err
    assert "internal error" not in err and len(err.strip().splitlines()) == 1
    assert snapshot(out) == before
    assert not list((out / publish.STATE_DIR).rglob("*.parquet"))  # its files discarded


@pytest.mark.parametrize("text, reason", [
    ("RuntimeError: OSError: [Errno 28] No space left on device [while running "
     "'WriteTables/WriteParquet/WriteShards']",
     "No space left on device while running 'WriteTables/WriteParquet/WriteShards': "),
    ("OSError: [Errno 122] Disk quota exceeded: '/data/out/x.arrow'",
     "Disk quota exceeded: '/data/out/x.arrow': "),
    ("OSError: [Errno 2] No such file or directory: '/x'", None),
])
def test_a_workers_full_disk_is_a_reason_not_a_bug(text, reason):
    found = failures.reason_of(RuntimeError(f"Traceback (most recent call last):\n{text}"))
    assert found == reason if reason is None else found.startswith(reason)


def test_a_config_may_allow_a_table_whose_every_row_is_rejected(tmp_path, capsys):
    out = tmp_path / "out"
    bad = "".join(f"{300 * t},vm0,1.0,101.0,250.0\n" for t in range(5))
    config = tiny_config(tmp_path, readings=bad,
                     extra="output { allow_all_rows_rejected: true }\n")
    assert run_cli(config, out) == 0
    assert ("every row of azure_v1.vm_cpu_readings was rejected: 5 of 5 (most common reason, "
            "5 rows: maxcpu above 100 %: 101.0); published anyway "
            "(output.allow_all_rows_rejected)") in capsys.readouterr().err
    manifest = manifests.require(str(out))
    assert {name: t["rows"] for name, t in manifest["tables"].items()} == {
        "dead_letters": 5, "exclusions": 0, "instances": 2, "machines": 0, "source_counts": 2,
        "usage": 0}
    assert query(str(out), "SELECT \"table\", read, kept, rejected FROM source_counts "
                 "ORDER BY 1").to_pylist() == [
        {"table": "vm_cpu_readings", "read": 5, "kept": 0, "rejected": 5},
        {"table": "vmtable", "read": 2, "kept": 2, "rejected": 0}]
    assert not (out / publish.STATE_DIR / "failed").exists()


@pytest.mark.slow
def test_readers_refuse_a_directory_without_a_successful_manifest(tmp_path):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    (out / "fleetcast_manifest.json").unlink()
    with pytest.raises(QueryError, match=f"^{out}: no successful fleetcast run manifest"):
        query(str(out), "SELECT 1")
    with pytest.raises(RunFailed, match=f"^{out}: no successful fleetcast run manifest"):
        manifests.parquet_files_of(str(out / "usage"))
    loader = tmp_path / "load.textproto"
    loader.write_text(f'usage {{ input {{ parquet: "{out}/usage" }} }}\n{OVERCOMMIT}')
    result = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", str(loader),
                             "--output_dir", str(tmp_path / "again"), "-q"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert result.stderr.strip().endswith(
        f"fleetcast: run failed: {out}: no successful fleetcast run manifest "
        "(fleetcast_manifest.json): the directory holds no finished run (a run failed, was "
        "killed while publishing, or never ran); run the config again")


def test_a_publication_killed_halfway_is_finished_by_the_nextrun_cli(tmp_path):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    area = publish.StagingArea.open(str(out))
    staged = area.staged_dir(str(out / "usage"))
    os.makedirs(staged)
    pq.write_table(pa.table({"x": [1, 2]}), os.path.join(staged, "part-00000-of-00001.parquet"))
    manifest = area.manifest(name="halfway")
    # Killed after the first step of the publication: the root has no manifest.
    area._move_into_place = lambda plan: (out / "fleetcast_manifest.json").unlink()
    area.publish(manifest)
    area.release()  # as the kernel does when the process is killed
    with pytest.raises(RunFailed):
        manifests.require(str(out))
    next_run = publish.StagingArea.open(str(out))  # finishes the publication first
    next_run.discard()
    next_run.release()
    assert manifests.require(str(out))["name"] == "halfway"
    assert sorted(p.name for p in (out / "usage").iterdir()) == ["part-00000-of-00001.parquet"]


def test_an_extra_copy_into_a_table_of_the_run_fails_before_any_compute(tmp_path, capsys):
    out = tmp_path / "out"
    clash = tiny_config(tmp_path, extra=f'machines {{ output {{ parquet: "{out}/machines" }} }}')
    assert run_cli(clash, out) == cli.EXIT_RUN_FAILED
    assert (f"fleetcast: run failed: {out}/machines: two outputs of the run write into it"
            in capsys.readouterr().err)
    assert not (out / "machines").exists()
    elsewhere = tmp_path / "copies" / "instances"
    copy = tiny_config(tmp_path, extra=f'instances {{ output {{ parquet: "{elsewhere}" }} }}')
    assert run_cli(copy, out) == 0
    assert len(read_table(elsewhere)) == 2
    assert f"{elsewhere}/part-00000-of-00004.parquet" in manifests.require(
        str(out))["outside"]


def test_a_table_loaded_from_the_output_itself_stays_published(tmp_path):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    usage_files = sorted((out / "usage").iterdir())
    loader = tmp_path / "reuse.textproto"
    loader.write_text(f'name: "reuse"\nusage {{ input {{ parquet: "{out}/usage" }} }}\n'
                      f"{OVERCOMMIT}")
    assert run_cli(loader, out) == 0
    manifest = manifests.require(str(out))
    assert manifest["tables"]["usage"]["rows"] == 120
    assert sorted((out / "usage").iterdir()) == usage_files
    assert "overcommit_summary" in manifest["tables"] and "instances" not in manifest["tables"]
    assert query(str(out), "SELECT count(*) AS n FROM usage").to_pylist() == [{"n": 120}]


def test_a_staging_area_that_cannot_be_discarded_does_not_hide_why_the_run_failed(
        tmp_path, capsys, monkeypatch):
    # As when a task of a cancelled Dask computation still writes into the staging area.
    fake = tmp_path / "events.parquet"
    fake.write_text('{"time": 0}\n')
    config = tmp_path / "broken.textproto"
    config.write_text(f'google_v3 {{ instance_events {{ path: "{fake}" }} }}')

    def busy(area):
        raise OSError(39, "Directory not empty")

    monkeypatch.setattr(publish.StagingArea, "discard", busy)
    assert run_cli(config, tmp_path / "out") == cli.EXIT_RUN_FAILED
    err = capsys.readouterr().err
    assert "could not discard the failed run's staging area" in err
    assert f"fleetcast: run failed: {fake}: not a readable Parquet file: " in err
