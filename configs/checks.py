"""Config problems and the checker that collects them, by field path.

Every validator in fleetcast (the run config's, and each registry entry's) reports through a
`Checker`, so that a wrong config names the field and the reason, e.g.
``overcommit.fortune_teller[1].predictor.rc_like.percentile: must be in [0, 100], got 120``.
"""

import dataclasses
import math
import os
import re
from typing import Callable, Optional

from configs.units import DAY_S, US_PER_S


@dataclasses.dataclass(frozen=True)
class Limit:
    """The largest value a numeric field may take, and why: `maximum` in `unit`, `why` one
    clause for the message. `bytes_each` (optional) is the memory one unit of the value
    costs; the message then says how much the value given would need."""

    maximum: float
    unit: str
    why: str
    bytes_each: float = 0.0

    def problem(self, value) -> str:
        unit = f" {self.unit}" if self.unit else ""
        text = f"must be at most {number(self.maximum)}{unit}: {self.why}"
        if self.bytes_each:
            return f"{text}, so {number(value)} would need ~{size(value * self.bytes_each)}"
        return f"{text}; got {value}"


def number(value) -> str:
    """`value` with thousands separators (an integer without decimals)."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,g}"


def size(num_bytes: float) -> str:
    """A memory size in decimal units (bytes, kB, MB, ..., PB), three digits."""
    units = ("bytes", "kB", "MB", "GB", "TB", "PB")
    power = min(int(math.log10(max(num_bytes, 1))) // 3, len(units) - 1)
    return f"{num_bytes / 1000 ** power:.3g} {units[power]}"


# Durations in seconds (`_s` fields): longer than any trace (the public ones span a month),
# and small enough that one in µs added to trace times stays far inside int64.
PROCESSES_PER_CORE = 4


def max_worker_processes(what: str) -> Limit:
    """PROCESSES_PER_CORE worker processes per core of this machine; `what` each process
    holds, for the message."""
    cores = os.cpu_count() or 1
    return Limit(PROCESSES_PER_CORE * cores, "processes",
                 f"{PROCESSES_PER_CORE} x this machine's {cores} cores (more only share "
                 f"the cores, each {what})")


MAX_DURATION = Limit(10 * 365 * DAY_S, "s (10 years)",
                     "longer than any trace; in µs, added to trace times, it must fit an int64")
# Trace times (`_us` fields) within ten years of the trace start: sums of them and of
# durations in µs stay within int64.
MAX_TRACE_TIME_US = int(MAX_DURATION.maximum) * US_PER_S
# A week of 5-minute samples (or steps).
WEEK_OF_SAMPLES = 7 * DAY_S // 300

# Upper bounds of numeric fields, by field name, wherever the field is: the shards of the
# sources, stages and output, and the peak predictors' knobs (predictors/peak/registry.py
# checks those through `positive`).
UPPER_BOUNDS = {
    # A shard is a Beam element, and in the output a file per table.
    "num_shards": Limit(10_000, "shards",
                        "a shard is a Beam element and, in the output, a file per table"),
    # phi * limit: above 1 a machine would advertise more than its tasks' limits.
    "phi": Limit(1.0, "", "phi = 1 is no overcommit"),
    # A predictor's history is a float64 window per step (or per task sample).
    "num_history_samples": Limit(
        WEEK_OF_SAMPLES, "samples (a week of 5-minute samples)",
        "a predictor keeps a float64 window of this many values per step or task sample"),
    # A task counts at its full limit until it has min_num_samples samples.
    "min_num_samples": Limit(WEEK_OF_SAMPLES, "samples (a week of 5-minute samples)",
                             "until then a task counts at its full limit"),
    # An ARIMA refit forecasts refit_every_steps steps at once.
    "refit_every_steps": Limit(WEEK_OF_SAMPLES, "steps (a week of 5-minute steps)",
                               "a refit forecasts this many steps at once"),
    # The AR order p of ARIMA(p, 1, 0) (predictors/peak/arima.py): a fit solves a p x p system
    # per window and needs 2p + 2 samples (p = 100,000 asks for 80 GB of normal equations).
    "p": Limit(48, "", "4 hours of 5-minute lags; an ARIMA fit solves a p x p system per "
               "window of at least 2p + 2 samples"),
}

# BigQuery naming rules (cloud.google.com/bigquery/docs/datasets, .../tables, and
# resource-manager project IDs): a project ID is 6-30 lowercase letters, digits and hyphens,
# starting with a letter and not ending with a hyphen, optionally after a "domain:"; a
# dataset is up to 1,024 letters, digits and underscores; a table up to 1,024 letters,
# marks, numbers, connectors, dashes and spaces.
_PROJECT = r"(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]"
_DATASET = r"[A-Za-z0-9_]{1,1024}"
BIGQUERY_DATASET = re.compile(rf"^(?:(?P<project>{_PROJECT})[:.])?(?P<dataset>{_DATASET})$")
BIGQUERY_TABLE = re.compile(
    rf"^(?:(?P<project>{_PROJECT})[:.])?(?P<dataset>{_DATASET})\.(?P<table>[\w\- ]{{1,1024}})$")


@dataclasses.dataclass(frozen=True)
class ConfigProblem:
    """What is wrong with one field; `missing_input` for an input file that is not there
    (yet): the config is valid, but cannot run now."""

    field: str
    reason: str
    missing_input: bool = False

    def __str__(self):
        return f"{self.field}: {self.reason}"


class ConfigError(ValueError):
    """A config that cannot run; `problems` lists every field at fault."""

    def __init__(self, source: str, problems):
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"invalid config {source}:\n{lines}")


class Checker:
    """Collects problems while walking a config.

    Args:
      check_inputs: whether input files must exist now (fail fast instead of mid-run).
      matches: pattern -> True if some file matches it (the run's file systems).
    """

    def __init__(self, check_inputs: bool = True,
                 matches: Optional[Callable[[str], bool]] = None):
        self.check_inputs = check_inputs and matches is not None
        self._matches = matches
        self.problems = []

    def fail(self, field: str, reason: str):
        self.problems.append(ConfigProblem(field, reason))

    def require(self, condition: bool, field: str, reason: str):
        if not condition:
            self.fail(field, reason)

    def positive(self, message, name: str, field: str, allow_zero=False,
                 maximum: Optional[Limit] = None):
        """A finite number > 0 (>= 0 with `allow_zero`), at most `maximum` (default: the
        field name's UPPER_BOUNDS entry)."""
        value = getattr(message, name)
        if not (math.isfinite(value) and (value >= 0 if allow_zero else value > 0)):
            finite = "" if math.isfinite(value) else "finite and "
            self.fail(f"{field}.{name}",
                      f"must be {finite}{'>= 0' if allow_zero else '> 0'}, got {value}")
        else:
            self.at_most(message, name, field, maximum)

    def at_most(self, message, name: str, field: str, maximum: Optional[Limit] = None):
        """A number at most `maximum` (default: the field name's UPPER_BOUNDS entry, if
        any); the message says why."""
        value = getattr(message, name)
        maximum = UPPER_BOUNDS.get(name) if maximum is None else maximum
        if maximum is not None:
            self.require(value <= maximum.maximum, f"{field}.{name}", maximum.problem(value))

    def duration(self, message, name: str, field: str, allow_zero=False):
        """A duration in seconds: finite, > 0 (>= 0 with `allow_zero`), at most
        MAX_DURATION."""
        self.positive(message, name, field, allow_zero, MAX_DURATION)

    def trace_time(self, message, name: str, field: str):
        """A trace time in µs, set or not: within MAX_TRACE_TIME_US of the trace start."""
        value = getattr(message, name)
        self.require(abs(value) <= MAX_TRACE_TIME_US, f"{field}.{name}",
                     f"must be within {number(MAX_TRACE_TIME_US)} µs (10 years) of the trace "
                     f"start (times are µs; sums of them must stay within int64); got {value}")

    def fraction(self, message, name: str, field: str, upper: float = 1.0):
        value = getattr(message, name)
        self.require(0 <= value <= upper, f"{field}.{name}",
                     f"must be in [0, {upper:g}], got {value}")

    def range(self, message, field: str):
        if message.HasField("lower_bound") and message.HasField("upper_bound"):
            self.require(message.lower_bound <= message.upper_bound, field,
                         f"lower_bound {message.lower_bound} > upper_bound {message.upper_bound}")

    def path_exists(self, pattern: str, field: str):
        if not pattern:
            self.fail(field, "is required")
        elif self.check_inputs and not self._matches(pattern):
            self.problems.append(ConfigProblem(field, f"no file matches {pattern!r}",
                                               missing_input=True))

    def location(self, message, field: str):
        """A DataLocation: a Parquet directory or a BigQuery table."""
        which = message.WhichOneof("location")
        if which is None:
            self.fail(field, "names neither parquet nor bigquery_table")
        elif which == "parquet":
            self.require(bool(message.parquet.strip()), f"{field}.parquet",
                         "is empty: give a Parquet dataset directory (local or gs://)")
        else:
            self.bigquery_table(message.bigquery_table, f"{field}.bigquery_table")

    def bigquery_table(self, value: str, field: str):
        if not value.strip():
            self.fail(field, "is empty: give 'dataset.table' or 'project:dataset.table'")
        else:
            self.require(BIGQUERY_TABLE.match(value) is not None, field,
                         "must be 'dataset.table' or 'project:dataset.table' by BigQuery's "
                         f"naming rules, got {value!r}")

    def bigquery_dataset(self, value: str, field: str):
        if not value.strip():
            self.fail(field, "is empty: give 'dataset' or 'project:dataset'")
        else:
            self.require(BIGQUERY_DATASET.match(value) is not None, field,
                         "must be 'dataset' or 'project:dataset' by BigQuery's naming rules, "
                         f"got {value!r}")

    def load_or_write(self, message, field: str):
        """A LoadOrWrite: a loaded table must exist (with check_inputs)."""
        which = message.WhichOneof("load_or_write")
        if which is None:
            self.fail(field, "names neither input nor output")
            return
        location = getattr(message, which)
        self.location(location, f"{field}.{which}")
        parquet = location.parquet if location.WhichOneof("location") == "parquet" else ""
        if which == "input" and parquet.strip():
            self.path_exists(parquet.rstrip("/") + "/*", f"{field}.input.parquet")
