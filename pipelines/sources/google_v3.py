"""Google cluster trace v3 (2019) → canonical machines, instances and usage tables.

Field names and enums follow the trace's clusterdata_trace_format_v3.proto. Rows arrive as
newline-delimited JSON (plain or .gz, as the public shards are), CSV with a header (nested
records flattened as "record.field"), Parquet, or BigQuery rows; int64 values may be decimal
strings, as BigQuery's JSON export writes them. instance_usage and instance_events in JSON,
CSV, Parquet or BigQuery (by the Storage Read API, `BIGQUERY_COLUMNS` only) are read columnar
(pipelines.io.columnar: Arrow batches, vectorised checks, the rows those cannot vouch for
parsed by the per-row parsers below, which stay the reference).

Instances and usage are built per shard of collections: every event, usage window and
collection event of a collection lands in the same shard (by a hash of collection_id), where
numpy builds the instance runs and joins the usage windows (pipelines.sources.join). `num_shards`
bounds the memory of one shard.
"""

import json
import math
from typing import List

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines import schemas
from pipelines.io import columnar, sharding, spill
from pipelines.io.columnar import DISTRIBUTION, FLOAT, INT, Field
from pipelines.io.dead_letters import (
    COUNTS,
    DEAD_LETTERS,
    ROWS,
    ChunkParser,
    ParseChunks,
    RowError,
    SplitByTag,
    counts,
    get_field,
    rows_as_dead_letters,
    to_enum,
    to_float,
    to_int,
)
from pipelines.io.readers import ReadTableChunks, file_format, read_bigquery
from pipelines.sources import join

SOURCE = "google_v3"

EVENT_TYPES = {0: "SUBMIT", 1: "QUEUE", 2: "ENABLE", 3: "SCHEDULE", 4: "EVICT", 5: "FAIL",
               6: "FINISH", 7: "KILL", 8: "LOST", 9: "UPDATE_PENDING", 10: "UPDATE_RUNNING"}
SCHEDULE = 3
TERMINAL_TYPES = (4, 5, 6, 7, 8)
MACHINE_EVENT_TYPES = {0: "EVENT_TYPE_UNKNOWN", 1: "ADD", 2: "REMOVE", 3: "UPDATE"}
# v3 marks times after the end of the trace with the largest int64.
AFTER_TRACE_END = np.iinfo(np.int64).max
# Rows of a parsed table sharded at a time (see `ReadGoogleV3.expand`).
SHARD_BATCH_ROWS = 1 << 18

INSTANCE_EVENTS = pa.schema([
    ("time", pa.int64()), ("type", pa.int64()), ("collection_id", pa.int64()),
    ("instance_index", pa.int64()), ("machine_id", pa.int64()), ("cpus", pa.float64()),
    ("memory", pa.float64()), ("priority", pa.int64()), ("scheduling_class", pa.int64()),
    ("collection_type", pa.int64()), ("alloc_collection_id", pa.int64()),
    ("alloc_instance_index", pa.int64()),
])

INSTANCE_USAGE = pa.schema([
    ("start_time", pa.int64()), ("end_time", pa.int64()), ("collection_id", pa.int64()),
    ("instance_index", pa.int64()), ("machine_id", pa.int64()), ("avg_cpu", pa.float64()),
    ("max_cpu", pa.float64()), ("avg_memory", pa.float64()), ("max_memory", pa.float64()),
    ("cpu_usage_distribution", pa.list_(pa.float64())),
    ("tail_cpu_usage_distribution", pa.list_(pa.float64())),
])

COLLECTION_EVENTS = pa.schema([
    ("time", pa.int64()), ("type", pa.int64()), ("collection_id", pa.int64()),
    ("user", pa.string()), ("collection_name", pa.string()),
    ("collection_logical_name", pa.string()), ("vertical_scaling", pa.int64()),
    ("scheduler", pa.int64()), ("parent_collection_id", pa.int64()),
])


def _distribution(value, field: str, length: int):
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise RowError(f"{field} is not a list: {value!r}") from None
    if not isinstance(value, list) or len(value) != length:
        raise RowError(f"{field} must hold {length} values, got {value!r}")
    try:
        values = [float(v) for v in value]
    except (TypeError, ValueError):
        raise RowError(f"{field} holds a value that is not a number: {value!r}") from None
    if min(values) < 0 or not all(map(math.isfinite, values)):
        raise RowError(f"{field} holds a negative or non-finite value: {value!r}")
    return values


class InstanceEventParser(ChunkParser):
    """Rows of the v3 instance_events → INSTANCE_EVENTS rows (requests >= 0)."""

    source, table, schema = SOURCE, "instance_events", INSTANCE_EVENTS

    def parse_row(self, row):
        cpus = to_float(get_field(row, "resource_request", "cpus"), "resource_request.cpus",
                        required=False, min_value=0)
        memory = to_float(get_field(row, "resource_request", "memory"),
                          "resource_request.memory", required=False, min_value=0)
        return (
            to_int(row.get("time"), "time", min_value=0),
            to_enum(row.get("type"), "type", EVENT_TYPES),
            to_int(row.get("collection_id"), "collection_id"),
            to_int(row.get("instance_index"), "instance_index", min_value=0),
            to_int(row.get("machine_id"), "machine_id", required=False),
            cpus, memory,
            to_int(row.get("priority"), "priority", required=False, min_value=0),
            to_int(row.get("scheduling_class"), "scheduling_class", required=False, min_value=0),
            to_int(row.get("collection_type"), "collection_type", required=False, min_value=0),
            to_int(row.get("alloc_collection_id"), "alloc_collection_id", required=False),
            to_int(row.get("alloc_instance_index"), "alloc_instance_index", required=False),
        )


class InstanceUsageParser(ChunkParser):
    """Rows of the v3 instance_usage → INSTANCE_USAGE rows (end_time after start_time)."""

    source, table, schema = SOURCE, "instance_usage", INSTANCE_USAGE

    def parse_row(self, row):
        start = to_int(row.get("start_time"), "start_time", min_value=0)
        end = to_int(row.get("end_time"), "end_time", min_value=0)
        if end <= start:
            raise RowError(f"end_time {end} is not after start_time {start}")
        return (
            start, end,
            to_int(row.get("collection_id"), "collection_id"),
            to_int(row.get("instance_index"), "instance_index", min_value=0),
            to_int(row.get("machine_id"), "machine_id"),
            to_float(get_field(row, "average_usage", "cpus"), "average_usage.cpus", min_value=0),
            to_float(get_field(row, "maximum_usage", "cpus"), "maximum_usage.cpus",
                     required=False, min_value=0),
            to_float(get_field(row, "average_usage", "memory"), "average_usage.memory",
                     required=False, min_value=0),
            to_float(get_field(row, "maximum_usage", "memory"), "maximum_usage.memory",
                     required=False, min_value=0),
            _distribution(row.get("cpu_usage_distribution"), "cpu_usage_distribution",
                          len(schemas.CPU_DISTRIBUTION_PERCENTILES)),
            _distribution(row.get("tail_cpu_usage_distribution"), "tail_cpu_usage_distribution",
                          len(schemas.TAIL_CPU_DISTRIBUTION_PERCENTILES)),
        )


class InstanceEventColumns(columnar.ColumnarParser):
    """InstanceEventParser's checks on whole Arrow batches (the columnar reader); an event
    type given by name is read row by row."""

    fields = (
        Field("time", ("time",), INT, required=True, min_value=0),
        Field("type", ("type",), INT, required=True),
        Field("collection_id", ("collection_id",), INT, required=True),
        Field("instance_index", ("instance_index",), INT, required=True, min_value=0),
        Field("machine_id", ("machine_id",), INT),
        Field("cpus", ("resource_request", "cpus"), FLOAT, min_value=0),
        Field("memory", ("resource_request", "memory"), FLOAT, min_value=0),
        Field("priority", ("priority",), INT, min_value=0),
        Field("scheduling_class", ("scheduling_class",), INT, min_value=0),
        Field("collection_type", ("collection_type",), INT, min_value=0),
        Field("alloc_collection_id", ("alloc_collection_id",), INT),
        Field("alloc_instance_index", ("alloc_instance_index",), INT),
    )

    def __init__(self):
        super().__init__(InstanceEventParser())

    def extra_checks(self, values):
        return np.isin(values["type"], list(EVENT_TYPES))


class InstanceUsageColumns(columnar.ColumnarParser):
    """InstanceUsageParser's checks on whole Arrow batches (the columnar reader)."""

    fields = (
        Field("start_time", ("start_time",), INT, required=True, min_value=0),
        Field("end_time", ("end_time",), INT, required=True, min_value=0),
        Field("collection_id", ("collection_id",), INT, required=True),
        Field("instance_index", ("instance_index",), INT, required=True, min_value=0),
        Field("machine_id", ("machine_id",), INT, required=True),
        Field("avg_cpu", ("average_usage", "cpus"), FLOAT, required=True, min_value=0),
        Field("max_cpu", ("maximum_usage", "cpus"), FLOAT, min_value=0),
        Field("avg_memory", ("average_usage", "memory"), FLOAT, min_value=0),
        Field("max_memory", ("maximum_usage", "memory"), FLOAT, min_value=0),
        Field("cpu_usage_distribution", ("cpu_usage_distribution",), DISTRIBUTION,
              length=len(schemas.CPU_DISTRIBUTION_PERCENTILES)),
        Field("tail_cpu_usage_distribution", ("tail_cpu_usage_distribution",), DISTRIBUTION,
              length=len(schemas.TAIL_CPU_DISTRIBUTION_PERCENTILES)),
    )

    def __init__(self):
        super().__init__(InstanceUsageParser())

    def extra_checks(self, values):
        return values["end_time"] > values["start_time"]


# Tables with a columnar reader (the others are read row by row).
COLUMNAR = {"instance_events": InstanceEventColumns, "instance_usage": InstanceUsageColumns}
# The top-level columns the parsers read, per table: a BigQuery table is read by these only
# (the trace's instance_usage has 20 columns; fleetcast estimate dry-runs the same projection).
BIGQUERY_COLUMNS = {
    "instance_events": ("time", "type", "collection_id", "instance_index", "machine_id",
                        "resource_request", "priority", "scheduling_class", "collection_type",
                        "alloc_collection_id", "alloc_instance_index"),
    "instance_usage": ("start_time", "end_time", "collection_id", "instance_index",
                       "machine_id", "average_usage", "maximum_usage", "cpu_usage_distribution",
                       "tail_cpu_usage_distribution"),
    "collection_events": ("time", "type", "collection_id", "user", "collection_name",
                          "collection_logical_name", "vertical_scaling", "scheduler",
                          "parent_collection_id"),
    "machine_events": ("machine_id", "time", "type", "capacity", "platform_id"),
}


class CollectionEventParser(ChunkParser):
    """Rows of the v3 collection_events → COLLECTION_EVENTS rows."""

    source, table, schema = SOURCE, "collection_events", COLLECTION_EVENTS

    def parse_row(self, row):
        def text(name):
            value = row.get(name)
            return None if value is None else str(value)

        return (
            to_int(row.get("time"), "time", min_value=0),
            to_enum(row.get("type"), "type", EVENT_TYPES),
            to_int(row.get("collection_id"), "collection_id"),
            text("user"), text("collection_name"), text("collection_logical_name"),
            to_int(row.get("vertical_scaling"), "vertical_scaling", required=False, min_value=0),
            to_int(row.get("scheduler"), "scheduler", required=False, min_value=0),
            to_int(row.get("parent_collection_id"), "parent_collection_id", required=False),
        )


class MachineEventParser(ChunkParser):
    """machine_events rows straight into the canonical `machines` table."""

    source, table, schema = SOURCE, "machine_events", schemas.MACHINES

    def __init__(self, pool: str):
        self._pool = pool

    def parse_row(self, row):
        event_type = to_enum(row.get("type"), "type", MACHINE_EVENT_TYPES)
        platform = row.get("platform_id")
        return (
            to_int(row.get("machine_id"), "machine_id"),
            to_int(row.get("time"), "time", min_value=0),
            MACHINE_EVENT_TYPES[event_type],
            to_float(get_field(row, "capacity", "cpus"), "capacity.cpus", required=False,
                     min_value=0),
            to_float(get_field(row, "capacity", "memory"), "capacity.memory", required=False,
                     min_value=0),
            None if platform is None else str(platform),
            self._pool,
        )


def _instance_ids(collection_id: pa.Array, instance_index: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(pc.cast(collection_id, pa.string()),
                                       pc.cast(instance_index, pa.string()), ":")


def _first_collection_features(collections: pa.Table) -> pa.Table:
    """One row per collection: its earliest event (by time, then type)."""
    order = np.lexsort((collections.column("type").to_numpy(),
                        collections.column("time").to_numpy(),
                        collections.column("collection_id").to_numpy()))
    ids = collections.column("collection_id").to_numpy()[order]
    first = order[np.concatenate([[True], ids[1:] != ids[:-1]])] if len(ids) else order
    return collections.take(first)


def build_instances(events: pa.Table, collections: pa.Table, pool: str):
    """Instance runs (SCHEDULE → terminal event) from the events of whole collections.

    Returns (INSTANCES table, dead letters). A run ends at the first terminal event (EVICT,
    FAIL, FINISH, KILL, LOST) after its SCHEDULE; without one it is still running at trace end
    (end_time null). A SCHEDULE followed by another SCHEDULE with no terminal event between is
    contradictory and goes to the dead letters. The request is the latest one with cpus > 0
    and memory > 0 at or before the SCHEDULE (null if none).
    """
    col = {name: events.column(name).to_numpy(zero_copy_only=False) for name in
           ("time", "type", "collection_id", "instance_index", "cpus", "memory")}
    code, _ = join.factorize(col["collection_id"], col["instance_index"])
    order, schedules, next_terminal, broken = _schedule_runs(col, code)
    dead = rows_as_dead_letters(
        SOURCE, "instance_events", events.take(order[schedules[broken]]),
        "SCHEDULE followed by another SCHEDULE of the same instance without a terminal event")
    schedules, next_terminal = schedules[~broken], next_terminal[~broken]
    start = order[schedules]
    end = np.where(next_terminal >= 0, order[np.maximum(next_terminal, 0)], -1)
    return _instances_table(events, col, collections, pool, start, end,
                            _request_events(col, code, start)), dead


def _schedule_runs(col: dict, code: np.ndarray):
    """(order, schedules, next_terminal, broken): the events sorted by (instance, time,
    type), the sorted positions of the SCHEDULEs, of each one's next terminal event of the
    same instance (-1 if none) and whether another SCHEDULE comes first."""
    order = np.lexsort((col["type"], col["time"], code))
    sorted_code, sorted_type = code[order], col["type"][order]
    schedules = np.flatnonzero(sorted_type == SCHEDULE)
    terminals = np.flatnonzero(np.isin(sorted_type, TERMINAL_TYPES))

    def next_of(positions, after):
        j = np.searchsorted(positions, after, side="right")
        candidate = positions[np.minimum(j, len(positions) - 1)] if len(positions) else after
        ok = (j < len(positions)) & (sorted_code[candidate] == sorted_code[after])
        return np.where(ok, candidate, -1)

    next_terminal = next_of(terminals, schedules)
    next_schedule = next_of(schedules, schedules)
    broken = (next_schedule >= 0) & ((next_terminal < 0) | (next_schedule < next_terminal))
    return order, schedules, next_terminal, broken


def _request_events(col: dict, code: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Row of the request in force at each SCHEDULE row `start` (-1 if none): the latest
    event of the instance at or before it with cpus > 0 and memory > 0."""
    has_request = np.nan_to_num(col["cpus"]) > 0
    has_request &= np.nan_to_num(col["memory"]) > 0
    request_rows = np.flatnonzero(has_request)
    request = join.latest_at_or_before(
        code[request_rows], col["time"][request_rows], code[start], col["time"][start],
        tiebreak=(col["type"][request_rows],))
    return np.where(request >= 0, request_rows[np.maximum(request, 0)], -1)


def _instances_table(events: pa.Table, col: dict, collections: pa.Table, pool: str,
                     start: np.ndarray, end: np.ndarray, request_event: np.ndarray) -> pa.Table:
    """The INSTANCES rows of runs from event rows `start` to `end` (-1: still running);
    `col` holds the events' time and type as numpy arrays."""
    end_time = np.where(end >= 0, col["time"][np.maximum(end, 0)], AFTER_TRACE_END)
    censored = end_time == AFTER_TRACE_END
    end_type = np.array([EVENT_TYPES[t] for t in col["type"][np.maximum(end, 0)]], dtype=object)
    end_type[censored] = None

    def take(name, rows, missing):
        values = events.column(name).take(pa.array(np.maximum(rows, 0)))
        return pc.if_else(pa.array(missing), pa.nulls(len(rows), values.type), values)

    no_request = request_event < 0
    starts = events.take(pa.array(start))
    features = _collection_features_for(starts.column("collection_id"), collections)
    n = len(start)
    instances = {
        "instance_id": _instance_ids(starts.column("collection_id"),
                                     starts.column("instance_index")),
        "collection_id": starts.column("collection_id"),
        "instance_index": starts.column("instance_index"),
        "machine_id": starts.column("machine_id"),
        "pool": pa.array([pool] * n, pa.string()),
        "start_time": starts.column("time"),
        "end_time": pa.array(np.where(censored, 0, end_time), pa.int64(), mask=censored),
        "end_type": pa.array(end_type, pa.string()),
        "cpu_request": take("cpus", request_event, no_request),
        "memory_request": take("memory", request_event, no_request),
        **{name: starts.column(name) for name in (
            "priority", "scheduling_class", "collection_type", "alloc_collection_id",
            "alloc_instance_index")},
        **features,
    }
    return pa.Table.from_arrays(
        [instances.get(f.name, pa.nulls(n, f.type)).cast(f.type) for f in schemas.INSTANCES],
        schema=schemas.INSTANCES)


def _collection_features_for(collection_id, collections: pa.Table) -> dict:
    names = ("user", "collection_name", "collection_logical_name", "vertical_scaling",
             "scheduler", "parent_collection_id")
    if collections is None or collections.num_rows == 0:
        return {}
    first = _first_collection_features(collections)
    ids = first.column("collection_id").to_numpy()
    wanted = np.asarray(collection_id.to_numpy() if hasattr(collection_id, "to_numpy")
                        else collection_id)
    position = np.minimum(np.searchsorted(ids, wanted), len(ids) - 1)
    missing = ids[position] != wanted
    return {name: pc.if_else(pa.array(missing),
                             pa.nulls(len(wanted), first.column(name).type),
                             first.column(name).take(pa.array(position)))
            for name in names}


def join_usage(events: pa.Table, usage: pa.Table):
    """Canonical usage rows: every window joined with its instance's request in force.

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
    dead = rows_as_dead_letters(
        SOURCE, "instance_usage", usage.take(np.flatnonzero(match < 0)),
        "no instance event with cpus > 0 and memory > 0 at or before the window start")
    windows = usage.take(pa.array(joined))
    request = events.take(pa.array(valid_rows[match[joined]]))
    columns = {
        "machine_id": windows.column("machine_id"),
        "instance_id": _instance_ids(windows.column("collection_id"),
                                     windows.column("instance_index")),
        "start_time": windows.column("start_time"),
        "end_time": windows.column("end_time"),
        "cpu_limit": request.column("cpus"),
        "memory_limit": request.column("memory"),
        **{name: windows.column(name) for name in (
            "avg_cpu", "max_cpu", "cpu_usage_distribution", "tail_cpu_usage_distribution",
            "avg_memory", "max_memory")},
        **{name: request.column(name) for name in (
            "priority", "scheduling_class", "collection_type", "alloc_collection_id")},
    }
    table = pa.Table.from_arrays([columns[f.name] for f in schemas.USAGE], schema=schemas.USAGE)
    return table, dead


def shard_by_collection(tables: List[pa.Table], num_shards: int, spill_to):
    """(collection shard, the rows of `tables` (one parsed table's batches) in that shard or a
    Spilled reference to them, as `spill_to` says) pairs."""
    table = pa.concat_tables(tables)
    shards = sharding.shard_of_ints(table.column("collection_id").to_numpy(), num_shards)
    return spill.split_spilled(table, shards, spill_to)


def build_shard(element, pool: str):
    """(shard, {events, usage, collections}) → (tag, table) pairs: instances, usage, dead
    letters and the join's counts."""
    _, grouped = element
    events, usage, collections = (
        sharding.concat(map(spill.load, grouped[name]), schema) for name, schema in (
            ("events", INSTANCE_EVENTS), ("usage", INSTANCE_USAGE),
            ("collections", COLLECTION_EVENTS)))
    if events.num_rows:
        instances, dead = build_instances(events, collections, pool)
        if instances.num_rows:
            yield "instances", instances
        if dead.num_rows:
            # Parsed events that turn out contradictory move from kept to rejected, so the
            # counts of instance_events still close: read = kept + rejected.
            yield COUNTS, counts(SOURCE, "instance_events", 0, -dead.num_rows, dead.num_rows)
            yield DEAD_LETTERS, dead
    if usage.num_rows:
        joined, dead = join_usage(events, usage)
        yield COUNTS, counts(SOURCE, "usage_join", usage.num_rows, joined.num_rows,
                             dead.num_rows)
        if joined.num_rows:
            yield "usage", joined
        if dead.num_rows:
            yield DEAD_LETTERS, dead


class ReadGoogleV3(beam.PTransform):
    """GoogleV3Source config → dict of PCollections of Arrow tables.

    Keys: machines, instances, usage (canonical tables), dead_letters, counts.
    """

    def __init__(self, source, columnar_readers: bool = True):
        """`columnar_readers=False` reads every table row by row (the reference path)."""
        super().__init__()
        self._source = source
        self._num_shards = source.num_shards
        self._columnar = columnar_readers

    def _read(self, pbegin, name, parser):
        table_input = getattr(self._source, name)
        which = table_input.WhichOneof("input")
        if which is None:
            empty = pbegin | f"No{name}" >> beam.Create([])
            return empty, empty, empty
        if (self._columnar and name in COLUMNAR and which == "path"
                and columnar.supports(file_format(table_input))):
            parsed = pbegin | f"Read{name}" >> columnar.ParseFiles(
                table_input.path, table_input.format, COLUMNAR[name]())
        elif self._columnar and name in COLUMNAR and which != "path":
            parsed = (pbegin
                      | f"Read{name}" >> read_bigquery(table_input, BIGQUERY_COLUMNS[name])
                      | f"Parse{name}" >> columnar.ParseTables(COLUMNAR[name]()))
        else:
            parsed = (pbegin
                      | f"Read{name}" >> ReadTableChunks(table_input,
                                                         columns=BIGQUERY_COLUMNS[name])
                      | f"Parse{name}" >> ParseChunks(parser))
        return parsed[ROWS], parsed[DEAD_LETTERS], parsed[COUNTS]

    def expand(self, pbegin):
        pool = self._source.pool
        events, events_dead, events_counts = self._read(
            pbegin, "instance_events", InstanceEventParser())
        usage, usage_dead, usage_counts = self._read(
            pbegin, "instance_usage", InstanceUsageParser())
        collections, coll_dead, coll_counts = self._read(
            pbegin, "collection_events", CollectionEventParser())
        machines, machines_dead, machines_counts = self._read(
            pbegin, "machine_events", MachineEventParser(pool))

        # Each table is grouped through files of the run (pipelines/io/spill.py).
        spill_to = spill.spill_to()

        # Batches are sharded SHARD_BATCH_ROWS rows at a time: each (batch, shard) piece is an
        # element the runner groups, and per parsed batch of 20,000 rows their number grows
        # with the trace (~785k at the cell-day).
        def keyed(pcoll, label):
            return (pcoll
                    | f"Batch{label}" >> beam.BatchElements(
                        min_batch_size=SHARD_BATCH_ROWS, max_batch_size=SHARD_BATCH_ROWS,
                        element_size_fn=lambda table: table.num_rows, record_metrics=False)
                    | f"Shard{label}" >> beam.FlatMap(
                        shard_by_collection, self._num_shards, spill_to))

        built = (
            {"events": keyed(events, "Events"), "usage": keyed(usage, "Usage"),
             "collections": keyed(collections, "Collections")}
            | "GroupByCollectionShard" >> beam.CoGroupByKey()
            | "BuildInstancesAndJoinUsage" >> beam.FlatMap(build_shard, pool)
            | "SplitShardOutputs" >> SplitByTag(("instances", "usage", DEAD_LETTERS, COUNTS)))
        dead_letters = (
            (events_dead, usage_dead, coll_dead, machines_dead, built[DEAD_LETTERS])
            | "FlattenDeadLetters" >> beam.Flatten())
        all_counts = (
            (events_counts, usage_counts, coll_counts, machines_counts, built[COUNTS])
            | "FlattenCounts" >> beam.Flatten())
        return {"machines": machines, "instances": built["instances"], "usage": built["usage"],
                "dead_letters": dead_letters, "counts": all_counts}


# What each TableInput choice must hold, for the message of an empty one.
_TABLE_INPUT_CONTENTS = {"path": "a file pattern (local or gs://)",
                         "bigquery_table": "'dataset.table' or 'project:dataset.table'",
                         "bigquery_query": "a SQL query"}


def _validate_table_input(check, message, field: str, required: bool):
    which = message.WhichOneof("input")
    if which is None:
        if required:
            check.fail(field, "is required (path, bigquery_table or bigquery_query)")
    elif not getattr(message, which).strip():
        check.fail(f"{field}.{which}", f"is empty: give {_TABLE_INPUT_CONTENTS[which]}")
    elif which == "path":
        check.path_exists(message.path, f"{field}.path")
    elif which == "bigquery_table":
        check.bigquery_table(message.bigquery_table, f"{field}.bigquery_table")


def validate_config(check, source, field: str = "google_v3"):
    """Checks a GoogleV3Source message (configs/checks.py Checker)."""
    check.positive(source, "num_shards", field)
    _validate_table_input(check, source.instance_events, f"{field}.instance_events", True)
    for name in ("instance_usage", "machine_events", "collection_events"):
        _validate_table_input(check, getattr(source, name), f"{field}.{name}", False)
