"""Flink and Spark through Beam's portable job servers: what `fleetcast run` checks before it
submits, and the engines' failures it turns into one line.

A portable run starts Beam's job server (a Java process), which submits the job to the
cluster; the Python steps run in SDK workers, in this process (LOOPBACK) or in a worker pool
beside the cluster's workers (EXTERNAL, `fleetcast worker-pool`). docs/runners.md has the
setup.
"""

import contextlib
import json
import logging
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Optional

from apache_beam.options.pipeline_options import (
    FlinkRunnerOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    SparkRunnerOptions,
    StandardOptions,
)

from pipelines.io.failures import RunFailed

RUNNERS = ("FlinkRunner", "SparkRunner", "PortableRunner")
_FLINK_LOCAL = ("[local]", "[auto]")
CONNECT_TIMEOUT_S = 5.0
DOCS = "docs/runners.md"


def runner_name(options: PipelineOptions) -> str:
    """The runner's class name, whatever module path it was given with."""
    return (options.view_as(StandardOptions).runner or "").rsplit(".", 1)[-1]


def is_portable(options: PipelineOptions) -> bool:
    return runner_name(options) in RUNNERS


def check_before_submitting(options: PipelineOptions) -> None:
    """RunFailed, in one line naming the option, when the cluster or the job server that a
    Flink or Spark run names cannot be reached or found. Nothing for other runners."""
    runner = runner_name(options)
    if runner == "FlinkRunner":
        flink = options.view_as(FlinkRunnerOptions)
        _check_jar("--flink_job_server_jar", flink.flink_job_server_jar)
        if flink.flink_master not in _FLINK_LOCAL and not options.view_as(
                PortableOptions).job_endpoint:
            _check_flink(flink.flink_master)
    elif runner == "SparkRunner":
        spark = options.view_as(SparkRunnerOptions)
        _check_jar("--spark_job_server_jar", spark.spark_job_server_jar)
        if spark.spark_master_url.startswith("spark://") and not options.view_as(
                PortableOptions).job_endpoint:
            _check_spark(spark.spark_master_url)


def _check_jar(option: str, jar: Optional[str]):
    if jar and "://" not in jar:
        with contextlib.suppress(OSError), open(jar, "rb") as handle:
            if handle.read(2) == b"PK":
                return
            raise RunFailed(f"{option}={jar}: not a jar file")
        raise RunFailed(f"{option}={jar}: no such file (scripts/engines.sh build makes the job "
                        f"servers; {DOCS})")


def _check_flink(master: str):
    url = (master if re.match(r"^https?://", master) else f"http://{master}").rstrip("/")
    try:
        with urllib.request.urlopen(f"{url}/overview", timeout=CONNECT_TIMEOUT_S) as answer:
            answer.read()
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise RunFailed(f"--flink_master={master}: no Flink cluster answers there ({reason}); "
                        "start one (scripts/engines.sh start flink) or name a running one's "
                        "REST address") from None


def _check_spark(master_url: str):
    hosts = master_url.removeprefix("spark://").split(",")  # several masters: any one
    reasons = []
    for host_port in hosts:
        host, _, port = host_port.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
            return
        except (OSError, ValueError) as e:
            reasons.append(f"{host_port}: {e}")
    raise RunFailed(f"--spark_master_url={master_url}: no Spark master answers there "
                    f"({'; '.join(reasons)}); start one (scripts/engines.sh start spark) or "
                    "name a running one") from None


def name_job(options: PipelineOptions, run_id: str) -> None:
    """Names a Flink or Spark run's job after the run (fleetcast-<run id>) unless --job_name
    names it: the cluster's UI lists it so, and `cancel_cluster_job` finds it by that name."""
    cloud = options.view_as(GoogleCloudOptions)
    if is_portable(options) and not cloud.job_name:
        cloud.job_name = f"fleetcast-{run_id.lower()}"


def cancel_cluster_job(options: PipelineOptions, timeout_s: float = 10.0) -> None:
    """Cancels the run's job on its Flink cluster (Beam's job server cancels only its own wait
    for it, and the job would go on without the run) and waits up to `timeout_s` until Flink
    says it ended. A Spark application ends with its driver, the job server, which the run
    ends."""
    if runner_name(options) != "FlinkRunner":
        return
    master = options.view_as(FlinkRunnerOptions).flink_master
    name = options.view_as(GoogleCloudOptions).job_name
    if master in _FLINK_LOCAL or not name:
        return
    url = (master if re.match(r"^https?://", master) else f"http://{master}").rstrip("/")
    deadline = time.monotonic() + timeout_s
    while True:
        running = [job["jid"] for job in _flink_jobs(url)
                   if job["name"] == name and job["state"] not in _FLINK_ENDED]
        if not running or time.monotonic() > deadline:
            return
        for job_id in running:
            request = urllib.request.Request(f"{url}/jobs/{job_id}?mode=cancel",
                                             method="PATCH")
            with contextlib.suppress(OSError), urllib.request.urlopen(
                    request, timeout=CONNECT_TIMEOUT_S):
                pass
        time.sleep(0.5)


_FLINK_ENDED = ("FINISHED", "CANCELED", "FAILED")


def _flink_jobs(url: str) -> list:
    try:
        with urllib.request.urlopen(f"{url}/jobs/overview", timeout=CONNECT_TIMEOUT_S) as answer:
            return json.loads(answer.read())["jobs"]
    except (OSError, ValueError, KeyError):
        return []


# An engine's failures that are its setup, not fleetcast's: (pattern, what to do).
_ENGINE_FAILURES = (
    (re.compile(r"Unable to fetch remote job server jar at (\S+?):? (HTTP Error \d+[^.]*|"
                r"<urlopen error [^>]*>)"),
     "Beam could not fetch its job server jar {0} ({1}): give --flink_job_server_jar or "
     "--spark_job_server_jar (scripts/engines.sh build makes both; " + DOCS + ")"),
    (re.compile(r"Insufficient number of network buffers: (required \d+, but only \d+ "
                r"available)"),
     "Flink's TaskManager has too few network buffers for this job ({0}): raise "
     "taskmanager.memory.network.min and .max, or lower "
     "taskmanager.network.sort-shuffle.min-buffers (scripts/engines.sh: 1 GB and 64; "
     + DOCS + "#flink-memory)"),
    (re.compile(r"OutOfMemoryError: (Direct buffer memory|Java heap space)"),
     "an engine's JVM ran out of memory ({0}): give Flink's TaskManager more "
     "(taskmanager.memory.task.off-heap.size for direct buffers, "
     "taskmanager.memory.process.size) or Spark's executors more (spark.executor.memory)"),
    (re.compile(r"fleetcast worker pool: (worker \S+ did not start: [^\n]+)"),
     "the worker pool could not start a Python worker: {0}"),
    (re.compile(r"(TaskManager with id \S+ is no longer reachable|TaskManager \S+ "
                r"disconnected|Connection unexpectedly closed by remote task manager "
                r"'[^']*'|Ask timed out on \[Actor\[[^\]]*/taskmanager_\d+[^\]]*\]\] after "
                r"\[\d+ ms\]|recipient \[Actor\[[^\]]*/taskmanager_\d+[^\]]*\]\], because the "
                r"recipient is unreachable)"),
     "Flink lost a TaskManager while the job ran ({0}); nothing was published: run again "
     "once the cluster has its TaskManagers"),
)


def failure_reason(error: BaseException) -> Optional[str]:
    """The one-line reason of a portable run's failure that lies in the engine's setup (its
    job server, memory, worker pool), or None."""
    text = str(error)
    for pattern, advice in _ENGINE_FAILURES:
        found = pattern.search(text)
        if found:
            return advice.format(*(group.strip() for group in found.groups()))
    return None


def quiet_engine_noise():
    """Keeps off the user's terminal (for `fleetcast run` without -v): Beam's WARNING that it
    starts and stops a job server; its ERROR copies of the job's failure, which the run
    reports in one line; and the tracebacks of LOOPBACK workers' threads whose gRPC stream the
    runner cancels or drops when the job ends (normally or not: the job says how)."""
    logging.getLogger("apache_beam.utils.subprocess_server").setLevel(logging.ERROR)
    job_log = logging.getLogger("apache_beam.runners.portability.portable_runner")
    if not any(isinstance(f, _NoJobErrors) for f in job_log.filters):
        job_log.addFilter(_NoJobErrors())
    if not getattr(threading.excepthook, "fleetcast_quiet", False):
        previous = threading.excepthook

        def hook(args):
            if not _ended_stream(args.exc_value):
                previous(args)
        hook.fleetcast_quiet = True
        threading.excepthook = hook


class _NoJobErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


def _ended_stream(error: Optional[BaseException]) -> bool:
    import grpc
    return isinstance(error, grpc.RpcError) and error.code() in (
        grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
