"""Runs that must fail rather than give results that look valid but are not.

A compressed file cut short, a file that is not of its format, a table whose every row was
rejected, an output location that cannot be written: each raises RunFailed with a message
that names the file or table, and `fleetcast run` prints that message (exit 1) instead of
the runner's traceback.
"""

import errno
import re
from typing import Optional


class RunFailed(ValueError):
    """A run that cannot give trustworthy results; the message names the file or table."""


_WHILE_RUNNING = " [while running"
# A full disk or quota is the machine's state, not a bug: OSError's text from any process.
_DISK_FULL = re.compile(rf"\[Errno (?:{errno.ENOSPC}|{errno.EDQUOT})\] ([^\[\n]+)")
_STEP = re.compile(r"\[while running '([^']+)'\]")


def reason_of(exception: BaseException) -> Optional[str]:
    """The RunFailed message an exception from a pipeline run carries (or the reason of a
    full disk), or None.

    In-process runners re-raise the RunFailed itself (with " [while running 'step']"
    appended); runners with worker processes raise a RuntimeError holding the worker's
    traceback as text, whose RunFailed line is the message.
    """
    if isinstance(exception, RunFailed):
        return str(exception).split(_WHILE_RUNNING)[0]
    text = str(exception)
    found = re.findall(r"\bRunFailed: (.+)", text)
    if found:
        return found[-1].split(_WHILE_RUNNING)[0]
    return disk_full_reason(exception)


def disk_full_reason(exception: BaseException) -> Optional[str]:
    """What to do about a full disk (ENOSPC) or exhausted quota (EDQUOT) that `exception`
    reports (an OSError's text, itself or in a worker's traceback), naming the step; None
    otherwise."""
    text = str(exception)
    full = _DISK_FULL.search(text)
    if full is None:
        return None
    what = full.group(1).strip().rstrip(":")
    step = _STEP.search(text)
    return (f"{what}{f' while running {step.group(1)!r}' if step else ''}: the run writes "
            "its results, and the spill files of its large tables, under the output directory "
            "until it publishes (a cell-day needs ~50 GB there, docs/runners.md). This run's "
            "files were discarded and the earlier results are intact: free space on that "
            "disk, or give --output_dir on a larger one, and run again")
