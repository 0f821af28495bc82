"""Syntax errors in a config read like its range errors: one line, `line N: FIELD.PATH: ...`,
with the valid names of a misspelled field or enum value (pipelines/config_errors.py), exit 2
from `fleetcast validate`."""

import pathlib
import re
import subprocess
import sys

import pytest

from configs import fleetcast_pb2
from pipelines import config as run_config

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.textproto"))
FLEETCAST = pathlib.Path(sys.executable).parent / "fleetcast"
DEMO = (REPO / "configs" / "demo.textproto").read_text()


def misspelt(name: str) -> str:
    """`name` with its middle letter doubled (``lifetime_cap_s`` -> ``lifetimee_cap_s``)."""
    return name[:len(name) // 2 + 1] + name[len(name) // 2:]


def problem(text: str) -> str:
    """The one problem `parse_config` reports for `text`."""
    with pytest.raises(run_config.ConfigError) as error:
        run_config.parse_config(text, "typo.textproto")
    assert len(error.value.problems) == 1
    return str(error.value.problems[0])


def assert_suggests(message: str, prefix: str, right: str):
    """`message` is `prefix: no such field (did you mean ...?)` with `right` among the names."""
    match = re.fullmatch(re.escape(prefix) + r": no such field \(did you mean (.*)\?\)", message)
    assert match, message
    assert right in match.group(1).split(" or "), message


def sections(path):
    """(field, its message) of every top-level message field that the config at `path` sets."""
    config = run_config.parse_config(path.read_text(), str(path))
    return [(field.name, value) for field, value in config.ListFields()
            if field.message_type is not None]


SECTIONS = [(path, name, message) for path in CONFIGS for name, message in sections(path)]


def test_the_shipped_configs_cover_every_stage_and_a_source():
    used = {name for _, name, _ in SECTIONS}
    assert {"overcommit", "lifetime_model", "placement", "shaping", "output"} <= used
    assert used & {"synthetic", "azure_v1", "google_v3", "google_2011"}


@pytest.mark.parametrize("path, section, message", SECTIONS,
                         ids=[f"{p.stem}-{name}" for p, name, _ in SECTIONS])
def test_a_typo_in_each_section_of_each_shipped_config_names_its_path(path, section, message):
    text = path.read_text()
    opening = list(re.finditer(rf"(?m)^{section}\s*:?\s*\{{", text))
    assert len(opening) == 1, f"{path.name}: {section} opens {len(opening)} times at column 0"
    line = text.count("\n", 0, opening[0].start()) + 1
    fields = message.DESCRIPTOR.fields_by_name
    for right in [field.name for field, _ in message.ListFields()] or [max(fields, key=len)]:
        typo = misspelt(right)
        assert typo not in fields
        at = opening[0].end()
        assert_suggests(problem(f"{text[:at]} {typo}: 1 {text[at:]}"),
                        f"line {line}: {section}.{typo}", right)


def paths_to_every_message():
    """(field names from RunConfig, the message type they lead to) of the shortest path to
    each message type reachable from RunConfig."""
    paths, queue = {}, [((), fleetcast_pb2.RunConfig.DESCRIPTOR)]
    while queue:
        names, descriptor = queue.pop(0)
        if descriptor.full_name not in paths:
            paths[descriptor.full_name] = (names, descriptor)
            queue += [(names + (f,), d.message_type) for f, d in
                      descriptor.fields_by_name.items() if d.message_type is not None]
    return list(paths.values())


MESSAGES = paths_to_every_message()


@pytest.mark.parametrize("names, descriptor", MESSAGES,
                         ids=[descriptor.full_name for _, descriptor in MESSAGES])
def test_a_typo_in_every_message_type_names_its_path(names, descriptor):
    right = max(descriptor.fields_by_name, key=len)
    typo = misspelt(right)
    text = "".join(f"{name} {{\n" for name in names) + f"{typo}: 1\n" + "}\n" * len(names)
    path, outer = [], fleetcast_pb2.RunConfig.DESCRIPTOR
    for name in names:
        field = outer.fields_by_name[name]
        path.append(f"{name}[0]" if field.is_repeated else name)
        outer = field.message_type
    assert_suggests(problem(text), f"line {len(names) + 1}: {'.'.join(path + [typo])}", right)


def test_the_issue_s_typo_reads_like_a_range_error():
    text = DEMO.replace("lifetime_cap_s: 21600", "lifetime_cap: 21600")
    line = DEMO[:DEMO.index("lifetime_cap_s")].count("\n") + 1
    assert problem(text) == (f"line {line}: lifetime_model.lifetime_cap: no such field "
                             "(did you mean lifetime_cap_s?)")


def test_a_typo_deep_in_repeated_messages_counts_their_index():
    text = DEMO.replace("predictors { rc_like { percentile: 99",
                        "predictors { rc_like { percentil: 99")
    assert problem(text).endswith("overcommit.fortune_teller[4].predictor.max_of.predictors[1]"
                                  ".rc_like.percentil: no such field (did you mean percentile?)")
    assert problem("placement: { lifetime_source: [{ oracle: true }, { oracl: true }] }") == (
        "line 1: placement.lifetime_source[1].oracl: no such field (did you mean oracle?)")


def test_a_name_close_to_nothing_lists_the_valid_fields():
    assert problem("synthetic { zzz: 1 }") == (
        "line 1: synthetic.zzz: no such field; valid: machines, days, seed, "
        "arrival_rate_per_machine_hour")


def test_a_field_of_an_outer_message_asks_for_a_missing_brace():
    assert problem("lifetime_model {\n  train_fraction: 0.5\nplacement {\n}\n") == (
        "line 3: lifetime_model.placement: no such field here; placement is a field of the top "
        "level (is a } missing above?)")


POLICIES = ("BEST_FIT, PBFR, LA, LA_BINARY, NILAS, LAVA, DPBFR, CLASS_FIRST_FIT, LAVA_SCORING, "
            "LAVA_STRICT_RECYCLING")


@pytest.mark.parametrize("value, hint", [("NILASS", " (did you mean NILAS?)"), ("99", "")])
def test_an_unknown_enum_value_lists_the_valid_ones(value, hint):
    for text in (f"placement {{\n  policy: BEST_FIT\n  policy: {value}\n}}",
                 f"placement {{\n\n  policy: [BEST_FIT, {value}]\n}}"):
        assert problem(text) == (f"line 3: placement.policy: {value} is not a valid value{hint}; "
                                 f"valid: {POLICIES}")


@pytest.mark.parametrize("text, expected", [
    ('lifetime_model {\n  train_fraction: "x"\n}',
     'line 2: lifetime_model.train_fraction: must be a number, got "x"'),
    ("synthetic { machines: 1.5 }", "line 1: synthetic.machines: must be an integer, got 1.5"),
    ("lifetime_model { train_lifetime_fractions_model: maybe }",
     "line 1: lifetime_model.train_lifetime_fractions_model: must be true or false"),
    ("name: 3", "line 1: name: must be a string in quotes, got 3"),
    ("synthetic: 3", "line 1: synthetic: is a message: expected { after its name"),
    ("synthetic {\n  days: 2\n  days: 3\n}",
     "line 3: synthetic.days: is set twice, but takes one value (not repeated)"),
    ("synthetic {}\nazure_v1 {}", "line 2: azure_v1: is set along with synthetic: set only one "
     "of google_v3, azure_v1, azure_packing_2020, synthetic, google_2011"),
    ("synthetic {}\nplacement {\n  lifetime_source { oracle: true }\n",
     "line 2: placement: its { is never closed (a } is missing)"),
    ("synthetic {}\n}", "line 2: this } closes no message (one } too many)"),
    ('name: "demo # {"\nsynthetic { # }\n  seeed: 1 }',
     "line 3: synthetic.seeed: no such field (did you mean seed?)"),
], ids=["float", "integer", "bool", "string", "message", "twice", "oneof", "unclosed",
        "extra-brace", "braces-in-strings-and-comments"])
def test_other_syntax_errors_are_one_line_with_the_field(text, expected):
    assert problem(text) == expected


def fleetcast_validate(*paths):
    """Runs the installed `fleetcast validate` on `paths` as a user would."""
    return subprocess.run([str(FLEETCAST), "validate", *map(str, paths)], capture_output=True,
                          text=True, cwd=REPO, timeout=300)


@pytest.mark.parametrize("old, new, at, expected", [
    ("lifetime_cap_s: 21600", "lifetime_cap: 21600", "lifetime_cap_s",
     "lifetime_model.lifetime_cap: no such field (did you mean lifetime_cap_s?)"),
    ("policy: NILAS", "policy: NILASS", "policy: NILAS", "placement.policy: NILASS is not a "
     f"valid value (did you mean NILAS?); valid: {POLICIES}"),
    ("elastic_fraction: 0.5\n}", "elastic_fraction: 0.5\n", "shaping {",
     "shaping: its { is never closed (a } is missing)"),
], ids=["field", "enum", "brace"])
def test_validate_prints_one_line_and_exits_2(tmp_path, old, new, at, expected):
    """`at`: the text of DEMO on the line reported."""
    config = tmp_path / "typo.textproto"
    config.write_text(DEMO.replace(old, new, 1))
    line = DEMO[:DEMO.index(at)].count("\n") + 1
    result = fleetcast_validate(config)
    assert (result.returncode, result.stderr) == (
        2, f"fleetcast: {config}: line {line}: {expected}\n")


def test_validate_passes_every_shipped_config():
    result = fleetcast_validate(*CONFIGS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(": valid config ") == len(CONFIGS)
