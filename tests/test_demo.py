"""The quick start's demo shows something: configs/demo.textproto's placement replays, run as
`fleetcast run configs/demo.textproto` runs them, separate the lifetime-aware policies from
Best-Fit, and the README's table of the demo's placement holds the numbers the run gives.

Only the demo's synthetic trace and placement stage run here (about 30 s instead of the full
demo's minute): the replays use the trace and oracle or noisy-oracle lifetimes only, so their
tables are those of the full run.
"""

import pathlib

import pytest

from pipelines import config as run_config
from pipelines import run as run_pipeline
from tests.helpers import read_table

pytestmark = pytest.mark.slow  # both tests read the demo's replays (module fixture)

REPO = pathlib.Path(__file__).resolve().parent.parent
DEMO_CONFIG = REPO / "configs" / "demo.textproto"
README = REPO / "README.md"
README_SECTION = "**The demo's placement**"
LIFETIME_AWARE_POLICIES = ("nilas", "lava", "la")
# What "differ visibly" means for the demo: each lifetime-aware policy with the oracle keeps at
# least this many percentage points more hosts empty than Best-Fit, on a pool where Best-Fit
# itself leaves at least MIN_BEST_FIT_EMPTY_HOSTS_PCT empty.
MIN_GAIN_VS_BEST_FIT_PP = 1.0
MIN_BEST_FIT_EMPTY_HOSTS_PCT = 5.0


@pytest.fixture(scope="module")
def demo_placement_summary(tmp_path_factory):
    """placement_summary of the demo config's synthetic trace and placement stage, indexed
    by (policy, lifetime_source)."""
    config = run_config.load_config(str(DEMO_CONFIG))
    for stage in ("overcommit", "lifetime_model", "shaping"):
        config.ClearField(stage)
    assert run_config.validate(config) == []
    output_dir = tmp_path_factory.mktemp("demo")
    run_pipeline.run(config, str(output_dir), ["--runner=DirectRunner"])
    summary = read_table(output_dir / "placement_summary")
    summary = summary[summary["defrag"] == "none"]
    return summary.set_index(["policy", "lifetime_source"])


def test_demo_placement_separates_lifetime_aware_policies_from_best_fit(
        demo_placement_summary):
    summary = demo_placement_summary
    best_fit = summary.loc[("best_fit", "oracle")]
    assert best_fit["empty_hosts_pct"] >= MIN_BEST_FIT_EMPTY_HOSTS_PCT, best_fit
    assert summary["failed_placements"].sum() == 0
    for policy in LIFETIME_AWARE_POLICIES:
        gain_pp = summary.loc[(policy, "oracle"), "empty_hosts_pct_vs_best_fit_pp"]
        assert gain_pp >= MIN_GAIN_VS_BEST_FIT_PP, (policy, gain_pp)


def _readme_demo_table() -> dict:
    """{(policy, column header): empty hosts %} of the README's table of the demo's
    placement (the first table after the section's title)."""
    text = README.read_text(encoding="utf-8")
    assert README_SECTION in text, f"README.md has no {README_SECTION} section"
    rows = []
    for line in text[text.index(README_SECTION):].splitlines():
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    header, body = rows[0], rows[2:]
    values = {}
    for cells in body:
        for column, cell in zip(header[1:], cells[1:]):
            # "19.93 (+1.96)": the empty hosts %, then the difference to Best-Fit.
            values[(cells[0], column)] = float(cell.split()[0])
    return values


def test_readme_prints_the_demo_placement_numbers(demo_placement_summary):
    readme = _readme_demo_table()
    sources = {"oracle": "oracle", "noisy 0.8": "noisy_oracle_0.8",
               "noisy 0.6": "noisy_oracle_0.6", "noisy 0.4": "noisy_oracle_0.4"}
    policies = {policy for policy, _ in readme}
    assert policies == {"best_fit", *LIFETIME_AWARE_POLICIES}
    for (policy, column), printed in readme.items():
        got = demo_placement_summary.loc[(policy, sources[column]), "empty_hosts_pct"]
        assert printed == round(got, 2), (policy, column, printed, got)
