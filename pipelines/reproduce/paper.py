"""A paper `fleetcast reproduce` checks: its key, reference, runs, claims, figures, tables."""

import dataclasses
import pathlib
from typing import Callable, List, Tuple

import pandas as pd
from matplotlib import pyplot as plt

from pipelines.report.figures import PNG_DPI
from pipelines.reproduce.claims import Claim
from pipelines.reproduce.runs import Runs, RunSpec

Figures = Callable[[Runs, pathlib.Path], List[Tuple[str, str]]]
Tables = Callable[[Runs], List[Tuple[str, pd.DataFrame]]]


def save_png(fig, directory: pathlib.Path, name: str) -> str:
    """Saves `fig` as <directory>/<name>.png, closes it, and returns the file's name."""
    fig.savefig(directory / f"{name}.png", dpi=PNG_DPI, bbox_inches="tight")
    plt.close(fig)
    return f"{name}.png"


def no_figures(runs: Runs, directory: pathlib.Path) -> List[Tuple[str, str]]:
    return []


def no_tables(runs: Runs) -> List[Tuple[str, pd.DataFrame]]:
    return []


@dataclasses.dataclass(frozen=True)
class Paper:
    """A paper and what fleetcast checks of it.

    `key` is its reference key ([Bashir21]); `authors`, `title` and `venue` its reference
    (`reference` joins them); `runs` the configs it runs, in order; `claims`
    its claims in page order; `summary` a paragraph on what the runs can and cannot compare.
    `figures(runs, directory)` saves PNGs in `directory` and returns (file name, caption);
    `tables(runs)` returns (title, DataFrame) of the results the claims come from. Both skip
    what a skipped run lacks.
    """

    key: str
    authors: str
    title: str
    venue: str
    summary: str
    runs: Tuple[RunSpec, ...]
    claims: Tuple[Claim, ...]
    figures: Figures = no_figures
    tables: Tables = no_tables

    @property
    def reference(self) -> str:
        return f"{self.authors}. {self.title}. {self.venue}."
