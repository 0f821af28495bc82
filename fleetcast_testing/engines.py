"""The local Flink and Spark clusters of scripts/engines.sh, and `fleetcast worker-pool`
processes, for the tests and benchmarks that run fleetcast on them."""

import contextlib
import json
import os
import pathlib
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from typing import List, Optional

REPO = pathlib.Path(__file__).resolve().parent.parent
ENGINES_SH = REPO / "scripts" / "engines.sh"
SERVICES = ("flink", "spark")


def engines_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("FLEETCAST_ENGINES_DIR") or REPO / ".engines")


def description() -> Optional[dict]:
    """engines.json, which `scripts/engines.sh build` writes (None before that)."""
    path = engines_dir() / "engines.json"
    return json.loads(path.read_text()) if path.exists() else None


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=3) as answer:
        return json.loads(answer.read())


def why_not_up(service: str) -> Optional[str]:
    """None when `service` (flink, spark) of scripts/engines.sh is up, else why not."""
    engines = description()
    if engines is None:
        return f"{engines_dir()}/engines.json is missing: run scripts/engines.sh start"
    try:
        if service == "flink":
            up = _get_json(f"http://{engines['flink']['master']}/overview")["slots-total"] > 0
        else:
            up = _get_json(f"{engines['spark']['rest_ui']}/json/")["aliveworkers"] > 0
    except (OSError, ValueError, KeyError) as e:
        return f"{service} is not running ({e}): run scripts/engines.sh start {service}"
    return None if up else f"{service} has no worker yet: run scripts/engines.sh start {service}"


def run_options(runner: str, environment: str = "loopback",
                pool_port: Optional[int] = None) -> List[str]:
    """The `fleetcast run` options that `scripts/engines.sh options` prints for `runner`
    (flink, spark) with LOOPBACK or EXTERNAL workers (the pool on `pool_port`)."""
    env = dict(os.environ)
    if pool_port is not None:
        env["FLEETCAST_POOL_PORT"] = str(pool_port)
    printed = subprocess.run(["bash", str(ENGINES_SH), "options", runner, environment],
                             env=env, check=True, capture_output=True, text=True).stdout
    return shlex.split(printed)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def worker_pool(cwd, port: Optional[int] = None, extra_args=(), log_path=None):
    """`fleetcast worker-pool --port PORT` (this interpreter's) running in `cwd` while in the
    context; yields its port."""
    port = port or free_port()
    log = open(log_path or os.devnull, "ab")  # noqa: SIM115 (closed below)
    fleetcast = os.path.join(os.path.dirname(sys.executable), "fleetcast")
    process = subprocess.Popen([fleetcast, "worker-pool", "--port", str(port), *extra_args],
                               cwd=str(cwd), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fleetcast worker-pool on port {port} did not start")
            time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def flink_jobs(engines: dict) -> list:
    """The Flink cluster's jobs (REST /jobs/overview), newest first."""
    jobs = _get_json(f"http://{engines['flink']['master']}/jobs/overview")["jobs"]
    return sorted(jobs, key=lambda job: job["start-time"], reverse=True)
