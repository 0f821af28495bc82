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
numpy builds the instance runs and joins the usage windows (pipelines.sources.instance_runs,
shared with the 2011 trace). `num_shards` bounds the memory of one shard.

A table read from files must be whole (pipelines.sources.parts: numbered shards from the
first to the last present, one `-of-` count), else the run fails naming the missing shards
unless `allow_missing_parts`; source_counts.parts says which were read. End events that end
no run, runs still going after their collection ended, runs across the time gap of missing
shards and SCHEDULEs after the trace end are exclusions (pipelines.sources.instance_runs).
"""

import json
import math

import apache_beam as beam
import numpy as np
import pyarrow as pa

from pipelines import schemas
from pipelines.io import columnar
from pipelines.io.columnar import DISTRIBUTION, FLOAT, INT, Field
from pipelines.io.dead_letters import (
    COUNTS,
    DEAD_LETTERS,
    EXCLUSIONS,
    ROWS,
    ChunkParser,
    ParseChunks,
    RowError,
    SplitByTag,
    get_field,
    to_enum,
    to_float,
    to_int,
)
from pipelines.io.readers import ReadTableChunks, file_format, read_bigquery
from pipelines.sources import instance_runs, parts

SOURCE = "google_v3"

EVENT_TYPES = {0: "SUBMIT", 1: "QUEUE", 2: "ENABLE", 3: "SCHEDULE", 4: "EVICT", 5: "FAIL",
               6: "FINISH", 7: "KILL", 8: "LOST", 9: "UPDATE_PENDING", 10: "UPDATE_RUNNING"}
SCHEDULE = 3
TERMINAL_TYPES = (4, 5, 6, 7, 8)
MACHINE_EVENT_TYPES = {0: "EVENT_TYPE_UNKNOWN", 1: "ADD", 2: "REMOVE", 3: "UPDATE"}

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


RUN_COLUMNS = ("collection_id", "instance_index", "machine_id", "priority", "scheduling_class",
               "collection_type", "alloc_collection_id", "alloc_instance_index")
COLLECTION_COLUMNS = ("user", "collection_name", "collection_logical_name", "vertical_scaling",
                      "scheduler", "parent_collection_id")
TRACE = instance_runs.Trace(
    source=SOURCE, events_table="instance_events", usage_table="instance_usage",
    names=EVENT_TYPES, schedule=SCHEDULE, ends=TERMINAL_TYPES, run_columns=RUN_COLUMNS,
    collection_columns=COLLECTION_COLUMNS, events=INSTANCE_EVENTS, usage=INSTANCE_USAGE,
    collections=COLLECTION_EVENTS)


shard_by_collection = instance_runs.shard_by_collection


def build_instances(events: pa.Table, collections: pa.Table, pool: str):
    """Instance runs (SCHEDULE → terminal event) from the events of whole collections:
    (INSTANCES table, dead letters), as instance_runs.build_instances gives them."""
    return instance_runs.build_instances(events, collections, pool, TRACE)


def join_usage(events: pa.Table, usage: pa.Table):
    """Canonical usage rows: every window joined with its instance's request in force.

    Returns (USAGE table, dead letters for windows with no qualifying event).
    """
    return instance_runs.join_usage(events, usage, TRACE)


class ReadGoogleV3(beam.PTransform):
    """GoogleV3Source config → dict of PCollections of Arrow tables.

    Keys: machines, instances, usage (canonical tables), dead_letters, counts, exclusions
    (((source, table, reason), rows) pairs) and parts (((source, table), the parts read)).
    """

    def __init__(self, source, columnar_readers: bool = True):
        """`columnar_readers=False` reads every table row by row (the reference path)."""
        super().__init__()
        self._source = source
        self._num_shards = source.num_shards
        self._columnar = columnar_readers
        self._parts = {}

    def _read(self, pbegin, name, parser):
        """(rows, dead letters, counts) of table `name` (empty if not configured); the parts
        of a file input checked first (RunFailed for a gap unless allow_missing_parts)."""
        table_input = getattr(self._source, name)
        which = table_input.WhichOneof("input")
        if which is None:
            empty = pbegin | f"No{name}" >> beam.Create([])
            return empty, empty, empty
        if which == "path":
            self._parts[name] = parts.read_parts(table_input.path, f"{SOURCE}.{name}.path",
                                                 self._source.allow_missing_parts)
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

    def _coverage(self, pbegin, events):
        """The Coverage side input of the parsed instance `events` (the neighbour shards of
        a gap parsed again for their times)."""
        table_input = self._source.instance_events
        found = self._parts.get("instance_events")
        neighbours = instance_runs.gap_neighbour_rows(
            pbegin, found.gap_neighbours() if found else [],
            lambda path: columnar.ParseFiles(path, table_input.format, InstanceEventColumns()),
            "GapPartsinstance_events")
        return instance_runs.coverage(events, neighbours, "Coverageinstance_events")

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

        grouped = instance_runs.group_by_collection_shard(
            {"events": events, "usage": usage, "collections": collections}, self._num_shards,
            "GroupByCollectionShard")
        built = (
            grouped
            | "BuildInstancesAndJoinUsage" >> beam.FlatMap(
                instance_runs.build_shard, pool, TRACE, self._coverage(pbegin, events))
            | "SplitShardOutputs" >> SplitByTag(("instances", "usage", DEAD_LETTERS, COUNTS,
                                                 EXCLUSIONS)))
        dead_letters = (
            (events_dead, usage_dead, coll_dead, machines_dead, built[DEAD_LETTERS])
            | "FlattenDeadLetters" >> beam.Flatten())
        all_counts = (
            (events_counts, usage_counts, coll_counts, machines_counts, built[COUNTS])
            | "FlattenCounts" >> beam.Flatten())
        return {"machines": machines, "instances": built["instances"], "usage": built["usage"],
                "dead_letters": dead_letters, "counts": all_counts,
                "exclusions": built[EXCLUSIONS],
                "parts": pbegin | "Parts" >> beam.Create(parts.described(SOURCE, self._parts))}
