"""Plug-ins from outside the project: the predictor and policy of docs/extending.md, copied
verbatim into a package in a temporary folder, run end to end through `fleetcast run` and
checked by `fleetcast validate`; the registries and the parameter typing rule."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from configs.registry import PluginError, Registry, build_plugin, convert_param
from pipelines import config as run_config
from policies.registry import PLACEMENT_POLICIES
from predictors.peak.registry import PEAK_PREDICTORS
from tests.helpers import docs_block, read_table

FLEETCAST = str(pathlib.Path(sys.executable).parent / "fleetcast")



@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    """A folder outside the repository holding my_pkg/{peaks,fit}.py from docs/extending.md."""
    root = tmp_path_factory.mktemp("outside")
    package = root / "my_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "peaks.py").write_text(docs_block("HalfLimit"))
    (package / "fit.py").write_text(docs_block("WorstFit"))
    return root


def fleetcast(*args, plugin_path, cwd):
    env = {**os.environ, "PYTHONPATH": str(plugin_path)}
    return subprocess.run([FLEETCAST, *args], capture_output=True, text=True, cwd=cwd, env=env)


PLUGIN_RUN = """
name: "plugins"
synthetic { machines: 4 days: 1 seed: 2 }
overcommit {
  metric { cpu_percentile: 90 }
  fortune_teller { name: "oracle" oracle { horizon_s: 7200 } }
  fortune_teller { name: "borg" predictor { borg_default { phi: 0.5 } } }
  fortune_teller { name: "mine" predictor { plugin {
    class_path: "my_pkg.peaks:HalfLimit" params { key: "fraction" value: "0.5" } } } }
}
lifetime_model { lifetime_cap_s: 21600 num_trees: 20 long_lived_threshold_s: 3600
  long_lived_decision_s: 3600 train_no_uptime_ablation: false train_kaplan_meier: false
  num_shards: 2 }
placement {
  policy: BEST_FIT
  policy_plugin { name: "worst_fit" class_path: "my_pkg.fit:WorstFit"
                  params { key: "used_first" value: "false" } }
  lifetime_source { oracle: true }
  lifetime_source { noisy_oracle_accuracy: 0.8 }
  lifetime_source { uptime_model: true }
  lifetime_source { one_shot_model: true }
  warmup_s: 7200
  sample_period_s: 900
  stranding_every: 0
}
"""


@pytest.fixture(scope="module")
def plugin_run(plugin_path, tmp_path_factory):
    work = tmp_path_factory.mktemp("run")
    (work / "plugins.textproto").write_text(PLUGIN_RUN)
    result = fleetcast("run", "plugins.textproto", "--output_dir", "out",
                       plugin_path=plugin_path, cwd=work)
    assert result.returncode == 0, result.stderr[-3000:]
    return work / "out"


@pytest.mark.slow
def test_plugin_predictor_is_scored_like_the_built_ins(plugin_run):
    series = read_table(plugin_run / "overcommit_timeseries")
    mine = series[series.predictor == "mine"]
    borg = series[series.predictor == "borg"]
    assert len(mine) == len(borg) > 0
    # Half of the total limit at every step: borg-default with phi 0.5 and no warm-up.
    np.testing.assert_array_equal(mine.predicted_peak.to_numpy(),
                                  0.5 * mine.total_limit.to_numpy())
    np.testing.assert_allclose(mine.sort_values(["machine_id", "time"]).predicted_peak,
                               borg.sort_values(["machine_id", "time"]).predicted_peak)
    metrics = read_table(plugin_run / "overcommit_machine_metrics").set_index(
        ["predictor", "machine_id"])
    np.testing.assert_allclose(metrics.loc["mine"].savings_ratio, 0.5)
    summary = read_table(plugin_run / "overcommit_summary")
    assert set(summary.predictor) == {"oracle", "borg", "mine"}


@pytest.mark.slow
def test_plugin_policy_replays_with_every_lifetime_source(plugin_run):
    summary = read_table(plugin_run / "placement_summary")
    sources = {"oracle", "noisy_oracle_0.8", "uptime_model", "one_shot_model"}
    worst = summary[summary.policy == "worst_fit"].set_index("lifetime_source")
    best = summary[summary.policy == "best_fit"].set_index("lifetime_source")
    assert set(worst.index) == set(best.index) == sources
    assert (worst.placed_vms > 0).all()
    # Spreading over every host leaves no more hosts empty than Best-Fit's packing.
    assert (worst.empty_hosts_pct <= best.empty_hosts_pct.loc[worst.index] + 1e-9).all()
    series = read_table(plugin_run / "placement_timeseries")
    assert "worst_fit" in set(series.policy)


def plugin_problems(text, plugin_path, monkeypatch):
    monkeypatch.syspath_prepend(str(plugin_path))
    return [str(p) for p in run_config.validate(run_config.parse_config(
        "synthetic {} " + text), check_inputs=False)]


PREDICTOR = ("overcommit { metric { avg_cpu: true } fortune_teller { name: 'o' oracle {} } "
             "fortune_teller { name: 'm' predictor { plugin { %s } } } }")
PREDICTOR_FIELD = "overcommit.fortune_teller[1].predictor.plugin"


@pytest.mark.parametrize("plugin, expected", [
    ('class_path: "my_pkg.peaks:HalfLimit" params { key: "fraction" value: "0.25" }', None),
    ('class_path: "my_pkg.nothing:HalfLimit"',
     f"{PREDICTOR_FIELD}.class_path: cannot import 'my_pkg.nothing': No module named "
     "'my_pkg.nothing'"),
    ('class_path: "my_pkg.peaks:HalfLimits"',
     f"{PREDICTOR_FIELD}.class_path: 'my_pkg.peaks' has no attribute 'HalfLimits'"),
    ('class_path: "my_pkg.fit:WorstFit"',
     f"{PREDICTOR_FIELD}.class_path: my_pkg.fit:WorstFit lacks predict()"),
    ('class_path: "my_pkg.peaks:HalfLimit" params { key: "fraction" value: "2" }',
     f"{PREDICTOR_FIELD}.params['fraction']: HalfLimit(fraction=2.0) raised ValueError: "
     "fraction must be in [0, 1], got 2.0"),
    ('class_path: "my_pkg.peaks:HalfLimit" params { key: "fraction" value: "half" }',
     f"{PREDICTOR_FIELD}.params['fraction']: is not a number: 'half'"),
    ('class_path: "my_pkg.peaks:HalfLimit" params { key: "fractoin" value: "0.5" }',
     f"{PREDICTOR_FIELD}.params['fractoin']: HalfLimit takes no parameter 'fractoin'; it "
     "takes: fraction"),
])
def test_validate_names_the_plugin_field(plugin, expected, plugin_path, monkeypatch):
    problems = plugin_problems(PREDICTOR % plugin, plugin_path, monkeypatch)
    assert problems == ([] if expected is None else [expected])


def test_validate_checks_a_policy_plugin(plugin_path, monkeypatch):
    text = ("placement { policy: BEST_FIT lifetime_source { oracle: true } policy_plugin { "
            "name: 'best_fit' class_path: 'my_pkg.fit:WorstFit' params { key: 'used_first' "
            "value: 'maybe' } } }")
    assert plugin_problems(text, plugin_path, monkeypatch) == [
        "placement.policy_plugin[0].name: 'best_fit' is a built-in policy's name",
        "placement.policy_plugin[0].params['used_first']: is not a bool (true/false): 'maybe'",
        "placement.policy_plugin[0].name: 'best_fit' is used twice"]


@pytest.mark.slow
def test_cli_validate_fails_naming_the_parameter(plugin_path, tmp_path):
    (tmp_path / "mine.textproto").write_text(
        "synthetic {} " + PREDICTOR % 'class_path: "my_pkg.peaks:HalfLimit" params { key: '
        '"fraction" value: "2.0" }')
    result = fleetcast("validate", "mine.textproto", plugin_path=plugin_path, cwd=tmp_path)
    assert result.returncode == 2
    assert f"{PREDICTOR_FIELD}.params['fraction']: HalfLimit(fraction=2.0) raised" \
        in result.stderr


def test_old_top_level_overcommit_fields_get_a_clear_message():
    with pytest.raises(run_config.ConfigError) as error:
        run_config.parse_config('synthetic {}\nmetric { avg_cpu: true }', "old.textproto")
    assert ("line 2: metric is no longer a top-level field: the overcommit stages are one "
            "message since fleetcast 0.2; put filter, filtered_usage, metric, reset_and_shift, "
            "scheduler, scheduled_usage, fortune_teller inside overcommit { ... }"
            in str(error.value))


# --- The typing rule and the registries --------------------------------------------------------

class Typed:
    def __init__(self, count: int, ratio: float = 1.0, flag=False, label="x", anything=None,
                 maybe: "int | None" = None):
        self.count, self.ratio, self.flag = count, ratio, flag
        self.label, self.anything, self.maybe = label, anything, maybe


def test_params_convert_by_annotation_default_then_json():
    built = build_plugin("tests.test_plugins:Typed", {
        "count": "3", "ratio": "0.5", "flag": "Yes", "label": "12", "anything": "[1, 2]",
        "maybe": "7"})
    assert (built.count, built.ratio, built.flag, built.label, built.anything, built.maybe) \
        == (3, 0.5, True, "12", [1, 2], 7)
    assert build_plugin("tests.test_plugins.Typed", {"count": "1", "anything": "text"}) \
        .anything == "text"
    assert convert_param("0", bool) is False and convert_param("1e3", float) == 1000.0


@pytest.mark.parametrize("params, field, reason", [
    ({}, "params['count']", "is required by Typed"),
    ({"count": "1.5"}, "params['count']", "is not an integer: '1.5'"),
    ({"count": "1", "colour": "red"}, "params['colour']", "Typed takes no parameter"),
])
def test_params_that_do_not_fit_the_constructor(params, field, reason):
    with pytest.raises(PluginError) as error:
        build_plugin("tests.test_plugins:Typed", params)
    assert error.value.field == field and reason in error.value.reason


def test_registries_hold_every_built_in_once():
    assert list(PEAK_PREDICTORS) == [
        "borg_default", "rc_like", "per_machine_percentile", "n_sigma", "task_max",
        "task_avg", "max_of", "avg_of", "arima", "gaussian_process", "plugin"]
    assert list(PLACEMENT_POLICIES) == [
        "best_fit", "pbfr", "dpbfr", "la", "la_binary", "nilas", "lava", "lava_scoring",
        "lava_strict_recycling", "class_first_fit"]
    registry = Registry("thing")
    registry.register("a", 1)
    with pytest.raises(ValueError, match="thing 'a' is registered already"):
        registry.register("a", 2)
    with pytest.raises(KeyError, match="unknown thing 'b'; known: a"):
        registry["b"]  # noqa: B018
