"""The fleetcast command: run prints where the results are, rejects unknown flags and passes
Beam's options through; validate checks several configs; synth writes a v3 trace; --help and
--version."""

import gzip
import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys

import pytest

from pipelines import cli, commands
from tests.helpers import SMALL

FLEETCAST = pathlib.Path(sys.executable).parent / "fleetcast"


def fleetcast(*args, cwd):
    """Runs the installed `fleetcast` executable as a user would."""
    return subprocess.run([str(FLEETCAST), *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_run_prints_results_rows_counts_and_dead_letters(tmp_path, capsys):
    config = tmp_path / "small.textproto"
    config.write_text('name: "small" synthetic { machines: 2 days: 0.25 seed: 1 }')
    assert cli.main(["run", str(config), "--output_dir", str(tmp_path / "out"),
                     "--runner=DirectRunner"]) == 0
    printed = capsys.readouterr().out
    assert f"Results: {tmp_path / 'out'}" in printed
    for table in ("machines", "instances", "usage", "dead_letters", "source_counts"):
        assert os.path.join(str(tmp_path / "out"), table) in printed
    assert "google_v3.instance_usage" in printed and "Dead letters (malformed rows): 0" in printed


def test_run_fails_fast_on_a_missing_input(tmp_path, capsys):
    config = tmp_path / "missing.textproto"
    config.write_text(f'azure_v1 {{ vmtable: "{tmp_path}/absent.csv.gz" }}')
    assert cli.main(["run", str(config), "--output_dir", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert f"azure_v1.vmtable: no file matches '{tmp_path}/absent.csv.gz'" in error
    assert not (tmp_path / "out").exists()


def test_synth_bad_argument_is_one_line_exit_2(tmp_path, capsys):
    assert cli.main(["synth", "--out", str(tmp_path), "--processes", "0"]) == 2
    assert capsys.readouterr().err == \
        "fleetcast: synth: processes must be positive, got 0\n"


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


@pytest.mark.slow
def test_a_typo_fails_naming_it_with_the_suggestion_and_writes_nothing(tmp_path):
    (tmp_path / "small.textproto").write_text(SMALL)
    result = fleetcast("run", "small.textproto", "--ouput_dir", "out", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "--ouput_dir: unknown option (did you mean --output_dir?)" in result.stderr
    assert "finished" not in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.textproto"]  # no out/, results/


@pytest.mark.parametrize("args, expected", [
    (["--runnr=DirectRunner", "--direct_num_workers", "2"],
     "--runnr: unknown option (did you mean --runner?)"),
    (["-x"], "-x: unknown option"),
    (["second.textproto"], "second.textproto: unexpected argument"),
    (["--direct_num_workers=two"], "argument --direct_num_workers: invalid int value: 'two'"),
])
def test_run_rejects_what_neither_fleetcast_nor_beam_knows(args, expected, tmp_path, capsys):
    config = tmp_path / "small.textproto"
    config.write_text(SMALL)
    assert cli.main(["run", str(config), "--output_dir", str(tmp_path / "out"), *args]) == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_beam_options_pass_through_to_a_real_run(tmp_path):
    (tmp_path / "small.textproto").write_text(SMALL)
    result = fleetcast("run", "small.textproto", "--output_dir", "out", "--runner=DirectRunner",
                       "--direct_num_workers=2", "--direct_running_mode=in_memory",
                       f"--temp_location={tmp_path / 'tmp'}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "unknown" not in result.stderr and "Discarding" not in result.stderr
    assert "Results: out" in result.stdout
    assert (tmp_path / "out" / "usage").is_dir()


def test_every_runners_options_are_accepted():
    commands.check_beam_args([
        "--runner=DataflowRunner", "--project", "p", "--region=us-central1",
        "--temp_location=gs://b/tmp", "--staging_location=gs://b/staging", "--setup_file",
        "./setup.py", "--extra_package=a.tar.gz", "--extra_package=b.tar.gz",
        "--no_use_public_ips", "--experiments=use_runner_v2", "--save_main_session",
        "--flink_master=HOST:8081", "--environment_type=LOOPBACK",
        "--spark_master_url=spark://HOST:7077", "--direct_running_mode=multi_processing"])
    # The DaskRunner's options are registered by its module, which the runner path names.
    commands.check_beam_args(["--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                         "--dask_client_address=tcp://HOST:8786"])


@pytest.mark.parametrize("workers, message", [
    ("-1", "must be at least 0 (0: one per core)"),
    ("100000", "must be at most "),
])
def test_direct_workers_are_bounded_before_any_work(tmp_path, capsys, workers, message):
    config = tmp_path / "small.textproto"
    config.write_text(SMALL)
    assert cli.main(["run", str(config), "--output_dir", str(tmp_path / "out"),
                     f"--direct_num_workers={workers}"]) == 2
    assert capsys.readouterr().err.startswith(
        f"fleetcast: --direct_num_workers={workers}: {message}")
    assert not (tmp_path / "out").exists()
    commands.check_beam_args(["--direct_num_workers=2", "--direct_running_mode=multi_processing"])


def test_validate_checks_every_config_and_reports_each_invalid_one(tmp_path, capsys):
    first, second, bad = (tmp_path / f"{n}.textproto" for n in ("first", "second", "bad"))
    first.write_text(SMALL)
    second.write_text("synthetic { machines: 3 }")
    bad.write_text("synthetic { days: -1 }")
    assert cli.main(["validate", str(first), str(bad), str(second)]) == 2
    captured = capsys.readouterr()
    assert f"{first}: valid config 'small'" in captured.out
    assert f"{second}: valid config 'second'" in captured.out
    assert "bad" not in captured.out
    assert f"fleetcast: {bad}: synthetic.days: must be > 0, got -1.0\n" in captured.err
    assert "1 of 3 configs are invalid" in captured.err


def test_version_prints_the_installed_version(tmp_path):
    result = fleetcast("--version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout == f"fleetcast {importlib.metadata.version('fleetcast')}\n"


def _help(capsys, monkeypatch, *args):
    monkeypatch.setenv("COLUMNS", "200")  # argparse wraps at the terminal width
    with pytest.raises(SystemExit) as exit_:
        cli.main([*args, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_help_says_what_each_command_does_with_its_defaults(capsys, monkeypatch):
    program = _help(capsys, monkeypatch)
    assert "Apache Beam batch analysis of cluster traces" in program
    assert "fleetcast validate CONFIG [CONFIG ...]" in program
    assert "fleetcast estimate CONFIG [--project PROJECT]" in program
    estimate = _help(capsys, monkeypatch, "estimate")
    assert "--usd_per_tib USD on-demand price per TiB processed (default: 6.25)" in estimate
    assert "A dry run bills nothing" in estimate
    assert "passes every Beam pipeline option" in program
    run = _help(capsys, monkeypatch, "run")
    assert "(default: results/<config name>" in run
    assert "passes through to the pipeline unchanged" in run
    for example in ("--direct_num_workers=2", "--runner=DataflowRunner",
                    "--dask_client_address=tcp://HOST:8786"):
        assert example in run
    assert "Exits 2 if any config is invalid" in _help(capsys, monkeypatch, "validate")
    synth = _help(capsys, monkeypatch, "synth")
    for documented in ("--machines N machines in the cell (default: 20)",
                       "--days D trace length in days (default: 2.0)",
                       "--seed S random seed; the same arguments give byte-identical files "
                       "(default: 0)",
                       "--arrival_rate R collections (jobs of ~5 tasks) submitted per machine "
                       "and hour (default: 0.25 / request_scale)",
                       "--processes P worker processes (the same files for any number) "
                       "(default: 1)",
                       "or parquet (default: json)"):
        assert documented in synth
    assert "--out DIR output directory" in synth
