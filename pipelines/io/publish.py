"""Atomic results: a run writes under a staging directory and publishes only on success
(docs/reliability.md, "Results are published atomically").

A Parquet run with output root R writes every file (tables, the generated trace, lifetime
models, extra copies on R's file system) into R/.fleetcast/staging/<run id>/; only when the
pipeline has finished and its results pass their checks are the staged files renamed into
place, after the publication plan and before the run manifest (manifests.py), each written
whole (fsynced, renamed). A directory on another file system than R's is written in place
during the run and is not in the manifest. Steps reading the run's own outputs find them with
`staged_dirs` / `staged_path`.

Ownership is by location: a run replaces or deletes only files under R that R's previous
manifest lists (without a readable manifest, files named like fleetcast's shards), and replaces
a file outside R only if a run into R itself wrote it (`manifests.owns_outside`); it never
deletes outside R, never writes through a symbolic link below R, and fails naming any other
path in the way. A run into a local R holds an exclusive flock(2) on R/.fleetcast/lock until it
has published or failed (released by the kernel when it ends, SIGKILL included).
"""

import contextlib
import datetime
import logging
import os
import re
import socket
import uuid
from typing import Dict, List, Optional

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipelines.io import manifests
from pipelines.io.failures import RunFailed
from pipelines.io.manifests import MANIFEST, STATE_DIR, ManifestError, is_local
from pipelines.io.root_files import (
    delete_file,
    delete_stale,
    ensure_dir,
    files_under,
    is_directory,
    link_below,
    lock,
    occupied,
    outside_key,
    refuse_link,
    relative_to,
    rename,
)

PLAN = "publication_plan.json"
_LOG = logging.getLogger("fleetcast.publish")
_SHARD = re.compile(r"^[^/]+/part-\d{5}-of-\d{5}\.parquet$")
# What fleetcast wrote under an output root before it wrote manifests: table shards, the
# synthetic trace's files and the lifetime models' files (models/<model name>/<file>).
_LEGACY = re.compile(r"^([^/]+/part-\d{5}-of-\d{5}\.parquet"
                     r"|synthetic_trace/[^/]+/[^/]+-\d{5}-of-\d{5}\.[a-z.]+"
                     r"|models/[^/]+/[^/]+)$")


def now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def read_parquet_dir(directory: str, columns=None) -> Optional[pa.Table]:
    """Every Parquet file under `directory` as one table (None: no file)."""
    tables = []
    for path in files_under(directory):
        with FileSystems.open(path) as handle:
            # In this thread (see cli._read_table): never an Arrow thread holding the handle.
            tables.append(pq.ParquetFile(handle).read(columns=columns, use_threads=False))
    return pa.concat_tables(tables) if tables else None


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
        self.staging_dir = FileSystems.join(self.state_dir, "staging")
        self.work_dir = FileSystems.join(self.staging_dir, run_id)
        self.previous: Optional[dict] = None  # the root's manifest when the run started
        self._staged: Dict[str, str] = {}  # final directory -> staged directory
        self._lock_fd: Optional[int] = None

    @classmethod
    def open(cls, root: str) -> "StagingArea":
        """The staging area of a new run into `root`, holding `root`'s lock until `release`.
        Finishes (or sets aside) what interrupted publications left, and reads the root's
        manifest: a damaged one is replaced when the run publishes (a warning says so)."""
        run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S-") + \
            uuid.uuid4().hex[:8]
        area = cls(root, run_id)
        with area._writable():
            for directory in (area.state_dir, area.staging_dir):
                refuse_link(area.root, directory)
                ensure_dir(directory)
            area._lock_fd = lock(root, area.state_dir, f"pid {os.getpid()} on "
                                 f"{socket.gethostname()}, started {now_utc()}, run {run_id}")
        try:
            area._finish_interrupted_publications()
            manifests.remove_interrupted_writes(FileSystems.join(root, MANIFEST))
            area.previous = area._previous_manifest()
            with area._writable():
                ensure_dir(area.work_dir)
                manifests.write_json_atomic(FileSystems.join(area.work_dir, "run.json"),
                                            {"run_id": run_id, "started_at": now_utc()})
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

    def _previous_manifest(self) -> Optional[dict]:
        """The root's manifest; None, with a warning, when it is damaged (the root's files
        are then owned as if it had none)."""
        try:
            return manifests.read(self.root)
        except ManifestError as e:
            path = FileSystems.join(self.root, MANIFEST)
            if is_local(path) and os.path.isdir(path):
                raise RunFailed(f"{path}: a directory where fleetcast writes its manifest; "
                                "move it away") from None
            _LOG.warning("%s: damaged fleetcast manifest (%s); this run replaces it, and "
                         "replaces only files named like fleetcast's shards", path, e.reason)
            return None

    def _finish_interrupted_publications(self):
        """Publishes what a run killed while publishing left staged (with its plan), sets
        aside a run whose plan is damaged, and deletes what killed or failed runs left
        staged without a plan (empty directories included)."""
        if is_local(self.staging_dir):
            run_ids = sorted(os.listdir(self.staging_dir))
        else:
            run_ids = sorted({relative_to(p, self.staging_dir).split("/")[0]
                              for p in files_under(self.staging_dir)})
        for run_id in run_ids:
            interrupted = StagingArea(self.root, run_id)
            plan_path = FileSystems.join(interrupted.work_dir, PLAN)
            if not FileSystems.exists(plan_path):
                interrupted.discard()
                continue
            try:
                plan = interrupted._checked_plan(plan_path)
            except ValueError as e:
                kept = interrupted.keep_failed(f"damaged publication plan: {e}")
                _LOG.warning("%s: damaged publication plan (%s) of a run killed while it "
                             "published; its staged files are set aside in %s, and this run "
                             "publishes over what it had moved", plan_path, e, kept)
                continue
            interrupted._move_into_place(plan)

    def _checked_plan(self, path: str) -> dict:
        """The publication plan in `path`; ValueError saying why it cannot be carried out
        safely (its renames must come from this run's staging directory and go to files
        its manifest lists under the root, or outside it as the root's own)."""
        plan = manifests.read_json(path)
        if not isinstance(plan, dict) or not {"manifest", "moves", "stale"} <= set(plan):
            raise ValueError("not a publication plan")
        try:
            manifest = manifests.check(plan["manifest"], path)
        except ManifestError as e:
            raise ValueError(f"its manifest: {e.reason}") from None
        moves, stale = plan["moves"], plan["stale"]
        if not isinstance(moves, list) or not isinstance(stale, list):
            raise ValueError("'moves' or 'stale' is not of its type")
        owned_outside = manifests.owns_outside(manifest, self.root)
        for move in moves:
            if not (isinstance(move, list) and len(move) == 2
                    and manifests.is_relative_under(move[1])):
                raise ValueError(f"renames {move!r}, not a staged file")
            if not (move[0] in manifest["files"] or (owned_outside
                                                     and move[0] in manifest["outside"])):
                raise ValueError(f"renames onto {move[0]!r}, not a file its manifest lists")
        if not all(manifests.is_relative_under(f) for f in stale):
            raise ValueError("deletes a path that is not under the output directory")
        return plan

    def staged_dir(self, final_dir: str) -> str:
        """Where this run writes the directory `final_dir` until it publishes: `final_dir`
        itself when it is on another file system than the root (no rename crosses them).
        RunFailed for a directory under the root reached through a symbolic link."""
        final_dir = final_dir.rstrip("/")
        if FileSystems.get_scheme(final_dir) != FileSystems.get_scheme(self.root):
            return final_dir
        for other in self._staged:
            if final_dir == other or final_dir.startswith(other + "/") \
                    or other.startswith(final_dir + "/"):
                raise RunFailed(f"{final_dir}: two outputs of the run write into it (e.g. a "
                                f"LoadOrWrite copy of a table into the table's own directory)"
                                f"; overlaps {other}")
        refuse_link(self.root, final_dir)
        relative = (relative_to(final_dir, self.root) if final_dir != self.root else "")
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
                relative = relative_to(staged, staged_dir)
                if staged_dir == self.work_dir and (
                        relative.startswith(f"{STATE_DIR}-") or relative == "run.json"):
                    continue  # a copy outside the root (listed under its own directory), an
                    # extra_dir, or the run's own record
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
        """The manifest of the staged files (success, tables with their rows, every file
        with its size), and of the earlier run's `carried_tables` (tables of the root that
        this run loaded as input: they stay, listed again)."""
        staged = self.staged_files()
        previous = self.previous or {"tables": {}, "files": {}}
        tables = {name: previous["tables"][name] for name in carried_tables
                  if name in previous["tables"]}
        files = {f: previous["files"][f] for table in tables.values() for f in table["files"]}
        outside = {}
        for final in sorted(staged):
            relative = relative_to(final, self.root)
            size = manifests.file_size(staged[final])
            if relative is None:
                outside[outside_key(final)] = size
                continue
            files[relative] = size
            if _SHARD.match(relative) and relative.split("/")[0] not in carried_tables:
                table = tables.setdefault(relative.split("/")[0], {"files": []})
                table["files"].append(relative)
        for name, table in tables.items():
            if name not in carried_tables:
                table["rows"] = rows_in(staged[FileSystems.join(self.root, f)]
                                        for f in table["files"])
        return {"fleetcast_manifest": manifests.FORMAT_VERSION, "success": True,
                "run_id": self.run_id, **run_fields, "root": manifests.root_identity(self.root),
                "tables": tables, "files": files, "outside": outside}

    def publish(self, manifest: dict):
        """Moves the staged files into place and writes `manifest` last. RunFailed, before
        anything moves, when a staged file would replace a file the run may not replace."""
        replaceable = self._replaceable()
        moves = []  # [final path relative to the root (absolute outside it), staged path
        # relative to the work directory]: the plan holds for any spelling of the root
        for final, staged in sorted(self.staged_files().items()):
            relative = relative_to(final, self.root)
            key = relative if relative is not None else outside_key(final)
            refuse_link(self.root, final)
            if occupied(final) and ((final if relative is not None else key) not in replaceable
                                    or is_directory(final)):
                whose = ("no fleetcast manifest says fleetcast wrote it" if relative
                         else "no run into this directory wrote it")
                raise RunFailed(f"{final}: exists and {whose}; move it away (the previous "
                                "results are untouched)")
            moves.append([key, relative_to(staged, self.work_dir)])
        listed = {FileSystems.join(self.root, f) for f in manifest["files"]}
        stale = sorted(relative_to(p, self.root) for p in replaceable
                       if p not in listed and relative_to(p, self.root) is not None)
        # The plan goes with the staged files, so a publication killed halfway can finish.
        plan = {"manifest": manifest, "moves": moves, "stale": stale}
        manifests.write_json_atomic(FileSystems.join(self.work_dir, PLAN), plan)
        self._move_into_place(plan)

    def _replaceable(self) -> set:
        """Paths of files that this run may delete or replace: those under the root that
        the earlier run's manifest lists, and the files outside the root that a run into the
        root itself wrote (replaced only, never deleted)."""
        previous = self.previous
        if previous is None:
            return {path for path in files_under(self.root)
                    if _LEGACY.match(relative_to(path, self.root) or "")
                    and not link_below(self.root, path)}
        inside = {FileSystems.join(self.root, f) for f in previous["files"]}
        inside = {path for path in inside if not link_below(self.root, path)}
        if manifests.owns_outside(previous, self.root):
            return inside | set(previous["outside"])
        return inside

    def _move_into_place(self, plan: dict):
        """Carries out a publication plan: the root's manifest goes first (readers then refuse
        the root), the staged files are renamed over the earlier run's, the earlier run's
        other files under the root are deleted, and the new manifest is written last."""
        root_manifest = FileSystems.join(self.root, MANIFEST)
        if manifests.file_size(root_manifest) is not None:
            delete_file(root_manifest)
        for key, staged in plan["moves"]:
            final = key if key in plan["manifest"]["outside"] else FileSystems.join(
                self.root, key)
            source = FileSystems.join(self.work_dir, staged)
            if FileSystems.exists(source):  # else moved before the interruption
                refuse_link(self.root, final)
                rename(source, final)
        delete_stale(self.root, [FileSystems.join(self.root, f) for f in plan["stale"]])
        manifests.write_json_atomic(root_manifest, plan["manifest"])
        self.discard()

    def keep_failed(self, reason: str) -> str:
        """Moves this failed run's staged files to R/.fleetcast/failed/<run id> (a reader
        never sees them; the last failed run is kept for inspection) and returns that path."""
        failed_root = FileSystems.join(self.state_dir, "failed")
        refuse_link(self.root, failed_root)
        if FileSystems.exists(failed_root):
            FileSystems.delete([failed_root])
        target = FileSystems.join(failed_root, self.run_id)
        for source in files_under(self.work_dir):
            rename(source, FileSystems.join(target, relative_to(source, self.work_dir)))
        ensure_dir(target)
        manifests.write_json_atomic(FileSystems.join(target, "failure.json"),
                                    {"reason": reason})
        self.discard()
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
