"""Config validation of ranges and names: every numeric field finite and within a sane bound,
BigQuery names by BigQuery's naming rules, a run name that keeps results/<name> under
results/ (`fleetcast validate` as users run it)."""

import pytest

from pipelines import cli
from pipelines import config as run_config
from tests.helpers import REPO

ORACLE = 'fortune_teller { name: "oracle" oracle {} }'


@pytest.mark.parametrize("text, problem", [
    ('name: "../../x" synthetic {}',
     "name: must be a plain directory name (letters, digits, '_', '-', '.'; not starting "
     "with '.'), so results/<name> stays under results/: got '../../x'"),
    ('name: ".." synthetic {}',
     "name: must be a plain directory name (letters, digits, '_', '-', '.'; not starting "
     "with '.'), so results/<name> stays under results/: got '..'"),
    ('name: "demo-2.v1" synthetic {}', None),
    ("synthetic {} output { num_shards: 1000000 }",
     "output.num_shards: must be at most 10,000 shards: a shard is a Beam element and, in "
     "the output, a file per table; got 1000000"),
    ("synthetic { days: inf }", "synthetic.days: must be finite and > 0, got inf"),
    ("synthetic { days: nan }", "synthetic.days: must be finite and > 0, got nan"),
    ("synthetic { days: 100000 }",
     "synthetic.days: must be at most 3,650 days (10 years): longer than any trace; got "
     "100000.0"),
    ("synthetic { machines: 10000000 }",
     "synthetic.machines: must be at most 100,000 machines: 8 x a Google 2019 cell; got "
     "10000000"),
    ("synthetic { seed: -1 }", "synthetic.seed: must be >= 0, got -1"),
    ("synthetic { arrival_rate_per_machine_hour: inf }",
     "synthetic.arrival_rate_per_machine_hour: must be finite and > 0, got inf"),
    (f"synthetic {{}} overcommit {{ metric {{ avg_cpu: true }} {ORACLE} fortune_teller {{ "
     "name: 'b' predictor { borg_default { phi: inf } } } }",
     "overcommit.fortune_teller[1].predictor.borg_default.phi: must be finite and >= 0, "
     "got inf"),
    (f"synthetic {{}} overcommit {{ metric {{ avg_cpu: true }} {ORACLE} fortune_teller {{ "
     "name: 'b' predictor { borg_default { phi: 2 } } } }",
     "overcommit.fortune_teller[1].predictor.borg_default.phi: must be at most 1: phi = 1 is "
     "no overcommit; got 2.0"),
    ('synthetic {} output { bigquery_dataset: "proj:my data; DROP TABLE x" }',
     "output.bigquery_dataset: must be 'dataset' or 'project:dataset' by BigQuery's naming "
     "rules, got 'proj:my data; DROP TABLE x'"),
    ('synthetic {} output { bigquery_dataset: "../../etc.passwd" }',
     "output.bigquery_dataset: must be 'dataset' or 'project:dataset' by BigQuery's naming "
     "rules, got '../../etc.passwd'"),
    ('synthetic {} output { bigquery_dataset: "my-project:fleet_2019" }', None),
    ('synthetic {} usage { output { bigquery_table: "my-project:fleet.usage; DROP x" } }',
     "usage.output.bigquery_table: must be 'dataset.table' or 'project:dataset.table' by "
     "BigQuery's naming rules, got 'my-project:fleet.usage; DROP x'"),
    ('synthetic {} usage { output { bigquery_table: "fleet.usage copy" } }', None),
    ('google_v3 { instance_events { bigquery_table: '
     '"google.com:google-cluster-data.clusterdata_2019_a.instance_events" } }', None),
])
def test_ranges_and_names(text, problem):
    problems = [str(p) for p in run_config.validate(run_config.parse_config(text),
                                                    check_inputs=False)]
    assert problems == ([problem] if problem else [])


def test_validate_rejects_a_name_that_leaves_results_before_writing(tmp_path, capsys,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "escape.textproto").write_text('name: "../../x" synthetic { machines: 1 }')
    assert cli.main(["run", "escape.textproto"]) == cli.EXIT_CONFIG_ERROR
    assert "name: must be a plain directory name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [tmp_path / "escape.textproto"]


@pytest.mark.parametrize("kind, problem", [
    ("directory", "<file>: cannot be read: [Errno 21] Is a directory: '{path}'"),
    ("binary", "<file>: is not UTF-8 text (a config is a text-format RunConfig)"),
    ("missing", "<file>: config file does not exist"),
])
def test_a_config_that_cannot_be_read_is_one_line(tmp_path, capsys, kind, problem):
    path = tmp_path / "config.textproto"
    if kind == "directory":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"\xff\xfe\x00")
    for command in (["validate", str(path)], ["run", str(path), "-q"]):
        assert cli.main(command) == cli.EXIT_CONFIG_ERROR
        assert capsys.readouterr().err == f"fleetcast: {path}: {problem.format(path=path)}\n"


def test_validate_warns_of_inputs_not_there_yet_and_run_fails_on_them(capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # the README's command, from the repository root
    configs = sorted(str(p.relative_to(REPO)) for p in (REPO / "configs").glob("*.textproto"))
    missing = "data/clusterdata_2019_a/instance_events-*.json.gz"
    if (REPO / "data" / "clusterdata_2019_a").exists():
        pytest.skip("the Google 2019 shards are downloaded here")
    assert cli.main(["validate", *configs]) == 0  # several configs: grouped by what to do
    err = capsys.readouterr().err
    assert ("  configs/google_2019_json.textproto: 3 inputs under data/clusterdata_2019_a/; "
            "made by: gsutil -m cp") in err
    assert cli.main(["validate", "configs/google_2019_json.textproto"]) == 0  # one: each field
    assert (f"fleetcast: warning: configs/google_2019_json.textproto: google_v3.instance_events"
            f".path: no file matches '{missing}' (the config is valid; `fleetcast run` fails "
            "until the input is there)") in capsys.readouterr().err
    assert cli.main(["validate", "--check_inputs", "configs/google_2019_json.textproto"]) == 2
    assert (f"fleetcast: configs/google_2019_json.textproto: google_v3.instance_events.path: "
            f"no file matches '{missing}'\n") in capsys.readouterr().err
    assert cli.main(["run", "configs/google_2019_json.textproto", "--output_dir",
                     "/nonexistent/never-written", "-q"]) == 2
    assert f"google_v3.instance_events.path: no file matches '{missing}'" in \
        capsys.readouterr().err
