"""Stable sharding of Arrow tables, so related rows meet in one Beam element.

Sources group rows by a hash of a key (a collection id, a VM id, a deployment id) into a
fixed number of shards; each shard is then processed with numpy as one element. The hashes
are stable across processes and runs, so every runner groups the same way.
"""

import zlib
from typing import Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def shard_of_ints(keys: np.ndarray, num_shards: int) -> np.ndarray:
    """int64[n] shards of integer keys (Fibonacci hashing)."""
    mixed = np.asarray(keys).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return ((mixed >> np.uint64(33)) % np.uint64(num_shards)).astype(np.int64)


def shard_of_strings(keys, num_shards: int) -> np.ndarray:
    """int64[n] shards of string keys (CRC-32 of each distinct value; nulls hash as "")."""
    encoded = pc.dictionary_encode(pa.chunked_array([keys]) if isinstance(keys, pa.Array)
                                   else keys).combine_chunks()
    hashes = np.array([zlib.crc32((v or "").encode()) % num_shards
                       for v in encoded.dictionary.to_pylist()] or [0], dtype=np.int64)
    indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
    null_shard = zlib.crc32(b"") % num_shards
    return np.where(np.asarray(pc.is_null(encoded.indices)), null_shard, hashes[indices])


def dictionary_codes(values) -> Tuple[np.ndarray, pa.Array]:
    """(int64[n] codes, distinct values) of a string column: values[i] == distinct[codes[i]]."""
    encoded = pc.dictionary_encode(values)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), encoded.dictionary


def sorted_codes(values) -> np.ndarray:
    """int64[n] codes of a string column that order like the values: equal values share a
    code, and the codes do not depend on the order of the rows (unlike `dictionary_codes`)."""
    codes, distinct = dictionary_codes(values)
    rank = np.empty(len(distinct), dtype=np.int64)
    rank[pc.sort_indices(distinct).to_numpy()] = np.arange(len(distinct))
    return rank[codes]


def split_by_key(table: pa.Table, key, num_shards: Optional[int] = None):
    """Yields (key, sub-table) pairs that group the rows of `table` by `key` (a column name
    or an array), rows in table order.

    With `num_shards`, the key is a stable hash shard in [0, num_shards) (`shard_of_ints` for
    integer keys, `shard_of_strings` otherwise); without, each distinct key value is a group
    (integer keys must not be null)."""
    keys = table.column(key) if isinstance(key, str) else key
    integer = pa.types.is_integer(keys.type)
    if num_shards is not None:
        shards = (shard_of_ints(keys.to_numpy(), num_shards) if integer
                  else shard_of_strings(keys, num_shards))
        yield from split_table(table, shards)
    elif integer:
        yield from split_table(table, keys.to_numpy())
    else:
        codes, values = dictionary_codes(keys)
        for code, rows in split_table(table, codes):
            yield values[code].as_py(), rows


def split_table(table: pa.Table, shards: np.ndarray):
    """Yields (shard, sub-table) for every shard that has rows, rows in table order."""
    if any(column.num_chunks > 1 for column in table.columns):
        # One copy into contiguous columns: a take on chunked columns copies them whole.
        table = table.combine_chunks()
    order = np.argsort(shards, kind="stable")
    for rows in np.split(order, np.flatnonzero(np.diff(shards[order])) + 1):
        if len(rows):
            yield int(shards[rows[0]]), table.take(pa.array(rows))


def take_rows(table: pa.Table, indices: np.ndarray) -> pa.Table:
    """`table.take(indices)` (int64[n] row numbers) in memory and time proportional to n.

    Arrow's take on a column of several chunks concatenates them first unless they are of
    fixed width: a copy of each string column of the whole table per call. Here each record
    batch gives its own rows, which are then put in the order of `indices`. (`split_table`,
    which takes every row once, combines the chunks once instead: 3× cheaper there.)"""
    batches = table.to_batches()
    if len(batches) <= 1:
        return table.take(indices)
    indices = np.asarray(indices, dtype=np.int64)
    starts = np.cumsum([0] + [batch.num_rows for batch in batches])
    batch_of = np.searchsorted(starts, indices, side="right") - 1
    by_batch = np.argsort(batch_of, kind="stable")
    bounds = np.searchsorted(batch_of[by_batch], np.arange(len(batches) + 1))
    parts = [batches[b].take(indices[by_batch[lo:hi]] - starts[b])
             for b, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])) if hi > lo]
    position = np.empty(len(indices), dtype=np.int64)
    position[by_batch] = np.arange(len(indices))
    return pa.Table.from_batches(parts, table.schema).take(position)


def concat(tables, schema: pa.Schema) -> pa.Table:
    """The rows of all `tables` (possibly none) as one table of `schema`."""
    tables = [t for t in tables if t.num_rows]
    return pa.concat_tables(tables) if tables else schema.empty_table()
