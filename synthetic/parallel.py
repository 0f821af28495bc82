"""Worker processes of the generator: a map over tasks in forked processes that share one
object of the parent (the sampled trace), or in the calling process."""

from __future__ import annotations

import contextlib
import multiprocessing

# The object the tasks of the current pool share (inherited by forked workers).
_SHARED = None


class _InProcess:
    """Pool.map's interface, run in the calling process."""

    @staticmethod
    def map(function, items, chunksize: int = 1) -> list:
        return [function(item) for item in items]


@contextlib.contextmanager
def pool(processes: int, shared=None):
    """A pool whose `map(function, items, chunksize)` runs on `processes` forked processes
    (1: in this process) and returns the results in the items' order; `shared()` gives the
    tasks `shared`. Forked workers read the parent's memory as it was, without copying it
    through a pipe."""
    global _SHARED
    _SHARED = shared
    try:
        if processes <= 1:
            yield _InProcess()
        else:
            with multiprocessing.get_context("fork").Pool(processes) as workers:
                yield workers
    finally:
        _SHARED = None


def shared():
    """The object shared by the tasks of the current pool."""
    return _SHARED
