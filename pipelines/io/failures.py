"""Runs that must fail rather than give results that look valid but are not.

A compressed file cut short, a file that is not of its format, a table whose every row was
rejected, an output location that cannot be written: each raises RunFailed with a message
that names the file or table, and `fleetcast run` prints that message (exit 1) instead of
the runner's traceback.
"""

import re
from typing import Optional


class RunFailed(ValueError):
    """A run that cannot give trustworthy results; the message names the file or table."""


_WHILE_RUNNING = " [while running"


def reason_of(exception: BaseException) -> Optional[str]:
    """The RunFailed message an exception from a pipeline run carries, or None.

    In-process runners re-raise the RunFailed itself (with " [while running 'step']"
    appended); runners with worker processes raise a RuntimeError holding the worker's
    traceback as text, whose RunFailed line is the message.
    """
    if isinstance(exception, RunFailed):
        return str(exception).split(_WHILE_RUNNING)[0]
    found = re.findall(r"\bRunFailed: (.+)", str(exception))
    return found[-1].split(_WHILE_RUNNING)[0] if found else None
