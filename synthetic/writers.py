"""Writers: Column (one output column of a v3 table), its encoding as an Arrow table (as JSON
or CSV lines: synthetic.lines), and the shard files of a table (gzip'd text or Parquet,
through Beam's FileSystems, imported on first use: `fleetcast --help` reads this package's
defaults and should not wait for Beam)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from isal import igzip

from synthetic.constants import FILE_SUFFIXES
from synthetic.lines import encode_lines


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


# ISA-L's level 1: several times faster than zlib's fastest level, for smaller files;
# compression is a slow step of writing JSON.
_GZIP_LEVEL = 1
# ISA-L's output depends on where its input is cut, not only on the bytes: text goes to it in
# blocks of this size, so a shard's file is the same however its rows were batched.
_GZIP_BLOCK_BYTES = 1 << 20


class _ShardWriter:
    """Writes one shard file through Beam's FileSystems (local, gs://, ...): gzip'd JSON
    lines or CSV (gzip header without time or name, input cut in fixed blocks: the same
    bytes on every rerun and runner), or Parquet.

    Text is compressed (ISA-L's gzip) in a background thread while the caller builds the next
    chunk (ISA-L and Arrow release the GIL); blocks are written in order, one at a time.
    """

    def __init__(self, path: str, file_format: str):
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems
        self._format = file_format
        self._handle = FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
        self._parquet = None
        self._compressing = None
        if file_format == "parquet":
            self._buffer = pa.BufferOutputStream()
        else:
            self._gzip = igzip.GzipFile(filename="", mode="wb", fileobj=self._handle,
                                        compresslevel=_GZIP_LEVEL, mtime=0)
            self._compressor = ThreadPoolExecutor(max_workers=1)
            self._pending = bytearray()
        self._started = False

    def _compress(self, data, last: bool = False):
        """Queues `data`; compresses every whole block queued (and the rest when `last`)."""
        pending = self._pending
        pending += data
        cut = len(pending) if last else len(pending) - len(pending) % _GZIP_BLOCK_BYTES
        with memoryview(pending) as view:
            for start in range(0, cut, _GZIP_BLOCK_BYTES):
                block = bytes(view[start:start + _GZIP_BLOCK_BYTES])
                if self._compressing is not None:
                    self._compressing.result()
                self._compressing = self._compressor.submit(self._gzip.write, block)
        del pending[:cut]

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
            self._compress(b"", last=True)
            if self._compressing is not None:
                self._compressing.result()
            self._compressor.shutdown()
            self._gzip.close()
        self._handle.close()


def shard_paths(out_dir: str, table: str, shards: int, file_format: str,
                layout: str = "tables") -> list[str]:
    """The table's shard files: out_dir/TABLE/TABLE-00000-of-0000N.SUFFIX ("tables"), or
    out_dir/TABLE-000000000000.SUFFIX ("public", as the trace's buckets name them)."""
    from apache_beam.io.filesystems import FileSystems
    suffix = FILE_SUFFIXES[file_format]
    if layout == "public":
        return [FileSystems.join(out_dir, f"{table}-{i:012d}{suffix}") for i in range(shards)]
    return [FileSystems.join(out_dir, table, f"{table}-{i:05d}-of-{shards:05d}{suffix}")
            for i in range(shards)]
