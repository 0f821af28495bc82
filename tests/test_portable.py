"""What a Flink or Spark run checks and says without a cluster: a cluster that is down or a
job-server jar that is missing fails `fleetcast run` in one line before anything is written;
an engine's setup failures read as one line; `fleetcast worker-pool` answers a runner's
request with the worker's error; every local path of a config reaches the workers
absolute; large values cross groupings and side inputs as files of the run."""

import os
import subprocess
import time

import grpc
import pytest
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2

from fleetcast_testing import engines
from pipelines import config as run_config
from pipelines import portable
from pipelines.io import manifests, publish, spill
from tests.helpers import DEMO_CONFIG, FLEETCAST, REPO, tiny_config


def fleetcast_run(output_dir, *options, config=DEMO_CONFIG):
    return subprocess.run([FLEETCAST, "run", str(config), "--output_dir", str(output_dir),
                           *options], capture_output=True, text=True, timeout=120,
                          check=False)


def closed_port() -> int:
    return engines.free_port()  # nothing listens there once the probe closed it


@pytest.mark.parametrize("options, says", [
    (["--runner=FlinkRunner", "--flink_master=127.0.0.1:{port}"],
     "--flink_master=127.0.0.1:{port}: no Flink cluster answers there"),
    (["--runner=SparkRunner", "--spark_master_url=spark://127.0.0.1:{port}"],
     "--spark_master_url=spark://127.0.0.1:{port}: no Spark master answers there"),
    (["--runner=FlinkRunner", "--flink_master=127.0.0.1:{port}",
      "--flink_job_server_jar=/nonexistent/job-server.jar"],
     "--flink_job_server_jar=/nonexistent/job-server.jar: no such file"),
    (["--runner=SparkRunner", "--spark_master_url=spark://127.0.0.1:{port}",
      "--spark_job_server_jar={config}"], "--spark_job_server_jar={config}: not a jar file"),
])
def test_a_cluster_or_job_server_that_is_not_there_fails_the_run_in_one_line(
        tmp_path, options, says):
    port = closed_port()
    fill = {"port": port, "config": DEMO_CONFIG}
    done = fleetcast_run(tmp_path / "out", *(o.format(**fill) for o in options))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"fleetcast: run failed: {says.format(**fill)}"), done.stderr
    assert not (tmp_path / "out").exists()  # checked before anything is written


def test_engine_setup_failures_read_as_one_line():
    jar = ("RuntimeError: Unable to fetch remote job server jar at https://repo.maven.apache."
           "org/maven2/org/apache/beam/beam-runners-flink-2.2-job-server/2.77.0/beam-runners-"
           "flink-2.2-job-server-2.77.0.jar: HTTP Error 404: Not Found. Also failed to fetch")
    assert portable.failure_reason(RuntimeError(jar)) == (
        "Beam could not fetch its job server jar https://repo.maven.apache.org/maven2/org/"
        "apache/beam/beam-runners-flink-2.2-job-server/2.77.0/beam-runners-flink-2.2-job-"
        "server-2.77.0.jar (HTTP Error 404: Not Found): give --flink_job_server_jar or "
        "--spark_job_server_jar (scripts/engines.sh build makes both; docs/runners.md)")
    buffers = ("java.io.IOException: Insufficient number of network buffers: required 512, "
               "but only 451 available. The total number of network buffers is currently")
    assert portable.failure_reason(RuntimeError(buffers)).startswith(
        "Flink's TaskManager has too few network buffers for this job (required 512, but only "
        "451 available): raise taskmanager.memory.network.min and .max")
    lost = ("org.apache.pekko.pattern.AskTimeoutException: Ask timed out on [Actor[pekko.tcp"
            "://flink@127.0.0.1:45777/user/rpc/taskmanager_0#-2119770489]] after [10000 ms]. "
            "Message of type")
    assert portable.failure_reason(RuntimeError(lost)).startswith(
        "Flink lost a TaskManager while the job ran (Ask timed out on [Actor[pekko.tcp://flink@"
        "127.0.0.1:45777/user/rpc/taskmanager_0#-2119770489]] after [10000 ms]); nothing was "
        "published")
    unreachable = (
        "RecipientUnreachableException: Could not send message [RemoteRpcInvocation("
        "TaskExecutorGateway.submitTask(TaskDeploymentDescriptor, JobMasterId, Time))] from "
        "sender [Actor[pekko://flink/temp/taskmanager_0$Mj]] to recipient [Actor[pekko.tcp://"
        "flink@127.0.0.1:42645/user/rpc/taskmanager_0#474722285]], because the recipient is "
        "unreachable. This can either mean")
    assert portable.failure_reason(RuntimeError(unreachable)).startswith(
        "Flink lost a TaskManager while the job ran (recipient [Actor[pekko.tcp://flink@"
        "127.0.0.1:42645/user/rpc/taskmanager_0#474722285]], because the recipient is "
        "unreachable); nothing was published")
    assert portable.failure_reason(RuntimeError("ValueError: a bug")) is None


@pytest.fixture
def pool(tmp_path):
    """A stub for `fleetcast worker-pool`'s runner: a gRPC stub of a pool started the way
    users start it."""
    with engines.worker_pool(tmp_path) as port:
        with grpc.insecure_channel(f"localhost:{port}") as channel:
            yield beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(channel)


def test_the_worker_pool_answers_with_the_error_of_a_worker_that_cannot_start(pool):
    """A worker whose runner's provisioning service is not there exits; the pool's answer
    says why, at once, rather than letting the runner wait for it forever."""
    unreachable = endpoints_pb2.ApiServiceDescriptor(url=f"localhost:{closed_port()}")
    started = time.monotonic()
    answer = pool.StartWorker(beam_fn_api_pb2.StartWorkerRequest(
        worker_id="w1", control_endpoint=unreachable, logging_endpoint=unreachable,
        provision_endpoint=unreachable), timeout=60)
    assert time.monotonic() - started < 30  # its spare's imports, then one failed call
    assert answer.error.startswith(
        f"fleetcast worker pool: worker w1 did not start: the runner's provisioning service "
        f"at {unreachable.url}: UNAVAILABLE: "), answer.error


def test_every_local_path_of_a_config_is_made_absolute_and_nothing_else():
    config = run_config.parse_config('''
        google_v3 { instance_events { path: "trace/ie-*.json.gz" }
                    instance_usage { path: "gs://bucket/usage-*.parquet" }
                    machine_events { path: "/data/me.json" } }
        lifetime_model { model_dir: "models" }
        usage { output { parquet: "copies/usage" } }
        output { parquet_dir: "out" }''')
    absolute = run_config.with_absolute_paths(config)
    cwd = os.getcwd()
    assert absolute.google_v3.instance_events.path == f"{cwd}/trace/ie-*.json.gz"
    assert absolute.google_v3.instance_usage.path == "gs://bucket/usage-*.parquet"
    assert absolute.google_v3.machine_events.path == "/data/me.json"
    assert absolute.lifetime_model.model_dir == f"{cwd}/models"
    assert absolute.usage.output.parquet == f"{cwd}/copies/usage"
    assert absolute.output.parquet_dir == f"{cwd}/out"
    assert config.output.parquet_dir == "out"  # the config itself is left as it was


def _strings(message):
    """Every (message type, field, value) of the string fields set in `message`."""
    for field, value in message.ListFields():
        if field.message_type is None:
            if field.type == field.TYPE_STRING:
                yield from ((message.DESCRIPTOR.full_name, field.name, v)
                            for v in (value if field.is_repeated else [value]))
        elif field.is_repeated and not field.message_type.GetOptions().map_entry:
            for item in value:
                yield from _strings(item)
        elif not field.is_repeated:
            yield from _strings(value)


@pytest.mark.parametrize("config_path", sorted((REPO / "configs").glob("*.textproto")),
                         ids=lambda path: path.name)
def test_no_shipped_config_names_a_file_that_stays_relative(config_path, monkeypatch):
    """A field that names a file but is missing from PATH_FIELDS would reach the workers
    relative: no string of a shipped config that names something under the repository (as
    its commands run there) stays relative."""
    monkeypatch.chdir(REPO)
    config = run_config.with_absolute_paths(run_config.load_config(str(config_path),
                                                                   check_inputs=False))
    relative = [(message, field, value) for message, field, value in _strings(config)
                if "/" in value and not os.path.isabs(value) and "://" not in value]
    assert relative == []


def test_a_run_keeps_its_config_as_written_in_the_manifest(tmp_path, monkeypatch):
    config = tiny_config(tmp_path)
    config.write_text(config.read_text().replace(f"{tmp_path}/", ""))  # relative paths
    monkeypatch.chdir(tmp_path)
    done = fleetcast_run("out", "-q", config=config.name)
    assert done.returncode == 0, done.stderr
    manifest = manifests.require(str(tmp_path / "out"))
    assert 'vmtable: "vmtable.csv"' in manifest["config"]


def test_large_objects_cross_as_files_of_the_run_and_read_back_equal(tmp_path):
    area = publish.StagingArea.open(str(tmp_path / "root"))
    try:
        with publish.staging(area):
            to = spill.spill_to(min_bytes=1000)
        small, large = {"a": 1}, {"rows": list(range(10_000))}
        assert spill.spilled_object(small, to) is small
        reference = spill.spilled_object(large, to)
        assert isinstance(reference, spill.SpilledObject)
        assert reference.path.startswith(area.extra_dir("spill"))
        assert spill.load_object(reference) == large
        assert spill.load_object(small) is small
        assert spill.spilled_object(large, None) is large  # outside a run
    finally:
        area.discard()
        area.release()
