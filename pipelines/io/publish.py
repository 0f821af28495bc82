"""Atomic results: a run writes under a staging directory and publishes only on success.

A Parquet run with output root R writes every file into R/.fleetcast/staging/<run id>/ (its
tables, the synthetic trace it generates, its lifetime models, and the extra copies and
model directories configured elsewhere on R's file system). Only
when the pipeline has finished and the results pass their checks are the staged files
renamed into place, and the run manifest R/fleetcast_manifest.json is written last:

    {"fleetcast_manifest": 1, "success": true, "run_id", "name", "config" (text format),
     "fleetcast_version", "started_at", "finished_at" (UTC, ISO 8601),
     "tables": {name: {"rows", "files"}}, "files": [every file the run published]}

Paths under R are relative to R. A directory on another file system than R's (gs:// beside
a local R, or the reverse) cannot be renamed into from R's staging area: it is written in
place while the run runs, and is not in the manifest. Steps that read the run's own outputs
while it runs (the placement stage loads the lifetime models) find them through
`staged_dirs`. fleetcast deletes or replaces only files that the previous
manifest lists (or, in a root without one, files named like its Parquet shards,
part-NNNNN-of-NNNNN.parquet, in a table directory: results of fleetcast before manifests);
a user's notes.txt or hidden file beside the tables is never touched. Readers
(`fleetcast query`, the notebooks, loaded tables) refuse a root without a successful
manifest and read exactly the files it lists.

While the files are renamed (milliseconds) R has no manifest, so a run killed in that
window leaves a root that readers refuse; its staged files and manifest stay in the staging
directory and the next run into R finishes that publication before it starts.

One run at a time writes into a local R: a run holds an exclusive flock(2) on
R/.fleetcast/lock (which records its pid, host, start time and run id) from before it
touches R until it has published or failed, and a second run fails at once naming R and
the holder. The kernel releases the lock when its process ends, SIGKILL included, so a lock
left behind never blocks. An R on another file system (gs://) is not locked.
"""

import contextlib
import datetime
import fcntl
import json
import os
import re
import socket
import uuid
from typing import Dict, List, Optional

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipelines.io.failures import RunFailed

MANIFEST = "fleetcast_manifest.json"
STATE_DIR = ".fleetcast"
LOCK = "lock"
FORMAT_VERSION = 1
_SHARD = re.compile(r"^[^/]+/part-\d{5}-of-\d{5}\.parquet$")
# What fleetcast wrote under an output root before it wrote manifests: table shards, the
# synthetic trace's files and the lifetime models' files (models/<model name>/<file>).
_LEGACY = re.compile(r"^([^/]+/part-\d{5}-of-\d{5}\.parquet"
                     r"|synthetic_trace/[^/]+/[^/]+-\d{5}-of-\d{5}\.[a-z.]+"
                     r"|models/[^/]+/[^/]+)$")


def now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def files_under(directory: str) -> List[str]:
    if not FileSystems.exists(directory):
        return []
    return sorted(m.path for m in FileSystems.match([FileSystems.join(directory, "**")])[0]
                  .metadata_list)


def _relative(path: str, root: str) -> Optional[str]:
    prefix = root.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else None


def _write_json(path: str, value: dict):
    with FileSystems.create(path) as handle:
        handle.write(json.dumps(value, indent=1, sort_keys=True).encode("utf-8"))


def _read_json(path: str) -> dict:
    with FileSystems.open(path) as handle:
        return json.loads(handle.read().decode("utf-8"))


def _ensure_dir(directory: str):
    if not FileSystems.exists(directory):
        FileSystems.mkdirs(directory)


def _rename(source: str, target: str):
    _ensure_dir(target.rsplit("/", 1)[0])
    FileSystems.rename([source], [target])


def _remove_empty_dirs(directories):
    """Deletes each directory (deepest first) that holds nothing, e.g. a stale table's."""
    for directory in sorted(set(directories), key=len, reverse=True):
        if FileSystems.exists(directory) and not files_under(directory):
            FileSystems.delete([directory])


def _lock(root: str, state_dir: str, run_id: str) -> Optional[int]:
    """The descriptor of an exclusive flock on `state_dir`/lock, recording this process as
    its holder; None for a root that is not a local path. RunFailed naming `root` and the
    holder when another process holds it."""
    if FileSystems.get_scheme(state_dir) is not None:
        return None
    fd = os.open(os.path.join(state_dir, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 4096).decode("utf-8", "replace").strip()
        os.close(fd)
        raise RunFailed(f"{root}: another fleetcast run is writing into this directory "
                        f"({holder or 'its holder has not recorded itself yet'}); wait for "
                        "it to end or write elsewhere (the lock goes when that process "
                        "ends)") from None
    holder = f"pid {os.getpid()} on {socket.gethostname()}, started {now_utc()}, run {run_id}"
    os.ftruncate(fd, 0)
    os.write(fd, holder.encode("utf-8"))
    return fd


def read_parquet_dir(directory: str, columns=None) -> Optional[pa.Table]:
    """Every Parquet file under `directory` as one table (None: no file)."""
    tables = []
    for path in files_under(directory):
        with FileSystems.open(path) as handle:
            tables.append(pq.read_table(handle, columns=columns))
    return pa.concat_tables(tables) if tables else None


def read_manifest(root: str) -> Optional[dict]:
    """The run manifest of output root `root`, or None when it has none."""
    path = FileSystems.join(root, MANIFEST)
    return _read_json(path) if FileSystems.exists(path) else None


def require_manifest(root: str) -> dict:
    """The successful manifest of `root`; RunFailed naming `root` when there is none."""
    manifest = read_manifest(root)
    if manifest is None or not manifest.get("success"):
        raise RunFailed(f"{root}: no successful fleetcast run manifest ({MANIFEST}): the "
                        "directory holds no finished run (a run failed, was killed while "
                        "publishing, or never ran); run the config again")
    return manifest


def table_files(root: str, manifest: dict, table: str) -> List[str]:
    """Paths of the files of `table` that the manifest of `root` lists."""
    return [FileSystems.join(root, f) for f in manifest["tables"][table]["files"]]


def parquet_files_of(table_dir: str) -> Optional[List[str]]:
    """The files of a table directory that a fleetcast run published: those its root's
    manifest lists; None for a directory outside any fleetcast output root (read it whole).
    RunFailed for a root without a successful manifest, or a table it does not list."""
    root, _, table = table_dir.rstrip("/").rpartition("/")
    if not (FileSystems.exists(FileSystems.join(root, MANIFEST))
            or FileSystems.exists(FileSystems.join(root, STATE_DIR))):
        return None
    manifest = require_manifest(root)
    if table not in manifest["tables"]:
        raise RunFailed(f"{table_dir}: not a table of the run in {root} (its manifest lists "
                        f"{', '.join(sorted(manifest['tables']))})")
    return table_files(root, manifest, table)


def rows_in(paths) -> int:
    total = 0
    for path in paths:
        with FileSystems.open(path) as handle:
            total += pq.ParquetFile(handle).metadata.num_rows
    return total


class StagingArea:
    """One run's staging directory under output root `root`, and the final place of each
    directory staged in it. `open` checks that the root is writable (before any compute)."""

    def __init__(self, root: str, run_id: str):
        self.root = root.rstrip("/") or "/"
        self.run_id = run_id
        self.state_dir = FileSystems.join(self.root, STATE_DIR)
        self.work_dir = FileSystems.join(self.state_dir, "staging", run_id)
        self._staged: Dict[str, str] = {}  # final directory -> staged directory
        self._lock_fd: Optional[int] = None

    @classmethod
    def open(cls, root: str) -> "StagingArea":
        """The staging area of a new run into `root`, holding `root`'s lock until `release`."""
        run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S-") + \
            uuid.uuid4().hex[:8]
        area = cls(root, run_id)
        with area._writable():
            _ensure_dir(area.state_dir)
            area._lock_fd = _lock(root, area.state_dir, run_id)
        try:
            area._finish_interrupted_publications()
            probe = FileSystems.join(area.work_dir, "writable")
            with area._writable():
                _ensure_dir(area.work_dir)
                _write_json(probe, {"run_id": run_id})
                FileSystems.delete([probe])
        except BaseException:
            area.release()
            raise
        return area

    @contextlib.contextmanager
    def _writable(self):
        """Turns a failure to write under the root into RunFailed naming it."""
        try:
            yield
        except RunFailed:
            raise
        except Exception as e:  # pylint: disable=broad-except
            raise RunFailed(f"{self.root}: the output location is not writable: {e}") from None

    def release(self):
        """Releases the root's lock (once the run has published, failed or been discarded)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _finish_interrupted_publications(self):
        """Publishes what a run killed while publishing left staged (with its manifest), and
        deletes what killed or failed runs left staged without one."""
        staging = FileSystems.join(self.state_dir, "staging")
        for run_id in sorted({_relative(p, staging).split("/")[0]
                              for p in files_under(staging)}):
            interrupted = StagingArea(self.root, run_id)
            staged_manifest = FileSystems.join(interrupted.work_dir, MANIFEST)
            if FileSystems.exists(staged_manifest):
                interrupted._move_into_place(_read_json(staged_manifest))
            else:
                interrupted.discard()

    def staged_dir(self, final_dir: str) -> str:
        """Where this run writes the directory `final_dir` until it publishes: `final_dir`
        itself when it is on another file system than the root (no rename crosses them)."""
        final_dir = final_dir.rstrip("/")
        if FileSystems.get_scheme(final_dir) != FileSystems.get_scheme(self.root):
            return final_dir
        for other in self._staged:
            if final_dir == other or final_dir.startswith(other + "/") \
                    or other.startswith(final_dir + "/"):
                raise RunFailed(f"{final_dir}: two outputs of the run write into it (e.g. a "
                                f"LoadOrWrite copy of a table into the table's own directory)"
                                f"; overlaps {other}")
        relative = (_relative(final_dir, self.root) if final_dir != self.root else "")
        if relative is None:  # an extra copy outside the root
            relative = f"{STATE_DIR}-copies/{len(self._staged)}"
        staged = FileSystems.join(self.work_dir, relative) if relative else self.work_dir
        self._staged[final_dir] = staged
        return staged

    def staged_dirs(self) -> Dict[str, str]:
        """{final directory: staged directory} of every directory staged so far."""
        return dict(self._staged)

    def staged_files(self) -> Dict[str, str]:
        """{final path: staged path} of every file this run has staged."""
        files = {}
        for final_dir, staged_dir in self._staged.items():
            for staged in files_under(staged_dir):
                relative = _relative(staged, staged_dir)
                if staged_dir == self.work_dir and relative.startswith(f"{STATE_DIR}-"):
                    continue  # a copy outside the root (listed under its own directory), or
                    # an extra_dir
                files[FileSystems.join(final_dir, relative)] = staged
        return files

    def extra_dir(self, name: str) -> str:
        """A directory of this run's staging area that is never published (it goes with
        the area when the run ends, is discarded or is kept aside as failed)."""
        return FileSystems.join(self.work_dir, f"{STATE_DIR}-{name}")

    def staged_table(self, final_dir: str, columns=None) -> pa.Table:
        """The rows of a table this run has staged (before it publishes)."""
        return read_parquet_dir(self._staged[final_dir.rstrip("/")], columns)

    def manifest(self, carried_tables=(), **run_fields) -> dict:
        """The manifest of the staged files (success, tables with their rows), and of the
        earlier run's `carried_tables` (tables of the root that this run loaded as input:
        they stay, listed again)."""
        files = self.staged_files()
        previous = read_manifest(self.root) or {"tables": {}}
        carried = {name: previous["tables"][name] for name in carried_tables
                   if name in previous["tables"]}
        published = [f for table in carried.values() for f in table["files"]]
        tables = dict(carried)
        for final in sorted(files):
            relative = _relative(final, self.root)
            published.append(relative if relative is not None else final)
            if relative is not None and _SHARD.match(relative):
                table = tables.setdefault(relative.split("/")[0], {"files": []})
                table["files"].append(relative)
        for name, table in tables.items():
            if name in carried:
                continue
            table["rows"] = rows_in(files[FileSystems.join(self.root, f)]
                                    for f in table["files"])
        return {"fleetcast_manifest": FORMAT_VERSION, "success": True, "run_id": self.run_id,
                **run_fields, "tables": tables, "files": sorted(published)}

    def publish(self, manifest: dict):
        """Moves the staged files into place and writes `manifest` last."""
        previous = read_manifest(self.root)
        replaced = self._replaceable(previous)
        moves = self.staged_files()
        foreign = [f for f in moves if f not in replaced and FileSystems.exists(f)]
        if foreign:
            raise RunFailed(f"{foreign[0]}: exists and no fleetcast manifest says fleetcast "
                            "wrote it; move it away (the previous results are untouched)")
        # The plan goes with the staged files, so a publication killed halfway can finish.
        plan = {"manifest": manifest, "moves": moves, "replaced": sorted(replaced)}
        _write_json(FileSystems.join(self.work_dir, MANIFEST), plan)
        self._move_into_place(plan)

    def _replaceable(self, previous: Optional[dict]) -> set:
        """Paths of the earlier run's files that this run may delete or replace."""
        if previous is not None:
            return {self._absolute(f) for f in previous.get("files", [])}
        return {path for path in files_under(self.root)
                if _LEGACY.match(_relative(path, self.root) or "")}

    def _absolute(self, path: str) -> str:
        return path if FileSystems.get_scheme(path) or path.startswith("/") \
            else FileSystems.join(self.root, path)

    def _move_into_place(self, plan: dict):
        """Carries out a publication plan: the root's manifest goes first (readers then refuse
        the root), the staged files are renamed over the earlier run's, the earlier run's
        other files are deleted, and the new manifest is written last."""
        root_manifest = FileSystems.join(self.root, MANIFEST)
        if FileSystems.exists(root_manifest):
            FileSystems.delete([root_manifest])
        moves = plan["moves"]
        for final, source in moves.items():
            if FileSystems.exists(source):  # else moved before the interruption
                _rename(source, final)
        listed = {self._absolute(f) for f in plan["manifest"]["files"]}
        stale = [p for p in plan["replaced"] if p not in listed and FileSystems.exists(p)]
        if stale:
            FileSystems.delete(stale)
        _remove_empty_dirs(p.rsplit("/", 1)[0] for p in stale)
        _write_json(root_manifest + ".tmp", plan["manifest"])
        FileSystems.rename([root_manifest + ".tmp"], [root_manifest])
        self.discard()

    def keep_failed(self, reason: str) -> str:
        """Moves this failed run's staged files to R/.fleetcast/failed/<run id> (a reader
        never sees them; the last failed run is kept for inspection) and returns that path."""
        failed_root = FileSystems.join(self.state_dir, "failed")
        if FileSystems.exists(failed_root):
            FileSystems.delete([failed_root])
        target = FileSystems.join(failed_root, self.run_id)
        for source in files_under(self.work_dir):
            _rename(source, FileSystems.join(target, _relative(source, self.work_dir)))
        _write_json(FileSystems.join(target, "failure.json"), {"reason": reason})
        FileSystems.delete([self.work_dir])
        return target

    def discard(self):
        if FileSystems.exists(self.work_dir):
            FileSystems.delete([self.work_dir])


_ACTIVE: List[StagingArea] = []


@contextlib.contextmanager
def staging(area: Optional[StagingArea]):
    """While building a pipeline, every Parquet sink writes into `area` (None: in place)."""
    if area is None:
        yield
        return
    _ACTIVE.append(area)
    try:
        yield area
    finally:
        _ACTIVE.pop()


def staged_dir(final_dir: str) -> str:
    """Where a sink built now writes `final_dir`: its staged place while a run's staging
    area is active, else `final_dir` itself."""
    return _ACTIVE[-1].staged_dir(final_dir) if _ACTIVE else final_dir


def extra_dir(name: str) -> Optional[str]:
    """The never-published directory `name` of the run being built (StagingArea.extra_dir),
    or None outside a run."""
    return _ACTIVE[-1].extra_dir(name) if _ACTIVE else None


def staged_dirs() -> Dict[str, str]:
    """{final directory: staged directory} of every directory staged so far by the run being
    built (empty outside a run): a step that reads one of the run's outputs while it runs
    looks it up there (`staged_path`), as the files reach their final place only when the
    run publishes."""
    return _ACTIVE[-1].staged_dirs() if _ACTIVE else {}


def staged_path(path: str, dirs: Dict[str, str]) -> str:
    """Where the run writes `path` (a final path) given its `staged_dirs`: in the staged
    directory of the final directory that holds it, else `path` itself."""
    path = path.rstrip("/")
    for final_dir, staged in dirs.items():
        if path == final_dir or path.startswith(final_dir + "/"):
            return staged + path[len(final_dir):]
    return path
