"""The coder of fleetcast's PCollections: Beam's FastPrimitivesCoder, with Arrow tables
encoded as Arrow IPC streams and sized without encoding them.

fleetcast's elements are Arrow tables, often in (key, value) tuples, with undeclared element
types, so Beam codes them with FastPrimitivesCoder, which pickles what it does not know and
estimates an element's size (sampled on every step's output) by encoding it whole. This coder
asks tables and arrays for their size instead, and encodes a table as an IPC stream, which
costs less than pickling it and holds only its rows (a pickled slice carries its parent's
buffers). Tables of 256 KiB or more travel LZ4-compressed: the portable runners copy every
encoded element several times between stages, and the big tables (the per-teller timeseries
repeats its columns per teller) compress well, for less than the copies cost.
"""

import pickle
import weakref

import numpy as np
import pyarrow as pa
from apache_beam import coders
from apache_beam.coders import coder_impl

_ARROW_IPC = b"A"
_PICKLE = b"P"
COMPRESS_MIN_BYTES = 1 << 18
_COMPRESSED = pa.ipc.IpcWriteOptions(compression="lz4")


# The encoding each live decoded table came from, by id(table). Tables are immutable, and
# the portable runners decode and re-encode every element they group or flatten (a
# GroupByKey decodes its input and encodes the groups again): a decoded table re-encodes to
# the bytes it came from, without writing (or compressing) it again.
_ENCODED_BY_ID = {}


def _encode(value) -> bytes:
    if isinstance(value, pa.Table):
        encoded = _ENCODED_BY_ID.get(id(value))
        if encoded is not None:
            return encoded
        sink = pa.BufferOutputStream()
        sink.write(_ARROW_IPC)
        options = _COMPRESSED if value.nbytes >= COMPRESS_MIN_BYTES else None
        with pa.ipc.new_stream(sink, value.schema, options=options) as writer:
            writer.write_table(value)
        return sink.getvalue().to_pybytes()
    return _PICKLE + pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def _decode(encoded: bytes):
    body = memoryview(encoded)[1:]
    if encoded[:1] == _ARROW_IPC:
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
        _ENCODED_BY_ID[id(table)] = encoded
        weakref.finalize(table, _ENCODED_BY_ID.pop, id(table), None)
        return table
    return pickle.loads(body)


class ArrowOrPickleCoder(coders.Coder):
    """Arrow tables as IPC streams, anything else pickled (not deterministic)."""

    def _create_impl(self):
        return coder_impl.CallbackCoderImpl(_encode, _decode)

    def is_deterministic(self):
        return False

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))


class _ArrowAwareImpl(coder_impl.FastPrimitivesCoderImpl):

    def get_estimated_size_and_observables(self, value, nested=False):
        size = estimated_size(value)
        if size is None:
            return super().get_estimated_size_and_observables(value, nested)
        return size, []


def estimated_size(value):
    """Bytes of an Arrow table or numpy array, or of a tuple or list holding only those,
    ints, floats, strings and None; None for anything else."""
    if isinstance(value, (pa.Table, pa.RecordBatch, pa.Array, pa.ChunkedArray)):
        return value.nbytes
    if isinstance(value, np.ndarray):
        return value.nbytes
    if value is None or isinstance(value, (int, float, bool)):
        return 9
    if isinstance(value, (str, bytes)):
        return len(value) + 1
    if type(value) in (tuple, list):
        total = 1
        for item in value:
            size = estimated_size(item)
            if size is None:
                return None
            total += size
        return total
    return None


class ArrowAwareCoder(coders.FastPrimitivesCoder):
    """FastPrimitivesCoder that encodes Arrow tables as IPC streams and whose size estimates
    of tables and arrays cost nothing."""

    def __init__(self, fallback_coder=None):
        super().__init__(fallback_coder or ArrowOrPickleCoder())

    def _create_impl(self):
        return _ArrowAwareImpl(self._fallback_coder.get_impl())


def register():
    """Makes the coder Beam's fallback for elements of undeclared type (idempotent)."""
    registry = coders.registry
    if not getattr(registry, "_fleetcast_arrow_aware", False):
        registry.register_fallback_coder(ArrowAwareCoder)
        registry._fleetcast_arrow_aware = True
