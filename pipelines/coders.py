"""The coder fleetcast's PCollections use: Beam's FastPrimitivesCoder, with cheap size
estimates for Arrow tables and numpy arrays.

fleetcast's elements are Arrow tables (chunks of a table, a machine's samples, a shard's
rows), often inside (key, value) tuples, and their element types are not declared, so Beam
codes them with FastPrimitivesCoder, which pickles what it does not know. Beam also samples
the byte size of elements on every step's output (for its metrics and for splitting), and
FastPrimitivesCoder estimates a size by encoding the whole element: a pickled copy of a
65,536-row usage chunk for each sample, most of a stage's time on a small run. Tables and
arrays know their size, so this coder asks them instead; encoding is unchanged.
"""

import numpy as np
import pyarrow as pa
from apache_beam import coders
from apache_beam.coders import coder_impl


class _FastPrimitivesWithArrowSizesImpl(coder_impl.FastPrimitivesCoderImpl):

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


class FastPrimitivesWithArrowSizesCoder(coders.FastPrimitivesCoder):
    """FastPrimitivesCoder whose size estimates of Arrow tables and arrays cost nothing."""

    def _create_impl(self):
        return _FastPrimitivesWithArrowSizesImpl(self._fallback_coder.get_impl())


def register():
    """Makes the coder Beam's fallback for elements of undeclared type (idempotent)."""
    registry = coders.registry
    if not getattr(registry, "_fleetcast_arrow_sizes", False):
        registry.register_fallback_coder(FastPrimitivesWithArrowSizesCoder)
        registry._fleetcast_arrow_sizes = True
