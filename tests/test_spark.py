"""fleetcast on a real Spark standalone cluster (scripts/engines.sh start spark): the demo with
LOOPBACK and EXTERNAL workers gives the DirectRunner's tables and model files, and an
interrupted run ends its Spark application.

Each run is `fleetcast run` as a user types it, with the options `scripts/engines.sh options
spark` prints. CI starts the cluster (FLEETCAST_REQUIRE_ENGINES); elsewhere these tests skip
when it is not up.
"""

import json
import signal
import time
import urllib.request

import pytest

from fleetcast_testing import engines
from tests.helpers import (
    assert_same_results,
    counters_printed,
    finished,
    require_engine,
    start_demo,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def spark():
    """engines.json's description of the running cluster."""
    return require_engine("spark")


def applications(spark, state: str) -> list:
    with urllib.request.urlopen(f"{spark['spark']['rest_ui']}/json/", timeout=5) as answer:
        return json.loads(answer.read())[state]


def test_demo_on_spark_with_loopback_workers_gives_the_direct_runners_tables(
        spark, direct_demo, direct_demo_counters, tmp_path):
    code, out, err = finished(start_demo(tmp_path / "spark", engines.run_options("spark")))
    assert code == 0, err[-3000:]
    assert "Really starting service" not in err and "Traceback" not in err, err[-3000:]
    assert counters_printed(out) == direct_demo_counters  # through the job server
    assert_same_results(direct_demo, tmp_path / "spark")


def test_an_interrupted_run_ends_its_spark_application(spark, tmp_path):
    run = start_demo(tmp_path / "out", engines.run_options("spark"))
    deadline = time.monotonic() + 120
    while not applications(spark, "activeapps") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert applications(spark, "activeapps"), "no Spark application started"
    time.sleep(3)
    run.send_signal(signal.SIGTERM)
    code, _, err = finished(run)
    assert code == -signal.SIGTERM, err[-3000:]
    deadline = time.monotonic() + 30
    while applications(spark, "activeapps") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not applications(spark, "activeapps")


def test_demo_on_spark_with_external_workers_gives_the_same_tables(spark, direct_demo,
                                                                    tmp_path):
    """A worker pool in a folder of its own and the run's output given relative to the
    submitter's folder."""
    (tmp_path / "pool").mkdir()
    (tmp_path / "submitter").mkdir()
    with engines.worker_pool(tmp_path / "pool") as port:
        code, _, err = finished(start_demo("spark_external",
                                           engines.run_options("spark", "external", port),
                                           cwd=tmp_path / "submitter"))
    assert code == 0, err[-3000:]
    assert_same_results(direct_demo, tmp_path / "submitter" / "spark_external")
