"""A paper's claim, fleetcast's number for it, and the rule that turns the two into a verdict.

A Claim states what a paper says (its words, where it says it, its number), how fleetcast
computes the same number from a run's tables (a Measure: SQL over the run through
`pipelines.query.query`, or a function of the run; a Spread: one of those over several runs
of a config that differ only in their split time or seed), and a Rule stated in words and
computed from (paper, fleetcast). Its verdict is one of REPRODUCED, NOT_REPRODUCED or
NOT_COMPARABLE; the last always carries its reason (an input that is absent, a replay the run
lacks, a number that is undefined). A Spread's claim is reproduced only where its rule holds
on every run, each run's number shown.
"""

import dataclasses
import math
from typing import Callable, Optional, Sequence, Tuple

import pandas as pd

REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE = "reproduced", "not reproduced", "not comparable"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE)


class NotComparable(Exception):
    """fleetcast has no number for a claim; the message says why."""


@dataclasses.dataclass(frozen=True)
class Measurement:
    """fleetcast's number (a float, or a tuple of names for an ordering) and how it reads."""

    value: object
    text: str


@dataclasses.dataclass(frozen=True)
class Verdict:
    """REPRODUCED, NOT_REPRODUCED, or NOT_COMPARABLE with its reason."""

    outcome: str
    reason: str = ""

    def __post_init__(self):
        if self.outcome not in VERDICTS:
            raise ValueError(f"unknown verdict {self.outcome!r}")
        if self.outcome == NOT_COMPARABLE and not self.reason:
            raise ValueError("a verdict of not comparable needs its reason")

    def __str__(self):
        return f"{self.outcome}: {self.reason}" if self.reason else self.outcome


@dataclasses.dataclass(frozen=True)
class Rule:
    """A verdict rule: `text` states it, `holds(paper, fleetcast)` computes it. `magnitude`
    marks a rule that judges only a direction against a number the paper states: the page
    then shows fleetcast's number against the paper's and their ratio."""

    text: str
    holds: Callable[[object, object], bool]
    magnitude: bool = False

    def verdict(self, paper, fleetcast) -> Verdict:
        """REPRODUCED when the rule holds; NOT_COMPARABLE when fleetcast's number is NaN."""
        if isinstance(fleetcast, float) and math.isnan(fleetcast):
            return Verdict(NOT_COMPARABLE, "fleetcast's number is undefined (NaN) on this run")
        return Verdict(REPRODUCED if self.holds(paper, fleetcast) else NOT_REPRODUCED)


def _number(unit: str, value: float) -> str:
    return f"{value:g}{unit}"


def within_factor(factor: float) -> Rule:
    """Same sign as the paper and within `factor` of it (both zero counts as equal)."""
    def holds(paper, fleetcast):
        if paper == 0 or fleetcast == 0:
            return paper == fleetcast
        if (paper > 0) != (fleetcast > 0):
            return False
        ratio = abs(fleetcast / paper)
        return 1 / factor <= ratio <= factor
    return Rule(f"same sign and within a factor of {factor:g}", holds)


def within(tolerance: float, unit: str = "") -> Rule:
    """|fleetcast − paper| ≤ tolerance."""
    return Rule(f"|fleetcast − paper| ≤ {_number(unit, tolerance)}",
                lambda paper, fleetcast: abs(fleetcast - paper) <= tolerance + 1e-12)


def at_least(margin: float = 0.0, unit: str = "") -> Rule:
    """fleetcast ≥ paper − margin."""
    text = f"fleetcast ≥ paper − {_number(unit, margin)}" if margin else "fleetcast ≥ paper"
    return Rule(text, lambda paper, fleetcast: fleetcast >= paper - margin - 1e-12)


def at_most(margin: float = 0.0, unit: str = "") -> Rule:
    """fleetcast ≤ paper + margin."""
    text = f"fleetcast ≤ paper + {_number(unit, margin)}" if margin else "fleetcast ≤ paper"
    return Rule(text, lambda paper, fleetcast: fleetcast <= paper + margin + 1e-12)


def above() -> Rule:
    """fleetcast > paper (the paper's number is a bound it states, e.g. "more than 1×")."""
    return Rule("fleetcast > paper", lambda paper, fleetcast: fleetcast > paper)


def same_sign(magnitude: bool = False) -> Rule:
    """fleetcast's number has the paper's sign (strictly: zero has neither). With `magnitude`
    the paper's number is one it states (not a bare sign such as "< 0"), shown beside
    fleetcast's with their ratio, which the verdict does not judge."""
    shown = "; fleetcast / paper shown as ×, not judged" if magnitude else ""
    return Rule(f"same sign as the paper (zero has no sign{shown})",
                lambda paper, fleetcast: paper * fleetcast > 0, magnitude)


def same_order() -> Rule:
    """fleetcast's ordering (a tuple of names, best first) equals the paper's."""
    return Rule("ordering equal to the paper's",
                lambda paper, fleetcast: tuple(paper) == tuple(fleetcast))


def same_first() -> Rule:
    """fleetcast's ordering puts first what the paper puts first."""
    return Rule("the same one first as in the paper",
                lambda paper, fleetcast: tuple(fleetcast)[:1] == tuple(paper)[:1])


@dataclasses.dataclass(frozen=True)
class Sql:
    """fleetcast's number: `sql` over the tables of the run of config `config`, reduced to a
    Measurement by `reduce` (a function of the result as a DataFrame)."""

    config: str
    sql: str
    reduce: Callable[[pd.DataFrame], Measurement]

    @property
    def configs(self) -> Tuple[str, ...]:
        return (self.config,)

    def measure(self, runs) -> Measurement:
        frame = runs.result(self.config).sql(self.sql)
        if not len(frame):
            raise NotComparable(f"the {self.config} run has no rows for this query")
        return self.reduce(frame)

    def how(self, runs) -> str:
        where = runs.result_dir(self.config)
        return f"`fleetcast query {where} \"{' '.join(self.sql.split())}\"`"


@dataclasses.dataclass(frozen=True)
class Computed:
    """fleetcast's number from a function of the runs (`compute(runs) -> Measurement`),
    described in words by `description`."""

    configs: Tuple[str, ...]
    compute: Callable[[object], Measurement]
    description: str

    def measure(self, runs) -> Measurement:
        return self.compute(runs)

    def how(self, runs) -> str:
        dirs = ", ".join(f"`{runs.result_dir(c)}`" for c in self.configs)
        return f"{self.description} (from {dirs})"


@dataclasses.dataclass(frozen=True)
class Spread:
    """One measure over several runs of a config that differ only in `what` ("split": their
    time split, or "seed"): `configs` names the runs, the config's own first, `build(config)`
    is the measure (a Sql or Computed) on one of them and `label(run_config)` names a run by
    its RunConfig ("split at hour 10")."""

    configs: Tuple[str, ...]
    build: Callable[[str], object]
    label: Callable[[object], str]
    what: str

    def how(self, runs) -> str:
        others = ", ".join(f"`{runs.result_dir(c)}`" for c in self.configs[1:])
        return f"{self.build(self.configs[0]).how(runs)}; the same over {others}"


@dataclasses.dataclass(frozen=True)
class Claim:
    """One thing a paper says that fleetcast checks."""

    text: str  # what the paper says, in a sentence
    where: str  # its section, figure or table, e.g. "§5.4, Fig. 10(d)"
    paper: object  # the paper's number (or ordering) the rule compares with
    paper_text: str  # the paper's number as the page shows it
    measure: object  # a Sql, Computed or Spread
    rule: Rule

    @property
    def rule_text(self) -> str:
        """The rule in words, "at every split" added for a Spread."""
        if isinstance(self.measure, Spread):
            return f"{self.rule.text}, at every {self.measure.what}"
        return self.rule.text


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A claim checked on a set of runs."""

    claim: Claim
    fleetcast_text: str
    verdict: Verdict
    how: str


def _measured(measure, runs) -> Measurement:
    """`measure` on `runs`; NotComparable when a run it reads was skipped."""
    skipped = [runs.skipped(c) for c in measure.configs if runs.skipped(c)]
    if skipped:
        raise NotComparable(skipped[0])
    return measure.measure(runs)


def _ratio(claim: Claim, value) -> str:
    """" (0.11×)": fleetcast's number over the paper's, for a rule that shows magnitudes."""
    if not claim.rule.magnitude or not claim.paper or not isinstance(value, float):
        return ""
    return f" ({value / claim.paper:.2g}×)"


def check(claim: Claim, runs) -> Outcome:
    """The claim's Outcome on `runs` (NOT_COMPARABLE with the reason when fleetcast has no
    number for it)."""
    how = claim.measure.how(runs)
    if isinstance(claim.measure, Spread):
        return _check_spread(claim, runs, how)
    try:
        measured = _measured(claim.measure, runs)
    except NotComparable as e:
        return Outcome(claim, "—", Verdict(NOT_COMPARABLE, str(e)), how)
    text = measured.text
    if claim.rule.magnitude:
        text += f" vs paper {claim.paper_text}{_ratio(claim, measured.value)}"
    return Outcome(claim, text, claim.rule.verdict(claim.paper, measured.value), how)


def _check_spread(claim: Claim, runs, how: str) -> Outcome:
    """A Spread's Outcome: each run's number; NOT_REPRODUCED when the rule fails on any run
    (with how many it holds on, when some), else NOT_COMPARABLE when a run has no number,
    else REPRODUCED."""
    spread = claim.measure
    shown, verdicts = [], []
    for config in spread.configs:
        label = spread.label(runs.config(config))
        try:
            measured = _measured(spread.build(config), runs)
        except NotComparable as e:
            shown.append(f"{label}: —")
            verdicts.append(Verdict(NOT_COMPARABLE, f"{label}: {e}"))
            continue
        shown.append(f"{label}: {measured.text}{_ratio(claim, measured.value)}")
        verdict = claim.rule.verdict(claim.paper, measured.value)
        verdicts.append(Verdict(verdict.outcome, verdict.reason and f"{label}: {verdict.reason}"))
    text = "; ".join(shown) + (f"; vs paper {claim.paper_text}" if claim.rule.magnitude else "")
    outcomes = [v.outcome for v in verdicts]
    held = outcomes.count(REPRODUCED)
    if NOT_REPRODUCED in outcomes:
        reason = f"holds at {held} of {len(outcomes)} {spread.what}s" if held else ""
        return Outcome(claim, text, Verdict(NOT_REPRODUCED, reason), how)
    if NOT_COMPARABLE in outcomes:
        return Outcome(claim, text, verdicts[outcomes.index(NOT_COMPARABLE)], how)
    return Outcome(claim, text, Verdict(REPRODUCED), how)


# Reducers of a query's result (a DataFrame) to a Measurement.

def scalar(fmt: str = "{:.3g}", scale: float = 1.0) -> Callable[[pd.DataFrame], Measurement]:
    """The first cell (times `scale`), formatted with `fmt`."""
    def reduce(frame):
        value = frame.iat[0, 0]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return Measurement(math.nan, "NaN")
        value = float(value) * scale
        return Measurement(value, fmt.format(value))
    return reduce


def ordering(expected: Sequence[str], fmt: str = "{:+.2f}",
             ascending: bool = False) -> Callable[[pd.DataFrame], Measurement]:
    """Rows of (name, value): the names by value, largest first (smallest with `ascending`),
    with their values; NotComparable unless every name of `expected` is there."""
    def reduce(frame):
        names_in(frame, frame.columns[0], expected)
        ranked = frame.sort_values(frame.columns[1], ascending=ascending, kind="stable")
        names = tuple(str(name) for name in ranked.iloc[:, 0])
        text = (" < " if ascending else " > ").join(
            f"{name} ({fmt.format(value)})" for name, value in zip(names, ranked.iloc[:, 1]))
        return Measurement(names, text)
    return reduce


def names_in(frame: pd.DataFrame, column: str, expected: Sequence[str],
             what: Optional[str] = None):
    """Raises NotComparable unless `frame[column]` holds every name of `expected`."""
    missing = sorted(set(expected) - set(frame[column].astype(str)))
    if missing:
        raise NotComparable(f"the run has no {what or column} {', '.join(missing)}")
    return frame
