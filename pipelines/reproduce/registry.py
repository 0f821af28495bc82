"""The papers `fleetcast reproduce` knows, by key, and the reproduction itself."""

import logging
import pathlib
import time
from typing import List, Optional

from pipelines.io.owned_files import OwnedDirectory, staged_files
from pipelines.reproduce import barbalho23, bashir21, ling25, ling25ext, pace18
from pipelines.reproduce.claims import check
from pipelines.reproduce.page import (
    INDEX,
    STAGING,
    commit,
    counts,
    counts_text,
    owned,
    page_text,
    pages_dir,
    publish_page,
    write_index,
)
from pipelines.reproduce.runs import Runs

_LOG = logging.getLogger("fleetcast.reproduce")
PAPERS = {paper.key: paper for paper in (ling25.PAPER, ling25ext.PAPER, pace18.PAPER,
                                         barbalho23.PAPER, bashir21.PAPER)}
ALL = "all"


def default_output_dir(key: str, quick: bool) -> str:
    """results/reproduce/<key>, with -quick for --quick."""
    return f"results/reproduce/{key}{'-quick' if quick else ''}"


def reproduce(key: str, quick: bool = False, output_dir: Optional[str] = None,
              docs_dir: str = "docs") -> List[pathlib.Path]:
    """Runs the configs of paper `key` (every paper for "all", one paper after the other, a
    config shared by two papers run once) into `output_dir`, checks the paper's claims,
    writes <docs_dir>/reproduce/<key>.md with its figures, and rebuilds the index; returns
    the pages written. It holds <docs_dir>/reproduce's lock and replaces or deletes there
    only what its pages say it wrote (page.py): owned_files.Refused, before any run, when
    another command holds the lock or a page or index.md to write is not its own, and before
    a paper's files move when a figure would replace a file no page of its owns."""
    keys = list(PAPERS) if key == ALL else [key]
    target = pages_dir(docs_dir)
    names = [f"{k}.md" for k in keys] + [INDEX]
    with target.locked():
        target.refuse_foreign(names, set().union(*(owned(target.path, n) for n in names)))
        code = commit()
        runs = Runs(output_dir or default_output_dir(key, quick), quick)
        pages = [_reproduce_paper(PAPERS[k], runs, target, code) for k in keys]
        write_index(docs_dir, {key: paper.reference for key, paper in PAPERS.items()})
    return pages


def _reproduce_paper(paper, runs: Runs, target: OwnedDirectory, code: str) -> pathlib.Path:
    """Runs `paper`'s configs, checks its claims, and publishes its page and figures in
    `target` (docs/reproduce); returns the page's path."""
    started = time.time()
    for spec in paper.runs:
        runs.run(spec)
    outcomes = [check(claim, runs) for claim in paper.claims]
    name = f"{paper.key}.md"
    with target.staging(STAGING) as staged:
        figure_dir = pathlib.Path(staged) / paper.key
        figure_dir.mkdir()
        figures = paper.figures(runs, figure_dir)
        publish_page(target, staged, name, page_text(
            paper, outcomes, runs, figures, paper.tables(runs), code, staged_files(staged)))
    page = pathlib.Path(target.path) / name
    _LOG.info("reproduce: %s: %s (%.0f s): %s", paper.key, counts_text(counts(outcomes)),
              time.time() - started, page)
    return page
