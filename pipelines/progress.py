"""Progress of a run: Beam Metrics counters and throttled progress lines.

Counters (`apache_beam.metrics.Metrics`, namespace "fleetcast") show on any runner: Dataflow's
UI lists them per step while the job runs, and `fleetcast run` prints their final values
(`counter_values`). Progress lines go to the "fleetcast.progress" logger from inside the DoFns,
at most once per REPORT_INTERVAL_S per process for steps that run many times (`Throttle`) and
every REPORT_INTERVAL_S from a background thread while one long step runs (`Heartbeat`: a
placement replay, training the lifetime models), so a long stage is never silent for longer.
`fleetcast run` shows them by default (`-q` hides them, `-v` adds Beam's own INFO lines).
"""

import codecs
import logging
import re
import threading
import time
from typing import Callable, Dict, Optional

from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

NAMESPACE = "fleetcast"
LOG = logging.getLogger("fleetcast.progress")
REPORT_INTERVAL_S = 30.0


def report(message: str, *args):
    """Logs one progress line. Every progress line is logged here, so that the lines
    forwarded from DirectRunner worker processes can be told apart (`WorkerProgressLines`)."""
    LOG.info(message, *args)


def count(name: str, value: int = 1):
    """Adds `value` to the Beam counter fleetcast/`name` of the step that runs this."""
    Metrics.counter(NAMESPACE, name).inc(int(value))


def counter_values(result) -> Dict[str, int]:
    """{counter name: final value} of the fleetcast counters of a finished PipelineResult,
    summed over the steps that increment it; empty when the runner reports no metrics."""
    try:
        counters = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    except NotImplementedError:  # e.g. a runner without a metrics API
        return {}
    values: Dict[str, int] = {}
    for counter in counters:
        # `committed` is what survived retries; runners that track only attempts leave it None.
        value = counter.committed if counter.committed is not None else counter.attempted
        values[counter.key.metric.name] = values.get(counter.key.metric.name, 0) + int(value)
    return dict(sorted(values.items()))


class Throttle:
    """`ready()` is True at most once per `interval_s` (the first call included): lets a
    function that runs for every element log its progress now and then."""

    def __init__(self, interval_s: float = REPORT_INTERVAL_S):
        self._interval_s = interval_s
        self._next = 0.0

    def ready(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self._interval_s
        return True


class Heartbeat:
    """A `with` block around one long step: logs "<what>: started", then `describe()` (or
    "running") with the elapsed time every `interval_s` from a daemon thread, and
    "<what>: done in N s" at the end."""

    def __init__(self, what: str, describe: Optional[Callable[[], str]] = None,
                 interval_s: float = REPORT_INTERVAL_S):
        self.what = what
        self._describe = describe or (lambda: "running")
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        name=f"fleetcast-heartbeat {what}")
        self._started = 0.0

    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    def _beat(self):
        while not self._stop.wait(self._interval_s):
            report("%s: %s (%.0f s so far)", self.what, self._describe(), self.elapsed_s())

    def __enter__(self) -> "Heartbeat":
        self._started = time.monotonic()
        report("%s: started", self.what)
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()
        report("%s: %s in %.1f s", self.what, "failed" if exc_info[0] else "done",
               self.elapsed_s())


# The DirectRunner's multi_processing mode forwards each log entry of its worker processes to
# this logger of the main process as one "Worker: <LogEntry>" line (the entry in protobuf text).
WORKER_LOGGER = "apache_beam.runners.portability.local_job_service"
_WORKER_MESSAGE = re.compile(r'message: "((?:[^"\\]|\\.)*)"')
_WORKER_LOCATION = re.compile(r'log_location: "([^"]*)"')


# Warnings every multi_processing worker logs when it starts, about options and a directory
# the DirectRunner does not use: nothing a user can act on.
_STARTUP_WARNINGS = ("No semi_persistent_directory found", "Discarding unparseable args")


class NoBeamTracebacks(logging.Filter):
    """Drops Beam's log entries that carry a traceback (a failing step logs one before the
    run raises): the command reports the failure itself, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("apache_beam"):
            return True
        return not (record.exc_info or "Traceback (most recent call last)" in record.getMessage())


class WorkerProgressLines(logging.Filter):
    """On WORKER_LOGGER: passes worker entries at WARNING and above as they are (but the
    start-up warnings every worker logs), and the workers' progress lines (logged by `report`)
    as plain "worker: <line>" lines; drops Beam's other INFO entries."""

    def filter(self, record: logging.LogRecord) -> bool:
        entry = record.getMessage()
        if record.levelno >= logging.WARNING:
            return not any(warning in entry for warning in _STARTUP_WARNINGS)
        message, location = _WORKER_MESSAGE.search(entry), _WORKER_LOCATION.search(entry)
        if not (message and location and "pipelines/progress.py:" in location[1]):
            return False
        message = codecs.escape_decode(message[1].encode("utf-8"))[0].decode("utf-8")
        record.msg, record.args = f"worker: {message}", ()
        return True
