"""`fleetcast validate` on several configs prints their warnings once, grouped by what to do
(issue 50): combinations to check, inputs to make (with the command of the config's header),
and known-bad combinations that a replay compares with best_fit on purpose."""

import pathlib
import subprocess
import sys

from pipelines.stages.placement import known_bad
from pipelines.warning_groups import header_commands

FLEETCAST = pathlib.Path(sys.executable).parent / "fleetcast"
REPO = pathlib.Path(__file__).resolve().parent.parent
BASE = "synthetic { machines: 2 days: 0.25 seed: 1 }\nlifetime_model { }\n"
ONE_SHOT_NILAS = (f"placement: nilas with lifetime_source one_shot_model (LA's two classes) "
                  f"loses to Best-Fit: {known_bad.ONE_SHOT_LOSSES['nilas']} ({known_bad.DOCS})")


def fleetcast(cwd, *args):
    return subprocess.run([str(FLEETCAST), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_header_commands_join_continued_lines_and_stop_at_the_first_field():
    text = ("# What this is:\n#   fleetcast synth --out data/x \\\n#     --machines 3\n"
            "# then\n#   fleetcast run this.textproto\nname: \"x\"\n#   not a header\n")
    assert header_commands(text) == ["fleetcast synth --out data/x --machines 3",
                                     "fleetcast run this.textproto"]


def test_several_configs_warn_once_each_under_what_to_do(tmp_path):
    configs = {
        "clean.textproto": BASE,
        "alone.textproto": BASE + "placement { policy: NILAS "
                                  "lifetime_source { one_shot_model: true } }\n",
        "compared.textproto": BASE + "placement { policy: BEST_FIT policy: NILAS "
                                     "lifetime_source { one_shot_model: true } }\n",
        "inputs.textproto": ("# Made by:\n#   fleetcast synth --out earlier \\\n"
                             "#     --machines 2\n#   fleetcast run inputs.textproto\n"
                             'instances { input { parquet: "earlier/instances/*" } }\n'
                             'machines { input { parquet: "earlier/machines/*" } }\n'),
    }
    for name, text in configs.items():
        (tmp_path / name).write_text(text)
    result = fleetcast(tmp_path, "validate", *configs)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": valid config ") == 4
    assert result.stderr.splitlines() == [
        "fleetcast: warning: 4 warnings in 3 of 4 configs, by what to do:",
        "fleetcast: warning: combinations known to lose or to do nothing, without their "
        "baseline in the run (check these):",
        f"  alone.textproto: {ONE_SHOT_NILAS}",
        "fleetcast: warning: inputs not there yet (`fleetcast run` fails until they are), "
        "with the command in the config's header that makes them:",
        "  inputs.textproto: 2 inputs under earlier/instances/, earlier/machines/; made by: "
        "fleetcast synth --out earlier --machines 2",
        "fleetcast: warning: known-bad combinations beside best_fit in their replay "
        "(intended: the run measures what they lose, as the reproductions' comparisons do):",
        f"  compared.textproto: {ONE_SHOT_NILAS}"]
    # One config: each warning on its own line, as `fleetcast run` prints them.
    alone = fleetcast(tmp_path, "validate", "alone.textproto")
    assert alone.stderr == f"fleetcast: warning: alone.textproto: {ONE_SHOT_NILAS}\n"


def test_the_shipped_configs_warn_only_of_inputs_with_their_command_and_of_comparisons():
    paths = sorted(str(p.relative_to(REPO)) for p in (REPO / "configs").glob("*.textproto"))
    result = fleetcast(REPO, "validate", *paths)
    assert result.returncode == 0, result.stderr
    headings = [line for line in result.stderr.splitlines()[1:]
                if line.startswith("fleetcast: warning: ")]
    assert [heading.split(" (")[0] for heading in headings] == [
        "fleetcast: warning: inputs not there yet",
        "fleetcast: warning: known-bad combinations beside best_fit in their replay"]
    inputs = result.stderr.split(headings[0])[1].split(headings[1])[0].splitlines()[1:]
    assert inputs and all("; made by: fleetcast synth --out data/" in line
                          or "; made by: gsutil -m cp " in line for line in inputs)
