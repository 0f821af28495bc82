"""Dataflow's packaging: the source package that `--setup_file=./setup.py` stages (Beam's
own stager builds it, as DataflowRunner does), installed into a new venv as Dataflow's
workers install it, runs the demo from a folder outside the checkout to the DirectRunner's
tables."""

import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability.stager import Stager

from tests.helpers import REPO, assert_same_results

pytestmark = pytest.mark.slow


def test_the_staged_package_installed_in_a_new_venv_runs_the_demo(direct_demo, tmp_path):
    staged = tmp_path / "staged"
    staged.mkdir()
    resources = Stager.create_job_resources(
        PipelineOptions([f"--setup_file={REPO / 'setup.py'}"]), str(staged))
    package = next(
        beam_runner_api_pb2.ArtifactFilePayload.FromString(resource.type_payload).path
        for resource in resources
        if beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(
            resource.role_payload).staged_name == "workflow.tar.gz")
    venv = tmp_path / "worker"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet",
                                "--disable-pip-version-check", package],
                               capture_output=True, text=True, check=False)
    assert installed.returncode == 0, installed.stderr[-3000:]
    # The config as installed with the package, run where no checkout is.
    config = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import configs, pathlib; print(pathlib.Path(configs.__file__).parent / "
         "'demo.textproto')"], capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout.strip()
    assert not config.startswith(str(REPO))
    done = subprocess.run([str(venv / "bin" / "fleetcast"), "run", config, "--output_dir",
                           "demo", "-q"], cwd=tmp_path, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_results(direct_demo, tmp_path / "demo")
