"""Worker processes end with the `fleetcast run` that started them (Linux).

With --direct_running_mode=multi_processing Beam starts each SDK worker under `sh -c`, and a
worker whose runner is killed keeps computing (on SIGINT the runner even waits for it
forever). Three guards:

- `ended_by_signals` (the run command): SIGTERM or SIGINT sends SIGTERM to every descendant
  of fleetcast (Linux /proc), then ends fleetcast by the same signal;
- a run on a cluster first cancels its job (`before_signal_ends_run`), which would otherwise
  go on without the run;
- SIGKILL cannot be caught, and prctl's parent-death signal would watch the `sh`, not
  fleetcast. So while the pipeline runs (`watched_by_workers`), FLEETCAST_RUN_PID names
  fleetcast in the environment every worker inherits, and a watchdog process (`python -m
  pipelines.worker_guard PID`) waits on a pidfd of fleetcast (Linux 5.3+): when fleetcast
  ends, it kills every process that carries that name, a worker still starting too.
  Elsewhere workers are not watched.

`watch_run_process` is the in-process form of the watch, for the workers of `fleetcast
worker-pool`, which end with the pool.
"""

import collections
import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, List, Optional

ENV = "FLEETCAST_RUN_PID"
# How long the watchdog keeps ending processes that carry the run's name (a `sh -c` may
# still be starting its worker when the first pass ends the `sh`).
WATCHDOG_SWEEP_S = 1.0


@contextlib.contextmanager
def watched_by_workers():
    """While in this context, worker processes started by this process end with it, however
    it ends (a watchdog process ends them)."""
    previous = os.environ.get(ENV)
    os.environ[ENV] = str(os.getpid())
    watchdog = _start_watchdog()
    try:
        yield
    finally:
        if previous is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = previous
        if watchdog is not None:
            watchdog.kill()
            watchdog.wait()


def _start_watchdog() -> Optional[subprocess.Popen]:
    if not hasattr(os, "pidfd_open"):
        return None
    return subprocess.Popen([sys.executable, "-m", __name__, str(os.getpid())],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            close_fds=True)


def carrying_run(pid: int) -> List[int]:
    """Pids of the processes (not this one) whose environment names run `pid` (Linux /proc)."""
    tag, found = f"{ENV}={pid}".encode(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    if tag in handle.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue  # ended while listed, or not ours
    return found


def _watchdog(pid: int):
    """Waits for process `pid` to end, then kills every process that carries its name."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the run, which ends us
    try:
        select.select([os.pidfd_open(pid)], [], [])  # readable once the process has ended
    except ProcessLookupError:
        pass
    ended, deadline = set(), time.monotonic() + WATCHDOG_SWEEP_S
    while time.monotonic() < deadline:
        for worker in carrying_run(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)
            ended.add(worker)
        time.sleep(0.1)
    if ended:
        os.write(2, f"fleetcast: the run's process {pid} ended; its {len(ended)} worker "
                    "processes are ended too\n".encode())


def _end(pid: int):
    os.write(2, f"fleetcast worker {os.getpid()}: the process {pid} it works for ended; "
                "exiting\n".encode())
    os._exit(1)  # pylint: disable=protected-access  # a worker has nothing to flush


def _end_when_ended(pidfd: int, pid: int):
    select.select([pidfd], [], [])  # readable once the process has ended
    _end(pid)


def watch_run_process():
    """Ends this process when the process ENV names ends (at once if it has ended already)."""
    pid = os.environ.get(ENV)
    if pid is None or not hasattr(os, "pidfd_open"):
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


if __name__ == "__main__":
    _watchdog(int(sys.argv[1]))
