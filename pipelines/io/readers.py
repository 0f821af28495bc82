"""Reading trace tables as chunks of rows, from files or BigQuery.

A source table becomes a PCollection of `RowChunk`s: up to `CHUNK_ROWS` rows, each a dict
from the file (nested records as dicts, or flat "record.field" keys from CSV) together with
the raw text of the row, kept so a rejected row reaches the dead letters as it was given.
The parsers that turn chunks into Arrow tables (fused with the read, so the dicts are never
serialized) live with each source.
"""

import bz2
import csv
import dataclasses
import itertools
import json
import lzma
import re
from typing import List, NamedTuple, Optional, Tuple

import apache_beam as beam
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard
from apache_beam.io import fileio
from apache_beam.io.filesystem import BeamIOError, CompressionTypes
from apache_beam.io.filesystems import FileSystems
from isal import isal_zlib

from configs import fleetcast_pb2
from pipelines.io.failures import RunFailed

CHUNK_ROWS = 20_000
BLOCK_BYTES = 1 << 20
BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark

Format = fleetcast_pb2.TableInput.Format


# Every compressed format Beam detects from a file's ending, as a new streaming
# decompressor per member (gzip and bzip2 files may hold several concatenated members).
# gzip and deflate through ISA-L (isal, zlib's interface and output), faster than zlib on
# the trace's usage shards, where gunzip is a sizeable part of a JSON.gz run.
_DECOMPRESSORS = {
    CompressionTypes.GZIP: lambda: isal_zlib.decompressobj(isal_zlib.MAX_WBITS | 16),
    CompressionTypes.BZIP2: bz2.BZ2Decompressor,
    CompressionTypes.LZMA: lzma.LZMADecompressor,
    CompressionTypes.ZSTD: lambda: zstandard.ZstdDecompressor().decompressobj(),
    CompressionTypes.DEFLATE: isal_zlib.decompressobj,
}
_CORRUPT = (EOFError, OSError, isal_zlib.error, lzma.LZMAError, zstandard.ZstdError)
# The leading bytes of the compressed formats that have them (raw deflate has none): no text
# file starts so (the first three are not UTF-8; bzip2's names its first block or its end).
_COMPRESSION_MAGIC = (
    (re.compile(rb"\x1f\x8b"), CompressionTypes.GZIP),
    (re.compile(rb"\xfd7zXZ\x00"), CompressionTypes.LZMA),
    (re.compile(rb"\x28\xb5\x2f\xfd"), CompressionTypes.ZSTD),
    (re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)"), CompressionTypes.BZIP2),
)
# A Parquet file starts (and ends) with these bytes; no JSON or CSV text does.
PARQUET_MAGIC = b"PAR1"
# Format names in file endings (before a compression ending).
_ENDINGS = ((".parquet", Format.PARQUET), (".csv", Format.CSV), (".json", Format.JSON),
            (".jsonl", Format.JSON), (".ndjson", Format.JSON))


def compression_of(path: str, head: bytes) -> str:
    """A file's compression (a CompressionTypes value): the one its ending names, else the
    one its leading bytes `head` show (gzip, bzip2, xz, zstd), else uncompressed."""
    compression = CompressionTypes.detect_compression_type(path)
    if compression != CompressionTypes.UNCOMPRESSED:
        return compression
    return next((kind for magic, kind in _COMPRESSION_MAGIC if magic.match(head)),
                CompressionTypes.UNCOMPRESSED)


def _members(blocks, new_decompressor):
    """Decompressed blocks of every member of a compressed stream given as raw `blocks`;
    EOFError when the stream ends inside a member (Beam's own reader returns what it has
    instead)."""
    decompressor, started = new_decompressor(), False
    for block in blocks:
        started = True
        while block:
            if decompressor.eof:
                decompressor = new_decompressor()
            yield decompressor.decompress(block)
            block = decompressor.unused_data if decompressor.eof else b""
    if not started:
        raise EOFError("the file is empty")
    if not decompressor.eof:
        raise EOFError("the file ends before its end-of-stream marker (truncated?)")


def _raw_blocks(raw, block_bytes: int):
    while block := raw.read(block_bytes):
        yield block


def _not_parquet(blocks, path: str, compression: str):
    """The non-empty `blocks` (decompressed), failing if they are a Parquet file's."""
    blocks = (block for block in blocks if block)
    first = next(blocks, b"")
    if first.startswith(PARQUET_MAGIC):
        raise RunFailed(_compressed_parquet(path, compression))
    if first:
        yield first
    yield from blocks


def _compressed_parquet(path: str, compression: str) -> str:
    return (f"{path}: a {compression}-compressed Parquet file, which cannot be read in place; "
            "decompress it (Parquet compresses its own pages)")


def file_blocks(readable_file, block_bytes: int = BLOCK_BYTES):
    """The bytes of a matched text file in blocks, decompressed as `compression_of` says (its
    ending, else its leading bytes). A compressed file that is cut short or corrupt, or that
    holds a Parquet file, fails the run (RunFailed, naming it): the rows lost inside it could
    not be counted as dead letters."""
    path = readable_file.metadata.path
    with readable_file.open(compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        blocks = _raw_blocks(raw, block_bytes)
        first = next(blocks, b"")
        compression = compression_of(path, first)
        blocks = itertools.chain([first] if first else [], blocks)
        if compression not in _DECOMPRESSORS:
            yield from blocks
            return
        try:
            yield from _not_parquet(_members(blocks, _DECOMPRESSORS[compression]), path,
                                    compression)
        except _CORRUPT as e:
            raise RunFailed(f"{path}: not a valid {compression} file: {e}") from None


@dataclasses.dataclass
class RowChunk:
    """Rows of one table. `raw[i]` is the text of `rows[i]` (None: serialize on demand)."""

    rows: List[Optional[dict]]
    raw: List[Optional[str]]
    # Rows that could not even be decoded: (reason, raw text).
    undecodable: List[tuple] = dataclasses.field(default_factory=list)
    # Where the rows come from: (file, the chunk's index among that file's chunks), if known.
    origin: Optional[Tuple[str, int]] = None

    def raw_text(self, i: int) -> str:
        if self.raw[i] is not None:
            return self.raw[i]
        return json.dumps(self.rows[i], default=str, sort_keys=True)


def _ending_format(path: str) -> Optional[int]:
    """The format a path's ending names (.parquet, .csv, .json, .jsonl, .ndjson, each maybe
    followed by a compression ending), else None."""
    name = path.lower()
    if CompressionTypes.detect_compression_type(name) != CompressionTypes.UNCOMPRESSED:
        name = name.rpartition(".")[0]
    return next((fmt for ending, fmt in _ENDINGS if name.endswith(ending)), None)


def file_format(table_input) -> int:
    """The format of a path input: its `format`, else guessed from the pattern's ending."""
    if table_input.format != Format.AUTO:
        return table_input.format
    return _ending_format(table_input.path) or Format.JSON


def is_parquet(readable_file) -> bool:
    """Whether a matched file is an (uncompressed) Parquet file: it starts with Parquet's
    magic bytes."""
    with readable_file.open(compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        return raw.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC


def format_of_file(readable_file, fmt: int, pattern: str) -> int:
    """The format one file matched by `pattern` is read in, so that every row of every file
    is read: Parquet if the file is Parquet (`is_parquet`), else `fmt` unless AUTO, else
    the format its own ending names, else the pattern's (JSON if none)."""
    if is_parquet(readable_file):
        return Format.PARQUET
    if fmt != Format.AUTO:
        return fmt
    return (_ending_format(readable_file.metadata.path) or _ending_format(pattern)
            or Format.JSON)


class InvalidUtf8(str):
    """A line that is not valid UTF-8, as text with U+FFFD for its bad bytes."""


def _decoded(line: bytes) -> str:
    try:
        return line.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError:
        return InvalidUtf8(line.decode("utf-8", errors="replace").rstrip("\r"))


def iter_lines(blocks, file_start: bool = True):
    """Decoded lines of a file's blocks of bytes, without a leading UTF-8 byte order mark (if
    `file_start`: the blocks begin the file); a line that is not valid UTF-8 comes as an
    InvalidUtf8."""
    rest, first = b"", file_start
    for block in blocks:
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        if lines and first:
            lines[0], first = lines[0].removeprefix(BOM), False
        for line in lines:
            yield _decoded(line)
    if rest:
        yield _decoded(rest.removeprefix(BOM) if first else rest)


def _json_row(text: str):
    """(row, None) for a line holding a JSON object, else (None, the reason)."""
    if isinstance(text, InvalidUtf8):
        return None, "not valid UTF-8"
    try:
        row = orjson.loads(text)
    except orjson.JSONDecodeError:
        # orjson is strict; the standard parser also reads NaN / Infinity literals, so such a
        # row is rejected for its value, with a precise reason, not as garbage. It also reads
        # lone surrogates ("\ud800"), which no UTF-8 table can hold.
        try:
            row = json.loads(text)
            json.dumps(row, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return None, "invalid Unicode: a lone surrogate (\\ud800-\\udfff)"
        except ValueError as e:
            return None, f"unparseable JSON: {e}"
    if not isinstance(row, dict):
        return None, f"JSON row is not an object: {text[:40]}"
    return row, None


def json_chunks(lines, chunk_rows=CHUNK_ROWS):
    """Chunks of newline-delimited JSON objects; a line that is not one (bad JSON, `null`, a
    list, invalid UTF-8) is undecodable, not fatal. Blank lines are no rows."""
    chunk = RowChunk([], [])
    for text in lines:
        if not text.strip():
            continue
        row, reason = _json_row(text)
        if reason is None:
            chunk.rows.append(row)
            chunk.raw.append(text)
        else:
            chunk.undecodable.append((reason, text))
        if len(chunk.rows) + len(chunk.undecodable) >= chunk_rows:
            yield chunk
            chunk = RowChunk([], [])
    if chunk.rows or chunk.undecodable:
        yield chunk


def _valid_utf8(lines, undecodable: list, last: list):
    """`lines` without the InvalidUtf8 ones, which go to `undecodable` with their reason;
    `last[0]` is the line given last."""
    for line in lines:
        if isinstance(line, InvalidUtf8):
            undecodable.append(("not valid UTF-8", line))
        else:
            last[0] = line
            yield line


def csv_chunks(lines, chunk_rows=CHUNK_ROWS, fieldnames=None):
    """Chunks of CSV rows as dicts. Without `fieldnames` the first line is the header.

    A row with a different number of fields than the header, a record csv.reader refuses (a
    field over 128 KiB) or a line that is not valid UTF-8 is undecodable.
    """
    invalid, last = [], [""]
    reader = csv.reader(_valid_utf8(lines, invalid, last))
    if fieldnames is None:
        fieldnames = next(reader, None)
    chunk = RowChunk([], [])
    for values in _records(reader, last) if fieldnames is not None else ():
        if isinstance(values, CsvError):
            chunk.undecodable.append((values.reason, values.raw))
        elif not values:
            continue
        else:
            _add_csv_row(chunk, values, fieldnames)
        if len(chunk.rows) + len(chunk.undecodable) + len(invalid) >= chunk_rows:
            chunk.undecodable.extend(invalid)
            invalid.clear()
            yield chunk
            chunk = RowChunk([], [])
    chunk.undecodable.extend(invalid)
    if chunk.rows or chunk.undecodable:
        yield chunk


class CsvError(NamedTuple):
    """A record csv.reader refuses (a field over its limit, 128 KiB): why, and the line it
    refused it on."""

    reason: str
    raw: str


def _records(reader, last: list):
    """The records of `reader`, a CsvError in place of one it refuses (`last[0]`: the line
    the reader read last)."""
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            yield CsvError(f"not a CSV record: {e}", last[0].rstrip("\r\n"))


def _add_csv_row(chunk, values, fieldnames):
    raw = ",".join(values)
    if len(values) != len(fieldnames):
        chunk.undecodable.append(
            (f"CSV row has {len(values)} fields, expected {len(fieldnames)}", raw))
    else:
        chunk.rows.append(dict(zip(fieldnames, values)))
        chunk.raw.append(raw)


def parquet_batches(readable_file, batch_rows: int, columns=None):
    """The record batches of a matched Parquet file (only `columns`, if given: all must be
    there); a file that is not one, or lacks a column, fails the run naming it."""
    path = readable_file.metadata.path
    with readable_file.open(compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        compression = compression_of(path, handle.read(16))
        handle.seek(0)
        try:
            parquet = pq.ParquetFile(handle)
        except pa.ArrowInvalid as e:
            if compression != CompressionTypes.UNCOMPRESSED:
                raise RunFailed(_compressed_parquet(path, compression)) from None
            raise RunFailed(f"{path}: not a readable Parquet file: {e}") from None
        names = parquet.schema_arrow.names
        missing = [c for c in columns or () if c not in names]
        if missing:
            raise RunFailed(f"{path}: a Parquet file without the input's columns "
                            f"{', '.join(missing)} (it has {', '.join(names)})")
        try:
            yield from parquet.iter_batches(batch_size=batch_rows, columns=columns)
        except pa.ArrowInvalid as e:
            raise RunFailed(f"{path}: not a readable Parquet file: {e}") from None


class _ReadFileChunks(beam.DoFn):
    """A matched file → RowChunks (the file is read in one pass, chunk by chunk), in the
    format `format_of_file` gives it."""

    def __init__(self, fmt: int, pattern: str, chunk_rows: int, fieldnames=None):
        self._format = fmt
        self._pattern = pattern
        self._chunk_rows = chunk_rows
        self._fieldnames = fieldnames

    def process(self, readable_file):
        for index, chunk in enumerate(self._chunks(readable_file)):
            chunk.origin = (readable_file.metadata.path, index)
            yield chunk

    def _chunks(self, readable_file):
        fmt = format_of_file(readable_file, self._format, self._pattern)
        if fmt == Format.PARQUET:
            for batch in parquet_batches(readable_file, self._chunk_rows, self._fieldnames):
                rows = batch.to_pylist()
                yield RowChunk(rows, [None] * len(rows))
        elif fmt == Format.CSV:
            yield from csv_chunks(iter_lines(file_blocks(readable_file)), self._chunk_rows,
                                  self._fieldnames)
        else:
            yield from json_chunks(iter_lines(file_blocks(readable_file)), self._chunk_rows)


def matched_files(pattern: str) -> list:
    """The FileMetadata of the files matching `pattern`, by path; RunFailed if none."""
    try:
        files = FileSystems.match([pattern])[0].metadata_list
    except BeamIOError:
        files = []  # some file systems raise for a pattern that matches nothing
    if not files:
        raise RunFailed(f"{pattern}: no file matches")
    return sorted(files, key=lambda f: f.path)


class OpenFiles(beam.PTransform):
    """Files matching `pattern` → their fileio.ReadableFiles, spread over the workers. Files
    are the unit of parallelism, so the pattern is matched when the pipeline is built and
    every file is an element of its own from the start: Reshuffle spreads them on the
    runners that honour it, and a runner that splits only created collections (Dask, with
    --dask_npartitions; its Reshuffle does nothing) splits them there. A pattern matching
    nothing fails."""

    def __init__(self, pattern: str):
        super().__init__()
        self._pattern = pattern

    def expand(self, pbegin):
        return (
            pbegin
            | "Match" >> beam.Create(matched_files(self._pattern))
            | "Open" >> fileio.ReadMatches()
            | "Spread" >> beam.Reshuffle())


class ReadFileChunks(beam.PTransform):
    """Files matching `pattern` → PCollection[RowChunk], each file in the format
    `format_of_file` gives it (`fmt` may be AUTO). A pattern matching nothing fails."""

    def __init__(self, pattern: str, fmt: int, chunk_rows: int = CHUNK_ROWS, fieldnames=None):
        super().__init__()
        self._pattern = pattern
        self._format = fmt
        self._chunk_rows = chunk_rows
        self._fieldnames = fieldnames

    def expand(self, pbegin):
        return (
            pbegin
            | "Files" >> OpenFiles(self._pattern)
            | "Chunks" >> beam.ParDo(
                _ReadFileChunks(self._format, self._pattern, self._chunk_rows,
                                self._fieldnames)))


class ReadTableChunks(beam.PTransform):
    """A configured TableInput (files or BigQuery) → PCollection[RowChunk]. A BigQuery table
    is read with only `columns` (top-level; all if empty), a query as written; rows come as
    BigQuery types them (records as dicts), which the row parsers read like JSON rows."""

    def __init__(self, table_input, chunk_rows: int = CHUNK_ROWS, columns=()):
        super().__init__()
        self._input = table_input
        self._chunk_rows = chunk_rows
        self._columns = tuple(columns)

    def expand(self, pbegin):
        which = self._input.WhichOneof("input")
        if which == "path":
            return pbegin | ReadFileChunks(self._input.path, self._input.format,
                                           self._chunk_rows)
        return (pbegin
                | "ReadBigQuery" >> read_bigquery(self._input, self._columns)
                | "ToChunks" >> beam.FlatMap(_table_chunks, self._chunk_rows))


def read_bigquery(table_input, columns=()) -> beam.PTransform:
    """The read of a BigQuery TableInput (a table by `columns`, all if empty, or a query)
    → PCollection[pa.Table]."""
    from pipelines.io import bigquery  # the BigQuery clients only when a run reads it
    if table_input.WhichOneof("input") == "bigquery_table":
        return bigquery.ReadBigQueryRows(table=table_input.bigquery_table, columns=columns)
    return bigquery.ReadBigQueryRows(query=table_input.bigquery_query)


def _table_chunks(table: pa.Table, chunk_rows: int):
    """An Arrow table → RowChunks of at most `chunk_rows` rows (no raw lines)."""
    for start in range(0, table.num_rows, chunk_rows):
        rows = table.slice(start, chunk_rows).to_pylist()
        yield RowChunk(rows, [None] * len(rows))
