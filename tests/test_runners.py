"""Same input, same tables: DirectRunner in memory, with 2 worker processes, and on Dask
(the demo's every stage on a small synthetic trace)."""

import os

import pandas as pd
import pytest

from tests.helpers import run_text_config, sorted_frame

DEMO = os.path.join(os.path.dirname(__file__), "..", "configs", "demo.textproto")
# The demo's every stage (join, overcommit, lifetime models, placement) on a smaller trace.
with open(DEMO, encoding="utf-8") as demo:
    CONFIG = (demo.read().replace("machines: 20", "machines: 4").replace("days: 2", "days: 1")
              + "\noutput { num_shards: 3 }\n")


def _assert_same_tables(got, expected):
    assert sorted(got) == sorted(expected)
    for name in expected:
        # Model paths name each run's own output directory.
        columns = [c for c in expected[name].columns if not (name == "lifetime_models"
                                                             and c == "path")]
        pd.testing.assert_frame_equal(sorted_frame(got[name][columns]),
                                      sorted_frame(expected[name][columns]), obj=name)


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory):
    out = tmp_path_factory.mktemp("in_memory")
    tables = run_text_config(CONFIG, out, ["--runner=DirectRunner",
                                           "--direct_running_mode=in_memory"])
    assert len(tables["usage"]) > 1000 and len(tables["instances"]) > 50
    for stage_table in ("overcommit_timeseries", "lifetime_examples", "placement_summary"):
        assert len(tables[stage_table]) > 0, stage_table
    return tables


def test_multi_processing_direct_runner_gives_identical_tables(in_memory, tmp_path):
    tables = run_text_config(CONFIG, tmp_path, [
        "--runner=DirectRunner", "--direct_running_mode=multi_processing",
        "--direct_num_workers=2"])
    _assert_same_tables(tables, in_memory)


def test_dask_runner_on_a_local_cluster_gives_identical_tables(in_memory, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster):
            tables = run_text_config(CONFIG, tmp_path, [
                "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                f"--dask_client_address={cluster.scheduler_address}"])
    _assert_same_tables(tables, in_memory)
