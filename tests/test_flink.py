"""fleetcast on a real Flink session cluster (scripts/engines.sh start flink): the demo with
LOOPBACK and EXTERNAL workers gives the DirectRunner's tables and model files; a lost
TaskManager or an interrupted run fails in one line, keeps the earlier results and leaves no
job running; a pool whose workers cannot start fails the run within a minute; workers that
write where the submitter cannot see fail the run instead of publishing part of it.

Each run is `fleetcast run` as a user types it, with the options `scripts/engines.sh options
flink` prints. CI starts the cluster (FLEETCAST_REQUIRE_ENGINES); elsewhere these tests skip
when it is not up. The tests run in order: the last one follows runs that failed.
"""

import os
import signal
import subprocess
import time

import pytest

from fleetcast_testing import engines
from tests.helpers import (
    FLEETCAST,
    assert_same_results,
    counters_printed,
    finished,
    require_engine,
    run_cli,
    snapshot,
    start_demo,
    tiny_config,
)

pytestmark = [pytest.mark.flink, pytest.mark.slow]
RUN_TIMEOUT_S = 600  # for a run that is not the demo


@pytest.fixture(scope="module")
def flink():
    """engines.json's description of the running cluster."""
    return require_engine("flink")


def wait_for_running_job(flink, since_ms, timeout_s=120):
    """The id of the first job started after `since_ms` once it is RUNNING with running
    tasks."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for job in engines.flink_jobs(flink):
            if job["start-time"] >= since_ms and job["state"] == "RUNNING" \
                    and job["tasks"]["running"] > 0:
                return job["jid"]
        time.sleep(0.5)
    raise AssertionError("no Flink job started")


def job_state(flink, job_id):
    return next(job["state"] for job in engines.flink_jobs(flink) if job["jid"] == job_id)


def earlier_results(tmp_path):
    """A root holding a small successful run (the DirectRunner), and its files' digests."""
    root = tmp_path / "results"
    assert run_cli(tiny_config(tmp_path), root) == 0
    return root, snapshot(root)


def test_demo_on_flink_with_loopback_workers_gives_the_direct_runners_tables(
        flink, direct_demo, direct_demo_counters, tmp_path):
    code, out, err = finished(start_demo(tmp_path / "flink", engines.run_options("flink")))
    assert code == 0, err[-3000:]
    assert "Really starting service" not in err and "Traceback" not in err, err[-3000:]
    assert counters_printed(out) == direct_demo_counters  # through the job server
    assert_same_results(direct_demo, tmp_path / "flink")


def test_a_lost_taskmanager_fails_the_run_in_one_line_and_keeps_the_earlier_results(
        flink, tmp_path):
    root, before = earlier_results(tmp_path)
    started_ms = time.time() * 1000
    run = start_demo(root, engines.run_options("flink"))
    try:
        wait_for_running_job(flink, started_ms)
        time.sleep(3)
        pid_file = engines.engines_dir() / "run" / "flink--taskexecutor.pid"
        os.kill(int(pid_file.read_text().split()[-1]), signal.SIGKILL)
        code, _, err = finished(run)
    finally:
        subprocess.run(["bash", str(engines.ENGINES_SH), "start", "flink"], check=True,
                       capture_output=True)
    assert code == 1, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("fleetcast:")]
    assert lines and lines[-1].startswith("fleetcast: run failed: Flink lost a TaskManager"), err
    assert snapshot(root) == before
    assert not os.listdir(root / ".fleetcast" / "staging")


def test_an_interrupted_run_cancels_its_flink_job(flink, tmp_path):
    root, before = earlier_results(tmp_path)
    started_ms = time.time() * 1000
    run = start_demo(root, engines.run_options("flink"))
    job_id = wait_for_running_job(flink, started_ms)
    run.send_signal(signal.SIGTERM)
    code, _, err = finished(run)
    assert code == -signal.SIGTERM, err[-3000:]
    deadline = time.monotonic() + 30
    while job_state(flink, job_id) not in ("CANCELED", "FAILED") \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    assert job_state(flink, job_id) == "CANCELED"
    assert snapshot(root) == before


def test_a_pool_whose_workers_cannot_start_fails_the_run_within_a_minute(flink, tmp_path):
    with engines.worker_pool(tmp_path, extra_args=["--ready_timeout_s", "0.01",
                                                   "--spare_workers", "0"]) as port:
        started = time.monotonic()
        code, _, err = finished(start_demo(tmp_path / "out",
                                        engines.run_options("flink", "external", port)))
    assert code == 1 and time.monotonic() - started < 60, err[-3000:]
    assert err.strip().splitlines()[-1].startswith(
        "fleetcast: run failed: the worker pool could not start a Python worker: worker "), err
    assert "not up after 0.01 s" in err


def test_workers_that_write_where_the_submitter_cannot_see_fail_the_run(flink, tmp_path):
    """Workers on "another machine": the pool in a mount namespace of its own, where the
    output directory is a private tmpfs. The submitter finds fewer rows than the workers
    wrote and publishes nothing."""
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -m (a mount namespace) needs root here")
    root, before = earlier_results(tmp_path)
    port = engines.free_port()
    pool = subprocess.Popen(["unshare", "-m", "sh", "-c", f'mount -t tmpfs tmpfs "{root}" && '
                             f'exec "{FLEETCAST}" worker-pool --port {port}'],
                            cwd=str(tmp_path), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not engines.listening(port):
            assert time.monotonic() < deadline and pool.poll() is None, "no worker pool"
            time.sleep(0.2)
        done = subprocess.run([FLEETCAST, "run", str(tiny_config(tmp_path)), "--output_dir",
                               str(root), "-q", *engines.run_options("flink", "external",
                                                                    port)],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    finally:
        pool.terminate()
        pool.wait(10)
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("fleetcast: run failed: ") and " rows and 0 of them are under " \
        f"{root}: the output directory must be a file system that this process and every " \
        "worker share" in last, done.stderr
    assert snapshot(root) == before


def test_demo_on_flink_with_external_workers_after_failed_runs_gives_the_same_tables(
        flink, direct_demo, tmp_path):
    """A worker pool in a folder of its own, the run's output and the config's trace given
    relative to the submitter's folder: every path reaches the workers whole."""
    (tmp_path / "pool").mkdir()
    (tmp_path / "submitter").mkdir()
    with engines.worker_pool(tmp_path / "pool") as port:
        code, _, err = finished(start_demo("flink_external",
                                        engines.run_options("flink", "external", port),
                                        cwd=tmp_path / "submitter"))
    assert code == 0, err[-3000:]
    assert_same_results(direct_demo, tmp_path / "submitter" / "flink_external")
