"""A `fleetcast run` with worker processes (--direct_running_mode=multi_processing) that is
ended by SIGTERM, SIGINT or SIGKILL leaves no process behind and publishes nothing.

The run reads its usage from a named pipe that nobody writes, so it stays blocked in its
workers, using no CPU, until the test ends it."""

import contextlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from pipelines.io import publish
from tests.helpers import REPO


def _workers_watching(parent: psutil.Process):
    """The SDK worker processes under `parent` that hold a pidfd (their guard is armed)."""
    watching = []
    for child in parent.children(recursive=True):
        try:
            command = child.cmdline()
            fds = os.listdir(f"/proc/{child.pid}/fd")
            links = [os.readlink(f"/proc/{child.pid}/fd/{fd}") for fd in fds]
        except (psutil.NoSuchProcess, FileNotFoundError):
            continue
        if command[:1] != ["/bin/sh"] and "apache_beam.runners.worker.sdk_worker_main" in \
                command and "anon_inode:[pidfd]" in links:
            watching.append(child)
    return watching


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_an_ended_multi_processing_run_leaves_no_worker_behind(tmp_path, signum):
    (tmp_path / "vmtable.csv").write_text("vm0,s,d,0,12000,50,10,40,Interactive,2,4\n")
    os.mkfifo(tmp_path / "readings.csv")
    config = tmp_path / "blocked.textproto"
    config.write_text(f'azure_v1 {{ vmtable: "{tmp_path}/vmtable.csv" '
                      f'vm_cpu_readings: "{tmp_path}/readings.csv" }}\n')
    out, err = tmp_path / "out", tmp_path / "stderr.txt"
    with open(err, "wb") as stderr:
        run = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", "run", str(config), "--output_dir",
             str(out), "-q", "--direct_num_workers=2", "--direct_running_mode=multi_processing"],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr)
    parent, children = psutil.Process(run.pid), []
    try:
        deadline = time.time() + 120
        while len(_workers_watching(parent)) < 2:
            assert run.poll() is None, err.read_text()
            assert time.time() < deadline, "the workers never started"
            time.sleep(0.1)
        children = parent.children(recursive=True)
        assert len(children) == 4  # two workers, each under its `sh -c`
        run.send_signal(signum)
        assert run.wait(timeout=30) == -signum
        gone, alive = psutil.wait_procs(children, timeout=15)
        assert alive == [] and len(gone) == 4
        if signum == signal.SIGKILL:  # the workers' guards ended them
            assert err.read_text().count(f"the run's process {run.pid} ended; exiting") == 2
        else:
            assert (f"fleetcast: run interrupted by {signal.Signals(signum).name}: its worker "
                    "processes are ended and nothing it staged is published"
                    in err.read_text())
        assert not (out / publish.MANIFEST).exists()
    finally:
        for process in [parent, *children]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        run.wait()
