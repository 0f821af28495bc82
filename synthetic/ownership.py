"""What `fleetcast synth` may replace in its output directory, and how it replaces it
(docs/reliability.md, "fleetcast synth").

A synth into directory R lists the files it wrote in R/fleetcast_synth_manifest.json
(MANIFEST), format 1:

    {"fleetcast_synth_manifest": 1, "fleetcast_version", "started_at", "finished_at" (UTC),
     "arguments": {synthetic.generate's keywords}, "rows": {table: rows},
     "files": {path relative to R: bytes}}

It replaces or deletes only files that the previous one lists, and refuses, before writing,
anything else in the way of its files (a file where a table's folder goes included) and any
trace file (named as a synth names its files, in any format, layout or shard count) that no
manifest lists: a run would read it with the new trace. It holds R's lock (R/.fleetcast/lock,
the one `fleetcast run` takes), writes the trace into R/.fleetcast/synth/trace, writes its
publication plan beside it, renames the files into place, deletes the previous trace's other
files and writes the manifest last. A synth killed before its plan leaves R as it was; one
killed after it leaves the plan, which the next synth into R carries out first.
"""

import contextlib
import os
import re
import socket
from typing import Dict, List, Optional

from apache_beam.io.filesystems import FileSystems

from pipelines import fleetcast_version
from pipelines.io.failures import RunFailed
from pipelines.io.manifests import (
    STATE_DIR,
    file_size,
    is_local,
    is_relative_under,
    read_json,
    write_json_atomic,
)
from pipelines.io.publish import now_utc
from pipelines.io.root_files import (
    delete_stale,
    ensure_dir,
    file_on_the_way,
    is_directory,
    lock,
    occupied,
    refuse_link,
    relative_to,
    rename,
)
from synthetic import bounds
from synthetic.constants import FILE_SUFFIXES, TABLES
from synthetic.trace import generate
from synthetic.writers import shard_paths

MANIFEST = "fleetcast_synth_manifest.json"
FORMAT_VERSION = 1
WORK_DIR = "synth"  # R/.fleetcast/synth: the trace being written (trace/) and its plan
_PLAN = "plan.json"
_TABLE = "|".join(TABLES)
_SUFFIX = "|".join(re.escape(suffix) for suffix in FILE_SUFFIXES.values())
# The name of every file a synth writes, relative to R: either layout, any format and shards.
_TRACE_FILE = re.compile(
    rf"^(?:(?P<table>{_TABLE})/(?P=table)-\d{{5}}-of-\d{{5}}|(?:{_TABLE})-\d{{12}})"
    rf"(?:{_SUFFIX})$")


def synth(out_dir: str, arguments: dict) -> dict:
    """Writes the trace of `arguments` (synthetic.generate's keywords) into `out_dir` in
    place of the trace an earlier synth wrote there; returns generate's summary with the
    published paths. Before writing anything: ValueError naming an argument out of its
    bounds (synthetic/bounds.py); RunFailed for an --out that is a file, is locked by
    another fleetcast command, or holds a file in the way that no synth manifest lists."""
    bounds.check(**arguments)
    root = out_dir.rstrip("/") or "/"
    if is_local(root) and os.path.exists(root) and not os.path.isdir(root):
        raise RunFailed(f"--out {out_dir}: a file, not a directory")
    with _locked(root):
        return _replace_trace(root, arguments)


@contextlib.contextmanager
def _locked(root: str):
    """Holds `root`'s lock, as `fleetcast run` does (no lock on a remote file system)."""
    state_dir = FileSystems.join(root, STATE_DIR)
    refuse_link(root, state_dir)
    try:
        ensure_dir(state_dir)
    except OSError as e:
        raise RunFailed(f"{root}: the output directory is not writable: {e}") from None
    fd = lock(root, state_dir, f"pid {os.getpid()} on {socket.gethostname()}, started "
              f"{now_utc()}, fleetcast synth")
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def _replace_trace(root: str, arguments: dict) -> dict:
    """The body of `synth`, under `root`'s lock."""
    work = FileSystems.join(root, STATE_DIR, WORK_DIR)
    refuse_link(root, work)
    _finish_interrupted(root, work)
    owned = _previous_files(root)
    finals = [path for table in TABLES for path in shard_paths(
        root, table, arguments["shards"], arguments["file_format"], arguments["layout"])]
    _refuse_foreign(root, owned, finals)
    started_at = now_utc()
    trace_dir = FileSystems.join(work, "trace")
    with _discarded_on_failure(work):
        summary = generate(trace_dir, **arguments)
        manifest = _manifest(trace_dir, summary, arguments, started_at)
        _refuse_foreign(root, owned, finals)  # a file put there while the trace was written
    plan = {"manifest": manifest, "stale": sorted(set(owned) - set(manifest["files"]))}
    write_json_atomic(FileSystems.join(work, _PLAN), plan)
    _carry_out(root, work, plan)
    return {**summary, "paths": {
        table: [FileSystems.join(root, relative_to(path, trace_dir)) for path in paths]
        for table, paths in summary["paths"].items()}}


@contextlib.contextmanager
def _discarded_on_failure(work: str):
    """Deletes `work` (what this synth staged) when the block fails."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):  # else the next synth into the root deletes it
            FileSystems.delete([work])
        raise


def _manifest(trace_dir: str, summary: dict, arguments: dict, started_at: str) -> dict:
    """The manifest of the trace generate wrote into `trace_dir` (its `summary`)."""
    files = {relative_to(path, trace_dir): file_size(path)
             for paths in summary["paths"].values() for path in paths}
    return {"fleetcast_synth_manifest": FORMAT_VERSION, "fleetcast_version": fleetcast_version(),
            "started_at": started_at, "finished_at": now_utc(), "arguments": arguments,
            "rows": summary["rows"], "files": files}


def _finish_interrupted(root: str, work: str):
    """Carries out the plan of a synth killed while it published, or deletes what a synth
    killed before its plan left."""
    plan_path = FileSystems.join(work, _PLAN)
    if FileSystems.exists(plan_path):
        _carry_out(root, work, _read_plan(root, work, plan_path))
    elif FileSystems.exists(work):
        FileSystems.delete([work])


def _carry_out(root: str, work: str, plan: dict):
    """Renames the staged files into place (those left: a plan may be carried out again),
    deletes the previous trace's other files, then writes the manifest and drops `work`."""
    trace_dir = FileSystems.join(work, "trace")
    for relative in sorted(plan["manifest"]["files"]):
        staged = FileSystems.join(trace_dir, relative)
        if FileSystems.exists(staged):
            final = FileSystems.join(root, relative)
            refuse_link(root, final)
            rename(staged, final)
    delete_stale(root, [FileSystems.join(root, relative) for relative in plan["stale"]])
    write_json_atomic(FileSystems.join(root, MANIFEST), plan["manifest"])
    FileSystems.delete([work])


def _checked_manifest(manifest) -> dict:
    """`manifest` when it is a synth manifest of format 1 (files under the root, with their
    sizes), else ValueError saying what it is not."""
    if not (isinstance(manifest, dict)
            and manifest.get("fleetcast_synth_manifest") == FORMAT_VERSION):
        raise ValueError(f"not a fleetcast synth manifest of format {FORMAT_VERSION}")
    files = manifest.get("files")
    if not (isinstance(files, dict) and all(
            is_relative_under(path) and isinstance(size, int) for path, size in files.items())):
        raise ValueError("'files' is not an object of paths under the directory and sizes")
    return manifest


def _previous_files(root: str) -> Dict[str, int]:
    """{path relative to `root`: bytes} of the trace the previous synth wrote there (none
    without a manifest); RunFailed when its manifest is damaged."""
    path = FileSystems.join(root, MANIFEST)
    if not occupied(path):
        return {}
    try:
        if is_directory(path):
            raise ValueError("a directory, not a file")
        return _checked_manifest(read_json(path))["files"]
    except ValueError as e:
        raise RunFailed(f"{path}: damaged fleetcast synth manifest ({e}), so which files in "
                        f"{root} synth wrote is unknown: delete the trace's files and the "
                        "manifest, or choose another --out") from None


def _read_plan(root: str, work: str, path: str) -> dict:
    """The publication plan in `path`; RunFailed when it is damaged."""
    try:
        plan = read_json(path)
        if not (isinstance(plan, dict) and isinstance(plan.get("stale"), list)
                and all(is_relative_under(f) for f in plan["stale"])):
            raise ValueError("no list of stale files under the directory")
        _checked_manifest(plan.get("manifest"))
    except ValueError as e:
        raise RunFailed(f"{path}: damaged plan of a synth killed while it published ({e}); "
                        f"{root} may hold files of two traces: delete the trace's files, "
                        f"{MANIFEST} and {work}, then synth again") from None
    return plan


def _refuse_foreign(root: str, owned: Dict[str, int], finals: List[str]):
    """RunFailed naming the first path in the way of `finals` (the new trace's files) that
    is not in `owned`, or the first trace file under `root` that is not."""
    for final in finals:
        refuse_link(root, final)
        blocker = _in_the_way(root, owned, final)
        if blocker is not None:
            raise RunFailed(f"{blocker}: in the way of the new trace, and no {MANIFEST} says "
                            "fleetcast synth wrote it; move it away or choose another --out")
    for path in _trace_files(root):
        if relative_to(path, root) not in owned:
            raise RunFailed(f"{path}: a trace file that no {MANIFEST} lists (an older "
                            "fleetcast's, or not fleetcast's), which a run would read with the "
                            f"new trace: remove the trace's files from {root} or choose "
                            "another --out")


def _in_the_way(root: str, owned: Dict[str, int], final: str) -> Optional[str]:
    """What keeps the new trace's file `final` from being written: a file where one of its
    folders goes, a directory at `final`, or a file there that the previous synth did not
    write; None when nothing does."""
    folder = file_on_the_way(root, final)
    if folder is not None:
        return folder
    if occupied(final) and (relative_to(final, root) not in owned or is_directory(final)):
        return final
    return None


def _trace_files(root: str) -> List[str]:
    """The files under `root` named as a synth names its files (_TRACE_FILE)."""
    patterns = [FileSystems.join(root, *parts, f"{table}-*")
                for table in TABLES for parts in ((), (table,))]
    return sorted(metadata.path for result in FileSystems.match(patterns)
                  for metadata in result.metadata_list
                  if _TRACE_FILE.match(relative_to(metadata.path, root) or ""))
