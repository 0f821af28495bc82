"""Same input, same tables: DirectRunner in memory, with 2 worker processes, and on Dask."""

import pandas as pd
import pytest

from tests.helpers import run_text_config, sorted_frame

# A small synthetic trace through the demo's join (canonical tables only).
CONFIG = """
name: "runners"
synthetic { machines: 4 days: 0.5 seed: 3 }
output { num_shards: 3 }
"""


def _assert_same_tables(got, expected):
    assert sorted(got) == sorted(expected)
    for name in expected:
        pd.testing.assert_frame_equal(sorted_frame(got[name]), sorted_frame(expected[name]),
                                      obj=name)


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory):
    out = tmp_path_factory.mktemp("in_memory")
    tables = run_text_config(CONFIG, out, ["--runner=DirectRunner",
                                           "--direct_running_mode=in_memory"])
    assert len(tables["usage"]) > 1000 and len(tables["instances"]) > 50
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
