"""`fleetcast --help`, `COMMAND --help` and `validate` answer without loading Beam or the
stages' heavy libraries: they load only when a pipeline is built (or a report drawn)."""

import subprocess
import sys

import pytest

from tests.helpers import REPO

# Modules that take a second or more to import between them and that none of these commands
# uses (scipy's own package loads with numba, which the synthetic trace's encoder needs).
HEAVY = ("apache_beam", "lightgbm", "matplotlib", "pandas", "duckdb", "scipy.ndimage",
         "scipy.optimize", "scipy.signal", "scipy.stats")
# A fresh interpreter runs the command as the `fleetcast` executable does (pipelines.cli's
# main), then prints the heavy libraries it imported.
PROBE = f"""
import sys
from pipelines import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as e:  # --help exits from argparse
    code = e.code
print("imported:", *sorted(set(sys.modules) & set({HEAVY!r})))
sys.exit(code)
"""


@pytest.mark.parametrize("args", [
    ["validate", "configs/demo.textproto"],
    ["--help"],
    ["run", "--help"],
    ["validate", "--help"],
])
def test_the_command_imports_no_heavy_library(args):
    result = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "imported:"


def test_validate_still_prints_what_the_demo_runs():
    result = subprocess.run([sys.executable, "-c", PROBE, "validate", "configs/demo.textproto"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.stdout.splitlines()[0] == (
        "configs/demo.textproto: valid config 'demo' (source: synthetic; overcommit: 5 fortune "
        "tellers; lifetime model; placement: 4 policies; shaping: 3 policies)")
    assert result.stderr == ""
