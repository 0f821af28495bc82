"""The pages `fleetcast reproduce` writes: docs/reproduce/<key>.md per paper and index.md.

A paper's page: its title (the paper's key and title; the authors and venue on the line
below), what produced it (fleetcast version, commit, date, full or --quick), the runs
(config, data, results directory, wall time), one table of claims (claim | paper | fleetcast
| data | rule | verdict), how each fleetcast number is computed, the figures (PNG in <key>/
next to the page) and the tables the claims come from. Its first lines hold a marker
comment in JSON with the verdict counts, from which index.md is rebuilt over every page
present, and the figure files the page owns ("figures", relative to docs/reproduce/). index.md
carries a marker of its own. `fleetcast reproduce` replaces or deletes only the pages, figures
and index these markers say it wrote (pipelines/io/owned_files.py); a page written before the
figures were listed owns the <key>/ files its Markdown links, an index written before its
marker is known by its heading and its "rebuilt from the pages present" sentence.
"""

import collections
import datetime
import math
import os
import pathlib
import re
import subprocess
from typing import Iterable, List, Optional, Sequence, Set, Tuple

import pandas as pd

from pipelines import fleetcast_version
from pipelines.io.owned_files import OwnedDirectory, find_marker, marker, owned_paths, read_text
from pipelines.reproduce.claims import VERDICTS, Outcome

MARKER = "fleetcast-reproduce"
INDEX_MARKER = "fleetcast-reproduce-index"
INDEX = "index.md"
STAGING = "reproduce"  # <docs_dir>/reproduce/.fleetcast/reproduce: a page being drawn
_INDEX_TITLE = "# Reproducing the papers"
_INDEX_SENTENCE = "This index is rebuilt from the pages present"


# Outside code spans, the characters Markdown would read as emphasis or HTML (a glob such as
# part-*-of-00500.csv.gz must not turn into italics; an underscore inside a word is not
# emphasis to Python-Markdown, so names such as azure_shaping stay as written).
_SPECIAL = re.compile(r"([\\*<>])")


def cell(text) -> str:
    """`text` as one Markdown table cell: on one line, pipes escaped, and outside `code`
    spans the characters Markdown reads as emphasis or HTML."""
    pieces = re.split(r"(`[^`]*`)", " ".join(str(text).split()))
    return "".join(piece if piece.startswith("`") else _SPECIAL.sub(r"\\\1", piece)
                   for piece in pieces).replace("|", "\\|")


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


def _data(runs, configs: Sequence[str]) -> str:
    """"`a`, `b`: what they read; `c`: ...": the runs `configs`, those that read the same
    data together (the splits of a config)."""
    by_data = collections.defaultdict(list)
    for config in configs:
        by_data[runs.data_label(config)].append(f"`{config}`")
    return "; ".join(f"{', '.join(names)}: {data}" for data, names in by_data.items())


def _claims_section(outcomes: Sequence[Outcome], runs) -> List[str]:
    rows = []
    for i, outcome in enumerate(outcomes, 1):
        claim = outcome.claim
        rows.append([f"{i}. {claim.text} ({claim.where})", claim.paper_text,
                     outcome.fleetcast_text, _data(runs, claim.measure.configs),
                     claim.rule_text, str(outcome.verdict)])
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


def pages_dir(docs_dir) -> OwnedDirectory:
    """<docs_dir>/reproduce, where `fleetcast reproduce` writes its pages, figures and index."""
    return OwnedDirectory(os.path.join(str(docs_dir), "reproduce"), "fleetcast reproduce",
                          "--docs_dir")


def page_text(paper, outcomes: Sequence[Outcome], runs, figures, tables, code: str,
              files: Sequence[str]) -> str:
    """The Markdown of <key>.md (`code`: the commit the runs ran, `commit()` when they
    started; `files`: the figure files it owns, relative to docs/reproduce/)."""
    by_verdict = counts(outcomes)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mode = ("--quick (small inputs: a check that every claim is computed, not a result)"
            if runs.quick else "full")
    lines = [f"# [{paper.key}] {paper.title}", "", f"*{paper.authors}. {paper.venue}.*", "",
             marker(MARKER, {"key": paper.key, "quick": runs.quick, "date": date,
                             "counts": by_verdict, "figures": list(files)}), "",
             f"Written by `fleetcast reproduce {paper.key}{' --quick' if runs.quick else ''}`;"
             " run it again rather than editing this page.", "",
             markdown_table(["fleetcast version", fleetcast_version()], [
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
    return "\n".join(lines).rstrip("\n") + "\n"


def _marker_in(text: str) -> Optional[dict]:
    """The marker of a page's `text` (key, quick, date, counts, and figures when it lists
    them), or None: no marker, or a damaged one."""
    found = find_marker(text, MARKER) or {}
    counted = isinstance(found.get("counts"), dict) and all(
        isinstance(n, int) for n in found["counts"].values())
    return found if counted and {"key", "quick", "date"} <= set(found) else None


def read_marker(page) -> Optional[dict]:
    """The marker of the page `page` (`_marker_in`); None for a file that is no page of
    fleetcast reproduce's (not UTF-8 included)."""
    return _marker_in(read_text(page) or "")


def owned(directory: str, name: str) -> Set[str]:
    """The files, relative to `directory` (docs/reproduce), that its page `name` owns, the
    page included: index.md, itself; <key>.md, itself and the figures its marker lists (or,
    written before the list, the <key>/ files its Markdown links). Nothing for a file
    fleetcast reproduce did not write, or no file."""
    text = read_text(os.path.join(directory, name))
    if text is None:
        return set()
    if name == INDEX:
        ours = find_marker(text, INDEX_MARKER) is not None or (
            text.startswith(_INDEX_TITLE + "\n") and _INDEX_SENTENCE in text)
        return {INDEX} if ours else set()
    found = _marker_in(text)
    if found is None:
        return set()
    key = name[:-len(".md")]
    listed = found["figures"] if "figures" in found else re.findall(
        rf"\]\(({re.escape(key)}/[^)\s]+)\)", text)
    return {name, *owned_paths(listed, key)}


def publish_page(target: OwnedDirectory, staged: str, name: str, text: str):
    """Publishes the page `name` of `target` holding `text` with the figures drawn into
    `staged` (`target.staging(STAGING)`) in place of what its previous page owned."""
    target.publish(staged, name, text, owned(target.path, name))


def _index_text(directory: str, references: dict) -> str:
    """index.md over the pages present in `directory` (`references`: {key: reference})."""
    rows, totals = [], collections.Counter()
    for page in sorted(pathlib.Path(directory).glob("*.md")):
        found = read_marker(page) if page.name != INDEX else None
        if found is None:
            continue
        key = found["key"]
        totals.update(found["counts"])
        rows.append([f"[{key}]({page.name})", references.get(key, ""),
                     "--quick" if found["quick"] else "full", found["date"],
                     *(found["counts"].get(v, 0) for v in VERDICTS)])
    lines = [_INDEX_TITLE, "", marker(INDEX_MARKER, {}), "",
             "Each page is written by `fleetcast reproduce PAPER` (`all` for every paper): it "
             "runs the paper's configs and compares each of the paper's claims that fleetcast "
             f"checks with fleetcast's number, by a rule stated on the page. {_INDEX_SENTENCE} "
             "whenever a page is written.", "",
             markdown_table(["paper", "reference", "mode", "date", *VERDICTS], rows), "",
             f"In all: {counts_text({v: totals.get(v, 0) for v in VERDICTS})}."]
    return "\n".join(lines) + "\n"


def write_index(docs_dir, references: dict) -> pathlib.Path:
    """Rewrites <docs_dir>/reproduce/index.md from the pages present (`references`: {key:
    full reference}) and returns its path; owned_files.Refused when an index.md fleetcast
    did not write is there. The caller holds the directory's lock when another command may
    write into it."""
    target = pages_dir(docs_dir)
    with target.staging(STAGING) as staged:
        publish_page(target, staged, INDEX, _index_text(target.path, references))
    return pathlib.Path(target.path) / INDEX
