"""A trace table's numbered parts (part-NNNNN-of-MMMMM): whole, or the run names the gap."""

import dataclasses
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from apache_beam.io.filesystems import FileSystems

from configs.checks import ConfigProblem
from pipelines.io.failures import RunFailed
from pipelines.io.readers import matched_files

# The part number and count at the end of a file name, before its extensions.
_OF = re.compile(r"(\d+)-of-(\d+)(?:\.[^/]*)?\Z")
# BigQuery's wildcard export: TABLE-000000000000.json.gz (no count), numbered from 0; a
# 12-digit number from _EXPORT_LIMIT on is a date or an id (201911010000), not a part.
_EXPORT = re.compile(r"-(\d{12})(?:\.[^/]*)?\Z")
_EXPORT_LIMIT = 10**8
# Ranges of part numbers a message lists before "and N more ranges".
_SHOWN = 8


@dataclasses.dataclass(frozen=True)
class Parts:
    """The numbered parts among a table's files, by file name (never by row).

    Files named `NNNNN-of-MMMMM` (the Google 2011 parts, fleetcast synth's shards) or
    `-NNNNNNNNNNNN` (BigQuery's wildcard export, the public v3 shards) must share one `-of-`
    count, give each number once, number below their count and hold every number from the
    first to the last present; a gap may be accepted (`allow_missing_parts`). Files not so
    numbered are not parts and are not checked.

    Attributes:
      files: part number -> the files of that number (one, unless given twice).
      counts: the `-of-` counts the names give (empty for export numbering).
      width: digits of the part numbers, for messages.
    """

    files: Dict[int, Tuple[str, ...]]
    counts: Tuple[int, ...]
    width: int

    def numbers(self) -> List[int]:
        return sorted(self.files)

    def missing(self) -> List[Tuple[int, int]]:
        """(first, last) of each run of numbers absent between the first and the last
        present (never the numbers one by one: names may number far apart)."""
        present = self.numbers()
        return [(a + 1, b - 1) for a, b in zip(present, present[1:]) if b > a + 1]

    def gap_neighbours(self) -> List[Tuple[str, str]]:
        """(last file before, first file after) each run of missing numbers."""
        return [(self.files[first - 1][0], self.files[last + 1][0])
                for first, last in self.missing()]

    def _of(self) -> str:
        return f" of {self.counts[0]:0{self.width}d}" if len(self.counts) == 1 else ""

    def describe(self) -> Optional[str]:
        """The parts read, e.g. "00000-00013, 00015-00017 of 00500 (00014 missing)"; None
        without numbered files."""
        if not self.files:
            return None
        read = self._list(_ranges(self.numbers()))
        missing = self.missing()
        return read + self._of() + (f" ({self._list(missing)} missing)" if missing else "")

    def _list(self, ranges: Sequence[Tuple[int, int]]) -> str:
        """(first, last) ranges as "00000-00013, 00015"."""
        shown = [f"{a:0{self.width}d}" + (f"-{b:0{self.width}d}" if b > a else "")
                 for a, b in ranges[:_SHOWN]]
        more = len(ranges) - _SHOWN
        return ", ".join(shown) + (f" and {more} more ranges" if more > 0 else "")

    def problem(self, allow_missing: bool) -> Optional[str]:
        """Why these parts cannot be read as one table (None if they can); a gap is no
        problem with `allow_missing`."""
        if len(self.counts) > 1:
            return (f"files of {len(self.counts)} part counts (-of-"
                    f"{', -of-'.join(f'{c:0{self.width}d}' for c in self.counts)}): one "
                    "table's parts share one count")
        twice = [n for n, paths in sorted(self.files.items()) if len(paths) > 1]
        if twice:
            return (f"part {twice[0]:0{self.width}d} is given by {len(self.files[twice[0]])} "
                    f"files ({', '.join(self.files[twice[0]])}): its rows would be read twice")
        beyond = [n for n in self.files if self.counts and n >= self.counts[0]]
        if beyond:
            return (f"part {min(beyond):0{self.width}d}{self._of()} is numbered beyond its "
                    "count")
        missing = self.missing()
        if missing and not allow_missing:
            n = sum(b - a + 1 for a, b in missing)
            return (f"{n:,} {'part' if n == 1 else 'parts'} missing: {self._list(missing)}"
                    f"{self._of()} (read {self._list(_ranges(self.numbers()))}): fetch them, "
                    "or set allow_missing_parts: true to read this subset")
        return None


def _ranges(numbers: Sequence[int]) -> List[Tuple[int, int]]:
    """Sorted numbers as (first, last) runs of consecutive ones."""
    ranges = []
    for n in numbers:
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], n)
        else:
            ranges.append((n, n))
    return ranges


def of_files(paths: Sequence[str]) -> Parts:
    """The numbered parts among `paths` (by file name)."""
    files, counts, width = {}, set(), 0
    for path in paths:
        name = os.path.basename(path)
        found = _OF.search(name) or _EXPORT.search(name)
        if found is None or (found.re is _EXPORT and int(found.group(1)) >= _EXPORT_LIMIT):
            continue
        number = found.group(1)
        files.setdefault(int(number), []).append(path)
        width = max(width, len(number))
        if found.re is _OF:
            counts.add(int(found.group(2)))
    return Parts({n: tuple(sorted(p)) for n, p in files.items()}, tuple(sorted(counts)), width)


def read_parts(pattern: str, field: str, allow_missing: bool) -> Parts:
    """The numbered parts of the files `pattern` matches, checked; RunFailed naming `field`
    and the pattern when they cannot be read as one table (or when none matches)."""
    found = of_files([f.path for f in matched_files(pattern)])
    problem = found.problem(allow_missing)
    if problem:
        raise RunFailed(f"{field}: {pattern}: {problem}")
    return found


def validate(check, pattern: str, field: str, allow_missing: bool):
    """Adds the problem of `pattern`'s parts to a configs/checks.py Checker as a missing input
    (the config is valid; the run fails until the parts are there), when it checks inputs."""
    if not check.check_inputs:
        return
    try:
        paths = [f.path for f in FileSystems.match([pattern])[0].metadata_list]
    except Exception:  # pylint: disable=broad-except  # path_exists reports no match
        return
    problem = of_files(paths).problem(allow_missing)
    if problem:
        check.problems.append(ConfigProblem(field, problem, missing_input=True))


def described(source: str, parts_by_table: Dict[str, Parts]) -> List[Tuple]:
    """((source, table), the parts read) of each table with numbered parts."""
    return [((source, table), found.describe()) for table, found in sorted(
        parts_by_table.items()) if found.describe() is not None]
