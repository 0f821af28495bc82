"""The lifetime stage's training sample: at most `max_training_instances` rows of the
instances table, those whose sample key (a hash of (instance_id, start_time) keyed by the
config's `seed`) is smallest. That is a uniform sample without replacement, the same on every
runner and in every run of the same rows and seed; below the cap it is every row.

    instances ─ SampleKeys ─ SampleCut (Combine: ≤ cap keys per accumulator) ─ (rows, cut)

Each shard of examples then keeps its rows with a key at most the cut (`sampled`), so no
step but the training holds the sample whole, and none holds every row.
"""

import hashlib
from typing import Optional, Tuple

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa

SAMPLED = "sampled_instances"
# (rows of the instances table, largest sample key of the sample; None: every row).
Cut = Tuple[int, Optional[int]]


def _hash_key(seed: int) -> str:
    """The 16-character key of pandas' SipHash for `seed`."""
    return hashlib.sha256(str(int(seed)).encode()).hexdigest()[:16]


def sample_keys(instances: pa.Table, seed: int) -> np.ndarray:
    """uint64[n] sample key of each row: SipHash of (instance_id, start_time) keyed by
    `seed` (stable across processes and runs)."""
    frame = pd.DataFrame({
        "instance_id": instances.column("instance_id").to_numpy(zero_copy_only=False),
        "start_time": instances.column("start_time").to_numpy(zero_copy_only=False)})
    return pd.util.hash_pandas_object(frame, index=False,
                                      hash_key=_hash_key(seed)).to_numpy(np.uint64)


class SampleCut(beam.CombineFn):
    """Sample keys (uint64 arrays) → `Cut`: the row count and the largest of the `size`
    smallest keys (None when there are at most `size` rows). An accumulator holds at most
    `size` keys."""

    def __init__(self, size: int):
        super().__init__()
        self._size = size

    def create_accumulator(self):
        return 0, np.empty(0, dtype=np.uint64)

    def add_input(self, accumulator, keys):
        return self.merge_accumulators([accumulator, (len(keys), np.asarray(keys, np.uint64))])

    def merge_accumulators(self, accumulators):
        accumulators = list(accumulators)
        rows = sum(n for n, _ in accumulators)
        keys = np.concatenate([k for _, k in accumulators])
        if len(keys) > self._size:
            keys = np.partition(keys, self._size - 1)[:self._size]
        return rows, keys

    def extract_output(self, accumulator) -> Cut:
        rows, keys = accumulator
        return rows, (int(keys.max()) if rows > self._size else None)


def sampled(instances: pa.Table, cut: Cut, seed: int) -> pa.Table:
    """The rows of `instances` in the sample that `cut` (SampleCut's) delimits."""
    _, largest = cut
    if largest is None:
        return instances
    return instances.filter(pa.array(sample_keys(instances, seed) <= np.uint64(largest)))
