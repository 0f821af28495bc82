"""In a multi_processing worker, drops the tracebacks Beam prints to the user's terminal.

A failing step's traceback goes to the runner, which ends the run and reports it in one
line (`fleetcast run`); Beam's SDK worker also prints it to its own stderr, which is the
user's terminal. `pipelines.run` names this module in the workers' `beam_plugins`: on import
it wraps the worker's stderr so that such a print is dropped, unless `fleetcast run -v` set
FLEETCAST_WORKER_TRACEBACKS. Every other write passes unchanged.
"""

import os
import sys

ENV = "FLEETCAST_WORKER_TRACEBACKS"
_TRACEBACK = "Traceback (most recent call last)"


class _WithoutTracebacks:
    """A text stream passing every write to `stream` but a traceback (and the newline that
    `print` writes after it)."""

    def __init__(self, stream):
        self._stream = stream
        self._dropped = False

    def write(self, text: str) -> int:
        dropped, self._dropped = self._dropped, text.startswith(_TRACEBACK)
        if self._dropped or (dropped and text == "\n"):
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def drop_worker_tracebacks():
    """Wraps this process's stderr (once) unless FLEETCAST_WORKER_TRACEBACKS is set."""
    if not os.environ.get(ENV) and not isinstance(sys.stderr, _WithoutTracebacks):
        sys.stderr = _WithoutTracebacks(sys.stderr)


if sys.argv and sys.argv[0].endswith("sdk_worker_main.py"):  # in a worker (not in-process)
    drop_worker_tracebacks()
