"""A `fleetcast run` with worker processes (--direct_running_mode=multi_processing) that is
ended by SIGTERM, SIGINT or SIGKILL leaves no process behind and publishes nothing.

The run reads its usage from a named pipe that nobody writes, so it stays blocked in its
workers, using no CPU, until the test ends it."""

import contextlib
import os
import signal
import subprocess
import time
from typing import Optional

import psutil
import pytest

from pipelines.io import publish
from tests.helpers import FLEETCAST


def _workers(parent: psutil.Process):
    """The SDK worker processes under `parent` (not their `sh -c`)."""
    workers = []
    for child in parent.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            command = child.cmdline()
            if command[:1] != ["/bin/sh"] and \
                    "apache_beam.runners.worker.sdk_worker_main" in command:
                workers.append(child)
    return workers


def _reading(fifo) -> Optional[int]:
    """A write end of `fifo` once a worker reads it (held open, so the read stays blocked)."""
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: no reader yet
        return None


@pytest.mark.slow
@pytest.mark.parametrize("signum, when", [
    (signal.SIGTERM, "reading"), (signal.SIGINT, "reading"), (signal.SIGKILL, "reading"),
    (signal.SIGKILL, "starting")])
def test_an_ended_multi_processing_run_leaves_no_worker_behind(tmp_path, signum, when):
    (tmp_path / "vmtable.csv").write_text("vm0,s,d,0,12000,50,10,40,Interactive,2,4\n")
    fifo = tmp_path / "readings.csv"
    os.mkfifo(fifo)
    config = tmp_path / "blocked.textproto"
    config.write_text(f'azure_v1 {{ vmtable: "{tmp_path}/vmtable.csv" '
                      f'vm_cpu_readings: "{fifo}" }}\n')
    out, err = tmp_path / "out", tmp_path / "stderr.txt"
    with open(err, "wb") as stderr:
        run = subprocess.Popen(
            [FLEETCAST, "run", str(config), "--output_dir", str(out), "-q",
             "--direct_num_workers=2", "--direct_running_mode=multi_processing"],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr)
    parent, children, writer = psutil.Process(run.pid), [], None
    try:
        deadline = time.time() + 120
        # Starting: the workers exist (not yet connected to the runner, their plugins not
        # imported); reading: one is blocked reading the pipe.
        while len(_workers(parent)) < 2 or (when == "reading" and writer is None):
            assert run.poll() is None, err.read_text()
            assert time.time() < deadline, "the workers never started"
            writer = _reading(fifo) if when == "reading" else None
            time.sleep(0.05)
        children = parent.children(recursive=True)
        assert len(children) == 5  # two workers, each under its `sh -c`, and the watchdog
        run.send_signal(signum)
        assert run.wait(timeout=30) == -signum
        killed = time.monotonic()
        gone, alive = psutil.wait_procs(children, timeout=15)
        assert alive == [] and len(gone) == 5
        if signum == signal.SIGKILL:  # the watchdog ended them
            assert time.monotonic() - killed < 5
            assert (f"fleetcast: the run's process {run.pid} ended; its 4 worker processes "
                    "are ended too" in err.read_text())
        else:
            assert (f"fleetcast: run interrupted by {signal.Signals(signum).name}: its worker "
                    "processes are ended and nothing it staged is published"
                    in err.read_text())
        assert not (out / publish.MANIFEST).exists()
    finally:
        if writer is not None:
            os.close(writer)
        for process in [parent, *children]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        run.wait()
