"""The notebooks run headless the way docs/getting-started.md says, on a relative results
path.

`FLEETCAST_RESULTS=results/demo .venv/bin/jupyter execute notebooks/<name>.ipynb` from the
repository root: jupyter starts the kernel in notebooks/, so a relative path must be found in
the repository root as well (notebooks/_results.py). The run here is the demo config's stages
on a smaller synthetic trace, written under a temporary copy of the repository's layout
(notebooks/ and results/demo) that the command runs from, so the relative path is honest.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format

from pipelines import config as run_config
from pipelines import run as run_pipeline
from pipelines.io.failures import RunFailed
from tests.helpers import read_table, write_manifest

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = ("overcommit", "lifetime", "placement", "shaping", "overcommit_placement")
FIGURES = {
    "overcommit": ["overcommit_fig10.png"],
    "lifetime": ["lifetime_f1_vs_uptime.png", "lifetime_error_histogram.png",
                 "lifetime_model_comparison.png"],
    "placement": ["placement_empty_hosts.png", "placement_summary.png",
                  "placement_accuracy_sweep.png"],
    "shaping": ["shaping_fig2_boxplots.png", "shaping_fig3_heatmaps.png"],
    # The demo has no placement.admission: the notebook says so and draws nothing.
    "overcommit_placement": [],
}
JUPYTER = Path(sys.executable).parent / "jupyter"  # .venv/bin/jupyter, from jupyter_core


def _small_demo_config():
    """configs/demo.textproto's stages on 6 machines x 1 day (about 10 s on the DirectRunner)."""
    config = run_config.parse_config((REPO / "configs" / "demo.textproto").read_text())
    config.synthetic.machines = 6
    config.synthetic.days = 1
    config.lifetime_model.lifetime_cap_s = 3 * 3600
    config.lifetime_model.num_trees = 20
    config.lifetime_model.learning_rate = 0.2
    config.lifetime_model.num_shards = 2
    config.placement.warmup_s = 3 * 3600
    config.output.num_shards = 1
    assert run_config.validate(config) == []
    return config


def _small_overcommit_placement_config():
    """configs/overcommit_placement.textproto on 6 machines x 1 day, oracle lifetimes only
    (no lifetime stage), the scoring oracle's horizon 2 hours (24 would leave a day's trace
    unscored)."""
    config = run_config.parse_config(
        (REPO / "configs" / "overcommit_placement.textproto").read_text())
    config.synthetic.machines = 6
    config.synthetic.days = 1
    config.ClearField("lifetime_model")
    config.overcommit.fortune_teller[0].oracle.horizon_s = 7200
    del config.placement.lifetime_source[1:]
    config.placement.warmup_s = 3 * 3600
    config.output.num_shards = 1
    assert run_config.validate(config) == []
    return config


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A directory laid out like the repository: notebooks/ (the notebooks and their helper)
    and results/demo (a small run of the demo's stages). Removed afterwards."""
    root = tmp_path_factory.mktemp("checkout")
    shutil.copytree(REPO / "notebooks", root / "notebooks",
                    ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    config = _small_demo_config()
    (root / "small_demo.textproto").write_text(text_format.MessageToString(config))
    run_pipeline.run(config, str(root / "results" / "demo"), ["--runner=DirectRunner"])
    yield root
    shutil.rmtree(root, ignore_errors=True)


# The headless command docs/getting-started.md prints, for one notebook.
PRINTED_COMMAND = "FLEETCAST_RESULTS=results/demo .venv/bin/jupyter execute notebooks/{}.ipynb"


def test_getting_started_prints_the_command_run_here():
    page = (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert PRINTED_COMMAND.format("lifetime") in page.splitlines()
    assert PRINTED_COMMAND.format("*") in page.splitlines()


@pytest.mark.slow
@pytest.mark.skipif(not JUPYTER.exists(), reason="no jupyter command next to the interpreter")
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_printed_command_runs_the_notebook(checkout, name):
    # PRINTED_COMMAND, from the (copied) repository root.
    env = dict(os.environ, FLEETCAST_RESULTS="results/demo")
    done = subprocess.run([str(JUPYTER), "execute", f"notebooks/{name}.ipynb"], cwd=checkout,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for figure in FIGURES[name]:
        assert (checkout / "results" / "demo" / figure).stat().st_size > 1000, figure


@pytest.mark.slow
@pytest.mark.skipif(not JUPYTER.exists(), reason="no jupyter command next to the interpreter")
def test_the_overcommit_placement_notebook_draws_the_frontier(checkout):
    results = checkout / "results" / "overcommit_placement"
    run_pipeline.run(_small_overcommit_placement_config(), str(results),
                     ["--runner=DirectRunner"])
    env = dict(os.environ, FLEETCAST_RESULTS="results/overcommit_placement")
    done = subprocess.run([str(JUPYTER), "execute", "notebooks/overcommit_placement.ipynb"],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for figure in ("overcommit_placement_frontier_0.png", "overcommit_placement_hosts.png"):
        assert (results / figure).stat().st_size > 1000, figure


@pytest.mark.slow
def test_the_demos_clean_trace_has_no_dead_letters_and_counts_its_exclusions(checkout):
    results = checkout / "results" / "demo"
    assert len(read_table(results / "dead_letters")) == 0
    excluded = read_table(results / "exclusions")
    assert excluded["rows"].sum() > 0 and set(excluded["stage"]) <= {"shaping", "overcommit"}
    assert "a later run of a task (each task's first run is replayed)" in set(excluded["reason"])


# The helper itself, without a kernel.

def _results_module():
    spec = importlib.util.spec_from_file_location("_results", REPO / "notebooks" / "_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_relative_path_prefers_the_working_directory_then_the_repository_root(
        tmp_path, monkeypatch):
    results = _results_module()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLEETCAST_RESULTS", "fleetcast-test-absent/run")
    with pytest.raises(FileNotFoundError) as error:
        results.results_dir()
    assert str(tmp_path / "fleetcast-test-absent" / "run") in str(error.value)
    assert str(REPO / "fleetcast-test-absent" / "run") in str(error.value)
    # The repository root: notebooks/ itself is there, but holds no run (no manifest).
    with pytest.raises(RunFailed, match=f"^{REPO / 'notebooks'}: no successful fleetcast run"):
        results.results_dir("notebooks")
    # The working directory first.
    (tmp_path / "notebooks").mkdir()
    write_manifest(tmp_path / "notebooks")
    assert results.results_dir("notebooks") == tmp_path / "notebooks"
    # An absolute path as is; the default is results/demo.
    write_manifest(tmp_path)
    assert results.results_dir(str(tmp_path)) == tmp_path
    monkeypatch.delenv("FLEETCAST_RESULTS")
    (tmp_path / "results" / "demo").mkdir(parents=True)
    write_manifest(tmp_path / "results" / "demo")
    assert results.results_dir() == tmp_path / "results" / "demo"
    with pytest.raises(FileNotFoundError, match="absent"):
        results.results_dir(str(tmp_path / "absent"))
