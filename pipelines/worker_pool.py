"""`fleetcast worker-pool`: the Python workers of a Flink or Spark run with
--environment_type=EXTERNAL.

A portable runner asks a worker pool (`--environment_config=HOST:PORT`) to start an SDK worker
for each of its task slots' environments. Beam's own pool (`worker_pool_main`) starts them as
whatever `python` is first on PATH, hands them neither the pipeline options nor the runner's
log channel, and answers before the worker has started: a worker that cannot import Beam dies
and the job waits for it forever. This pool

- starts each worker with its own interpreter (the venv fleetcast is installed in), from its
  own directory, through Beam's worker entry point with the job's options and log channel
  (as Beam's container boot program does), a few of them ahead of the runner's requests;
- answers the runner only once the worker is up, or with the worker's error after it exited
  or --ready_timeout_s went by, so such a job fails at once instead of hanging;
- ends its workers when it ends (SIGTERM, SIGINT, or SIGKILL: each worker watches the pool).
"""

import collections
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures
from typing import Dict

import grpc
from apache_beam.portability.api import (
    beam_fn_api_pb2,
    beam_fn_api_pb2_grpc,
    beam_provision_api_pb2,
    beam_provision_api_pb2_grpc,
)
from google.protobuf import json_format, text_format

from pipelines import heap, worker_guard

_LOG = logging.getLogger("fleetcast.worker_pool")
READY = "fleetcast-worker-ready"
FAILED = "fleetcast-worker-failed: "


class _Worker:
    """A worker process, started ahead of a request: it imports Beam and fleetcast, then
    waits on stdin for the worker id and provisioning endpoint the runner gives."""

    def __init__(self):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pipelines.worker_pool"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            close_fds=True, env=dict(os.environ, **{worker_guard.ENV: str(os.getpid())}))
        self.last_lines = collections.deque(maxlen=20)  # of its stderr
        threading.Thread(target=_forward, args=(self.process.stderr, self.last_lines),
                         daemon=True).start()

    def start(self, worker_id: str, provision_endpoint: str, timeout_s: float):
        """Hands it the runner's request; None once it is up, else why not (it is ended)."""
        try:
            self.process.stdin.write(json.dumps({"id": worker_id,
                                                 "provision_endpoint": provision_endpoint})
                                     + "\n")
            self.process.stdin.close()
        except OSError:  # it has exited: its status and stderr say why
            pass
        lines = []
        reader = threading.Thread(target=_read_until_ready, args=(self.process.stdout, lines),
                                  daemon=True)
        reader.start()
        reader.join(timeout_s)
        if lines and lines[-1] == READY:
            return None
        failure = next((line[len(FAILED):] for line in lines if line.startswith(FAILED)), None)
        if reader.is_alive():
            self.process.kill()
            return f"not up after {timeout_s:g} s (its log is the pool's)"
        code = self.process.wait()
        time.sleep(0.1)  # its last stderr lines through _forward
        said = next((line for line in reversed(self.last_lines) if line.strip()), "")
        return failure or (f"exited with status {code} before it was up"
                           + (f": {said.strip()}" if said else ""))


class WorkerPool(beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolServicer):
    """Starts and stops SDK worker processes for a runner's StartWorker / StopWorker calls,
    keeping `spare_workers` started ahead (a runner may ask for new workers at every stage:
    Flink's, when its runner is in the job's class loader; Spark's, without
    --environment_cache_millis), so a request waits for no interpreter to import."""

    def __init__(self, ready_timeout_s: float, spare_workers: int):
        self.ready_timeout_s = ready_timeout_s
        self.spare_workers = spare_workers
        self._workers: Dict[str, subprocess.Popen] = {}
        self._spares: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._stopped = False
        self._add_spares()

    def _add_spares(self):
        with self._lock:
            while not self._stopped and len(self._spares) < self.spare_workers:
                self._spares.append(_Worker())

    def _take(self) -> _Worker:
        """A spare (one that died says why when it is given the request), else a new one."""
        with self._lock:
            if self._spares:
                return self._spares.popleft()
        return _Worker()

    def StartWorker(self, request, context=None):  # noqa: N802 (gRPC's method name)
        _LOG.info("starting worker %s for %s", request.worker_id, request.control_endpoint.url)
        worker = self._take()
        threading.Thread(target=self._add_spares, daemon=True).start()
        with self._lock:
            self._workers[request.worker_id] = worker.process
        error = worker.start(request.worker_id, request.provision_endpoint.url,
                             self.ready_timeout_s)
        if error:
            with self._lock:
                self._workers.pop(request.worker_id, None)
            _LOG.error("worker %s did not start: %s", request.worker_id, error)
            return beam_fn_api_pb2.StartWorkerResponse(
                error=f"fleetcast worker pool: worker {request.worker_id} did not start: {error}")
        return beam_fn_api_pb2.StartWorkerResponse()

    def StopWorker(self, request, context=None):  # noqa: N802
        with self._lock:
            process = self._workers.pop(request.worker_id, None)
        if process is not None:
            _LOG.info("stopping worker %s", request.worker_id)
            _end(process)
        return beam_fn_api_pb2.StopWorkerResponse()

    def stop_all(self):
        with self._lock:
            self._stopped = True
            processes = list(self._workers.values()) + [w.process for w in self._spares]
            self._workers, self._spares = {}, collections.deque()
        for process in processes:
            _end(process)


def _read_until_ready(stream, lines: list):
    """Appends `stream`'s lines to `lines` until READY, then drains it (a worker writing to a
    full pipe would block)."""
    for line in stream:
        lines.append(line.rstrip("\n"))
        if lines[-1] == READY:
            break
    threading.Thread(target=stream.read, daemon=True).start()


def _forward(stream, last_lines):
    """Copies a worker's stderr to the pool's, keeping its last lines in `last_lines`."""
    for line in stream:
        last_lines.append(line.rstrip("\n"))
        sys.stderr.write(line)
    sys.stderr.flush()


def _end(process: subprocess.Popen, timeout_s: float = 5.0):
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def serve(port: int, ready_timeout_s: float, spare_workers: int):
    """Serves the pool on `port` of every interface until SIGTERM or SIGINT; its workers end
    with it."""
    try:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        bound = server.add_insecure_port(f"[::]:{port}")
    except RuntimeError:  # grpcio refuses a port it cannot bind
        bound = 0
    if not bound:
        raise OSError(f"cannot listen on port {port} (taken by another program?)")
    pool = WorkerPool(ready_timeout_s, spare_workers)
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
    stopped = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopped.set())
    server.start()
    print(f"fleetcast worker-pool: listening on port {bound} "
          f"(--environment_type=EXTERNAL --environment_config=HOST:{bound}); workers run "
          f"{sys.executable} in {os.getcwd()}", flush=True)
    stopped.wait()
    server.stop(grace=None)
    pool.stop_all()


def provision_info(worker_id: str, endpoint: str):
    """The job's ProvisionInfo (options, log and control endpoints) for worker `worker_id`."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
        return stub.GetProvisionInfo(beam_provision_api_pb2.GetProvisionInfoRequest(),
                                     metadata=[("worker_id", worker_id)], timeout=30).info


def worker_main():
    """An SDK worker: imports what a step needs, reads the runner's request from stdin, then
    runs Beam's entry point with the job's options and the runner's log channel (what the
    container boot program sets up), once it has said on stdout that it is up."""
    try:
        from apache_beam.runners.worker import sdk_worker_main

        import pipelines.run  # noqa: F401 (fleetcast and every stage import, or fail now)
        request = json.loads(sys.stdin.readline() or "null")
        if request is None:
            return  # the pool ended before it gave this spare a request
        worker_id, provision_endpoint = request["id"], request["provision_endpoint"]
        info = provision_info(worker_id, provision_endpoint)
    except grpc.RpcError as e:
        print(f"{FAILED}the runner's provisioning service at {provision_endpoint}: "
              f"{e.code().name}: {e.details()}", flush=True)
        raise
    except Exception as e:  # pylint: disable=broad-except
        print(f"{FAILED}{type(e).__name__}: {' '.join(str(e).split())[:300]}", flush=True)
        raise
    os.environ.update({
        "WORKER_ID": worker_id,
        "PIPELINE_OPTIONS": json.dumps(
            {"options": json_format.MessageToDict(info.pipeline_options)}),
        "CONTROL_API_SERVICE_DESCRIPTOR": text_format.MessageToString(info.control_endpoint),
        "LOGGING_API_SERVICE_DESCRIPTOR": text_format.MessageToString(info.logging_endpoint),
    })
    worker_guard.watch_run_process()  # ends this worker when the pool ends
    print(READY, flush=True)
    sdk_worker_main.main([])


def main():
    """A worker process of the pool (`fleetcast worker-pool` starts the pool itself)."""
    heap.map_large_blocks()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    worker_main()


if __name__ == "__main__":
    main()
