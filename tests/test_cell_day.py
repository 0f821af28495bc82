"""The cell-day config's small version (configs/cell_day_small.textproto), run the way its
header says: `fleetcast synth` then `fleetcast run`, as printed there. The run publishes,
every source row is counted once, and the synthetic trace's rows are the ones read."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pandas as pd

from tests.helpers import REPO

CONFIG = "configs/cell_day_small.textproto"
# The fleetcast executable next to this Python (the test's venv).
FLEETCAST = os.path.join(os.path.dirname(sys.executable), "fleetcast")


def printed_commands(config_path: str) -> list:
    """The `fleetcast ...` commands of a config's header comment (lines ending in a
    backslash continue on the next), split as a shell would."""
    commands, pending = [], None
    for line in open(config_path):
        if not line.startswith("#"):
            break
        text = line[1:].strip()
        if pending is not None:
            pending += " " + text
        elif text.startswith("fleetcast "):
            pending = text
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
        else:
            commands.append(shlex.split(pending))
            pending = None
    return commands


def test_cell_day_small_runs_as_printed_and_counts_add_up(tmp_path):
    os.makedirs(tmp_path / "configs")
    shutil.copy(os.path.join(REPO, CONFIG), tmp_path / CONFIG)
    commands = printed_commands(os.path.join(REPO, CONFIG))
    assert [c[:2] for c in commands] == [["fleetcast", "synth"], ["fleetcast", "run"]]
    outputs = []
    for command in commands:
        done = subprocess.run([FLEETCAST, *command[1:], *(["-q"] if command[1] == "run" else [])],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    written = {table: int(rows.replace(",", "")) for table, rows in
               re.findall(r"^\s+(\w+)\s+([\d,]+) rows$", outputs[0], re.M)}
    assert set(written) == {"machine_events", "collection_events", "instance_events",
                            "instance_usage"}
    results = tmp_path / "results" / "cell_day_small"
    manifest = json.loads((results / "fleetcast_manifest.json").read_text())
    assert manifest["success"] is True
    counts = pd.read_parquet(results / "source_counts").set_index("table")
    assert (counts["read"] == counts["kept"] + counts["rejected"]).all()
    for table, rows in written.items():
        assert counts.loc[table, "read"] == rows, table
    assert counts.loc["usage_join", "read"] == counts.loc["instance_usage", "kept"]
    assert manifest["tables"]["usage"]["rows"] == counts.loc["usage_join", "kept"]
    summary = pd.read_parquet(results / "placement_summary")
    assert len(summary) == 6 and set(summary["policy"]) == {"best_fit", "nilas", "lava"}
    assert len(pd.read_parquet(results / "overcommit_cell_metrics")) == 6
