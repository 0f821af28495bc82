"""Large Arrow tables handed between steps through files of the run, not through the runner.

A table crossing a grouping is encoded by the runner and copied several times (data channel,
grouping buffer, out again), pickled between Dask workers, and held whole by the in-memory
runner; for the widest tables (instance_usage) that costs more than reading and joining them.
So the two groupings of the canonical tables (by collection shard in the Google source, by
output shard in the Parquet sink) write each table once as an Arrow IPC file in the run's
staging area and group `Spilled` references of a few dozen bytes; the step after the grouping
maps the file back (zero-copy on a local file system). Large numpy arrays go the same way
as `.npy` files (`ArrayWriter`, `load_array`: written a chunk at a time, memory-mapped back,
so every worker of a machine shares their pages), and large Python objects that a grouping or
a side input carries as pickle files (`spilled_object`, `load_object`): a cluster's runner
sorts, broadcasts and copies such values whole, in memory it has only a little of. The
files' directory is never published: it goes with the staging area, and a retried step
writes new files (only the attempt that succeeded is grouped). Outside a run (no staging
area) tables, arrays and objects travel whole.
"""

import functools
import pickle
import uuid
from typing import NamedTuple, Optional, Union

import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines.io import publish, sharding
from pipelines.io.failures import RunFailed

# Smaller tables travel inline: the runner's copies of them cost less than a file (on gs://,
# a round trip to write and one to read). Small, because a grouping's small tables add up:
# the Google source's 256 collection shards of a quarter cell-day give 388k instance rows
# in tables of ~0.5 MB each, 120 MB that the runner held (and copied) whole at 1 MB.
MIN_SPILL_BYTES = 64 << 10
# Rows taken at a time by `spilled_take`: ~20 MB of instance rows.
TAKE_CHUNK_ROWS = 1 << 16


class Spilled(NamedTuple):
    """The rows of record batches [start, stop) of the Arrow IPC file `path`."""

    path: str
    start: int
    stop: int


class SpillTo(NamedTuple):
    """Where a step spills tables of at least `min_bytes` (Table.nbytes)."""

    directory: str
    min_bytes: int


def spill_to(min_bytes: Optional[int] = None) -> Optional[SpillTo]:
    """Where the run being built spills tables of at least `min_bytes` (default
    MIN_SPILL_BYTES, read at the call; None outside a run: nothing is spilled), fixed when the
    pipeline is built, so every worker spills alike.
    A grouping with one key or a few takes `min_bytes=0`: Flink's batch grouping combines a
    key's values into one record, which must fit a sort buffer (a few MB)."""
    directory = publish.extra_dir("spill")
    if directory is None:
        return None
    return SpillTo(directory, MIN_SPILL_BYTES if min_bytes is None else min_bytes)


def _spills(table: pa.Table, to: Optional[SpillTo]) -> bool:
    return to is not None and table.nbytes >= to.min_bytes


def write(pieces, directory: str) -> list:
    """Writes the tables `pieces` (one schema) into one new Arrow IPC file in `directory`;
    returns a Spilled reference to each, in order. A piece's record batches are its own, so a
    reader fetches one piece without the rest of the file."""
    path = FileSystems.join(directory, f"{uuid.uuid4().hex}.arrow")
    references, written = [], 0
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        writer = None
        for piece in pieces:
            if writer is None:
                writer = pa.ipc.new_file(pa.PythonFile(handle, mode="w"), piece.schema)
            batches = piece.to_batches()
            for batch in batches:
                writer.write_batch(batch)
            references.append(Spilled(path, written, written + len(batches)))
            written += len(batches)
        if writer is not None:
            writer.close()
    return references


def spilled(table: pa.Table, to: Optional[SpillTo]):
    """`table` itself, or a Spilled reference to a copy of it when `to` says so."""
    if not _spills(table, to) or not table.num_rows:
        return table
    return write([table], to.directory)[0]


def spilled_take(table: pa.Table, indices: np.ndarray, to: Optional[SpillTo]):
    """`spilled(table.take(indices), to)`, without the taken rows whole in memory when they
    spill: they are taken and written TAKE_CHUNK_ROWS at a time, into one file."""
    estimated_bytes = table.nbytes * len(indices) / max(table.num_rows, 1)
    if to is None or estimated_bytes < to.min_bytes or not len(indices):
        return spilled(table.take(indices), to)
    pieces = (sharding.take_rows(table, indices[start:start + TAKE_CHUNK_ROWS])
              for start in range(0, len(indices), TAKE_CHUNK_ROWS))
    references = write(pieces, to.directory)
    return Spilled(references[0].path, references[0].start, references[-1].stop)


def split_spilled(table: pa.Table, shards: np.ndarray, to: Optional[SpillTo]):
    """Yields (shard, rows of `table` in that shard, rows in table order) for every shard
    that has rows, as `sharding.split_table` does; when `to` says so, the pieces are written
    to one file and each is a Spilled reference."""
    pieces = list(sharding.split_table(table, shards))
    if not _spills(table, to) or not pieces:
        yield from pieces
        return
    yield from zip((shard for shard, _ in pieces),
                   write((rows for _, rows in pieces), to.directory))


class SpilledArray(NamedTuple):
    """A one-dimensional array of `length` items of `dtype` in the `.npy` file `path`."""

    path: str
    dtype: str
    length: int


class ArrayWriter:
    """Writes a one-dimensional array of `length` items of `dtype` chunk by chunk (`write`, in
    order): into a new `.npy` file in `to.directory`, or, outside a run (`to` None) or below
    `to.min_bytes`, into memory. `close()` gives the SpilledArray or the array itself, so an
    array larger than memory never has to be whole in it."""

    def __init__(self, length: int, dtype, to: Optional[SpillTo]):
        self._dtype = np.dtype(dtype)
        self._length = int(length)
        self._written = 0
        self._path = self._handle = self._array = None
        if to is not None and self._length * self._dtype.itemsize >= to.min_bytes:
            self._path = FileSystems.join(to.directory, f"{uuid.uuid4().hex}.npy")
            self._handle = FileSystems.create(
                self._path, compression_type=CompressionTypes.UNCOMPRESSED)
            np.lib.format.write_array_header_2_0(self._handle, {
                "descr": np.lib.format.dtype_to_descr(self._dtype), "fortran_order": False,
                "shape": (self._length,)})
        else:
            self._array = np.empty(self._length, self._dtype)

    def write(self, chunk: np.ndarray) -> None:
        chunk = np.ascontiguousarray(chunk, dtype=self._dtype)
        if self._written + len(chunk) > self._length:
            raise ValueError(f"{self._written + len(chunk)} items written to an array of "
                             f"{self._length}")
        if self._handle is not None:
            self._handle.write(chunk.tobytes())
        else:
            self._array[self._written:self._written + len(chunk)] = chunk
        self._written += len(chunk)

    def close(self) -> Union[np.ndarray, SpilledArray]:
        if self._written != self._length:
            raise ValueError(f"{self._written} items written to an array of {self._length}")
        if self._handle is None:
            return self._array
        self._handle.close()
        return SpilledArray(self._path, self._dtype.str, self._length)


def _gone(path: str) -> RunFailed:
    """What a step says when a spill file of its run is not there (a local one)."""
    return RunFailed(f"{path}: a file this run wrote into its staging area is gone: the output "
                     "directory must be one file system for every worker, and no other run "
                     "may delete its staging area (docs/runners.md#where-outputs-go)")


def load_array(value) -> np.ndarray:
    """The array a SpilledArray stands for (memory-mapped, read-only, when local), anything
    else as it is."""
    if not isinstance(value, SpilledArray):
        return value
    if _local(value.path):
        try:
            array = np.load(value.path.removeprefix("file://"), mmap_mode="r")
        except FileNotFoundError:
            raise _gone(value.path) from None
    else:
        with FileSystems.open(value.path,
                              compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            array = np.lib.format.read_array(handle)
    if array.dtype != np.dtype(value.dtype) or len(array) != value.length:
        raise ValueError(f"{value.path}: {array.dtype}[{len(array)}], not the "
                         f"{value.dtype}[{value.length}] written")
    return np.asarray(array)


def load(value):
    """The table a grouped value stands for: a Spilled reference read back (memory-mapped
    when local, else only its batches' byte ranges), anything else (a table, None) as it
    is."""
    if not isinstance(value, Spilled):
        return value
    if _local(value.path):
        try:
            source = pa.memory_map(value.path.removeprefix("file://"))
        except FileNotFoundError:
            raise _gone(value.path) from None
        return _batches(source, value)
    with FileSystems.open(value.path,
                          compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        return _batches(pa.PythonFile(handle, mode="r"), value)


def _local(path: str) -> bool:
    return FileSystems.get_scheme(path) in (None, "file")


def _batches(source, value: Spilled) -> pa.Table:
    reader = pa.ipc.open_file(source)
    return pa.Table.from_batches(
        [reader.get_batch(i) for i in range(value.start, value.stop)], reader.schema)


class SpilledObject(NamedTuple):
    """A Python object pickled into the file `path`."""

    path: str


def spilled_object(value, to: Optional[SpillTo]):
    """`value` itself, or a SpilledObject of it when `to` is set and its pickle has at least
    `to.min_bytes`."""
    if to is None:
        return value
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) < to.min_bytes:
        return value
    path = FileSystems.join(to.directory, f"{uuid.uuid4().hex}.pickle")
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        handle.write(data)
    return SpilledObject(path)


def load_object(value):
    """The object a SpilledObject stands for (the same object for the same file, as a side
    input's value is, while it is one of the last two read), anything else as it is."""
    return _read_object(value.path) if isinstance(value, SpilledObject) else value


@functools.lru_cache(maxsize=2)
def _read_object(path: str):
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            return pickle.loads(handle.read())
    except FileNotFoundError:
        raise _gone(path) from None
