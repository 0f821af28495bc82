"""Trusting the manifest: files outside the output directory are never deleted, nor replaced
by a run into a copy of the directory; publication files are written whole; a damaged
manifest or plan is reported in one line naming it and never blocks a run; a loaded table is
complete or refused; nothing is written or deleted through a symbolic link under the output;
no traceback reaches the user."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from pipelines import cli
from pipelines.io import manifests, publish, root_files
from pipelines.io.manifests import MANIFEST, STATE_DIR
from pipelines.query import query
from tests.helpers import OVERCOMMIT, REPO, run_cli, snapshot, tiny_config

LIFETIME = (
    'synthetic { machines: 3 days: 1 seed: 1 }\n'
    'lifetime_model { lifetime_cap_s: 3600 num_trees: 5 long_lived_threshold_s: 3600 '
    'long_lived_decision_s: 3600 train_no_uptime_ablation: false train_kaplan_meier: false '
    'train_la_classifier: false train_uptime_long_lived_classifier: false num_shards: 1 '
    'model_dir: "{model_dir}" }}\noutput {{ num_shards: 1 }}\n')


def _lifetime_config(tmp_path, name, model_dir):
    path = tmp_path / f"{name}.textproto"
    path.write_text(f'name: "{name}"\n' + LIFETIME.replace("{model_dir}", str(model_dir))
                    .replace("{{", "{").replace("}}", "}"))
    return path


def _inodes(directory):
    """{path: inode} of every file under `directory` (a replaced file has a new inode)."""
    return {str(p): p.stat().st_ino for p in directory.rglob("*") if p.is_file()}


def _last_line(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_copy_of_a_results_directory_never_owns_the_original_models(tmp_path, capsys):
    models = tmp_path / "models_elsewhere"
    run_a = tmp_path / "runA"
    assert run_cli(_lifetime_config(tmp_path, "a", models), run_a) == 0
    assert sorted(manifests.require(str(run_a))["outside"]) == [
        f"{models}/uptime/metadata.json", f"{models}/uptime/model.txt"]
    before, inodes = snapshot(models), _inodes(models)
    run_b, run_c = tmp_path / "runB", tmp_path / "runC"
    shutil.copytree(run_a, run_b)
    shutil.copytree(run_a, run_c)
    # A run into a copy leaves the original's models alone ...
    assert run_cli(_lifetime_config(tmp_path, "b", tmp_path / "models_b"), run_b) == 0
    assert snapshot(models) == before and _inodes(models) == inodes
    assert query(str(run_a), "SELECT path FROM lifetime_models").to_pylist() == [
        {"path": f"{models}/uptime"}]
    # ... and may not replace them either: they belong to the run into runA.
    assert run_cli(_lifetime_config(tmp_path, "a", models), run_c) == cli.EXIT_RUN_FAILED
    assert _last_line(capsys) == (
        f"fleetcast: run failed: {models}/uptime/metadata.json: exists and no run into this "
        "directory wrote it; move it away (the previous results are untouched)")
    assert snapshot(models) == before and _inodes(models) == inodes
    # A rerun into runA itself replaces them.
    assert run_cli(_lifetime_config(tmp_path, "a", models), run_a) == 0
    assert sorted(snapshot(models)) == sorted(before)
    assert set(_inodes(models).values()).isdisjoint(inodes.values())


@pytest.mark.parametrize("entry", ["../victim.txt", "{tmp}/victim.txt"])
def test_a_manifest_entry_outside_the_directory_is_never_deleted(tmp_path, capsys, entry):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    path = out / MANIFEST
    manifest = json.loads(path.read_text())
    manifest["files"][entry.format(tmp=tmp_path)] = 4
    path.write_text(json.dumps(manifest))
    assert run_cli(tiny_config(tmp_path), out) == 0
    assert victim.read_text() == "mine"
    assert f"{path}: damaged fleetcast manifest ('files' lists " in capsys.readouterr().err
    assert query(str(out), "SELECT count(*) AS n FROM usage").to_pylist() == [{"n": 120}]


DAMAGED = {
    "truncated": lambda text: text[:len(text) // 2],
    "empty": lambda text: "",
    "binary": lambda text: b"\x00\xff\xfe garbage",
    "a list": lambda text: "[]",
    "without tables": lambda text: json.dumps({**json.loads(text), "tables": None} | {}),
    "tables as a list": lambda text: json.dumps({**json.loads(text), "tables": []}),
    "a table without files": lambda text: json.dumps(
        {**json.loads(text), "tables": {**json.loads(text)["tables"], "usage": {
            "rows": 120, "files": []}}}),
}


def _damage(out, how):
    path = out / MANIFEST
    damaged = DAMAGED[how](path.read_text())
    if isinstance(damaged, bytes):
        path.write_bytes(damaged)
    else:
        path.write_text(damaged)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(DAMAGED))
def test_a_damaged_manifest_is_refused_by_readers_in_one_line(tmp_path, how):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    path = _damage(out, how)
    for command in (["query", str(out), "SELECT 1"], ["report", str(out)]):
        done = subprocess.run([sys.executable, "-m", "pipelines.cli", *command], cwd=REPO,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == cli.EXIT_CONFIG_ERROR, done.stderr
        assert done.stderr.strip().splitlines() == [done.stderr.strip()]
        assert done.stderr.startswith(f"fleetcast: {path}: damaged fleetcast manifest (")
        assert done.stderr.strip().endswith(f"run the config again into {out} to replace it, "
                                             f"or delete the file (then {out} holds no "
                                             "finished run until one publishes into it)")


@pytest.mark.parametrize("how", ["truncated", "a list", "tables as a list"])
def test_a_run_into_a_directory_with_a_damaged_manifest_replaces_it(tmp_path, capsys, how):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path, extra="output { num_shards: 3 }"), out) == 0
    path = _damage(out, how)
    (out / "usage" / "notes.txt").write_text("kept")
    started = time.time()
    assert run_cli(tiny_config(tmp_path), out) == 0
    assert time.time() - started < 60
    assert f"{path}: damaged fleetcast manifest (" in capsys.readouterr().err
    assert manifests.require(str(out))["tables"]["usage"]["rows"] == 120
    assert sorted(p.name for p in (out / "usage").iterdir()) == [
        "notes.txt", *(f"part-{s:05d}-of-00004.parquet" for s in range(4))]
    assert not os.listdir(out / STATE_DIR / "staging")


def test_a_manifest_that_is_a_directory_fails_a_run_before_any_compute(tmp_path, capsys):
    out = tmp_path / "out"
    (out / MANIFEST).mkdir(parents=True)
    (out / MANIFEST / "mine.txt").write_text("kept")
    assert run_cli(tiny_config(tmp_path), out) == cli.EXIT_RUN_FAILED
    assert _last_line(capsys) == (f"fleetcast: run failed: {out}/{MANIFEST}: a directory "
                                  "where fleetcast writes its manifest; move it away")
    assert (out / MANIFEST / "mine.txt").read_text() == "kept"


def _loader(tmp_path, table_dir):
    loader = tmp_path / "load.textproto"
    loader.write_text(f'usage {{ input {{ parquet: "{table_dir}" }} }}\n{OVERCOMMIT}')
    return loader


def test_a_loaded_table_with_a_missing_or_changed_shard_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    shard = out / "usage" / "part-00001-of-00004.parquet"
    data = shard.read_bytes()
    shard.unlink()
    assert run_cli(_loader(tmp_path, out / "usage"), tmp_path / "again") == cli.EXIT_RUN_FAILED
    assert _last_line(capsys) == (
        f"fleetcast: run failed: {shard}: missing; {out}/{MANIFEST} lists it as part of table "
        f"usage, which is incomplete without it: run the config again into {out}")
    assert cli.main(["query", str(out), "SELECT count(*) FROM usage"]) == 2
    assert _last_line(capsys).startswith(f"fleetcast: {shard}: missing; ")
    shard.write_bytes(data + b"extra")
    assert run_cli(_loader(tmp_path, out / "usage"), tmp_path / "again") == cli.EXIT_RUN_FAILED
    assert _last_line(capsys) == (
        f"fleetcast: run failed: {shard}: {len(data) + 5:,} bytes where {out}/{MANIFEST} "
        f"records {len(data):,}: the file was changed after the run published it; run the "
        f"config again into {out}")


def test_a_plain_directory_of_shards_with_one_missing_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    plain = tmp_path / "plain"
    shutil.copytree(out / "usage", plain)
    (plain / "part-00002-of-00004.parquet").unlink()
    assert run_cli(_loader(tmp_path, plain), tmp_path / "again") == cli.EXIT_RUN_FAILED
    assert _last_line(capsys) == (
        f"fleetcast: run failed: {plain}/part-00002-of-00004.parquet: missing; the table in "
        f"{plain} is incomplete without it (1 of 4 shards missing)")


def test_a_damaged_publication_plan_is_set_aside_and_never_blocks(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    before = snapshot(out)
    killed = out / STATE_DIR / "staging" / "20260101T000000-deadbeef"
    (killed / "usage").mkdir(parents=True)
    (killed / "usage" / "part-00000-of-00001.parquet").write_bytes(b"staged")
    (killed / publish.PLAN).write_text("")  # as a plan written in place and killed
    assert cli.main(["query", str(out), "SELECT count(*) AS n FROM usage"]) == 0
    assert snapshot(out) == before
    assert run_cli(tiny_config(tmp_path), out) == 0
    err = capsys.readouterr().err
    kept = out / STATE_DIR / "failed" / killed.name
    assert (f"{killed / publish.PLAN}: damaged publication plan (empty file) of a run killed "
            f"while it published; its staged files are set aside in {kept}") in err
    assert (kept / "usage" / "part-00000-of-00001.parquet").read_bytes() == b"staged"
    assert not os.listdir(out / STATE_DIR / "staging")


def test_a_plan_that_renames_outside_its_staging_is_not_carried_out(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    killed = out / STATE_DIR / "staging" / "20260101T000000-deadbeef"
    killed.mkdir(parents=True)
    manifest = manifests.require(str(out))
    plan = {"manifest": manifest, "stale": [],
            "moves": [["usage/part-00000-of-00004.parquet", "../../../../victim.txt"]]}
    (killed / publish.PLAN).write_text(json.dumps(plan))
    assert run_cli(tiny_config(tmp_path), out) == 0
    assert victim.read_text() == "mine"
    assert "renames ['usage/part-00000-of-00004.parquet', '../../../../victim.txt'], not a " \
        "staged file" in capsys.readouterr().err


def test_a_run_killed_as_it_publishes_never_bricks_the_directory(tmp_path):
    """SIGKILL as soon as the publication plan (or its temporary file) appears: the plan is
    whole or absent, and the next run publishes."""
    out = tmp_path / "out"
    config = tiny_config(tmp_path, extra="output { num_shards: 200 }")
    process = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "run", str(config),
                                "--output_dir", str(out), "-q"], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    staging = out / STATE_DIR / "staging"
    deadline = time.time() + 300
    while not list(staging.glob(f"*/{publish.PLAN}*")) and process.poll() is None:
        assert time.time() < deadline
        time.sleep(0.001)
    process.send_signal(signal.SIGKILL)
    process.wait()
    for plan in staging.glob(f"*/{publish.PLAN}"):
        json.loads(plan.read_text())  # whole, never cut short
    started = time.time()
    assert run_cli(tiny_config(tmp_path), out) == 0
    assert time.time() - started < 120
    assert query(str(out), "SELECT count(*) AS n FROM usage").to_pylist() == [{"n": 120}]


def test_nothing_is_written_through_a_symbolic_link_under_the_output(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    target = tmp_path / "target"
    target.mkdir()
    (target / "precious.txt").write_text("mine")
    shutil.rmtree(out / "usage")
    (out / "usage").symlink_to(target)
    before = snapshot(target)
    assert run_cli(tiny_config(tmp_path), out) == cli.EXIT_RUN_FAILED
    assert _last_line(capsys) == (
        f"fleetcast: run failed: {out}/usage: a symbolic link (to {target}) inside the output "
        f"directory {out}; fleetcast writes and deletes only through real directories there: "
        "remove the link, or write elsewhere")
    assert snapshot(target) == before


def test_the_lock_is_never_opened_through_a_symbolic_link(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    target = tmp_path / "precious.txt"
    target.write_text("mine")
    lock = out / STATE_DIR / root_files.LOCK
    lock.unlink()
    lock.symlink_to(target)
    assert run_cli(tiny_config(tmp_path), out) == cli.EXIT_RUN_FAILED
    assert _last_line(capsys).startswith(f"fleetcast: run failed: {lock}: cannot be opened as "
                                         "fleetcast's lock (")
    assert target.read_text() == "mine"


def test_what_killed_runs_left_staged_goes_with_the_next_run(tmp_path):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    for run_id in ("20260101T000000-aaaaaaaa", "20260101T000000-bbbbbbbb"):
        (out / STATE_DIR / "staging" / run_id).mkdir()
    (out / STATE_DIR / "staging" / "20260101T000000-bbbbbbbb" / "run.json").write_text("{}")
    assert run_cli(tiny_config(tmp_path), out) == 0
    assert not os.listdir(out / STATE_DIR / "staging")


def test_an_unforeseen_error_is_one_line_naming_its_traceback_file(tmp_path, capsys,
                                                                   monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr("pipelines.run.publish_run", broken)
    assert run_cli(tiny_config(tmp_path), tmp_path / "out") == cli.EXIT_RUN_FAILED
    line = _last_line(capsys)
    assert line.startswith("fleetcast: internal error (a bug in fleetcast or in a plug-in): "
                           "ZeroDivisionError: division by zero; the traceback is in ")
    traceback_file = line.rsplit(" ", 1)[1]
    assert "in broken" in open(traceback_file).read()
    os.unlink(traceback_file)


@pytest.mark.parametrize("mode", [[], pytest.param(["--direct_running_mode=multi_processing",
                                                    "--direct_num_workers=2"],
                                                   marks=pytest.mark.slow)],
                         ids=["in_process", "workers"])
def test_a_failing_step_prints_one_line_and_no_beam_traceback(tmp_path, mode):
    (tmp_path / "readings.csv.gz").write_bytes(b"not gzip")
    config = tiny_config(tmp_path)
    config.write_text(config.read_text().replace("readings.csv", "readings.csv.gz"))
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", str(config),
                           "--output_dir", str(tmp_path / "out"), "-q", *mode], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == cli.EXIT_RUN_FAILED
    assert done.stderr.strip().splitlines() == [
        f"fleetcast: run failed: {tmp_path}/readings.csv.gz: not a valid gzip file: the file "
        "ends before its end-of-stream marker (truncated?)"]


def test_a_multi_line_error_is_reported_on_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    capsys.readouterr()
    assert cli.main(["query", str(out), "SELEC 1"]) == cli.EXIT_CONFIG_ERROR
    assert capsys.readouterr().err == ('fleetcast: ParserException: Parser Error: syntax error '
                                       'at or near "SELEC"; LINE 1: SELEC 1\n')


def test_a_query_piped_into_head_ends_quietly(tmp_path):
    out = tmp_path / "out"
    assert run_cli(tiny_config(tmp_path), out) == 0
    sql = "SELECT * FROM usage, range(200)"  # 24,000 rows: more than a pipe holds
    done = subprocess.run(f"{sys.executable} -m pipelines.cli query {out} '{sql}' --format csv "
                          "| head -1", shell=True, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.startswith('"machine_id"') and done.stderr == ""
