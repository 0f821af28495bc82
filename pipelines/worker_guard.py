"""Worker processes end with the `fleetcast run` that started them (Linux).

With --direct_running_mode=multi_processing Beam starts each SDK worker under `sh -c`, and a
worker whose runner is killed keeps computing (on SIGINT the runner even waits for it
forever). Three guards:

- `ended_by_signals` (the run command): SIGTERM or SIGINT sends SIGTERM to every descendant
  of fleetcast (Linux /proc), then ends fleetcast by the same signal;
- a run on a cluster first cancels its job (`before_signal_ends_run`), which would otherwise
  go on without the run;
- SIGKILL cannot be caught, and prctl's parent-death signal would watch the `sh`, not
  fleetcast. So `pipelines.run` names this module in the workers' `beam_plugins` and sets
  FLEETCAST_RUN_PID while the pipeline runs; imported in a worker, a daemon thread waits on a
  pidfd of that process (Linux 5.3+) and ends the worker when it ends. Beam imports plugins
  only once a worker has connected its log channel (up to 60 s), so a worker still starting
  then ends when that wait gives up. Elsewhere workers are not watched.
"""

import collections
import contextlib
import os
import select
import signal
import threading
from typing import Callable, List

ENV = "FLEETCAST_RUN_PID"


@contextlib.contextmanager
def watched_by_workers():
    """While in this context, worker processes started by this process watch it."""
    previous = os.environ.get(ENV)
    os.environ[ENV] = str(os.getpid())
    try:
        yield
    finally:
        if previous is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = previous


def _end(pid: int):
    os.write(2, f"fleetcast worker {os.getpid()}: the run's process {pid} ended; "
                "exiting\n".encode())
    os._exit(1)  # pylint: disable=protected-access  # a worker has nothing to flush


def _end_when_ended(pidfd: int, pid: int):
    select.select([pidfd], [], [])  # readable once the process has ended
    _end(pid)


def watch_run_process():
    """In a worker started under `watched_by_workers`: ends this process when the run's
    process ends (at once if it has ended already)."""
    pid = os.environ.get(ENV)
    # Only an SDK worker (Beam gives it its control channel) watches: not fleetcast itself,
    # nor another program started while the pipeline runs.
    if pid is None or "CONTROL_API_SERVICE_DESCRIPTOR" not in os.environ \
            or not hasattr(os, "pidfd_open"):
        return
    try:
        pidfd = os.pidfd_open(int(pid))
    except ProcessLookupError:
        _end(int(pid))
    threading.Thread(target=_end_when_ended, args=(pidfd, int(pid)), daemon=True,
                     name="fleetcast-run-watch").start()


def descendants(pid: int) -> List[int]:
    """Pids of the live descendants of process `pid`, parents before their children (Linux
    /proc; empty elsewhere)."""
    children = collections.defaultdict(list)
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    # pid (comm) state ppid ...: comm may hold spaces and parentheses.
                    ppid = int(handle.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # ended while listed
            children[ppid].append(int(entry))
    found, parents = [], [pid]
    while parents:
        kids = children.get(parents.pop(0), [])
        found.extend(kids)
        parents.extend(kids)
    return found


# Called, each for at most BEFORE_END_TIMEOUT_S, before a signal ends the run.
_BEFORE_END: List[Callable[[], None]] = []
BEFORE_END_TIMEOUT_S = 15.0


@contextlib.contextmanager
def before_signal_ends_run(callback: Callable[[], None]):
    """While in this context, a SIGTERM or SIGINT that ends the run first calls `callback`
    (e.g. cancelling a cluster's job through the job server, which then still runs)."""
    _BEFORE_END.append(callback)
    try:
        yield
    finally:
        _BEFORE_END.remove(callback)


def _end_run(signum, _frame):
    os.write(2, f"fleetcast: run interrupted by {signal.Signals(signum).name}: its worker "
                "processes are ended and nothing it staged is published\n".encode())
    for callback in list(_BEFORE_END):
        thread = threading.Thread(target=callback, daemon=True, name="fleetcast-before-end")
        thread.start()
        thread.join(BEFORE_END_TIMEOUT_S)
    for pid in descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # ended by the signal, as the caller expects


@contextlib.contextmanager
def ended_by_signals():
    """While in this context (in the main thread), SIGTERM and SIGINT end this process and
    every process it started at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _end_run) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


watch_run_process()  # Beam imports the plugin when the worker starts
