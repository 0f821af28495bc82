"""Customer-history columns of the instances table ([Barbalho23] §3.2.2, App. B.1).

For each key (the customer, then optionally the logical name) the instances are grouped by a
stable hash of the key into `num_shards` shards; each shard sweeps its keys once in time
order (predictors/lifetime/history.py) and fills the key's `<key>_<statistic>` columns
(schemas.history_columns). Every row of a key meets in one shard; rows without the key are
spread by instance and get nulls.

    instances ─ ShardByCustomer ─ GroupCustomer ─ CustomerHistory
              ─ ShardByLogicalName ─ GroupLogicalName ─ LogicalNameHistory ─ instances

Leak-free by construction: an arrival at t sees only earlier arrivals, lifetimes that ended
before t and instances that had lived past the threshold before t (so a time split needs
nothing more: a test instance's features are what production would have had at its
arrival). Instances started at or before `trace_start_us` count as earlier arrivals, but
their lifetimes are unknown and enter no statistic; nor does a lifetime of zero.
"""

from typing import Optional, Tuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines import progress, schemas
from pipelines.history_config import history_keys
from pipelines.io import sharding, spill
from predictors.lifetime.history import HISTORY_STATISTICS, history_column, history_statistics


def key_values(instances: pa.Table, columns: Tuple[str, ...]) -> pa.Array:
    """The key of each row: the first non-null, non-empty value of `columns` (null if
    none)."""
    values = [pc.if_else(pc.equal(instances.column(c), ""), None, instances.column(c))
              for c in columns]
    key = values[0] if len(values) == 1 else pc.coalesce(*values)
    return key.combine_chunks() if isinstance(key, pa.ChunkedArray) else key


def shard_by_key(instances: pa.Table, columns: Tuple[str, ...], num_shards: int,
                 spill_to: Optional[spill.SpillTo]):
    """(shard, the rows of that shard, or a Spilled reference to them) pairs: by a hash of
    the key, rows without one by a hash of their instance_id."""
    key = key_values(instances, columns)
    by_key = sharding.shard_of_strings(key, num_shards)
    by_instance = sharding.shard_of_strings(instances.column("instance_id"), num_shards)
    shards = np.where(key.is_null().to_numpy(zero_copy_only=False), by_instance, by_key)
    return spill.split_spilled(instances, shards, spill_to)


def key_history(instances: pa.Table, key: str, columns: Tuple[str, ...], config) -> pa.Table:
    """`instances` with the `key` history columns computed over its rows (every row of each
    of its keys must be there)."""
    key_array = key_values(instances, columns)
    has_key = key_array.is_valid().to_numpy(zero_copy_only=False)
    codes = pc.dictionary_encode(key_array).indices.fill_null(-1).to_numpy(
        zero_copy_only=False).astype(np.int64)
    start_us = instances.column("start_time").to_numpy(zero_copy_only=False).astype(np.int64)
    end = instances.column("end_time")
    ended = end.is_valid().to_numpy(zero_copy_only=False)
    end_us = end.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    # A lifetime enters the statistics when it started in the trace and is positive (a
    # zero one, a dead letter of the lifetime stage, has no log10).
    lifetime_known = (start_us > config.trace_start_us) & (~ended | (end_us > start_us))
    statistics = history_statistics(
        codes, start_us, end_us, ended, lifetime_known,
        long_lived_threshold_s=float(config.long_lived_threshold_s),
        lookback_s=float(config.lookback_s))
    for statistic in HISTORY_STATISTICS:
        name = history_column(key, statistic)
        index = instances.schema.get_field_index(name)
        values = pa.array(statistics[statistic], pa.float64(), mask=~has_key)
        instances = instances.set_column(index, instances.schema.field(index), values)
    return instances


def add_key_history(element, key: str, columns: Tuple[str, ...], config):
    """(shard, tables or Spilled references of its rows) → the shard's rows, one table, with
    the `key` history columns filled."""
    _, pieces = element
    instances = sharding.concat(map(spill.load, pieces), schemas.INSTANCES)
    if instances.num_rows:
        progress.count(f"history.{key}_instances", instances.num_rows)
        yield key_history(instances, key, columns, config)


class AddHistory(beam.PTransform):
    """PCollection[instances table] → the same rows (regrouped) with the history columns of
    a CustomerHistoryConfig filled."""

    def __init__(self, config):
        super().__init__()
        self._config = config

    def expand(self, instances):
        spill_to = spill.spill_to()
        for key, columns in history_keys(self._config):
            label = "".join(part.title() for part in key.split("_"))
            instances = (
                instances
                | f"ShardBy{label}" >> beam.FlatMap(shard_by_key, columns,
                                                    self._config.num_shards, spill_to)
                | f"Group{label}" >> beam.GroupByKey()
                | f"{label}History" >> beam.FlatMap(add_key_history, key, columns,
                                                    self._config))
        return instances
