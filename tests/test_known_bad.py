"""Valid configs that are known to lose or to do nothing warn, at validation, at the start of
a run and in the report, each with its measurement and a link to the explanation."""

import pathlib

import pytest

from pipelines import cli
from pipelines import config as run_config
from pipelines.report import _findings
from pipelines.stages.placement import known_bad

REPO = pathlib.Path(__file__).resolve().parent.parent
BASE = 'name: "x" synthetic { machines: 2 days: 1 }\nlifetime_model { }\n'


def warnings_of(text: str):
    config = run_config.parse_config(BASE + text)
    assert run_config.validate(config) == []
    return run_config.warnings(config)


def test_exit_time_policies_with_la_s_one_shot_classes_warn():
    found = warnings_of("placement { policy: BEST_FIT policy: NILAS policy: LAVA "
                        "policy: LA_BINARY lifetime_source { one_shot_model: true } }")
    assert found == [
        f"placement: lava with lifetime_source one_shot_model (LA's two classes) loses to "
        f"Best-Fit: {known_bad.ONE_SHOT_LOSSES['lava']} ({known_bad.DOCS})",
        f"placement: nilas with lifetime_source one_shot_model (LA's two classes) loses to "
        f"Best-Fit: {known_bad.ONE_SHOT_LOSSES['nilas']} ({known_bad.DOCS})"]
    assert "-21.1 pp" in found[1]
    assert warnings_of("placement { policy: LA_BINARY policy: BEST_FIT "
                       "lifetime_source { one_shot_model: true } }") == []


@pytest.mark.parametrize("sources, warned", [
    ("lifetime_source { noisy_oracle_accuracy: 0.6 }", ["0.6"]),
    ("lifetime_source { noisy_oracle_accuracy: 0.8 } lifetime_source { oracle: true }", ["0.8"]),
    ("lifetime_source { noisy_oracle_accuracy: 0.9 }", []),
    # A sweep asks how the policy degrades: no warning.
    ("lifetime_source { oracle: true } lifetime_source { noisy_oracle_accuracy: 0.6 } "
     "lifetime_source { noisy_oracle_accuracy: 0.8 }", []),
])
def test_a_noisy_oracle_below_the_sweeps_break_even_warns(sources, warned):
    found = warnings_of(f"placement {{ policy: LA policy: NILAS {sources} }}")
    assert [line.split("noisy_oracle_accuracy ")[1].split(":")[0] for line in found] == warned
    assert all(line.startswith("placement: la with") and known_bad.DOCS in line
               for line in found)


def test_a_memory_failure_model_without_memory_warns():
    shaping = ("shaping { policy: BASELINE forecaster: ORACLE k1: 0 k2: 0 seed: 0 "
               "host_shape { cpu: 1 memory: 1 } host_count: 2 cpu_only: true "
               "failure_model: %s }")
    assert warnings_of(shaping % "MEMORY_LIMIT") == [
        "shaping: failure_model MEMORY_LIMIT with cpu_only: memory is left out, so no "
        "component can ever fail (use HOST_OVERLOAD or COMPONENT_LIMIT)"]
    assert warnings_of(shaping % "HOST_OVERLOAD") == []


def test_validate_and_run_print_the_warning_and_the_report_shows_it(tmp_path, capsys):
    path = tmp_path / "bad.textproto"
    path.write_text(BASE + "placement { policy: NILAS lifetime_source { one_shot_model: true } }")
    assert cli.main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"fleetcast: warning: {path}: placement: nilas with lifetime_source "
                          "one_shot_model")
    config = run_config.load_config(str(path))
    assert "<p>Warning: placement: nilas with lifetime_source one_shot_model" in _findings(
        [], {}, config)


def test_the_linked_explanation_exists():
    page = (REPO / "docs" / "stages" / "placement.md").read_text(encoding="utf-8")
    assert "\n## Known-bad combinations\n" in page
    assert known_bad.DOCS.endswith("#known-bad-combinations")
