"""The fleetcast command: run prints where the results are; synth writes a v3 trace."""

import gzip
import json
import os

from pipelines import cli


def test_run_prints_results_rows_counts_and_dead_letters(tmp_path, capsys):
    config = tmp_path / "small.textproto"
    config.write_text('name: "small" synthetic { machines: 2 days: 0.25 seed: 1 }')
    assert cli.main(["run", str(config), "--output_dir", str(tmp_path / "out"),
                     "--runner=DirectRunner"]) == 0
    printed = capsys.readouterr().out
    assert f"Results: {tmp_path / 'out'}" in printed
    for table in ("machines", "instances", "usage", "dead_letters", "source_counts"):
        assert os.path.join(str(tmp_path / "out"), table) in printed
    assert "google_v3.instance_usage" in printed and "Dead letters: 0" in printed


def test_run_fails_fast_on_a_missing_input(tmp_path, capsys):
    config = tmp_path / "missing.textproto"
    config.write_text(f'azure_v1 {{ vmtable: "{tmp_path}/absent.csv.gz" }}')
    assert cli.main(["run", str(config), "--output_dir", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert f"azure_v1.vmtable: no file matches '{tmp_path}/absent.csv.gz'" in error
    assert not (tmp_path / "out").exists()


def test_synth_writes_the_four_v3_tables(tmp_path, capsys):
    assert cli.main(["synth", "--out", str(tmp_path), "--machines", "2", "--days", "0.2",
                     "--seed", "4"]) == 0
    assert "synthetic trace written to" in capsys.readouterr().out
    for table in ("instance_events", "instance_usage", "machine_events", "collection_events"):
        files = sorted((tmp_path / table).glob("*.json.gz"))
        assert files, table
        with gzip.open(files[0], "rt") as f:
            assert isinstance(json.loads(f.readline()), dict)


def test_validate_prints_the_stages(capsys):
    repo = os.path.join(os.path.dirname(__file__), "..")
    assert cli.main(["validate", os.path.join(repo, "configs", "demo.textproto")]) == 0
    assert "valid config 'demo'" in capsys.readouterr().out
