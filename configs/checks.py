"""Config problems and the checker that collects them, by field path.

Every validator in fleetcast (the run config's, and each registry entry's) reports through a
`Checker`, so that a wrong config names the field and the reason, e.g.
``overcommit.fortune_teller[1].predictor.rc_like.percentile: must be in [0, 100], got 120``.
"""

import dataclasses
import math
import re
from typing import Callable, Optional

# Sane upper bounds of numeric fields, by field name, wherever the field is: a value past
# one is a typo (num_shards: 1000000 makes a million files per table) or a unit mistake.
UPPER_BOUNDS = {
    "num_shards": 10_000,
    "days": 3_650,         # synthetic trace length
    "machines": 100_000,   # synthetic cell (generated in memory)
    "phi": 1.0,            # borg-default: phi = 1 is no overcommit
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
    field: str
    reason: str

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

    def positive(self, message, name: str, field: str, allow_zero=False, maximum=None):
        """A finite number > 0 (>= 0 with `allow_zero`), at most `maximum` (default: the
        field name's UPPER_BOUNDS entry)."""
        value = getattr(message, name)
        maximum = UPPER_BOUNDS.get(name) if maximum is None else maximum
        if not (math.isfinite(value) and (value >= 0 if allow_zero else value > 0)):
            finite = "" if math.isfinite(value) else "finite and "
            self.fail(f"{field}.{name}",
                      f"must be {finite}{'>= 0' if allow_zero else '> 0'}, got {value}")
        elif maximum is not None and value > maximum:
            self.fail(f"{field}.{name}", f"must be at most {maximum:g}, got {value}")

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
            self.fail(field, f"no file matches {pattern!r}")

    def location(self, message, field: str):
        """A DataLocation: a Parquet directory or a BigQuery table."""
        which = message.WhichOneof("location")
        if which is None:
            self.fail(field, "names neither parquet nor bigquery_table")
        elif which == "bigquery_table":
            self.bigquery_table(message.bigquery_table, f"{field}.bigquery_table")

    def bigquery_table(self, value: str, field: str):
        self.require(BIGQUERY_TABLE.match(value) is not None, field,
                     "must be 'dataset.table' or 'project:dataset.table' by BigQuery's "
                     f"naming rules, got {value!r}")

    def bigquery_dataset(self, value: str, field: str):
        self.require(BIGQUERY_DATASET.match(value) is not None, field,
                     "must be 'dataset' or 'project:dataset' by BigQuery's naming rules, "
                     f"got {value!r}")

    def load_or_write(self, message, field: str):
        """A LoadOrWrite: a loaded table must exist (with check_inputs)."""
        which = message.WhichOneof("load_or_write")
        if which is None:
            self.fail(field, "names neither input nor output")
            return
        self.location(getattr(message, which), f"{field}.{which}")
        if which == "input" and message.input.WhichOneof("location") == "parquet":
            self.path_exists(message.input.parquet.rstrip("/") + "/*", f"{field}.input.parquet")
