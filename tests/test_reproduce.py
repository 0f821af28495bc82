"""`fleetcast reproduce`: the verdict rules on hand-made numbers, claims that cannot be
compared, the pages and the index; and `fleetcast reproduce all --quick` run as a user runs
it, every page written with a computed verdict for every claim."""

import math
import pathlib
import re
import subprocess
import sys

import pandas as pd
import pytest

from configs import fleetcast_pb2
from pipelines.reproduce import KEYS, claims, google_2011, page, runs
from pipelines.reproduce.claims import (
    NOT_COMPARABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    Claim,
    Measurement,
    NotComparable,
    Sql,
    Verdict,
)

REPO = pathlib.Path(__file__).resolve().parent.parent
FLEETCAST = pathlib.Path(sys.executable).parent / "fleetcast"
CLAIM_ROW = re.compile(r"^\| \d+\. ")


def outcome(rule, paper, fleetcast):
    return rule.verdict(paper, fleetcast).outcome


@pytest.mark.parametrize("paper, fleetcast, expected", [
    (6.5, 3.25, REPRODUCED), (6.5, 13.0, REPRODUCED), (6.5, 3.2, NOT_REPRODUCED),
    (6.5, 13.1, NOT_REPRODUCED), (6.5, -6.5, NOT_REPRODUCED), (-1.1, -0.6, REPRODUCED),
    (0.0, 0.0, REPRODUCED), (1.0, 0.0, NOT_REPRODUCED), (0.0, 0.5, NOT_REPRODUCED)])
def test_within_a_factor_needs_the_same_sign(paper, fleetcast, expected):
    assert outcome(claims.within_factor(2), paper, fleetcast) == expected


def test_the_tolerance_rules_include_their_bound():
    within = claims.within(0.05)
    assert outcome(within, 0.99, 0.94) == REPRODUCED
    assert outcome(within, 0.99, 1.04) == REPRODUCED
    assert outcome(within, 0.99, 0.93) == NOT_REPRODUCED
    at_least = claims.at_least(1.0, " pp")
    assert at_least.text == "fleetcast ≥ paper − 1 pp"
    assert outcome(at_least, 3.0, 2.0) == REPRODUCED
    assert outcome(at_least, 3.0, 1.99) == NOT_REPRODUCED
    assert outcome(claims.at_most(5.0, " pp"), 0.0, 5.0) == REPRODUCED
    assert outcome(claims.at_most(5.0, " pp"), 0.0, 5.01) == NOT_REPRODUCED
    assert outcome(claims.above(), 1.0, 1.0) == NOT_REPRODUCED
    assert outcome(claims.above(), 1.0, 1.01) == REPRODUCED


def test_signs_and_orderings():
    assert outcome(claims.same_sign(), -1.0, -0.2) == REPRODUCED
    assert outcome(claims.same_sign(), -1.0, 0.0) == NOT_REPRODUCED
    assert outcome(claims.same_sign(), -1.0, 0.3) == NOT_REPRODUCED
    order = ("lava", "nilas", "la_binary")
    assert outcome(claims.same_order(), order, ("lava", "nilas", "la_binary")) == REPRODUCED
    assert outcome(claims.same_order(), order, ("nilas", "lava", "la_binary")) == NOT_REPRODUCED
    assert outcome(claims.same_first(), ("max",), ("max", "rc", "borg")) == REPRODUCED
    assert outcome(claims.same_first(), ("max",), ("borg", "max")) == NOT_REPRODUCED


def test_an_undefined_number_is_not_comparable_and_says_why():
    verdict = claims.within(0.1).verdict(0.8, math.nan)
    assert verdict.outcome == NOT_COMPARABLE and "NaN" in verdict.reason
    with pytest.raises(ValueError, match="reason"):
        Verdict(NOT_COMPARABLE)
    with pytest.raises(ValueError, match="unknown verdict"):
        Verdict("roughly")


def test_reducers():
    ranked = claims.ordering(("a", "b", "c"), "{:.1f}")(
        pd.DataFrame({"name": ["a", "b", "c"], "value": [1.0, 3.0, 2.0]}))
    assert ranked.value == ("b", "c", "a") and ranked.text == "b (3.0) > c (2.0) > a (1.0)"
    rising = claims.ordering(("a", "b"), "{:.1f}", ascending=True)(
        pd.DataFrame({"name": ["a", "b"], "value": [2.0, 1.0]}))
    assert rising.value == ("b", "a") and rising.text == "b (1.0) < a (2.0)"
    with pytest.raises(NotComparable, match="no name c"):
        claims.ordering(("a", "c"))(pd.DataFrame({"name": ["a"], "value": [1.0]}))
    assert claims.scalar("{:.2f}", 100)(pd.DataFrame({"x": [0.1234]})).text == "12.34"
    assert math.isnan(claims.scalar()(pd.DataFrame({"x": [None]})).value)


def test_the_f1_slope_leaves_out_days_without_a_long_lived_job():
    """Day 3 (the trace's last minutes) has no long-lived job: its F1 of 0 is no
    measurement, and the slope is that of days 0-2 alone (0.6, 0.5, 0.4: -0.1 a day)."""
    days = pd.DataFrame({"period": [0, 1, 2, 3], "n_positive": [40, 30, 20, 0],
                         "f1": [0.6, 0.5, 0.4, 0.0]})
    slope = google_2011.f1_slope("la_classifier", "small").reduce(days)
    assert slope.value == pytest.approx(-0.1)
    assert slope.text == ("-0.1000 a day (day 0: 0.600, day 2: 0.400; day 3 left out: no "
                          "long-lived job)")
    with pytest.raises(NotComparable, match="fewer than 3 test days with a long-lived job"):
        google_2011.f1_slope("la_classifier", "small").reduce(days.iloc[1:])


class _FakeRuns:
    """Runs whose query on config `name` returns `frames[name]` (`frame` for every config),
    config "absent" and those of `skipped` skipped, and run configs split at `split_h[name]`."""

    def __init__(self, frame=None, frames=None, skipped=(), split_h=None):
        self.frames, self.frame = frames or {}, frame
        self._skipped, self.split_h = ("absent", *skipped), split_h or {}

    def skipped(self, name):
        return f"configs/{name}.textproto was not run: no file" if name in self._skipped \
            else None

    def result(self, name):
        frame = self.frames.get(name, self.frame)

        class Result:
            def sql(self, sql):
                return frame
        return Result()

    def result_dir(self, name):
        return f"/results/{name}"

    def config(self, name):
        config = fleetcast_pb2.RunConfig()
        config.lifetime_model.split_time_us = int(self.split_h[name] * 3.6e9)
        return config


TWO_DECIMALS = claims.scalar("{:.2f}")


def _claim(config, reduce=TWO_DECIMALS):
    return Claim("a claim", "§1", 1.0, "1.0", Sql(config, "SELECT 1", reduce),
                 claims.within(0.1))


def test_check_computes_a_verdict_or_says_why_it_cannot():
    done = claims.check(_claim("demo"), _FakeRuns(pd.DataFrame({"x": [1.05]})))
    assert (done.verdict.outcome, done.fleetcast_text) == (REPRODUCED, "1.05")
    assert done.how == '`fleetcast query /results/demo "SELECT 1"`'
    skipped = claims.check(_claim("absent"), _FakeRuns(pd.DataFrame({"x": [1.0]})))
    assert skipped.verdict == Verdict(NOT_COMPARABLE, "configs/absent.textproto was not "
                                                      "run: no file")
    empty = claims.check(_claim("demo"), _FakeRuns(pd.DataFrame({"x": []})))
    assert empty.verdict == Verdict(NOT_COMPARABLE, "the demo run has no rows for this query")


def _gain(frame):
    return Measurement(float(frame.iat[0, 0]), f"{frame.iat[0, 0]:+.2f} pp")


def _packs_better(measure, magnitude=True):
    """[Ling25]'s "packs better than the baseline" (+6.5 pp), a direction claim."""
    return Claim("LAVA packs better than the baseline", "§6.1", 6.5, "+6.5 pp", measure,
                 claims.same_sign(magnitude))


def test_a_direction_claim_shows_both_magnitudes_and_their_ratio():
    gains = _FakeRuns(pd.DataFrame({"g": [0.74]}))
    done = claims.check(_packs_better(Sql("tasks", "SELECT 1", _gain)), gains)
    assert done.verdict == Verdict(REPRODUCED)
    assert done.fleetcast_text == "+0.74 pp vs paper +6.5 pp (0.11×)"
    assert "shown" in done.claim.rule_text and "not judged" in done.claim.rule_text
    wrong_way = claims.check(_packs_better(Sql("tasks", "SELECT 1", _gain)),
                             _FakeRuns(pd.DataFrame({"g": [-1.3]})))
    assert wrong_way.verdict == Verdict(NOT_REPRODUCED)
    assert wrong_way.fleetcast_text == "-1.30 pp vs paper +6.5 pp (-0.2×)"
    # A bare sign ("< 0") states no magnitude: the number alone.
    bare = claims.check(_packs_better(Sql("tasks", "SELECT 1", _gain), magnitude=False), gains)
    assert bare.fleetcast_text == "+0.74 pp"


SPLITS = ("tasks", "tasks_split-1.5h", "tasks_split+1.5h")
SPLIT_H = {"tasks": 10, "tasks_split-1.5h": 8.5, "tasks_split+1.5h": 11.5}


def _over_splits(**kwargs):
    return claims.Spread(SPLITS, lambda config: Sql(config, "SELECT 1", _gain),
                         runs.split_label, "split", **kwargs)


def _gains_at(*gains, skipped=()):
    return _FakeRuns(frames={c: pd.DataFrame({"g": [g]}) for c, g in zip(SPLITS, gains)},
                     skipped=skipped, split_h=SPLIT_H)


def test_a_claim_over_splits_is_reproduced_only_where_every_split_agrees():
    claim = _packs_better(_over_splits())
    assert claim.rule_text.endswith(", at every split")
    held = claims.check(claim, _gains_at(0.76, 0.47, 0.9))
    assert held.verdict == Verdict(REPRODUCED)
    assert held.fleetcast_text == ("split at hour 10: +0.76 pp (0.12×); split at hour 8.5: "
                                   "+0.47 pp (0.072×); split at hour 11.5: +0.90 pp (0.14×); "
                                   "vs paper +6.5 pp")
    one_off = claims.check(claim, _gains_at(0.76, -0.1, 0.9))
    assert one_off.verdict == Verdict(NOT_REPRODUCED, "holds at 2 of 3 splits")
    assert "split at hour 8.5: -0.10 pp (-0.015×)" in one_off.fleetcast_text
    assert claims.check(claim, _gains_at(-0.2, -0.1, 0.0)).verdict == Verdict(NOT_REPRODUCED)
    # A split that did not run leaves the claim undecided, unless another split refutes it.
    unrun = claims.check(claim, _gains_at(0.76, 0.47, 0.9, skipped=["tasks_split+1.5h"]))
    assert unrun.verdict == Verdict(NOT_COMPARABLE, "split at hour 11.5: configs/tasks_split"
                                                    "+1.5h.textproto was not run: no file")
    assert "split at hour 11.5: —" in unrun.fleetcast_text
    refuted = claims.check(claim, _gains_at(0.76, -0.47, 0.9, skipped=["tasks_split+1.5h"]))
    assert refuted.verdict == Verdict(NOT_REPRODUCED, "holds at 1 of 3 splits")
    nan = claims.check(claim, _gains_at(0.76, math.nan, 0.9))
    assert nan.verdict.outcome == NOT_COMPARABLE
    assert nan.verdict.reason.startswith("split at hour 8.5: fleetcast's number is undefined")
    assert held.how == ('`fleetcast query /results/tasks "SELECT 1"`; the same over '
                        '`/results/tasks_split-1.5h`, `/results/tasks_split+1.5h`')


def test_split_variants_move_the_split_and_the_replay_start_with_it():
    tasks = runs.RunSpec("google_2011_placement.textproto", lambda config: None, "")
    own, earlier, later = runs.split_variants(tasks, (-1.5 * runs.HOUR_S, 1.5 * runs.HOUR_S))
    assert (own.name, earlier.name, later.name) == (
        "google_2011_placement", "google_2011_placement_split-1.5h",
        "google_2011_placement_split+1.5h")
    assert own is tasks and earlier.quick_skip == "--quick runs the config's own split only"
    assert earlier.label.startswith("`configs/google_2011_placement.textproto` with the split "
                                    "1.5 h earlier")
    for spec, hour in ((own, 10), (earlier, 8.5), (later, 11.5)):
        config = spec.config(quick=False)
        assert config.lifetime_model.split_time_us == hour * 3.6e9
        assert config.placement.start_time_us == hour * 3.6e9
        assert runs.split_label(config) == f"split at hour {hour:g}"
    jobs = runs.RunSpec("google_2011_lifetime.textproto", lambda config: None, "")
    _, days_earlier = runs.split_variants(jobs, (-1.5 * runs.DAY_S,))
    assert days_earlier.name == "google_2011_lifetime_split-1.5d"
    assert runs.split_label(days_earlier.config(quick=False)) == "split at day 5.5"
    by_fraction = runs.RunSpec("azure_lifetime.textproto", lambda config: None, "")
    with pytest.raises(ValueError, match="train_fraction"):
        runs.split_variants(by_fraction, (runs.HOUR_S,))[1].config(quick=False)


def test_the_data_of_runs_that_read_the_same_inputs_is_named_once():
    class Labels:
        def data_label(self, name):
            return "demo: synthetic" if name == "demo" else "google_2011 part-*.csv.gz"
    assert page._data(Labels(), ("tasks", "tasks_split-1.5h", "demo")) == (
        "`tasks`, `tasks_split-1.5h`: google_2011 part-*.csv.gz; `demo`: demo: synthetic")


def test_a_config_whose_input_is_absent_is_skipped_with_the_reason(tmp_path, monkeypatch):
    (tmp_path / "absent.textproto").write_text(
        f'name: "absent" azure_v1 {{ vmtable: "{tmp_path}/vmtable.csv.gz" }}')
    monkeypatch.setattr(runs, "CONFIG_DIR", tmp_path)
    done = runs.Runs(str(tmp_path / "out"), quick=False)
    done.run(runs.RunSpec("absent.textproto", lambda config: None, ""))
    assert done.skipped("absent") == (
        f"configs/absent.textproto was not run: azure_v1.vmtable: no file matches "
        f"'{tmp_path}/vmtable.csv.gz'")
    assert not (tmp_path / "out").exists()


def test_markdown_cells_and_the_index(tmp_path):
    assert page.markdown_table(["a|b"], [["x\ny | z"]]) == "| a\\|b |\n|---|\n| x y \\| z |"
    # A glob is not emphasis, a <name> not a tag; a code span keeps its characters.
    assert page.cell("part-*-of-00500.csv.gz, <x>, `a_b*c`") == (
        "part-\\*-of-00500.csv.gz, \\<x\\>, `a_b*c`")
    directory = tmp_path / "reproduce"
    directory.mkdir()
    for key, found in (("B", {REPRODUCED: 2, NOT_REPRODUCED: 1, NOT_COMPARABLE: 0}),
                       ("A", {REPRODUCED: 0, NOT_REPRODUCED: 3, NOT_COMPARABLE: 1})):
        marker = ('{"counts": ' + str(found).replace("'", '"')
                  + f', "date": "d", "key": "{key}", "quick": true}}')
        (directory / f"{key}.md").write_text(f"# {key}\n\n<!-- fleetcast-reproduce {marker} "
                                             "-->\n")
    (directory / "notes.md").write_text("# not a page of fleetcast reproduce\n")
    index = page.write_index(str(tmp_path), {"A": "Paper A", "B": "Paper B"}).read_text()
    assert "| [A](A.md) | Paper A | --quick | d | 0 | 3 | 1 |" in index
    assert "| [B](B.md) | Paper B | --quick | d | 2 | 1 | 0 |" in index
    assert "notes" not in index
    assert "In all: 2 reproduced, 4 not reproduced, 1 not comparable." in index


def test_pages_that_cannot_be_written_fail_before_any_run(tmp_path):
    (tmp_path / "docs").write_text("a file, not a directory")
    done = subprocess.run([str(FLEETCAST), "reproduce", "Bashir21", "--output_dir",
                           str(tmp_path / "runs"), "--docs_dir", str(tmp_path / "docs")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr == (f"fleetcast: {tmp_path / 'docs' / 'reproduce'}: cannot write the "
                           "pages: Not a directory\n")
    assert not (tmp_path / "runs").exists()


def test_the_registry_holds_every_key():
    from pipelines.reproduce.registry import PAPERS
    assert tuple(PAPERS) == KEYS


def page_heading(key: str) -> str:
    """A page's first lines: its key and the paper's title, the authors a line below."""
    from pipelines.reproduce.registry import PAPERS
    paper = PAPERS[key]
    return f"# [{key}] {paper.title}\n\n*{paper.authors}. {paper.venue}.*\n"


@pytest.mark.parametrize("key", KEYS)
def test_the_committed_pages_open_with_the_key_and_the_title(key):
    text = (REPO / "docs" / "reproduce" / f"{key}.md").read_text(encoding="utf-8")
    assert text.startswith(page_heading(key))
    assert len(text.splitlines()[0]) < 120


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """`fleetcast reproduce all --quick` into a temporary directory, from the repository root
    as the README says: (completed process, output root, docs directory)."""
    root = tmp_path_factory.mktemp("reproduce")
    docs = root / "docs"
    done = subprocess.run([str(FLEETCAST), "reproduce", "all", "--quick", "--output_dir",
                           str(root / "runs"), "--docs_dir", str(docs), "-q"], cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    return done, root / "runs", docs


def _claim_rows(text: str) -> list:
    rows = []
    for line in text.splitlines():
        if CLAIM_ROW.match(line):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            rows.append(cells)
    return rows


def test_reproduce_all_quick_writes_every_page_with_every_verdict(quick_run):
    done, _, docs = quick_run
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"fleetcast reproduce all --quick: 5 pages in \d+ s; index "
                        + re.escape(str(docs / "reproduce" / "index.md")), last), last
    index = (docs / "reproduce" / "index.md").read_text()
    for key in KEYS:
        text = (docs / "reproduce" / f"{key}.md").read_text()
        marker = page.read_marker(docs / "reproduce" / f"{key}.md")
        assert marker["key"] == key and marker["quick"] is True
        rows = _claim_rows(text)
        assert len(rows) == sum(marker["counts"].values()) > 0
        for cells in rows:
            assert len(cells) == 6 and all(cells), cells
            verdict = cells[5]
            assert verdict in (REPRODUCED, NOT_REPRODUCED) or verdict.startswith(
                NOT_COMPARABLE + ": "), cells
        for figure in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):
            assert (docs / "reproduce" / figure).is_file(), figure
        counts = " | ".join(str(marker["counts"][v]) for v in claims.VERDICTS)
        assert f"| [{key}]({key}.md) |" in index and f"| {counts} |" in index
        assert text.startswith(page_heading(key))
        assert f"{key}: " in done.stdout


def test_quick_pages_say_what_was_skipped_and_why(quick_run):
    _, _, docs = quick_run
    text = (docs / "reproduce" / "Pace18.md").read_text()
    assert "configs/azure_shaping.textproto was not run: --quick leaves out" in text
    assert "| --quick (small inputs" in text


def test_lava_limits_replays_lava_as_the_run_did(quick_run):
    """The script's plain-LAVA cells are the run's own LAVA replays (same pool, source)."""
    from pipelines.query import query
    from pipelines.report import read_config
    from pipelines.reproduce.lava_limits import OWN, lava_limits
    _, root, _ = quick_run
    results = str(root / "azure_placement")
    rows = lava_limits(results, read_config(results))
    run = query(results, "SELECT lifetime_source, empty_hosts_pct FROM placement_summary "
                         "WHERE policy = 'lava' AND defrag = 'none'").to_pandas()
    run = dict(zip(run["lifetime_source"], run["empty_hosts_pct"]))
    own = rows[rows["classes"] == OWN].set_index("exits")["empty_hosts_pct"]
    assert own["oracle"] == run["oracle"]
    assert own["uptime_model"] == run["uptime_model"]
    printed = subprocess.run([sys.executable, "scripts/lava_limits.py", results], cwd=REPO,
                             capture_output=True, text=True, timeout=600)
    assert printed.returncode == 0, printed.stderr
    assert f"| {OWN} | {own['uptime_model']:.2f} (" in printed.stdout


@pytest.mark.real_data
def test_the_customer_history_lifts_the_google_2011_jobs_classifier(quick_run):
    """configs/google_2011_lifetime.textproto as --quick runs it (days 0-4.6, split at 1.5):
    the user's history adds at least 0.15 AUC to LA's classifier and raises the uptime
    model's C-index."""
    from pipelines.query import query
    results = quick_run[1] / "google_2011_lifetime"
    if not (results / "fleetcast_manifest.json").is_file():
        pytest.skip("../shared/data/google_2011 is absent: the run was skipped")
    auc = query(str(results), "SELECT variant, auc FROM lifetime_la_classifier").to_pandas()
    auc = dict(zip(auc["variant"], auc["auc"]))
    assert auc["customer_small"] >= auc["no_customer"] + 0.15, auc
    c_index = query(str(results), "SELECT variant, c_index FROM lifetime_concordance WHERE "
                                  "model = 'uptime'").to_pandas()
    c_index = dict(zip(c_index["variant"], c_index["c_index"]))
    assert c_index["customer_small"] > c_index["no_customer"], c_index
