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
import json
import lzma
from typing import List, Optional

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
# gzip and deflate through ISA-L (isal, zlib's interface and output): 3.4x zlib's speed on
# the trace's usage shards, where gunzip was ~14 % of a JSON.gz run.
_DECOMPRESSORS = {
    CompressionTypes.GZIP: lambda: isal_zlib.decompressobj(isal_zlib.MAX_WBITS | 16),
    CompressionTypes.BZIP2: bz2.BZ2Decompressor,
    CompressionTypes.LZMA: lzma.LZMADecompressor,
    CompressionTypes.ZSTD: lambda: zstandard.ZstdDecompressor().decompressobj(),
    CompressionTypes.DEFLATE: isal_zlib.decompressobj,
}
_CORRUPT = (EOFError, OSError, isal_zlib.error, lzma.LZMAError, zstandard.ZstdError)


def _members(raw, new_decompressor, block_bytes):
    """Decompressed blocks of every member of a compressed stream; EOFError when the stream
    ends inside a member (Beam's own reader returns what it has instead)."""
    decompressor, started = new_decompressor(), False
    while block := raw.read(block_bytes):
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


def file_blocks(readable_file, block_bytes: int = BLOCK_BYTES):
    """The bytes of a matched file in blocks, decompressed by its ending (.gz, .bz2, .xz,
    .zst, .deflate). A compressed file that is cut short or corrupt fails the run (RunFailed,
    naming it): the rows lost inside it could not be counted as dead letters."""
    path = readable_file.metadata.path
    compression = CompressionTypes.detect_compression_type(path)
    with readable_file.open(compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        if compression not in _DECOMPRESSORS:
            while block := raw.read(block_bytes):
                yield block
            return
        try:
            yield from _members(raw, _DECOMPRESSORS[compression], block_bytes)
        except _CORRUPT as e:
            raise RunFailed(f"{path}: not a valid {compression} file: {e}") from None


@dataclasses.dataclass
class RowChunk:
    """Rows of one table. `raw[i]` is the text of `rows[i]` (None: serialize on demand)."""

    rows: List[Optional[dict]]
    raw: List[Optional[str]]
    # Rows that could not even be decoded: (reason, raw text).
    undecodable: List[tuple] = dataclasses.field(default_factory=list)

    def raw_text(self, i: int) -> str:
        if self.raw[i] is not None:
            return self.raw[i]
        return json.dumps(self.rows[i], default=str, sort_keys=True)


def file_format(table_input) -> int:
    """The format of a path input: its `format`, else guessed from the file ending."""
    if table_input.format != Format.AUTO:
        return table_input.format
    path = table_input.path.lower()
    for suffix in (".gz", ".bz2", ".zst", ".deflate"):
        path = path.removesuffix(suffix)
    if path.endswith(".parquet"):
        return Format.PARQUET
    if path.endswith(".csv"):
        return Format.CSV
    return Format.JSON


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


def _valid_utf8(lines, undecodable: list):
    """`lines` without the InvalidUtf8 ones, which go to `undecodable` with their reason."""
    for line in lines:
        if isinstance(line, InvalidUtf8):
            undecodable.append(("not valid UTF-8", line))
        else:
            yield line


def csv_chunks(lines, chunk_rows=CHUNK_ROWS, fieldnames=None):
    """Chunks of CSV rows as dicts. Without `fieldnames` the first line is the header.

    A row with a different number of fields than the header, or a line that is not valid
    UTF-8, is undecodable.
    """
    invalid = []
    reader = csv.reader(_valid_utf8(lines, invalid))
    if fieldnames is None:
        fieldnames = next(reader, None)
    chunk = RowChunk([], [])
    for values in reader if fieldnames is not None else ():
        if not values:
            continue
        raw = ",".join(values)
        if len(values) != len(fieldnames):
            chunk.undecodable.append(
                (f"CSV row has {len(values)} fields, expected {len(fieldnames)}", raw))
        else:
            chunk.rows.append(dict(zip(fieldnames, values)))
            chunk.raw.append(raw)
        if len(chunk.rows) + len(chunk.undecodable) + len(invalid) >= chunk_rows:
            chunk.undecodable.extend(invalid)
            invalid.clear()
            yield chunk
            chunk = RowChunk([], [])
    chunk.undecodable.extend(invalid)
    if chunk.rows or chunk.undecodable:
        yield chunk


def _parquet_chunks(handle, chunk_rows):
    for batch in pq.ParquetFile(handle).iter_batches(batch_size=chunk_rows):
        rows = batch.to_pylist()
        yield RowChunk(rows, [None] * len(rows))


class _ReadFileChunks(beam.DoFn):
    """A matched file → RowChunks (the file is read in one pass, chunk by chunk)."""

    def __init__(self, fmt: int, chunk_rows: int, fieldnames=None):
        self._format = fmt
        self._chunk_rows = chunk_rows
        self._fieldnames = fieldnames

    def process(self, readable_file):
        if self._format == Format.PARQUET:
            with readable_file.open() as handle:
                try:
                    yield from _parquet_chunks(handle, self._chunk_rows)
                except pa.ArrowInvalid as e:
                    raise RunFailed(f"{readable_file.metadata.path}: not a readable Parquet "
                                     f"file: {e}") from None
        elif self._format == Format.CSV:
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
    """Files matching `pattern` → PCollection[RowChunk]. A pattern matching nothing fails."""

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
                _ReadFileChunks(self._format, self._chunk_rows, self._fieldnames)))


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
            return pbegin | ReadFileChunks(self._input.path, file_format(self._input),
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
