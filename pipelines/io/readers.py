"""Reading trace tables as chunks of rows, from files or BigQuery.

A source table becomes a PCollection of `RowChunk`s: up to `CHUNK_ROWS` rows, each a dict
from the file (nested records as dicts, or flat "record.field" keys from CSV) together with
the raw text of the row, kept so a rejected row reaches the dead letters as it was given.
The parsers that turn chunks into Arrow tables (fused with the read, so the dicts are never
serialized) live with each source.
"""

import csv
import dataclasses
import json
from typing import List, Optional

import apache_beam as beam
import orjson
import pyarrow.parquet as pq
from apache_beam.io import fileio

from configs import fleetcast_pb2

CHUNK_ROWS = 20_000

Format = fleetcast_pb2.TableInput.Format


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


def iter_lines(handle, block_bytes: int = 1 << 24):
    """Decoded lines of a binary file handle, read in blocks (any Beam file, compressed too)."""
    rest = b""
    while True:
        block = handle.read(block_bytes)
        if not block:
            break
        lines = (rest + block).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line.decode("utf-8", errors="replace").rstrip("\r")
    if rest:
        yield rest.decode("utf-8", errors="replace").rstrip("\r")


def json_chunks(lines, chunk_rows=CHUNK_ROWS):
    """Chunks of newline-delimited JSON objects; a bad line is undecodable, not fatal."""
    chunk = RowChunk([], [])
    for text in lines:
        if not text.strip():
            continue
        try:
            row = orjson.loads(text)
        except orjson.JSONDecodeError:
            # orjson is strict; the standard parser also reads NaN / Infinity literals, so
            # such a row is rejected for its value, with a precise reason, not as garbage.
            try:
                row = json.loads(text)
            except ValueError as e:
                chunk.undecodable.append((f"unparseable JSON: {e}", text))
                row = None
        if isinstance(row, dict):
            chunk.rows.append(row)
            chunk.raw.append(text)
        elif row is not None:
            chunk.undecodable.append(("JSON row is not an object", text))
        if len(chunk.rows) + len(chunk.undecodable) >= chunk_rows:
            yield chunk
            chunk = RowChunk([], [])
    if chunk.rows or chunk.undecodable:
        yield chunk


def csv_chunks(lines, chunk_rows=CHUNK_ROWS, fieldnames=None):
    """Chunks of CSV rows as dicts. Without `fieldnames` the first line is the header.

    A row with a different number of fields than the header is undecodable.
    """
    reader = csv.reader(lines)
    if fieldnames is None:
        fieldnames = next(reader, None)
        if fieldnames is None:
            return
    chunk = RowChunk([], [])
    for values in reader:
        if not values:
            continue
        raw = ",".join(values)
        if len(values) != len(fieldnames):
            chunk.undecodable.append(
                (f"CSV row has {len(values)} fields, expected {len(fieldnames)}", raw))
        else:
            chunk.rows.append(dict(zip(fieldnames, values)))
            chunk.raw.append(raw)
        if len(chunk.rows) + len(chunk.undecodable) >= chunk_rows:
            yield chunk
            chunk = RowChunk([], [])
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
        with readable_file.open() as handle:
            if self._format == Format.PARQUET:
                yield from _parquet_chunks(handle, self._chunk_rows)
            elif self._format == Format.CSV:
                yield from csv_chunks(iter_lines(handle), self._chunk_rows, self._fieldnames)
            else:
                yield from json_chunks(iter_lines(handle), self._chunk_rows)


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
            | "Match" >> fileio.MatchFiles(self._pattern, empty_match_treatment="DISALLOW")
            | "Open" >> fileio.ReadMatches()
            # Files are the unit of parallelism; spread them before the expensive parse.
            | "Spread" >> beam.Reshuffle()
            | "Chunks" >> beam.ParDo(
                _ReadFileChunks(self._format, self._chunk_rows, self._fieldnames)))


class ReadTableChunks(beam.PTransform):
    """A configured TableInput (files or BigQuery) → PCollection[RowChunk]."""

    def __init__(self, table_input, chunk_rows: int = CHUNK_ROWS):
        super().__init__()
        self._input = table_input
        self._chunk_rows = chunk_rows

    def expand(self, pbegin):
        which = self._input.WhichOneof("input")
        if which == "path":
            return pbegin | ReadFileChunks(self._input.path, file_format(self._input),
                                           self._chunk_rows)
        if which == "bigquery_table":
            rows = pbegin | "ReadBigQuery" >> beam.io.ReadFromBigQuery(
                table=self._input.bigquery_table)
        else:
            rows = pbegin | "QueryBigQuery" >> beam.io.ReadFromBigQuery(
                query=self._input.bigquery_query, use_standard_sql=True)
        return (
            rows
            | "Batch" >> beam.BatchElements(min_batch_size=self._chunk_rows // 4,
                                            max_batch_size=self._chunk_rows)
            | "ToChunk" >> beam.Map(lambda batch: RowChunk(list(batch), [None] * len(batch))))
