"""File operations under a fleetcast output root: the root's lock, and renames and deletions
that never go through a symbolic link below the root and never delete a directory."""

import contextlib
import fcntl
import itertools
import logging
import os
from typing import List, Optional

from apache_beam.io.filesystems import FileSystems

from pipelines.io.failures import RunFailed
from pipelines.io.manifests import is_local

LOCK = "lock"
_LOG = logging.getLogger("fleetcast.publish")


def files_under(directory: str) -> List[str]:
    """Every file under `directory`, sorted (none when it does not exist)."""
    if not FileSystems.exists(directory):
        return []
    return sorted(m.path for m in FileSystems.match([FileSystems.join(directory, "**")])[0]
                  .metadata_list)


def relative_to(path: str, root: str) -> Optional[str]:
    """`path` relative to `root` when it is under it (as spelled), else None."""
    prefix = root.rstrip("/") + "/"
    return path[len(prefix):] if path.startswith(prefix) else None


def link_below(root: str, path: str) -> Optional[str]:
    """The first symbolic link on the way from `root` (excluded) down to `path` (included),
    or None; None for a path that is not local or not under `root`."""
    relative = relative_to(path, root)
    if relative is None or not is_local(path):
        return None
    current = root
    for part in relative.split("/"):
        current = os.path.join(current, part)
        if os.path.islink(current):
            return current
    return None


def refuse_link(root: str, path: str):
    """RunFailed naming the first symbolic link from `root` down to `path`, if any."""
    link = link_below(root, path)
    if link is not None:
        raise RunFailed(f"{link}: a symbolic link (to {os.readlink(link)}) inside the output "
                        f"directory {root}; fleetcast writes and deletes only through real "
                        "directories there: remove the link, or write elsewhere")


def file_on_the_way(root: str, path: str) -> Optional[str]:
    """The first path on the way from `root` (excluded) to `path`'s folder (included) that is
    there and is not a directory (a file where one of `path`'s folders goes), or None; None
    for a path that is not local or not under `root`."""
    relative = relative_to(path, root)
    if relative is None or not is_local(path):
        return None
    folders = (os.path.join(root, folder) for folder in
               itertools.accumulate(relative.split("/")[:-1], os.path.join))
    return next((folder for folder in folders
                 if os.path.lexists(folder) and not os.path.isdir(folder)), None)


def outside_key(path: str) -> str:
    """How a manifest names a file outside the root: its absolute path (or URL)."""
    return os.path.abspath(path) if is_local(path) else path


def ensure_dir(directory: str):
    """Creates `directory` (and its parents) unless it exists."""
    if not FileSystems.exists(directory):
        FileSystems.mkdirs(directory)


def rename(source: str, target: str):
    """Renames file `source` over `target` (atomically on a local file system), creating
    `target`'s directory."""
    ensure_dir(target.rsplit("/", 1)[0])
    if is_local(target):
        os.replace(source, target)
    else:
        FileSystems.rename([source], [target])


def occupied(path: str) -> bool:
    """Whether anything (a file, a directory, a link, even a broken one) is at `path`."""
    return os.path.lexists(path) if is_local(path) else FileSystems.exists(path)


def is_directory(path: str) -> bool:
    """Whether `path` is a local directory that is not a link."""
    return is_local(path) and os.path.isdir(path) and not os.path.islink(path)


def delete_file(path: str):
    """Deletes the file (or link) `path`; never a directory (a local one is left, warned)."""
    if not is_local(path):
        FileSystems.delete([path])
    elif is_directory(path):
        _LOG.warning("%s: a directory where fleetcast's manifest lists a file; left as is",
                     path)
    else:
        os.unlink(path)


def delete_stale(root: str, paths):
    """Deletes each of `paths` (files under `root`) that is there and not reached through a
    symbolic link below `root`, then the directories under `root` that this leaves empty."""
    paths = [path for path in paths if not link_below(root, path) and occupied(path)]
    for path in paths:
        delete_file(path)
    remove_empty_dirs(root, (path.rsplit("/", 1)[0] for path in paths))


def remove_empty_dirs(root: str, directories):
    """Removes each local directory strictly under `root` (deepest first) that is empty,
    e.g. a stale table's."""
    for directory in sorted(set(directories), key=len, reverse=True):
        if relative_to(directory, root) and is_local(directory) and not link_below(
                root, directory):
            with contextlib.suppress(OSError):
                os.rmdir(directory)


def lock(root: str, state_dir: str, holder: str) -> Optional[int]:
    """The descriptor of an exclusive flock on `state_dir`/lock, recording `holder` (who
    this process is) in it; None for a root that is not a local path. RunFailed naming
    `root` and the holder when another process holds it."""
    if not is_local(state_dir):
        return None
    path = os.path.join(state_dir, LOCK)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        raise RunFailed(f"{path}: cannot be opened as fleetcast's lock ({e.strerror}; a "
                        "symbolic link is never followed): remove it") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.read(fd, 4096).decode("utf-8", "replace").strip()
        os.close(fd)
        raise RunFailed(f"{root}: another fleetcast command is writing into this directory "
                        f"({other or 'its holder has not recorded itself yet'}); wait for "
                        "it to end or write elsewhere (the lock goes when that process "
                        "ends)") from None
    os.ftruncate(fd, 0)
    os.write(fd, holder.encode("utf-8"))
    return fd
