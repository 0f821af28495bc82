"""Row validation with dead letters and exclusions: nothing is dropped silently.

A `ChunkParser` turns a RowChunk into an Arrow table of valid rows; every row it cannot
accept becomes a dead letter (source, table, reason, raw row) and every chunk reports how many
rows it read, kept and rejected, so a run can print those counts per source and table. A
stage's rows that are valid but outside what it models (a task's later runs, a VM larger
than every host) are exclusions: counted per reason (`exclusions`), not dead letters.
"""

import collections
import json
import math
import re
from typing import Iterable, Optional, Sequence, Union

import apache_beam as beam
import numpy as np
import pyarrow as pa

from pipelines import progress, schemas

ROWS = "rows"
DEAD_LETTERS = "dead_letters"
EXCLUSIONS = "exclusions"
COUNTS = "counts"


class RowError(ValueError):
    """A row that violates the source's schema; the message is the dead-letter reason."""


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# Numbers as text: ASCII digits only (Python's int() and float() also take "١٢٣" and "1_0").
_INTEGER_TEXT = re.compile(r"-?[0-9]+\Z")
_NUMBER_TEXT = re.compile(r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?\Z"
                          r"|[-+]?(nan|inf|infinity)\Z", re.IGNORECASE)


def get_field(row: dict, *path: str):
    """row[path[0]][path[1]]..., or the flat CSV key "a.b" / "a_b"; None when absent. A value
    on the path that is neither a record nor missing (`"resource_request": "garbage"`) is a
    RowError, not an absent field."""
    value = row.get(path[0])
    if len(path) == 1:
        return value
    if isinstance(value, dict):
        return get_field(value, *path[1:])
    if not _missing(value):
        raise RowError(f"{path[0]} is not a record: {value!r}")
    for sep in (".", "_"):
        flat = row.get(sep.join(path))
        if flat is not None:
            return flat
    return None


def _missing(value) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _at_least(number, field: str, min_value):
    if min_value is not None and number < min_value:
        raise RowError(f"{field} is below {min_value}: {number}")
    return number


def _not_bool(value, field: str):
    if isinstance(value, bool):
        raise RowError(f"{field} is a boolean, not a number: {value!r}")


def to_int(value, field: str, required: bool = True, min_value=None):
    """An int64 from an int, an integral float or a decimal string of ASCII digits (BigQuery
    JSON); booleans, other text and integers outside int64 are errors."""
    if type(value) is int and INT64_MIN <= value <= INT64_MAX:  # the common case, first
        return _at_least(value, field, min_value)
    if _missing(value):
        if required:
            raise RowError(f"missing {field}")
        return None
    _not_bool(value, field)
    number = value
    if isinstance(value, str):
        text = value.strip()
        number = (int(text) if _INTEGER_TEXT.match(text)
                  else float(text) if _NUMBER_TEXT.match(text) else None)
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if type(number) is not int:
        raise RowError(f"{field} is not an integer: {value!r}")
    if not INT64_MIN <= number <= INT64_MAX:
        raise RowError(f"{field} is outside int64: {value!r}")
    return _at_least(number, field, min_value)


def to_float(value, field: str, required: bool = True, min_value=None):
    """A finite float from a number or decimal text of ASCII digits; NaN, infinities,
    booleans and other text are errors, as is a value below `min_value`."""
    if type(value) is float and math.isfinite(value) and (min_value is None
                                                          or value >= min_value):
        return value
    if _missing(value):
        if required:
            raise RowError(f"missing {field}")
        return None
    _not_bool(value, field)
    if isinstance(value, str) and not _NUMBER_TEXT.match(value.strip()):
        raise RowError(f"{field} is not a number: {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise RowError(f"{field} is not a number: {value!r}") from None
    if not math.isfinite(number):
        raise RowError(f"{field} is not finite: {value!r}")
    return _at_least(number, field, min_value)


def text_or_none(value, field: str, required: bool = False):
    """Text as given (a number as its str); an empty or missing value is None, or a RowError
    when `required`."""
    if value is None or value == "":
        if required:
            raise RowError(f"missing {field}")
        return None
    return value if isinstance(value, str) else str(value)


def to_enum(value, field: str, names: dict):
    """An enum value given as its number or its name; unknown values are errors."""
    if isinstance(value, str) and value.strip() in names.values():
        return {v: k for k, v in names.items()}[value.strip()]
    number = to_int(value, field)
    if number not in names:
        raise RowError(f"unknown {field} {number}")
    return number


def dead_letter_table(source: str, table: str, reasons: Sequence[str],
                      raws: Sequence[str]) -> pa.Table:
    n = len(reasons)
    return pa.table({
        "source": pa.array([source] * n, pa.string()),
        "table": pa.array([table] * n, pa.string()),
        "reason": pa.array(list(reasons), pa.string()),
        "raw": pa.array(list(raws), pa.string()),
    }, schema=schemas.DEAD_LETTERS)


def rows_as_dead_letters(source: str, table: str, rows: pa.Table,
                         reasons: Union[str, Sequence[str]]) -> pa.Table:
    """DEAD_LETTERS of rejected rows of an Arrow table: each row as JSON in the table's column
    order (values JSON cannot hold, e.g. timestamps, as text) with its reason (one for every
    row, or one per row)."""
    raws = [json.dumps(row, default=str) for row in rows.to_pylist()]
    if isinstance(reasons, str):
        reasons = [reasons] * len(raws)
    return dead_letter_table(source, table, reasons, raws)


def left_out(stage: str, table: str, rows: pa.Table, reasons: Sequence[str],
             excluded: frozenset):
    """(tag, value) pairs for the rows a stage leaves out of `table`, one reason per row:
    reasons in `excluded` (what the stage does not model) as (EXCLUSIONS, ((stage, table,
    reason), rows)) counts, the others as one (DEAD_LETTERS, table of dead letters)."""
    reasons = np.asarray(reasons, dtype=object)
    by_design = np.isin(reasons, list(excluded))
    for reason, n in collections.Counter(reasons[by_design]).items():
        yield EXCLUSIONS, ((stage, table, str(reason)), n)
    if not by_design.all():
        yield DEAD_LETTERS, rows_as_dead_letters(
            stage, table, rows.filter(pa.array(~by_design)), list(reasons[~by_design]))


def exclusions_table(element) -> pa.Table:
    """((stage, table, reason), rows) → one EXCLUSIONS row."""
    (stage, table, reason), rows = element
    progress.count(f"exclusions.{stage}.rows", rows)
    return pa.table({"stage": [stage], "table": [table], "reason": [reason],
                     "rows": [int(rows)]}, schema=schemas.EXCLUSIONS)


class SummarizeExclusions(beam.PTransform):
    """((stage, table, reason), rows) elements → EXCLUSIONS tables, one row per reason."""

    def expand(self, pcoll):
        return (pcoll
                | "Sum" >> beam.CombinePerKey(sum)
                | "Row" >> beam.Map(exclusions_table))


def counts(source: str, table: str, read: int, kept: int, rejected: int):
    """One (key, value) element of the per-source read / kept / rejected counts."""
    return (source, table), (read, kept, rejected)


class ChunkParser:
    """Parses rows of one source table into an Arrow table of `schema`.

    Subclasses implement `parse_row(row) -> tuple` (values in schema order) and raise
    RowError for a row that must be rejected.
    """

    source: str
    table: str
    schema: pa.Schema

    def parse_row(self, row: dict) -> tuple:
        raise NotImplementedError

    def parse(self, chunk):
        """(valid rows as a pa.Table, dead letters as a pa.Table) for one RowChunk."""
        values, reasons, raws = [], [], []
        for i, row in enumerate(chunk.rows):
            try:
                values.append(self.parse_row(row))
            except RowError as e:
                reasons.append(str(e))
                raws.append(chunk.raw_text(i))
        for reason, raw in chunk.undecodable:
            reasons.append(reason)
            raws.append(raw)
        columns = list(zip(*values)) if values else [[] for _ in self.schema]
        table = pa.Table.from_arrays(
            [pa.array(column, type=f.type) for column, f in zip(columns, self.schema)],
            schema=self.schema)
        return table, dead_letter_table(self.source, self.table, reasons, raws)


class SplitByTag(beam.PTransform):
    """PCollection of (tag, value) pairs → {tag: PCollection of values}.

    fleetcast's DoFns emit (tag, value) pairs instead of using Beam's tagged outputs:
    Beam 2.77's DaskRunner delivers every tagged output of a multi-output ParDo to every
    consumer, which would mix rows, dead letters and counts.
    """

    def __init__(self, tags):
        super().__init__()
        self._tags = tuple(tags)

    def expand(self, pairs):
        return {tag: pairs | f"Select{tag}" >> beam.FlatMap(_values_of, tag)
                for tag in self._tags}


def _values_of(pair, tag):
    if pair[0] == tag:
        yield pair[1]


class ParseChunks(beam.PTransform):
    """PCollection[RowChunk] → {rows, dead_letters, counts} PCollections."""

    def __init__(self, parser: ChunkParser):
        super().__init__()
        self._parser = parser

    def expand(self, chunks):
        return (chunks
                | "Parse" >> beam.FlatMap(parse_tagged, self._parser)
                | "Split" >> SplitByTag((ROWS, DEAD_LETTERS, COUNTS)))


def parse_tagged(chunk, parser: ChunkParser):
    """(tag, value) pairs of one parsed RowChunk: rows, dead letters, counts."""
    table, dead = parser.parse(chunk)
    read = len(chunk.rows) + len(chunk.undecodable)
    yield COUNTS, counts(parser.source, parser.table, read, table.num_rows, dead.num_rows)
    if dead.num_rows:
        yield DEAD_LETTERS, dead
    if table.num_rows:
        yield ROWS, table


def sum_counts(values: Iterable[tuple]) -> tuple:
    return tuple(int(x) for x in np.sum(np.array(list(values), dtype=np.int64).reshape(-1, 3),
                                        axis=0))


# Rows this worker process has parsed, per (source, table), for its progress lines.
_ROWS_SEEN = {}
_ROWS_LOG = progress.Throttle()


def count_source_rows(element):
    """Counts one chunk's ((source, table), (read, kept, rejected)) in the Beam counters
    <source>.<table>.rows_read / rows_kept / rows_rejected, and logs this worker's totals
    now and then; returns the element."""
    (source, table), numbers = element
    seen = _ROWS_SEEN.setdefault((source, table), np.zeros(3, dtype=np.int64))
    seen += numbers
    for name, value in zip(("rows_read", "rows_kept", "rows_rejected"), numbers):
        progress.count(f"{source}.{table}.{name}", value)
    if _ROWS_LOG.ready():
        progress.report("reading %s: %s", source, ", ".join(
            f"{t} {int(n[0]):,} rows" for (s, t), n in sorted(_ROWS_SEEN.items())
            if s == source))
    return element


def all_rejected(source_counts: pa.Table, dead: Optional[pa.Table]) -> Optional[str]:
    """Why a run must fail when a source table read rows and kept none (a wrong file, a
    wrong format or column order: results without its rows would look valid), with its most
    common dead-letter reason; None when every table kept rows or read none."""
    problems = []
    for row in source_counts.to_pylist():
        if row["read"] and not row["kept"]:
            reasons = collections.Counter(
                r["reason"] for r in (dead.to_pylist() if dead is not None else ())
                if (r["source"], r["table"]) == (row["source"], row["table"]))
            common = (f" (most common reason, {reasons.most_common(1)[0][1]:,} rows: "
                      f"{reasons.most_common(1)[0][0]})" if reasons else "")
            problems.append(f"every row of {row['source']}.{row['table']} was rejected: "
                            f"{row['rejected']:,} of {row['read']:,}{common}")
    return "; ".join(sorted(problems)) or None


class SummarizeCounts(beam.PTransform):
    """((source, table), (read, kept, rejected)) elements → one SOURCE_COUNTS table (and the
    per-source Beam counters); `parts`, if given, a PCollection of ((source, table), the
    parts read) pairs for the tables read from numbered parts."""

    def __init__(self, parts: Optional[beam.PCollection] = None):
        super().__init__()
        self._parts = parts

    def expand(self, pcoll):
        parts = {} if self._parts is None else beam.pvalue.AsDict(self._parts)
        return (
            pcoll
            | "CountRows" >> beam.Map(count_source_rows)
            | "Sum" >> beam.CombinePerKey(sum_counts)
            | "Row" >> beam.Map(counts_row, parts))


def counts_row(element, parts: dict) -> pa.Table:
    """((source, table), (read, kept, rejected)) → one SOURCE_COUNTS row, with the table's
    parts read from `parts` (null if none)."""
    (source, table), (read, kept, rejected) = element
    return pa.table({"source": [source], "table": [table], "read": [read], "kept": [kept],
                     "rejected": [rejected], "parts": [parts.get((source, table))]},
                    schema=schemas.SOURCE_COUNTS)
