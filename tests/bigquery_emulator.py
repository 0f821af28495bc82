"""A local BigQuery emulator (bqemulator, REST + Storage Read gRPC on DuckDB) for the tests.

scripts/setup_venv.sh test installs it in .venv-bqemulator (its own environment: see
scripts/bqemulator-requirements.txt). `start()` runs one on free ports and returns the
environment variables that point fleetcast's BigQuery clients at it.
"""

import contextlib
import os
import pathlib
import socket
import subprocess
import time
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
BQEMULATOR = REPO / ".venv-bqemulator" / "bin" / "bqemulator"
PROJECT = "fleetcast-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def start(log_path: pathlib.Path, timeout_s: float = 60):
    """Runs an ephemeral emulator for project PROJECT; yields {env var: value}."""
    if not BQEMULATOR.exists():
        # A checkout without the emulator (a worktree, `pytest -m "not slow"` before setup)
        # skips; CI (FLEETCAST_REQUIRE_EMULATOR, set by .ci/run) fails instead.
        message = f"{BQEMULATOR} is missing: run `bash scripts/setup_venv.sh test`"
        if os.environ.get("FLEETCAST_REQUIRE_EMULATOR"):
            raise RuntimeError(message)
        pytest.skip(message)
    rest, grpc = _free_port(), _free_port()
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [str(BQEMULATOR), "start", "--rest-port", str(rest), "--grpc-port", str(grpc),
             "--project", PROJECT, "--ephemeral", "--log-level", "warning"],
            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        url = f"http://127.0.0.1:{rest}/bigquery/v2/projects/{PROJECT}/datasets"
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("bqemulator did not start:\n"
                                       + log_path.read_text()[-3000:]) from None
                time.sleep(0.3)
        yield {"BIGQUERY_EMULATOR_HOST": f"http://127.0.0.1:{rest}",
               "FLEETCAST_BIGQUERY_STORAGE_HOST": f"127.0.0.1:{grpc}",
               "GOOGLE_CLOUD_PROJECT": PROJECT}
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


@contextlib.contextmanager
def running(log_path: pathlib.Path):
    """`start`, with its variables set in this process's environment while it runs (and
    inherited by the `fleetcast` processes the tests start); the old values come back."""
    with start(log_path) as env:
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            yield env
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
