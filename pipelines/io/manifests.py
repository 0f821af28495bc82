"""The run manifest: what one fleetcast run published under its output root R, checked
(docs/reliability.md). R/fleetcast_manifest.json, format 2:

    {"fleetcast_manifest": 2, "success": true, "run_id", "name", "config" (text format),
     "fleetcast_version", "started_at", "finished_at" (UTC, ISO 8601),
     "root": {"path": R's real path or URL, "inode": R's inode (local R only)},
     "tables": {name: {"rows": int, "files": [paths relative to R]}},
     "files": {path relative to R: bytes}   every file the run published under R,
     "outside": {absolute path: bytes}}     files it published elsewhere (a model_dir)

The files under R that it lists are fleetcast's; a file outside R is owned by the run into R
that wrote it, only while "root" still names R itself (path and inode), so a copy of R never
owns the files outside it. A manifest with a wrong structure, or listing a path that escapes R,
is damaged: readers refuse it naming the file, and a run into R replaces it. A format 1
manifest ("files" a list of paths, no "root" or sizes) is read, its files checked for presence
only, and its files outside R owned by nobody.
"""

import json
import os
import re
import uuid
from typing import List, Optional

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines.io.failures import RunFailed

MANIFEST = "fleetcast_manifest.json"
STATE_DIR = ".fleetcast"
FORMAT_VERSION = 2
_PART = re.compile(r"^part-(\d{5})-of-(\d{5})\.parquet$")


class ManifestError(RunFailed):
    """A manifest that is damaged, or that its files contradict; the message names the file
    and the remedy, `reason` says what is wrong."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason or message


def is_local(path: str) -> bool:
    return FileSystems.get_scheme(path) is None


def write_json_atomic(path: str, value: dict):
    """Writes `value` as JSON to `path` through a temporary file that is fsynced (local
    paths) and renamed over `path`, so `path` holds the old or the new content, never part."""
    data = json.dumps(value, indent=1, sort_keys=True).encode("utf-8")
    temporary = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    if not is_local(path):
        with FileSystems.create(temporary) as handle:
            handle.write(data)
        FileSystems.rename([temporary], [path])
        return
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def remove_interrupted_writes(path: str):
    """Deletes the temporary files `write_json_atomic(path, ...)` left when its process was
    killed before the rename (`path`.tmp-<8 hex digits>); the caller holds the lock of
    `path`'s directory, so none of them is still being written."""
    for temporary in FileSystems.match([f"{path}.tmp-*"])[0].metadata_list:
        if re.fullmatch(r"\.tmp-[0-9a-f]{8}", temporary.path[len(path):]):
            FileSystems.delete([temporary.path])


def read_json(path: str):
    """The JSON value in `path`; ValueError saying why it is not readable JSON."""
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            data = handle.read()
    except OSError as e:
        raise ValueError(f"cannot be read: {e.__class__.__name__}: {e}") from None
    if not data:
        raise ValueError("empty file")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"not JSON: {e}") from None


def root_identity(root: str) -> dict:
    """What names output root `root` in a manifest: its real path and inode (local), else
    its URL. A copy of the directory has another path and inode; a rerun into it, the same."""
    if not is_local(root):
        return {"path": root.rstrip("/")}
    return {"path": os.path.realpath(root), "inode": os.stat(root).st_ino}


def is_relative_under(path: str) -> bool:
    """Whether `path` names a file under an output root: relative, normalised (no '', '.'
    or '..' part) and outside fleetcast's state directory."""
    if not isinstance(path, str) or not path or path.startswith("/") or "://" in path:
        return False
    parts = path.split("/")
    return all(part not in ("", ".", "..") for part in parts) and parts[0] != STATE_DIR


def _check_tables(tables, files) -> Optional[str]:
    if not isinstance(tables, dict):
        return "'tables' is not an object"
    for name, table in tables.items():
        if not (is_relative_under(name) and "/" not in name):
            return f"table name {name!r} is not a directory name"
        if not isinstance(table, dict) or not isinstance(table.get("files"), list):
            return f"table {name!r} has no list of files"
        if not table["files"]:
            return f"table {name!r} lists no file (every table has at least one)"
        rows = table.get("rows")
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
            return f"table {name!r} has no row count"
        for path in table["files"]:
            if not (is_relative_under(path) and path.startswith(name + "/")):
                return f"table {name!r} lists {path!r}, not a file of its directory"
            if path not in files:
                return f"table {name!r} lists {path!r}, which 'files' does not"
    return None


def _normalised_files(manifest: dict):
    """({relative path: bytes or None}, {absolute path: bytes or None}, problem or None)."""
    files, outside = manifest.get("files", {}), manifest.get("outside", {})
    if manifest["fleetcast_manifest"] == 1 and isinstance(files, list):
        if not all(isinstance(f, str) for f in files):
            return {}, {}, "'files' holds a non-path"
        outside = {f: None for f in files if f.startswith("/") or "://" in f}
        files = {f: None for f in files if f not in outside}
    for name, value in (("files", files), ("outside", outside)):
        if not isinstance(value, dict) or not all(
                size is None or (isinstance(size, int) and not isinstance(size, bool)
                                 and size >= 0) for size in value.values()):
            return {}, {}, f"'{name}' is not an object of file sizes"
    escaping = next((f for f in files if not is_relative_under(f)), None)
    if escaping is not None:
        return {}, {}, f"'files' lists {escaping!r}, which is not a path under the directory"
    relative = next((f for f in outside if not (f.startswith("/") or "://" in f)), None)
    if relative is not None:
        return {}, {}, f"'outside' lists {relative!r}, which is not an absolute path"
    return files, outside, None


def _format_number(value) -> bool:
    """Whether `value` is a manifest format fleetcast reads: the int 1 or FORMAT_VERSION (not
    true or 1.0, which equal 1 in Python)."""
    return type(value) is int and value in (1, FORMAT_VERSION)


def check(manifest, path: str) -> dict:
    """`manifest` (the parsed JSON of `path`) with its file lists normalised to
    "files" {relative: bytes or None} and "outside" {absolute: bytes or None}; ManifestError
    naming `path` when its structure is not a fleetcast manifest's."""
    problem = None
    if not isinstance(manifest, dict):
        problem = f"holds a JSON {type(manifest).__name__}, not an object"
    elif not _format_number(manifest.get("fleetcast_manifest")):
        problem = f"unknown format {manifest.get('fleetcast_manifest')!r}"
    elif not isinstance(manifest.get("success"), bool):
        problem = "'success' is not true or false"
    elif "tables" not in manifest:
        problem = "no 'tables'"
    if problem is None:
        files, outside, problem = _normalised_files(manifest)
        problem = problem or _check_tables(manifest["tables"], files)
    if problem is None and not isinstance(manifest.get("root", {}), dict):
        problem = "'root' is not an object"
    if problem is not None:
        raise damaged(path, problem)
    return {**manifest, "files": files, "outside": outside}


def damaged(path: str, reason: str) -> ManifestError:
    root = path.rsplit("/", 1)[0]
    return ManifestError(f"{path}: damaged fleetcast manifest ({reason}); run the config again "
                         f"into {root} to replace it, or delete the file (then {root} holds "
                         "no finished run until one publishes into it)", reason)


def read(root: str) -> Optional[dict]:
    """The checked manifest of output root `root` (see `check`), or None when it has none;
    ManifestError naming the file when it is damaged."""
    path = FileSystems.join(root, MANIFEST)
    if not FileSystems.exists(path):
        return None
    if is_local(path) and os.path.isdir(path):
        raise damaged(path, "a directory, not a file")
    try:
        return check(read_json(path), path)
    except ValueError as e:
        if isinstance(e, ManifestError):
            raise
        raise damaged(path, str(e)) from None


def require(root: str) -> dict:
    """The checked manifest of a successful run in `root`; RunFailed naming `root` when it
    has none, ManifestError when it is damaged."""
    manifest = read(root)
    if manifest is None or not manifest["success"]:
        raise RunFailed(f"{root}: no successful fleetcast run manifest ({MANIFEST}): the "
                        "directory holds no finished run (a run failed, was killed while "
                        "publishing, or never ran); run the config again")
    return manifest


def runs_below(directory: str, depth: int = 2, shown: int = 10) -> List[str]:
    """The directories up to `depth` levels below the local `directory` that hold a run
    manifest, sorted (the first `shown`, then "…")."""
    found = []
    for parent, children, files in os.walk(directory):
        relative = os.path.relpath(parent, directory)
        level = 0 if relative == "." else relative.count(os.sep) + 1
        keep = level < depth
        children[:] = sorted(c for c in children if keep and not c.startswith("."))
        if parent != directory and MANIFEST in files:
            found.append(parent)
    found.sort()
    return found[:shown] + (["…"] if len(found) > shown else [])


def owns_outside(manifest: dict, root: str) -> bool:
    """Whether the files outside `root` that `manifest` lists were written by a run into
    `root` itself (not into a directory `root` was copied from)."""
    recorded = manifest.get("root") or {}
    return bool(recorded) and recorded == root_identity(root)


def file_size(path: str) -> Optional[int]:
    """The size of the file `path` in bytes, or None when there is no such file."""
    if is_local(path):
        try:
            return os.stat(path).st_size if os.path.isfile(path) else None
        except OSError:
            return None
    try:
        matched = FileSystems.match([path])[0].metadata_list
    except Exception:  # pylint: disable=broad-except
        return None
    return matched[0].size_in_bytes if matched else None


def table_files(root: str, manifest: dict, table: str) -> List[str]:
    """The paths of the files of `table` that `manifest` (of `root`) lists, each checked to
    be there with its recorded size; ManifestError naming the first one that is not."""
    paths = []
    manifest_path = FileSystems.join(root, MANIFEST)
    for relative in manifest["tables"][table]["files"]:
        path = FileSystems.join(root, relative)
        size, recorded = file_size(path), manifest["files"].get(relative)
        if size is None:
            raise ManifestError(f"{path}: missing; {manifest_path} lists it as part of table "
                                f"{table}, which is incomplete without it: run the config "
                                f"again into {root}")
        if recorded is not None and size != recorded:
            raise ManifestError(f"{path}: {size:,} bytes where {manifest_path} records "
                                f"{recorded:,}: the file was changed after the run published "
                                f"it; run the config again into {root}")
        paths.append(path)
    return paths


def _complete_shards(directory: str) -> List[str]:
    """The *.parquet files of a directory outside any fleetcast root; RunFailed when there
    is none, or when shards named part-NNNNN-of-MMMMM are not all M of one set."""
    pattern = FileSystems.join(directory, "*.parquet")
    try:
        paths = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
    except Exception:  # pylint: disable=broad-except
        paths = []
    if not paths:
        raise RunFailed(f"{directory}: no Parquet file (*.parquet) to load")
    shards = {m.groups() for m in (_PART.match(p.rsplit("/", 1)[-1]) for p in paths) if m}
    counts = {of for _, of in shards}
    if len(counts) > 1:
        raise RunFailed(f"{directory}: shards of {len(counts)} writes mixed (part-*-of-"
                        f"{', part-*-of-'.join(sorted(counts))}); keep one set of shards")
    if counts:
        (of,) = counts
        missing = sorted(set(range(int(of))) - {int(index) for index, _ in shards})
        if missing:
            raise RunFailed(f"{FileSystems.join(directory, f'part-{missing[0]:05d}-of-{of}')}"
                            f".parquet: missing; the table in {directory} is incomplete "
                            f"without it ({len(missing)} of {int(of)} shards missing)")
    return paths


def parquet_files_of(table_dir: str) -> List[str]:
    """The Parquet files a table directory holds: those its root's manifest lists (each
    checked to be there, unchanged) for a table of a fleetcast run, else every *.parquet
    file in it (a complete set of shards). RunFailed for a root without a successful
    manifest, a table it does not list, or a missing file."""
    root, _, table = table_dir.rstrip("/").rpartition("/")
    if not (FileSystems.exists(FileSystems.join(root, MANIFEST))
            or FileSystems.exists(FileSystems.join(root, STATE_DIR))):
        return _complete_shards(table_dir.rstrip("/"))
    manifest = require(root)
    if table not in manifest["tables"]:
        raise RunFailed(f"{table_dir}: not a table of the run in {root} (its manifest lists "
                        f"{', '.join(sorted(manifest['tables']))})")
    return table_files(root, manifest, table)
