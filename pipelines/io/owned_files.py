"""Files a fleetcast command writes into a local directory D that also holds files it did not
write: `fleetcast report` (D: --out) and `fleetcast reproduce` (D: DOCS_DIR/reproduce);
docs/reliability.md.

The command's page (report.html, a paper's page, index.md) records in a marker comment
(`marker`, `find_marker`) the files it owns; the command replaces or deletes only those. It
holds D's lock (D/.fleetcast/lock, the one `fleetcast run` takes), draws its files into a
staging directory D/.fleetcast/<name>, and publishes: every path it writes is checked, before
anything moves, to be free or its own; then the staged files are renamed into place, the page
last (so a reader finds the old page or the new one, never part of one), and the files the old
page owned that the new one does not are deleted.
"""

import contextlib
import dataclasses
import json
import os
import re
import shutil
import socket
from typing import Iterable, List, Optional, Set

from pipelines.io.failures import RunFailed
from pipelines.io.manifests import STATE_DIR, is_relative_under
from pipelines.io.publish import now_utc
from pipelines.io.root_files import (
    delete_stale,
    file_on_the_way,
    files_under,
    is_directory,
    lock,
    occupied,
    refuse_link,
    relative_to,
    rename,
)


class Refused(RunFailed):
    """A path the command may not write (a file it did not write in the way, a symbolic
    link), or a directory another fleetcast command holds: one line naming it (exit 2)."""


@contextlib.contextmanager
def _refusals():
    """Turns a RunFailed of the block (a link, a held lock) into Refused."""
    try:
        yield
    except Refused:
        raise
    except RunFailed as e:
        raise Refused(str(e)) from None


def marker(name: str, value: dict) -> str:
    """The one-line comment `<!-- NAME {JSON} -->` by which a page records what it is and
    owns (HTML and Markdown alike)."""
    return f"<!-- {name} {json.dumps(value, sort_keys=True)} -->"


def find_marker(text: str, name: str, lines: int = 8) -> Optional[dict]:
    """The JSON object of the `name` marker on one of the first `lines` lines of `text`, or
    None (no such line, or not a JSON object)."""
    pattern = re.compile(rf"<!-- {re.escape(name)} (\{{.*\}}) -->")
    found = next(filter(None, (pattern.fullmatch(line.strip())
                               for line in text.splitlines()[:lines])), None)
    try:
        value = json.loads(found.group(1)) if found else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_text(path) -> Optional[str]:
    """The text of the UTF-8 file `path`, or None when it is absent, not a file or not
    UTF-8 (then it is no page of fleetcast's)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return None


def owned_paths(listed, folder: str) -> Set[str]:
    """The entries of `listed` (a page's list of its files) that name a file directly in
    `folder` (a relative path): a page owns no other file."""
    if not isinstance(listed, list):
        return set()
    return {path for path in listed if isinstance(path, str) and is_relative_under(path)
            and path.startswith(folder + "/") and "/" not in path[len(folder) + 1:]}


@dataclasses.dataclass(frozen=True)
class OwnedDirectory:
    """The local directory `path` that `command` ("fleetcast report") writes into, chosen by
    its command-line option `option` (named in refusals)."""

    path: str
    command: str
    option: str

    @contextlib.contextmanager
    def locked(self):
        """Holds the directory's lock while the block runs, creating D/.fleetcast. Refused at
        once when another fleetcast command holds it; OSError when D cannot be created."""
        state_dir = os.path.join(self.path, STATE_DIR)
        with _refusals():
            refuse_link(self.path, state_dir)
            os.makedirs(state_dir, exist_ok=True)
            fd = lock(self.path, state_dir, f"pid {os.getpid()} on {socket.gethostname()}, "
                      f"started {now_utc()}, {self.command}")
        try:
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def staging(self, name: str):
        """An empty directory D/.fleetcast/`name` to draw the new files into (what a killed
        command left there is deleted first), deleted when the block ends."""
        staged = os.path.join(self.path, STATE_DIR, name)
        with _refusals():
            refuse_link(self.path, staged)
        shutil.rmtree(staged, ignore_errors=True)
        os.makedirs(staged)
        try:
            yield staged
        finally:
            shutil.rmtree(staged, ignore_errors=True)

    def refuse_foreign(self, relatives: Iterable[str], owned: Set[str]):
        """Refused naming the first thing in the way of writing `relatives` (paths relative
        to D): a symbolic link, a file where one of their folders goes, a directory, or a
        file that is not in `owned` (the paths relative to D that the command wrote)."""
        with _refusals():
            for relative in relatives:
                path = os.path.join(self.path, relative)
                refuse_link(self.path, path)
                blocker = file_on_the_way(self.path, path)
                if blocker is None and occupied(path) and (relative not in owned
                                                           or is_directory(path)):
                    blocker = path
                if blocker is not None:
                    raise Refused(f"{blocker}: in the way, and not written by {self.command} "
                                  f"(no page of its in {self.path} owns it); move it away or "
                                  f"choose another {self.option}")

    def publish(self, staged: str, page: str, text: str, owned: Set[str]):
        """Publishes the files drawn into `staged` (the `staging` directory) and the page
        `page` (a path relative to D) holding `text`, in place of the `owned` files (relative
        to D) of the previous page. Refused, before anything moves, when a path to write is
        in the way (`refuse_foreign`); else renames the staged files into place, then the
        page, then deletes the owned files the new result does not have."""
        files = staged_files(staged)
        with open(os.path.join(staged, page), "x", encoding="utf-8") as handle:
            handle.write(text)
        self.refuse_foreign([*files, page], owned)
        with _refusals():
            for relative in [*files, page]:
                source, final = os.path.join(staged, relative), os.path.join(self.path, relative)
                with open(source, "rb") as handle:
                    os.fsync(handle.fileno())  # whole on disk before it is renamed into place
                refuse_link(self.path, final)
                rename(source, final)
        delete_stale(self.path, [os.path.join(self.path, relative)
                                 for relative in sorted(owned - {*files, page})])


def staged_files(staged: str) -> List[str]:
    """Every file under the staging directory `staged`, relative to it, sorted."""
    return [relative_to(path, staged) for path in files_under(staged)]
