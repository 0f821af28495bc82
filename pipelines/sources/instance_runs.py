"""Instance runs from a Google trace's event log, and usage windows joined with the request in
force at their start: one implementation for the Google traces (v3 and 2011), parameterised
by each trace's names and event codes (`Trace`).

Parsed events are an Arrow table with time, type, collection_id, instance_index, cpus and
memory, and the columns a run takes from its SCHEDULE (`Trace.run_columns`). Events of one
instance are ordered by time, then event code: both traces number SUBMIT before SCHEDULE
before the end events, so a task scheduled and ended at one timestamp is one run. An end
event at AFTER_TRACE_END (the largest int64, the traces' "after the trace end") leaves its
run censored. Everything is per shard of collections (`group_by_collection_shard`), in numpy:
sorts and binary searches, no per-row Python.
"""

import dataclasses
from typing import Dict, List, Tuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines import schemas
from pipelines.io import sharding, spill
from pipelines.io.dead_letters import COUNTS, DEAD_LETTERS, counts, rows_as_dead_letters
from pipelines.sources import join

# The traces mark times after the end of the trace with the largest int64.
AFTER_TRACE_END = np.iinfo(np.int64).max
# Rows of a parsed table sharded at a time (see `group_by_collection_shard`).
SHARD_BATCH_ROWS = 1 << 18
SCHEDULE_TWICE = ("SCHEDULE followed by another SCHEDULE of the same instance without a "
                  "terminal event")
NO_REQUEST = "no instance event with cpus > 0 and memory > 0 at or before the window start"
# Usage values copied from the windows, and run features from the request's event.
USAGE_VALUES = ("avg_cpu", "max_cpu", "cpu_usage_distribution", "tail_cpu_usage_distribution",
                "avg_memory", "max_memory")
REQUEST_FEATURES = ("priority", "scheduling_class", "collection_type", "alloc_collection_id")


@dataclasses.dataclass(frozen=True)
class Trace:
    """What the shared code needs of one Google trace.

    Attributes:
      source: the source's name in dead letters and counts (google_v3).
      events_table, usage_table: its instance events' and usage's table names (the same).
      names: event type names by code; schedule: the code that starts a run; ends: the
        codes that end one (EVICT, FAIL, FINISH, KILL, LOST).
      run_columns: instance columns taken from a run's SCHEDULE event (same names).
      collection_columns: instance columns taken from the collection's earliest event.
      events, usage, collections: the schemas of its parsed tables.
    """

    source: str
    events_table: str
    usage_table: str
    names: Dict[int, str]
    schedule: int
    ends: Tuple[int, ...]
    run_columns: Tuple[str, ...]
    collection_columns: Tuple[str, ...]
    events: pa.Schema
    usage: pa.Schema
    collections: pa.Schema


def instance_ids(collection_id, instance_index) -> pa.Array:
    """"collection_id:instance_index" strings."""
    return pc.binary_join_element_wise(pc.cast(collection_id, pa.string()),
                                       pc.cast(instance_index, pa.string()), ":")


def canonical(schema: pa.Schema, columns: dict, n: int) -> pa.Table:
    """A table of `schema` from `columns` (name → array of n values); nulls for the others."""
    return pa.Table.from_arrays(
        [columns.get(f.name, pa.nulls(n, f.type)).cast(f.type) for f in schema], schema=schema)


def sort_events(time: np.ndarray, type_: np.ndarray, key: np.ndarray):
    """(order of the events by (key, time, type), the sorted keys, the sorted types)."""
    order = np.lexsort((type_, time, key))
    return order, key[order], type_[order]


def next_of(positions: np.ndarray, after: np.ndarray, sorted_key: np.ndarray) -> np.ndarray:
    """For each sorted position in `after`, the first of the sorted `positions` past it with
    the same key (-1 if none)."""
    j = np.searchsorted(positions, after, side="right")
    candidate = positions[np.minimum(j, len(positions) - 1)] if len(positions) else after
    ok = (j < len(positions)) & (sorted_key[candidate] == sorted_key[after])
    return np.where(ok, candidate, -1)


def schedule_runs(time: np.ndarray, type_: np.ndarray, key: np.ndarray, trace: Trace):
    """(order, schedules, next_end, broken): the events sorted by (instance `key`, time,
    type), the sorted positions of the SCHEDULEs, of each one's next end event of the same
    instance (-1 if none) and whether another SCHEDULE comes first."""
    order, sorted_key, sorted_type = sort_events(time, type_, key)
    schedules = np.flatnonzero(sorted_type == trace.schedule)
    ends = np.flatnonzero(np.isin(sorted_type, trace.ends))
    next_end = next_of(ends, schedules, sorted_key)
    next_schedule = next_of(schedules, schedules, sorted_key)
    broken = (next_schedule >= 0) & ((next_end < 0) | (next_schedule < next_end))
    return order, schedules, next_end, broken


def first_to_final_end(time: np.ndarray, type_: np.ndarray, key: np.ndarray, trace: Trace):
    """(start, end) event rows of each key's span: its first SCHEDULE to its final end
    event, the first end event after its last SCHEDULE (-1: none, still running). A key
    without a SCHEDULE has no span."""
    order, sorted_key, sorted_type = sort_events(time, type_, key)
    schedules = np.flatnonzero(sorted_type == trace.schedule)
    if not len(schedules):
        return schedules, schedules
    keys = sorted_key[schedules]
    new_key = np.concatenate([[True], keys[1:] != keys[:-1]])
    first, last = schedules[new_key], schedules[np.concatenate([new_key[1:], [True]])]
    final_end = next_of(np.flatnonzero(np.isin(sorted_type, trace.ends)), last, sorted_key)
    return order[first], np.where(final_end >= 0, order[np.maximum(final_end, 0)], -1)


def end_columns(time: np.ndarray, type_: np.ndarray, end: np.ndarray, trace: Trace) -> dict:
    """{end_time, end_type} of runs ending at event rows `end` (-1: none); both null for a
    censored run (no end event, or one at AFTER_TRACE_END)."""
    end_time = np.where(end >= 0, time[np.maximum(end, 0)], AFTER_TRACE_END)
    censored = end_time == AFTER_TRACE_END
    codes = np.array(sorted(trace.names))
    position = np.searchsorted(codes, type_[np.maximum(end, 0)])
    end_type = pa.DictionaryArray.from_arrays(
        pa.array(position, pa.int32(), mask=censored),
        pa.array([trace.names[c] for c in codes], pa.string()))
    return {"end_time": pa.array(np.where(censored, 0, end_time), pa.int64(), mask=censored),
            "end_type": end_type.cast(pa.string())}


def request_events(col: dict, code: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Row of the request in force at each SCHEDULE row `start` (-1 if none): the latest
    event of the instance at or before it with cpus > 0 and memory > 0."""
    has_request = np.nan_to_num(col["cpus"]) > 0
    has_request &= np.nan_to_num(col["memory"]) > 0
    request_rows = np.flatnonzero(has_request)
    request = join.latest_at_or_before(
        code[request_rows], col["time"][request_rows], code[start], col["time"][start],
        tiebreak=(col["type"][request_rows],))
    return np.where(request >= 0, request_rows[np.maximum(request, 0)], -1)


def _taken(table: pa.Table, name: str, rows: np.ndarray):
    """Column `name` at `rows` (-1: null)."""
    values = table.column(name).take(pa.array(np.maximum(rows, 0)))
    return pc.if_else(pa.array(rows < 0), pa.nulls(len(rows), values.type), values)


def build_instances(events: pa.Table, collections: pa.Table, pool: str, trace: Trace):
    """Instance runs (SCHEDULE → end event) from the events of whole collections.

    Returns (INSTANCES table, dead letters). A run ends at the first end event after its
    SCHEDULE; without one it is still running at trace end (end_time null). A SCHEDULE
    followed by another SCHEDULE with no end event between is contradictory and goes to the
    dead letters. The request is the latest one with cpus > 0 and memory > 0 at or before the
    SCHEDULE (null if none).
    """
    col = {name: events.column(name).to_numpy(zero_copy_only=False) for name in
           ("time", "type", "collection_id", "instance_index", "cpus", "memory")}
    code, _ = join.factorize(col["collection_id"], col["instance_index"])
    order, schedules, next_end, broken = schedule_runs(col["time"], col["type"], code, trace)
    dead = rows_as_dead_letters(trace.source, trace.events_table,
                                events.take(order[schedules[broken]]), SCHEDULE_TWICE)
    schedules, next_end = schedules[~broken], next_end[~broken]
    start = order[schedules]
    end = np.where(next_end >= 0, order[np.maximum(next_end, 0)], -1)
    request = request_events(col, code, start)
    starts = events.take(pa.array(start))
    columns = {
        "instance_id": instance_ids(starts.column("collection_id"),
                                    starts.column("instance_index")),
        "pool": pa.array([pool] * len(start), pa.string()),
        "start_time": starts.column("time"),
        **end_columns(col["time"], col["type"], end, trace),
        "cpu_request": _taken(events, "cpus", request),
        "memory_request": _taken(events, "memory", request),
        **{name: starts.column(name) for name in trace.run_columns},
        **collection_features(starts.column("collection_id"), collections,
                              trace.collection_columns),
    }
    return canonical(schemas.INSTANCES, columns, len(start)), dead


def _first_collection_events(collections: pa.Table) -> pa.Table:
    """One row per collection: its earliest event (by time, then type), by collection_id."""
    order, ids, _ = sort_events(collections.column("time").to_numpy(),
                                collections.column("type").to_numpy(),
                                collections.column("collection_id").to_numpy())
    first = order[np.concatenate([[True], ids[1:] != ids[:-1]])] if len(ids) else order
    return collections.take(first)


def collection_features(collection_id, collections: pa.Table, names) -> dict:
    """Columns `names` of each collection's earliest event, for the collections
    `collection_id` (null where it has none)."""
    if collections is None or collections.num_rows == 0 or not names:
        return {}
    first = _first_collection_events(collections)
    ids = first.column("collection_id").to_numpy()
    wanted = np.asarray(collection_id.to_numpy() if hasattr(collection_id, "to_numpy")
                        else collection_id)
    position = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
    return {name: _taken(first, name, np.where(ids[position] == wanted, position, -1))
            for name in names}


def join_usage(events: pa.Table, usage: pa.Table, trace: Trace):
    """Canonical usage rows: every window joined with its instance's request in force (the
    latest event at or before the window start with cpus > 0 and memory > 0; [Bashir21]
    App. A.5). The windows' USAGE_VALUES and the request's REQUEST_FEATURES that the tables
    have are copied, the others null.

    Returns (USAGE table, dead letters for windows with no qualifying event).
    """
    ev = {name: events.column(name).to_numpy(zero_copy_only=False) for name in
          ("time", "type", "collection_id", "instance_index", "cpus", "memory")}
    valid = (np.nan_to_num(ev["cpus"]) > 0) & (np.nan_to_num(ev["memory"]) > 0)
    valid_rows = np.flatnonzero(valid)
    u_collection = usage.column("collection_id").to_numpy()
    u_index = usage.column("instance_index").to_numpy()
    code, _ = join.factorize(np.concatenate([ev["collection_id"], u_collection]),
                             np.concatenate([ev["instance_index"], u_index]))
    event_code, usage_code = code[:len(ev["time"])], code[len(ev["time"]):]
    match = join.latest_at_or_before(
        event_code[valid_rows], ev["time"][valid_rows], usage_code,
        usage.column("start_time").to_numpy(),
        tiebreak=(ev["type"][valid_rows], ev["cpus"][valid_rows], ev["memory"][valid_rows]))
    joined = np.flatnonzero(match >= 0)
    dead = rows_as_dead_letters(trace.source, trace.usage_table,
                                usage.take(np.flatnonzero(match < 0)), NO_REQUEST)
    windows = usage.take(pa.array(joined))
    request = events.take(pa.array(valid_rows[match[joined]]))
    columns = {
        "machine_id": windows.column("machine_id"),
        "instance_id": instance_ids(windows.column("collection_id"),
                                    windows.column("instance_index")),
        "start_time": windows.column("start_time"),
        "end_time": windows.column("end_time"),
        "cpu_limit": request.column("cpus"),
        "memory_limit": request.column("memory"),
        **{name: windows.column(name) for name in USAGE_VALUES if name in usage.column_names},
        **{name: request.column(name) for name in REQUEST_FEATURES
           if name in events.column_names},
    }
    return canonical(schemas.USAGE, columns, len(joined)), dead


def shard_by_collection(tables: List[pa.Table], num_shards: int, spill_to):
    """(collection shard, the rows of `tables` (one parsed table's batches) in that shard or a
    Spilled reference to them, as `spill_to` says) pairs."""
    table = pa.concat_tables(tables)
    shards = sharding.shard_of_ints(table.column("collection_id").to_numpy(), num_shards)
    return spill.split_spilled(table, shards, spill_to)


def group_by_collection_shard(tables: dict, num_shards: int, label: str):
    """{name: PCollection of parsed tables with a collection_id column} → PCollection of
    (shard, {name: [tables or Spilled references]}): every row of a collection in the same
    shard (by a hash of collection_id), each table grouped through files of the run
    (pipelines/io/spill.py); `label` names the grouping's steps.

    Batches are sharded SHARD_BATCH_ROWS rows at a time: each (batch, shard) piece is an
    element the runner groups, and per parsed batch of 20,000 rows their number grows with
    the trace (~785k at the Google 2019 cell-day).
    """
    spill_to = spill.spill_to()
    keyed = {name: (pcoll
                    | f"{label}Batch{name}" >> beam.BatchElements(
                        min_batch_size=SHARD_BATCH_ROWS, max_batch_size=SHARD_BATCH_ROWS,
                        element_size_fn=lambda table: table.num_rows, record_metrics=False)
                    | f"{label}Shard{name}" >> beam.FlatMap(
                        shard_by_collection, num_shards, spill_to))
             for name, pcoll in tables.items()}
    return keyed | label >> beam.CoGroupByKey()


def shard_table(grouped: dict, name: str, schema: pa.Schema) -> pa.Table:
    """The rows of table `name` of a grouped shard (tables or Spilled references)."""
    return sharding.concat(map(spill.load, grouped.get(name, ())), schema)


def build_shard(element, pool: str, trace: Trace):
    """(shard, {events, usage, collections}) → (tag, table) pairs: instances, usage, dead
    letters and the join's counts."""
    _, grouped = element
    events = shard_table(grouped, "events", trace.events)
    usage = shard_table(grouped, "usage", trace.usage)
    collections = shard_table(grouped, "collections", trace.collections)
    if events.num_rows:
        instances, dead = build_instances(events, collections, pool, trace)
        if instances.num_rows:
            yield "instances", instances
        if dead.num_rows:
            # Parsed events that turn out contradictory move from kept to rejected, so the
            # counts of the events still close: read = kept + rejected.
            yield COUNTS, counts(trace.source, trace.events_table, 0, -dead.num_rows,
                                 dead.num_rows)
            yield DEAD_LETTERS, dead
    if usage.num_rows:
        joined, dead = join_usage(events, usage, trace)
        yield COUNTS, counts(trace.source, "usage_join", usage.num_rows, joined.num_rows,
                             dead.num_rows)
        if joined.num_rows:
            yield "usage", joined
        if dead.num_rows:
            yield DEAD_LETTERS, dead
