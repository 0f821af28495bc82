"""Columnar reading: JSON, CSV and Parquet files straight into Arrow, validated batch by batch.

A `ColumnarParser` is the vectorised twin of a source's `ChunkParser`: it checks whole Arrow
batches with numpy and keeps the rows it can prove the per-row parser would keep with the
same values. Everything else goes through the per-row parser, which stays the reference:
rows that fail a vectorised check, and pieces of a file the columnar JSON reader rejects or
might read differently (split in halves until they parse, or are small enough to read row by
row). So dead letters keep their exact reasons and raw text, and the counts stay exact.

CSV is read with a header line, or headerless with the column names given (`fieldnames`, as
some traces' own CSV parts come). JSON and CSV are read from `readers.file_blocks`, so a cut
or corrupt compressed file still fails the run naming it. The vectorised checks are
conservative on purpose: a row they cannot vouch for (NaN or Infinity literals anywhere in its
piece, invalid UTF-8, text where a number is due, CRLF line ends) costs the per-row rate,
never a different answer.
"""

import dataclasses
import io
import itertools
from typing import Optional, Tuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pj

from pipelines.io.dead_letters import (
    COUNTS,
    DEAD_LETTERS,
    ROWS,
    ChunkParser,
    SplitByTag,
    counts,
    parse_tagged,
)
from pipelines.io.readers import (
    BOM,
    CHUNK_ROWS,
    Format,
    OpenFiles,
    RowChunk,
    csv_chunks,
    file_blocks,
    format_of_file,
    iter_lines,
    json_chunks,
    parquet_batches,
)

# Decompressed bytes per JSON block (~11k rows of the Google usage table): big enough for the
# Arrow reader's per-call cost to vanish, small enough to bound a worker's memory.
JSON_BLOCK_BYTES = 8 << 20
# A rejected piece of at most this many lines is read row by row instead of split again.
PER_ROW_LINES = 64
# Literals the Arrow JSON reader accepts and Python's json reads differently or rejects
# ("Inf"), or that the per-row path rejects with its own reason (NaN, Infinity).
_NON_JSON_NUMBERS = (b"NaN", b"Inf")
_OPEN, _CLOSE, _NEWLINE = ord("{"), ord("}"), ord("\n")

INT, FLOAT, DISTRIBUTION, TEXT = "int", "float", "distribution", "text"


class Unsupported(Exception):
    """A batch whose column types the vectorised checks do not cover: read it row by row."""


@dataclasses.dataclass(frozen=True)
class Field:
    """One value the per-row parser reads: `path` in the row (a record's field as
    (record, field); CSV-style flat keys "record.field" / "record_field" are honoured as
    `get_field` does), its kind, whether it is required and its least value. A distribution
    has `length` values; a text is read as given, an empty one as null (`text_or_none`)."""

    name: str
    path: Tuple[str, ...]
    kind: str
    required: bool = False
    min_value: Optional[float] = None
    length: int = 0


def _flat_keys(path):
    return tuple(sep.join(path) for sep in (".", "_")) if len(path) > 1 else ()


def _arrow_type(kind: str) -> pa.DataType:
    return {INT: pa.int64(), FLOAT: pa.float64(), DISTRIBUTION: pa.list_(pa.float64()),
            TEXT: pa.string()}[kind]


class ColumnarParser:
    """Vectorised checks mirroring a ChunkParser whose rows are `fields` (in its schema's
    order). Subclasses may add row checks in `extra_checks`."""

    fields: Tuple[Field, ...]

    def __init__(self, row_parser: ChunkParser):
        self.row_parser = row_parser
        self.json_schema = self._json_schema()

    def _json_schema(self) -> pa.Schema:
        top, records = {}, {}
        for f in self.fields:
            if len(f.path) == 1:
                top[f.path[0]] = _arrow_type(f.kind)
            else:
                records.setdefault(f.path[0], {})[f.path[1]] = _arrow_type(f.kind)
                for key in _flat_keys(f.path):
                    top[key] = _arrow_type(f.kind)
        top.update({name: pa.struct(list(children.items()))
                    for name, children in records.items()})
        return pa.schema(list(top.items()))

    def extra_checks(self, values: dict) -> np.ndarray:
        """Rows passing the checks across fields (values: name → numpy array)."""
        return np.ones(len(next(iter(values.values()))), dtype=bool)

    def parse(self, batch, suspect: Optional[np.ndarray] = None) -> Tuple[pa.Table, np.ndarray]:
        """(rows that pass every check and are not `suspect`, in the row parser's schema; mask
        of the rows that do not). Raises Unsupported for column types the checks do not
        cover."""
        ok = np.ones(batch.num_rows, dtype=bool) if suspect is None else ~suspect
        columns, values = [], {}
        for f in self.fields:
            array, readable = _field_array(batch, f)
            column, good, values[f.name] = _CHECKS[f.kind](array, f)
            columns.append(column)
            ok &= good & readable
        ok &= self.extra_checks(values)
        table = pa.Table.from_arrays(columns, schema=self.row_parser.schema)
        return table.filter(pa.array(ok)), ~ok


def _column(batch, name: str):
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _valid(array: pa.Array) -> np.ndarray:
    return array.is_valid().to_numpy(zero_copy_only=False)


def _field_array(batch, f: Field):
    """(the field's values as an Arrow array of its kind's type, nulls where missing; mask of
    the rows whose value the per-row parser alone can read)."""
    expected = _arrow_type(f.kind)
    n = batch.num_rows
    record = _column(batch, f.path[0])
    if len(f.path) == 1:
        array = record if record is not None else pa.nulls(n, expected)
        ok = np.ones(n, dtype=bool)
    else:
        array = _child(record, f.path[1], expected, n)
        # get_field reads a flat key "record.field" only where the record is missing: such
        # rows go row by row rather than repeating its precedence rules here.
        missing = ~_valid(record) if record is not None else np.ones(n, dtype=bool)
        flats = [c for c in (_column(batch, k) for k in _flat_keys(f.path)) if c is not None]
        ok = ~(missing & np.any([_valid(c) for c in flats], axis=0)) if flats \
            else np.ones(n, dtype=bool)
    if f.kind == DISTRIBUTION and pa.types.is_list(array.type) \
            and array.type.value_type == pa.float64():
        array = array.cast(expected)  # Parquet names the list's item "element"
    if array.type != expected:
        raise Unsupported(f"{f.name}: {array.type}")
    return array, ok


def _child(record, name: str, expected, n: int) -> pa.Array:
    if record is None:
        return pa.nulls(n, expected)
    if not pa.types.is_struct(record.type):
        raise Unsupported(f"{name}: record of type {record.type}")
    index = record.type.get_field_index(name)
    if index < 0:
        return pa.nulls(n, expected)
    # struct_field keeps the child's values where the record is null: mask them.
    child = pc.struct_field(record, [index])
    return pc.if_else(record.is_valid(), child, pa.nulls(n, child.type))


def _check_int(array: pa.Array, f: Field):
    null = ~_valid(array)
    value = array.fill_null(0).to_numpy(zero_copy_only=False)
    good = ~null if f.required else np.ones(len(null), dtype=bool)
    if f.min_value is not None:
        good &= null | (value >= f.min_value)
    return array, good, value


def _check_float(array: pa.Array, f: Field):
    """Finite and ≥ min_value, or null when optional (NaN, ±inf: row by row)."""
    null = ~_valid(array)
    value = array.to_numpy(zero_copy_only=False).astype(np.float64)
    with np.errstate(invalid="ignore"):
        good = np.isfinite(value)
        if f.min_value is not None:
            good &= value >= f.min_value
    if not f.required:
        good |= null
    return array, good, value


def _check_distribution(array: pa.Array, f: Field):
    """A list of `length` finite values ≥ 0; null or empty reads as null (as the per-row
    `_distribution` does)."""
    lengths = pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(array)
    parents = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
    elements = flat.to_numpy(zero_copy_only=False).astype(np.float64)
    with np.errstate(invalid="ignore"):
        bad_element = ~(np.isfinite(elements) & (elements >= 0)) | ~_valid(flat)
    bad_rows = np.bincount(parents[bad_element], minlength=len(array)) > 0
    good = (lengths == 0) | ((lengths == f.length) & ~bad_rows)
    column = pc.if_else(pa.array(lengths == 0), pa.nulls(len(array), array.type), array)
    return column, good, None


def _check_text(array: pa.Array, f: Field):
    """Any text; empty reads as null (as `text_or_none` does)."""
    column = pc.if_else(pc.equal(array, ""), pa.nulls(len(array), array.type), array)
    good = _valid(column) if f.required else np.ones(len(array), dtype=bool)
    return column, good, None


_CHECKS = {INT: _check_int, FLOAT: _check_float, DISTRIBUTION: _check_distribution,
           TEXT: _check_text}


def _tagged_columnar(table: pa.Table, parser: ChunkParser):
    yield COUNTS, counts(parser.source, parser.table, table.num_rows, table.num_rows, 0)
    if table.num_rows:
        yield ROWS, table


def _per_row(chunk: RowChunk, parser: ChunkParser):
    if chunk.rows or chunk.undecodable:
        yield from parse_tagged(chunk, parser)


# JSON ---------------------------------------------------------------------------------------


def line_pieces(blocks, block_bytes: int = JSON_BLOCK_BYTES):
    """A file's decompressed blocks regrouped into pieces of whole lines of about
    `block_bytes` (the last may lack its newline), without a leading byte order mark."""
    pending, size, first = [], 0, True
    for block in blocks:
        if first and block:
            block, first = block.removeprefix(BOM), False
        pending.append(block)
        size += len(block)
        if size >= block_bytes:
            data = b"".join(pending)
            cut = data.rfind(b"\n") + 1
            if cut:
                yield data[:cut]
                data = data[cut:]
            pending, size = [data], len(data)
    data = b"".join(pending)
    if data:
        yield data


def _line_bounds(buf: np.ndarray):
    """(starts, ends) of the lines of a piece, the last line's newline being optional."""
    newlines = np.flatnonzero(buf == _NEWLINE)
    starts = np.concatenate([[0], newlines + 1])
    ends = np.concatenate([newlines, [len(buf)]])
    if starts[-1] == len(buf):
        starts, ends = starts[:-1], ends[:-1]
    return starts, ends


def _read_json_piece(data: bytes, buf: np.ndarray, starts, ends, schema: pa.Schema):
    """The Arrow table of a piece whose every line is one object the per-row path would read
    the same way, else None."""
    # A first byte absent from the piece (memchr) spares the slower search for the literal.
    if not len(starts) or any(token[:1] in data and token in data
                              for token in _NON_JSON_NUMBERS):
        return None
    # One object per line, nothing else: no blank lines (the per-row path skips them, Arrow
    # too, which would shift the row ↔ line mapping), no CRLF, no trailing text.
    if not ((ends > starts).all() and (buf[starts] == _OPEN).all()
            and (buf[ends - 1] == _CLOSE).all()):
        return None
    try:
        data.decode("utf-8")  # Arrow skips the bytes of fields it is not asked for
        table = pj.read_json(
            io.BytesIO(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=1 << 20),
            parse_options=pj.ParseOptions(explicit_schema=schema,
                                          unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    return table if table.num_rows == len(starts) else None


def _lines_per_row(data: bytes, parser: ChunkParser):
    # A piece starts after the file's byte order mark, if any: a later one is the row's.
    for chunk in json_chunks(iter_lines([data], file_start=False)):
        yield from _per_row(chunk, parser)


def parse_json_piece(data: bytes, columnar: ColumnarParser):
    """(tag, value) pairs of a piece of whole JSON lines: rows, dead letters, counts."""
    buf = np.frombuffer(data, dtype=np.uint8)
    starts, ends = _line_bounds(buf)
    table = _read_json_piece(data, buf, starts, ends, columnar.json_schema)
    if table is None:
        if len(starts) <= PER_ROW_LINES:
            yield from _lines_per_row(data, columnar.row_parser)
        else:
            middle = int(starts[len(starts) // 2])
            yield from parse_json_piece(data[:middle], columnar)
            yield from parse_json_piece(data[middle:], columnar)
        return
    good, bad = columnar.parse(table)  # the explicit schema gives every column its type
    yield from _tagged_columnar(good, columnar.row_parser)
    rows = np.flatnonzero(bad)
    if len(rows):
        yield from _lines_per_row(
            b"\n".join(data[starts[i]:ends[i]] for i in rows), columnar.row_parser)


# CSV ----------------------------------------------------------------------------------------

# Lines whose fields are plain or wholly quoted ("" for a quote): Python's csv module and
# Arrow read them as the same values, one record per line (both skip empty lines).
_CSV_FIELD = r'(?:[^",\r\n]*|"(?:[^"\r\n]|"")*")'
_CSV_LINE = rf"{_CSV_FIELD}(?:,{_CSV_FIELD})*"
_CSV_PIECE = rf"\A(?:{_CSV_LINE}\n)*(?:{_CSV_LINE})?\z"
# Text the per-row parsers read as exactly the number Arrow's cast gives (no spaces, no "+",
# no overflow); other text is left to them.
_NUMBER = r"-?[0-9]{1,15}(?:\.[0-9]{1,20})?(?:[eE][-+]?[0-9]{1,2})?"
_JSON_NUMBER = r"-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,20})?(?:[eE][-+]?[0-9]{1,2})?"
_CSV_TEXT = {INT: r"\A-?[0-9]{1,18}\z", FLOAT: rf"\A{_NUMBER}\z",
             DISTRIBUTION: rf"\A\[{_JSON_NUMBER}(?:,{_JSON_NUMBER})*\]\z"}


def _csv_header(line: bytes, columnar: ColumnarParser):
    """The field names of a header line the columnar path reads as csv.reader does (no
    quotes, no duplicates, no column named like a record), else None."""
    try:
        names = line.decode("utf-8").split(",")
    except UnicodeDecodeError:
        return None
    records = {f.path[0] for f in columnar.fields if len(f.path) > 1}
    if (not line or b'"' in line or b"\r" in line or len(set(names)) != len(names)
            or records & set(names)):
        return None
    return names


def _regular(data: bytes) -> bool:
    """Whether a piece is regular CSV lines: one record per line, read alike by Arrow and
    csv.reader."""
    return pc.match_substring_regex(pa.array([data], pa.binary()), _CSV_PIECE)[0].as_py()


def _csv_strings(data: bytes, header) -> Optional[pa.Table]:
    """Every column of a regular piece of CSV lines as text, else None (a line of another
    width than `header`, invalid UTF-8)."""
    try:
        return pcsv.read_csv(
            io.BytesIO(data),
            read_options=pcsv.ReadOptions(column_names=header, use_threads=False,
                                          block_size=1 << 20),
            convert_options=pcsv.ConvertOptions(
                column_types={name: pa.string() for name in header},
                strings_can_be_null=False, quoted_strings_can_be_null=False))
    except pa.ArrowInvalid:
        return None


def _csv_values(text: pa.Array, kind: str):
    """(the values of a text column as `kind`, null where empty; rows whose text is neither
    empty nor the plain form of a number). A TEXT column is every row's text."""
    if kind == TEXT:
        return text, np.zeros(len(text), dtype=bool)
    plain = pc.match_substring_regex(text, _CSV_TEXT[kind])
    empty = pc.equal(text, "")
    if kind == DISTRIBUTION:
        inner = pc.utf8_slice_codeunits(pc.if_else(plain, text, "[0]"), 1, -1)
        values = pc.split_pattern(inner, ",").cast(_arrow_type(kind))
    else:
        values = pc.if_else(plain, text, "0").cast(_arrow_type(kind))
    values = pc.if_else(plain, values, pa.nulls(len(text), values.type))
    suspect = ~(plain.to_numpy(zero_copy_only=False) | empty.to_numpy(zero_copy_only=False))
    return values, suspect


def _csv_typed(strings: pa.Table, columnar: ColumnarParser):
    """(the fields of CSV text columns in the JSON layout: records as structs of their flat
    "record.field" / "record_field" columns, as get_field reads them; suspect rows)."""
    n = strings.num_rows
    suspect = np.zeros(n, dtype=bool)
    top, records = {}, {}
    for f in columnar.fields:
        names = (f.path[0],) if len(f.path) == 1 else _flat_keys(f.path)
        name = next((k for k in names if k in strings.column_names), None)
        if name is None:
            values = pa.nulls(n, _arrow_type(f.kind))
        else:
            values, bad = _csv_values(strings.column(name).combine_chunks(), f.kind)
            suspect |= bad
        if len(f.path) == 1:
            top[f.path[0]] = values
        else:
            records.setdefault(f.path[0], {})[f.path[1]] = values
    top.update({name: pa.StructArray.from_arrays(list(children.values()),
                                                 names=list(children))
                for name, children in records.items()})
    return pa.table(top), suspect


def _csv_rest_per_row(pieces, header, parser: ChunkParser):
    lines = iter_lines(pieces, file_start=False)
    for chunk in csv_chunks(lines, fieldnames=header):
        yield from _per_row(chunk, parser)


def parse_csv_file(pieces, columnar: ColumnarParser, fieldnames=None):
    """(tag, value) pairs of a CSV file given as pieces of whole lines: with a header line,
    or, given `fieldnames`, without one (as csv_chunks reads them). Pieces of regular lines
    are read columnar (one whose lines Arrow rejects, row by row); from the first other
    piece on, the file is read by the per-row path (a quoted field may span lines there)."""
    pieces, header = iter(pieces), fieldnames
    if header is None:
        first = next(pieces, b"")
        header_line, _, rest = first.partition(b"\n")
        header = _csv_header(header_line, columnar)
        if header is None:
            yield from _csv_rest_per_row(itertools.chain([first], pieces), None,
                                         columnar.row_parser)
            return
        pieces = itertools.chain([rest] if rest else [], pieces)
    for piece in pieces:
        if not _regular(piece):
            yield from _csv_rest_per_row(itertools.chain([piece], pieces), header,
                                         columnar.row_parser)
            return
        strings = _csv_strings(piece, header)
        if strings is None:
            yield from _csv_rest_per_row([piece], header, columnar.row_parser)
            continue
        typed, suspect = _csv_typed(strings, columnar)
        good, bad = columnar.parse(typed, suspect)
        yield from _tagged_columnar(good, columnar.row_parser)
        rows = strings.take(pa.array(np.flatnonzero(bad))).to_pylist()
        if rows:
            yield from _per_row(RowChunk(rows, [",".join(r.values()) for r in rows]),
                                columnar.row_parser)


# Parquet ------------------------------------------------------------------------------------


def parse_arrow_batch(batch: pa.RecordBatch, columnar: ColumnarParser):
    """(tag, value) pairs of one Arrow batch (Parquet's, or BigQuery's Storage Read API's);
    rows the checks reject (or the whole batch, for column types they do not cover) are read
    as the per-row path reads such rows."""
    try:
        good, bad = columnar.parse(batch)
    except Unsupported:
        yield from _per_row(RowChunk(batch.to_pylist(), [None] * batch.num_rows),
                            columnar.row_parser)
        return
    yield from _tagged_columnar(good, columnar.row_parser)
    rows = np.flatnonzero(bad)
    if len(rows):
        picked = batch.take(pa.array(rows)).to_pylist()
        yield from _per_row(RowChunk(picked, [None] * len(picked)), columnar.row_parser)


class _ParseFile(beam.DoFn):
    """A matched file → (tag, value) pairs, read, checked and parsed in one pass, in the
    format `format_of_file` gives it."""

    def __init__(self, fmt: int, pattern: str, columnar: ColumnarParser, chunk_rows: int,
                 fieldnames=None):
        self._format = fmt
        self._pattern = pattern
        self._columnar = columnar
        self._chunk_rows = chunk_rows
        self._fieldnames = fieldnames

    def process(self, readable_file):
        fmt = format_of_file(readable_file, self._format, self._pattern)
        if fmt == Format.CSV:
            yield from parse_csv_file(line_pieces(file_blocks(readable_file)), self._columnar,
                                      self._fieldnames)
            return
        if fmt != Format.PARQUET:
            for piece in line_pieces(file_blocks(readable_file)):
                yield from parse_json_piece(piece, self._columnar)
            return
        for batch in parquet_batches(readable_file, self._chunk_rows):
            yield from parse_arrow_batch(batch, self._columnar)


def supports(fmt: int) -> bool:
    """Whether files of this format have a columnar reader."""
    return fmt in (Format.JSON, Format.CSV, Format.PARQUET)


def _parse_table(table: pa.Table, columnar: ColumnarParser):
    for batch in table.to_batches():
        yield from parse_arrow_batch(batch, columnar)


class ParseTables(beam.PTransform):
    """PCollection[pa.Table] (rows as the trace's nested records, e.g. read from BigQuery) →
    {rows, dead_letters, counts} PCollections, checked and parsed like Parquet batches."""

    def __init__(self, columnar: ColumnarParser):
        super().__init__()
        self._columnar = columnar

    def expand(self, tables):
        return (
            tables
            | "Parse" >> beam.FlatMap(_parse_table, self._columnar)
            | "Split" >> SplitByTag((ROWS, DEAD_LETTERS, COUNTS)))


class ParseFiles(beam.PTransform):
    """Files matching `pattern` → {rows, dead_letters, counts} PCollections, as
    ReadFileChunks | ParseChunks(columnar.row_parser) gives them (each file in the format
    `format_of_file` gives it; `fmt` may be AUTO), but columnar. CSV files have a header
    line, or none with `fieldnames` (the column names, in order)."""

    def __init__(self, pattern: str, fmt: int, columnar: ColumnarParser,
                 chunk_rows: int = CHUNK_ROWS, fieldnames=None):
        super().__init__()
        self._pattern = pattern
        self._format = fmt
        self._columnar = columnar
        self._chunk_rows = chunk_rows
        self._fieldnames = None if fieldnames is None else list(fieldnames)

    def expand(self, pbegin):
        return (
            pbegin
            | "Files" >> OpenFiles(self._pattern)
            | "Parse" >> beam.ParDo(_ParseFile(self._format, self._pattern, self._columnar,
                                               self._chunk_rows, self._fieldnames))
            | "Split" >> SplitByTag((ROWS, DEAD_LETTERS, COUNTS)))
