"""Writers: Column (one output column of a v3 table), its encoding as JSON or CSV lines or as an
Arrow table, and the shard files of a table (gzip'd text or Parquet, through Beam's
FileSystems)."""

from __future__ import annotations

import gzip
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from synthetic.constants import FILE_SUFFIXES


class Column(NamedTuple):
    """One output column of a v3 table.

    name is dotted for a field of a record ("resource_request.cpus"). kind: "int", "float",
    "str", "optional_int" (negative values are null), "float_list" (values (n, k)),
    "null" (always null), "empty_int_list" or "empty_constraint_list" (always []);
    values is None for the last three.
    """
    name: str
    kind: str
    values: np.ndarray | None = None


_CONSTRAINT_TYPE = pa.struct([("name", pa.string()), ("value", pa.string()),
                              ("relation", pa.int64())])


def _float_text(values: np.ndarray) -> pa.Array:
    """Shortest round-trip text of float64 values, always with a '.' or an exponent (Arrow
    prints 1.0 as "1", which readers would take for an integer)."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    text = pc.cast(pa.array(values), pa.string())
    if np.any(values == np.trunc(values)):
        bare = pc.invert(pc.match_substring_regex(text, "[.e]"))
        text = pc.if_else(bare, pc.binary_join_element_wise(text, ".0", ""), text)
    return text


class _LineBuilder:
    """Joins literal text and per-row text arrays into one line per row, in Arrow."""

    def __init__(self):
        self._parts = []

    def text(self, literal: str):
        if self._parts and isinstance(self._parts[-1], str):
            self._parts[-1] += literal
        else:
            self._parts.append(literal)

    def values(self, strings: pa.Array):
        self._parts.append(strings)

    def encoded(self) -> memoryview:
        parts = [pa.scalar(p) if isinstance(p, str) else p for p in self._parts]
        lines = pc.binary_join_element_wise(*parts, "")
        offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1,
                                offset=lines.offset * 4)
        return memoryview(lines.buffers()[2])[offsets[0]:offsets[-1]]


def _add_value_text(builder: _LineBuilder, column: Column, json_format: bool):
    kind, values = column.kind, column.values
    if kind == "int":
        builder.values(pc.cast(pa.array(values, pa.int64()), pa.string()))
    elif kind == "float":
        builder.values(_float_text(values))
    elif kind == "str":
        # Obfuscated names are base64: nothing to escape in JSON or CSV.
        quote = '"' if json_format else ""
        builder.text(quote)
        builder.values(pa.array(values, pa.string()))
        builder.text(quote)
    elif kind == "optional_int":
        strings = pc.cast(pa.array(values, pa.int64(), mask=values < 0), pa.string())
        builder.values(pc.fill_null(strings, "null" if json_format else ""))
    elif kind == "null":
        builder.text("null" if json_format else "")
    elif kind == "float_list":
        builder.text("[" if json_format else '"[')
        for j in range(values.shape[1]):
            if j:
                builder.text(",")
            builder.values(_float_text(values[:, j]))
        builder.text("]" if json_format else ']"')
    else:
        builder.text("[]" if json_format else '"[]"')


def encode_lines(columns: list[Column], file_format: str) -> memoryview:
    """The rows as newline-terminated text: JSON objects with nested records, or CSV with
    dotted names flattened and lists as quoted JSON arrays. Needs at least one row."""
    builder = _LineBuilder()
    if file_format == "csv":
        for i, column in enumerate(columns):
            if i:
                builder.text(",")
            _add_value_text(builder, column, json_format=False)
        builder.text("\n")
        return builder.encoded()
    builder.text("{")
    open_record = ""
    for i, column in enumerate(columns):
        record, _, field = column.name.rpartition(".")
        if record != open_record:
            if open_record:
                builder.text("}")
            if i:
                builder.text(",")
            if record:
                builder.text(f'"{record}":{{')
            open_record = record
        elif i:
            builder.text(",")
        builder.text(f'"{field}":')
        _add_value_text(builder, column, json_format=True)
    builder.text("}}\n" if open_record else "}\n")
    return builder.encoded()


def _arrow_values(column: Column, n_rows: int) -> pa.Array:
    kind, values = column.kind, column.values
    if kind == "int":
        return pa.array(values, pa.int64())
    if kind == "float":
        return pa.array(values, pa.float64())
    if kind == "str":
        return pa.array(values, pa.string())
    if kind == "optional_int":
        return pa.array(values, pa.int64(), mask=values < 0)
    if kind == "null":
        return pa.nulls(n_rows, pa.int64())
    if kind == "float_list":
        width = values.shape[1]
        offsets = pa.array(np.arange(0, n_rows * width + 1, width, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, pa.array(values.ravel(), pa.float64()))
    empty = pa.array([], pa.int64() if kind == "empty_int_list" else _CONSTRAINT_TYPE)
    return pa.ListArray.from_arrays(pa.array(np.zeros(n_rows + 1, dtype=np.int32)), empty)


def to_arrow(columns: list[Column], n_rows: int) -> pa.Table:
    """The rows as an Arrow table, dotted names grouped into struct columns."""
    fields = {}
    for column in columns:
        record, _, field = column.name.rpartition(".")
        values = _arrow_values(column, n_rows)
        if record:
            fields.setdefault(record, {})[field] = values
        else:
            fields[field] = values
    return pa.table({
        name: pa.StructArray.from_arrays(list(v.values()), list(v)) if isinstance(v, dict) else v
        for name, v in fields.items()})


# Level 1: much faster than the default 6 for slightly larger files; compression is the slowest
# step of writing JSON.
_GZIP_LEVEL = 1


class _ShardWriter:
    """Writes one shard file through Beam's FileSystems (local, gs://, ...): gzip'd JSON
    lines or CSV (gzip header without time or name: byte-identical reruns), or Parquet.

    Text is compressed in a background thread while the caller builds the next chunk (zlib
    and Arrow release the GIL); chunks are written in order, one at a time.
    """

    def __init__(self, path: str, file_format: str):
        self._format = file_format
        self._handle = FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
        self._parquet = None
        self._compressing = None
        if file_format == "parquet":
            self._buffer = pa.BufferOutputStream()
        else:
            self._gzip = gzip.GzipFile(filename="", mode="wb", fileobj=self._handle,
                                       compresslevel=_GZIP_LEVEL, mtime=0)
            self._compressor = ThreadPoolExecutor(max_workers=1)
        self._started = False

    def _compress(self, data):
        if self._compressing is not None:
            self._compressing.result()
        self._compressing = self._compressor.submit(self._gzip.write, data)

    def write(self, columns: list[Column], n_rows: int):
        """Appends rows; call at least once per shard (with zero rows for an empty one)."""
        if self._format == "parquet":
            table = to_arrow(columns, n_rows)
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self._buffer, table.schema)
            self._parquet.write_table(table)
            return
        if self._format == "csv" and not self._started:
            self._compress((",".join(c.name for c in columns) + "\n").encode())
        self._started = True
        if n_rows:
            self._compress(encode_lines(columns, self._format))

    def close(self):
        if self._format == "parquet":
            self._parquet.close()
            self._handle.write(self._buffer.getvalue().to_pybytes())
        else:
            if self._compressing is not None:
                self._compressing.result()
            self._compressor.shutdown()
            self._gzip.close()
        self._handle.close()


def _shard_paths(out_dir: str, table: str, shards: int, file_format: str) -> list[str]:
    suffix = FILE_SUFFIXES[file_format]
    return [FileSystems.join(out_dir, table, f"{table}-{i:05d}-of-{shards:05d}{suffix}")
            for i in range(shards)]
