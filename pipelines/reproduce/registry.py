"""The papers `fleetcast reproduce` knows, by key, and the reproduction itself."""

import logging
import pathlib
import time
from typing import List, Optional

from pipelines.reproduce import barbalho23, bashir21, ling25, ling25ext, pace18
from pipelines.reproduce.claims import check
from pipelines.reproduce.page import commit, counts, counts_text, write_index, write_page
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
    the pages written."""
    keys = list(PAPERS) if key == ALL else [key]
    code = commit()
    runs = Runs(output_dir or default_output_dir(key, quick), quick)
    pages = []
    for paper in (PAPERS[k] for k in keys):
        started = time.time()
        for spec in paper.runs:
            runs.run(spec)
        outcomes = [check(claim, runs) for claim in paper.claims]
        figure_dir = pathlib.Path(docs_dir) / "reproduce" / paper.key
        figure_dir.mkdir(parents=True, exist_ok=True)
        for old in figure_dir.glob("*.png"):
            old.unlink()
        figures = paper.figures(runs, figure_dir)
        page = write_page(paper, outcomes, runs, figures, paper.tables(runs), docs_dir, code)
        _LOG.info("reproduce: %s: %s (%.0f s): %s", paper.key,
                     counts_text(counts(outcomes)), time.time() - started, page)
        pages.append(page)
    write_index(docs_dir, {key: paper.reference for key, paper in PAPERS.items()})
    return pages
