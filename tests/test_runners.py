"""Same input, bit-identical tables: DirectRunner in memory, with 2 worker processes, and on
Dask (the demo's every stage on a small synthetic trace). The cell metrics and the summary's
means sum over machines in whatever order a runner delivers them; their sums are exact
(pipelines/stages/overcommit/summary.py), so no last bit may differ."""

import os

import pandas as pd
import pytest

from tests.helpers import run_text_config, sorted_frame

DEMO = os.path.join(os.path.dirname(__file__), "..", "configs", "demo.textproto")
# The demo's every stage (join, overcommit, lifetime models, placement) on a smaller trace.
with open(DEMO, encoding="utf-8") as demo:
    CONFIG = (demo.read().replace("machines: 20", "machines: 4").replace("days: 4", "days: 1")
              + "\noutput { num_shards: 3 }\n")


def _with_model_paths_relative(tables, out):
    """The tables with each model path relative to the run's own output root: the paths are
    the published (final) ones, under the root, whatever the runner."""
    models = tables["lifetime_models"].copy()
    models["path"] = [os.path.relpath(path, out) for path in models["path"]]
    return {**tables, "lifetime_models": models}


def _assert_same_tables(got, expected):
    assert sorted(got) == sorted(expected)
    for name in expected:
        pd.testing.assert_frame_equal(sorted_frame(got[name]), sorted_frame(expected[name]),
                                      check_exact=True, obj=name)


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory):
    out = tmp_path_factory.mktemp("in_memory")
    tables = run_text_config(CONFIG, out, ["--runner=DirectRunner",
                                           "--direct_running_mode=in_memory"])
    assert len(tables["usage"]) > 1000 and len(tables["instances"]) > 50
    for stage_table in ("overcommit_timeseries", "lifetime_examples", "placement_summary"):
        assert len(tables[stage_table]) > 0, stage_table
    # Several machines per cell sum: the order-dependent reductions have something to order.
    assert tables["overcommit_cell_metrics"]["num_machines"].max() == 4
    assert sorted(tables["lifetime_models"]["path"].map(os.path.dirname).unique()) == [
        str(out / "models")]
    return _with_model_paths_relative(tables, out)


@pytest.mark.slow
def test_multi_processing_direct_runner_gives_identical_tables(in_memory, tmp_path):
    tables = run_text_config(CONFIG, tmp_path, [
        "--runner=DirectRunner", "--direct_running_mode=multi_processing",
        "--direct_num_workers=2"])
    _assert_same_tables(_with_model_paths_relative(tables, tmp_path), in_memory)


@pytest.mark.slow
def test_dask_runner_on_a_local_cluster_gives_identical_tables(in_memory, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        with distributed.Client(cluster):
            tables = run_text_config(CONFIG, tmp_path, [
                "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                f"--dask_client_address={cluster.scheduler_address}"])
    _assert_same_tables(_with_model_paths_relative(tables, tmp_path), in_memory)
