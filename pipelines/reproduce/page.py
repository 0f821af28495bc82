"""The pages `fleetcast reproduce` writes: docs/reproduce/<key>.md per paper and index.md.

A paper's page: its title (the paper's key and full reference), what produced it (fleetcast
version, commit, date, full or --quick), the runs (config, data, results directory, wall
time), one table of claims (claim | paper | fleetcast | data | rule | verdict), how each
fleetcast number is computed, the figures (PNG in <key>/ next to the page) and the tables the
claims come from. Its first lines hold a marker comment with the verdict counts in JSON, from
which index.md is rebuilt over every page present.
"""

import collections
import datetime
import json
import math
import pathlib
import re
import subprocess
from typing import Iterable, List, Sequence, Tuple

import pandas as pd

from pipelines import run as run_pipeline
from pipelines.reproduce.claims import VERDICTS, Outcome

MARKER = "fleetcast-reproduce"
_MARKER_LINE = re.compile(r"<!-- " + MARKER + r" (\{.*\}) -->")
INDEX = "index.md"


def cell(text) -> str:
    """`text` as one Markdown table cell (pipes escaped, on one line)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence]) -> str:
    """A Markdown table of `rows` under `header`."""
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def _formatted(value) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def frame_table(frame: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table, floats to 4 significant digits, NaN as "—"."""
    return markdown_table(list(frame.columns),
                          [[_formatted(v) for v in row] for row in frame.itertuples(index=False)])


def commit() -> str:
    """The checkout's commit (short hash, "+ uncommitted changes" when dirty), or why none."""
    repo = pathlib.Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--",
                                "pipelines", "policies", "predictors", "configs", "synthetic"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{head} + uncommitted changes" if dirty else head


def counts(outcomes: Sequence[Outcome]) -> dict:
    """{verdict: how many outcomes have it}, every verdict present."""
    found = collections.Counter(o.verdict.outcome for o in outcomes)
    return {verdict: found.get(verdict, 0) for verdict in VERDICTS}


def counts_text(by_verdict: dict) -> str:
    """"2 reproduced, 1 not reproduced, 0 not comparable" (every verdict, in VERDICTS order)."""
    return ", ".join(f"{by_verdict.get(verdict, 0)} {verdict}" for verdict in VERDICTS)


def _runs_section(paper, runs) -> List[str]:
    rows = []
    for spec in paper.runs:
        mode = f"yes: {spec.quick_note}" if runs.quick else "no"
        if runs.skipped(spec.name):
            rows.append([spec.label, mode, runs.skipped(spec.name), "—", "—"])
            continue
        result = runs.result(spec.name)
        rows.append([spec.label, mode, result.data(), f"`{result.directory}`",
                     f"{result.wall_s:.0f} s"])
    return ["## Runs", "",
            markdown_table(["config", "--quick", "data", "results", "wall time"], rows), ""]


def _claims_section(outcomes: Sequence[Outcome], runs) -> List[str]:
    rows = []
    for i, outcome in enumerate(outcomes, 1):
        claim = outcome.claim
        data = "; ".join(runs.data_label(c) for c in claim.measure.configs)
        rows.append([f"{i}. {claim.text} ({claim.where})", claim.paper_text,
                     outcome.fleetcast_text, data, claim.rule.text, str(outcome.verdict)])
    numbers = collections.defaultdict(list)
    for i, outcome in enumerate(outcomes, 1):
        numbers[outcome.how].append(str(i))
    how = [f"- claim{'s' if len(n) > 1 else ''} {', '.join(n)}: {text}"
           for text, n in numbers.items()]
    return ["## Claims", "",
            markdown_table(["claim", "paper", "fleetcast", "data", "rule", "verdict"], rows),
            "", "### How fleetcast computes each number", "", *how, ""]


def _figures_section(key: str, figures: Sequence[Tuple[str, str]]) -> List[str]:
    if not figures:
        return []
    lines = ["## Figures", ""]
    for name, caption in figures:
        lines += [f"![{cell(caption)}]({key}/{name})", "", f"*{caption}*", ""]
    return lines


def _tables_section(tables: Sequence[Tuple[str, pd.DataFrame]]) -> List[str]:
    if not tables:
        return []
    lines = ["## Tables", ""]
    for title, frame in tables:
        lines += [f"### {title}", "", frame_table(frame), ""]
    return lines


def write_page(paper, outcomes: Sequence[Outcome], runs, figures, tables, docs_dir: str,
               code: str) -> pathlib.Path:
    """Writes <docs_dir>/reproduce/<key>.md (`code`: the commit the runs ran, `commit()`
    when they started); returns its path."""
    directory = pathlib.Path(docs_dir) / "reproduce"
    directory.mkdir(parents=True, exist_ok=True)
    by_verdict = counts(outcomes)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mode = ("--quick (small inputs: a check that every claim is computed, not a result)"
            if runs.quick else "full")
    marker = json.dumps({"key": paper.key, "quick": runs.quick, "date": date,
                         "counts": by_verdict}, sort_keys=True)
    lines = [f"# [{paper.key}] {paper.reference}", "",
             f"<!-- {MARKER} {marker} -->", "",
             f"Written by `fleetcast reproduce {paper.key}{' --quick' if runs.quick else ''}`;"
             " run it again rather than editing this page.", "",
             markdown_table(["", ""], [
                 ["fleetcast version", run_pipeline.fleetcast_version()],
                 ["commit", code], ["date", date], ["mode", mode],
                 ["verdicts", counts_text(by_verdict)]]), "",
             paper.summary, ""]
    if runs.quick:
        lines += [f"This page comes from `--quick`: its numbers check that every claim is "
                  f"computed, on small inputs; `fleetcast reproduce {paper.key}` runs the full "
                  "comparison.", ""]
    lines += _runs_section(paper, runs)
    lines += _claims_section(outcomes, runs)
    lines += _figures_section(paper.key, figures)
    lines += _tables_section(tables)
    page = directory / f"{paper.key}.md"
    page.write_text("\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")
    return page


def read_marker(page: pathlib.Path):
    """The marker of a page `write_page` wrote (a dict), or None."""
    for line in page.read_text(encoding="utf-8").splitlines()[:8]:
        found = _MARKER_LINE.fullmatch(line.strip())
        if found:
            return json.loads(found.group(1))
    return None


def write_index(docs_dir: str, references: dict) -> pathlib.Path:
    """Rewrites <docs_dir>/reproduce/index.md from the pages present (`references`: {key:
    full reference}); returns its path."""
    directory = pathlib.Path(docs_dir) / "reproduce"
    directory.mkdir(parents=True, exist_ok=True)
    rows, totals = [], collections.Counter()
    for page in sorted(directory.glob("*.md")):
        marker = read_marker(page) if page.name != INDEX else None
        if marker is None:
            continue
        key = marker["key"]
        totals.update(marker["counts"])
        rows.append([f"[{key}]({page.name})", references.get(key, ""),
                     "--quick" if marker["quick"] else "full", marker["date"],
                     *(marker["counts"].get(v, 0) for v in VERDICTS)])
    lines = ["# Reproducing the papers", "",
             "Each page is written by `fleetcast reproduce PAPER` (`all` for every paper): it "
             "runs the paper's configs and compares each of the paper's claims that fleetcast "
             "checks with fleetcast's number, by a rule stated on the page. This index is "
             "rebuilt from the pages present whenever a page is written.", "",
             markdown_table(["paper", "reference", "mode", "date", *VERDICTS], rows), "",
             f"In all: {counts_text({v: totals.get(v, 0) for v in VERDICTS})}."]
    index = directory / INDEX
    index.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return index
