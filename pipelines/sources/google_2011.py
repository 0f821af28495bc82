"""Google cluster trace 2011 (clusterdata-2011-2) → canonical machines, instances and usage.

The trace's own parts: gzipped CSV without a header, the columns of its schema document in
order (`*_COLUMNS`), times in µs, requests and capacities normalised to the largest machine,
an empty field a null. job_events, task_events and task_usage are read columnar (headerless
CSV through pipelines.io.columnar; the per-row parsers below stay the reference),
machine_events row by row; every malformed row is a dead letter with its reason. Parsed
events take v3's names (job_id → collection_id, task_index → instance_index, event_type →
type), so the runs and the usage join are pipelines.sources.instance_runs, shared with v3.

Units (`unit`): TASKS, one row per task run, a SCHEDULE to the task's next end event (EVICT,
FAIL, FINISH, KILL, LOST), as v3 builds them from task_events (with job names from
job_events, usage joined from task_usage); JOBS, one row per job from job_events alone, its
first SCHEDULE to its final end event (the first after its last SCHEDULE; censored if none).
Both are built per shard of jobs (a hash of job_id, `num_shards`).

Choices where the trace is silent:
- An event at time 0 happened before the trace window (which opens at 600 s): it stays at
  0, and the lifetime stage reads start_time <= trace_start_us = 0 as running before it.
- An event at 2^63 - 1 (after the trace end): an end event there leaves its run censored,
  as in v3; a SCHEDULE there is excluded, never an instance. (The first half of the month's
  job_events and 20 h of task_events have none.)
- Parts: each table's files must be whole (pipelines.sources.parts: every number from the
  first to the last present, one `-of-` count), else the run fails naming the missing parts
  unless `allow_missing_parts`; source_counts.parts says which were read. End events that end
  no run, runs still going after their job ended and runs across the time gap of missing
  parts are exclusions (pipelines.sources.instance_runs).
- missing_info is not read: an event the trace synthesised (missing_info set) counts as any
  other. A job or task never scheduled has no row; events of one timestamp order by type.
"""

import apache_beam as beam
import numpy as np
import pyarrow as pa

from configs import fleetcast_pb2
from pipelines import schemas
from pipelines.io import columnar
from pipelines.io.columnar import FLOAT, INT, TEXT, Field
from pipelines.io.dead_letters import (
    COUNTS,
    DEAD_LETTERS,
    EXCLUSIONS,
    ROWS,
    ChunkParser,
    ParseChunks,
    RowError,
    SplitByTag,
    text_or_none,
    to_enum,
    to_float,
    to_int,
)
from pipelines.io.readers import ReadFileChunks
from pipelines.sources import instance_runs, parts

SOURCE = "google_2011"
Unit = fleetcast_pb2.Google2011Source.Unit
CSV = fleetcast_pb2.TableInput.CSV

JOB_EVENTS_COLUMNS = ("time", "missing_info", "job_id", "event_type", "user",
                      "scheduling_class", "job_name", "logical_job_name")
TASK_EVENTS_COLUMNS = ("time", "missing_info", "job_id", "task_index", "machine_id",
                       "event_type", "user", "scheduling_class", "priority", "cpu_request",
                       "memory_request", "disk_request", "different_machines_restriction")
MACHINE_EVENTS_COLUMNS = ("time", "machine_id", "event_type", "platform_id", "cpus", "memory")
TASK_USAGE_COLUMNS = (
    "start_time", "end_time", "job_id", "task_index", "machine_id", "cpu_rate",
    "canonical_memory_usage", "assigned_memory_usage", "unmapped_page_cache",
    "total_page_cache", "maximum_memory_usage", "disk_io_time", "local_disk_space_usage",
    "maximum_cpu_rate", "maximum_disk_io_time", "cycles_per_instruction",
    "memory_accesses_per_instruction", "sample_portion", "aggregation_type",
    "sampled_cpu_usage")

EVENT_TYPES = {0: "SUBMIT", 1: "SCHEDULE", 2: "EVICT", 3: "FAIL", 4: "FINISH", 5: "KILL",
               6: "LOST", 7: "UPDATE_PENDING", 8: "UPDATE_RUNNING"}
SCHEDULE = 1
END_TYPES = (2, 3, 4, 5, 6)
MACHINE_EVENT_TYPES = {0: "ADD", 1: "REMOVE", 2: "UPDATE"}

TASK_EVENTS = pa.schema([
    ("time", pa.int64()), ("type", pa.int64()), ("collection_id", pa.int64()),
    ("instance_index", pa.int64()), ("machine_id", pa.int64()), ("cpus", pa.float64()),
    ("memory", pa.float64()), ("priority", pa.int64()), ("scheduling_class", pa.int64()),
    ("user", pa.string()),
])
JOB_EVENTS = pa.schema([
    ("time", pa.int64()), ("type", pa.int64()), ("collection_id", pa.int64()),
    ("user", pa.string()), ("scheduling_class", pa.int64()), ("collection_name", pa.string()),
    ("collection_logical_name", pa.string()),
])
TASK_USAGE = pa.schema([
    ("start_time", pa.int64()), ("end_time", pa.int64()), ("collection_id", pa.int64()),
    ("instance_index", pa.int64()), ("machine_id", pa.int64()), ("avg_cpu", pa.float64()),
    ("max_cpu", pa.float64()), ("avg_memory", pa.float64()), ("max_memory", pa.float64()),
])

TRACE = instance_runs.Trace(
    source=SOURCE, events_table="task_events", usage_table="task_usage", names=EVENT_TYPES,
    schedule=SCHEDULE, ends=END_TYPES,
    run_columns=("collection_id", "instance_index", "machine_id", "priority",
                 "scheduling_class", "user"),
    collection_columns=("collection_name", "collection_logical_name"),
    events=TASK_EVENTS, usage=TASK_USAGE, collections=JOB_EVENTS)
# A job's columns, from its first SCHEDULE (unit JOBS).
JOB_COLUMNS = ("collection_id", "user", "scheduling_class", "collection_name",
               "collection_logical_name")


class _FieldParser(ChunkParser):
    """A per-row parser of flat CSV rows whose values are its columnar twin's `fields` (in
    its schema's order; each field's path is the trace's column name)."""

    fields = ()

    def parse_row(self, row):
        values = tuple(_value(row.get(f.path[0]), f) for f in self.fields)
        self.check_row(dict(zip((f.name for f in self.fields), values)))
        return values

    def check_row(self, values: dict):
        """Raises RowError for a row whose values contradict each other."""


def _value(value, f: Field):
    """The per-row reading of field `f` (the event type, `type`, is an enum)."""
    if f.kind == TEXT:
        return text_or_none(value, f.path[0], required=f.required)
    if f.name == "type":
        return to_enum(value, f.path[0], EVENT_TYPES)
    read = to_int if f.kind == INT else to_float
    return read(value, f.path[0], required=f.required, min_value=f.min_value)


def _id(name: str, column: str, min_value=None) -> Field:
    return Field(name, (column,), INT, required=True, min_value=min_value)


TIME = Field("time", ("time",), INT, required=True, min_value=0)
TYPE = Field("type", ("event_type",), INT, required=True)
SCHEDULING_CLASS = Field("scheduling_class", ("scheduling_class",), INT, min_value=0)
USER = Field("user", ("user",), TEXT)


class TaskEventParser(_FieldParser):
    """Rows of task_events → TASK_EVENTS rows (requests >= 0)."""

    source, table, schema = SOURCE, "task_events", TASK_EVENTS
    fields = (
        TIME, TYPE, _id("collection_id", "job_id"), _id("instance_index", "task_index", 0),
        Field("machine_id", ("machine_id",), INT),
        Field("cpus", ("cpu_request",), FLOAT, min_value=0),
        Field("memory", ("memory_request",), FLOAT, min_value=0),
        Field("priority", ("priority",), INT, min_value=0), SCHEDULING_CLASS, USER,
    )


class JobEventParser(_FieldParser):
    """Rows of job_events → JOB_EVENTS rows."""

    source, table, schema = SOURCE, "job_events", JOB_EVENTS
    fields = (
        TIME, TYPE, _id("collection_id", "job_id"), USER, SCHEDULING_CLASS,
        Field("collection_name", ("job_name",), TEXT),
        Field("collection_logical_name", ("logical_job_name",), TEXT),
    )


class TaskUsageParser(_FieldParser):
    """Rows of task_usage → TASK_USAGE rows (end_time after start_time, usage >= 0)."""

    source, table, schema = SOURCE, "task_usage", TASK_USAGE
    fields = (
        Field("start_time", ("start_time",), INT, required=True, min_value=0),
        Field("end_time", ("end_time",), INT, required=True, min_value=0),
        _id("collection_id", "job_id"), _id("instance_index", "task_index", 0),
        _id("machine_id", "machine_id"),
        Field("avg_cpu", ("cpu_rate",), FLOAT, required=True, min_value=0),
        Field("max_cpu", ("maximum_cpu_rate",), FLOAT, min_value=0),
        Field("avg_memory", ("canonical_memory_usage",), FLOAT, min_value=0),
        Field("max_memory", ("maximum_memory_usage",), FLOAT, min_value=0),
    )

    def check_row(self, values):
        if values["end_time"] <= values["start_time"]:
            raise RowError(f"end_time {values['end_time']} is not after start_time "
                           f"{values['start_time']}")


class _Columns(columnar.ColumnarParser):
    """A _FieldParser's checks on whole Arrow batches; an event type given by name (or
    unknown) is read row by row."""

    def __init__(self, row_parser: _FieldParser):
        self.fields = row_parser.fields
        super().__init__(row_parser)

    def extra_checks(self, values):
        ok = super().extra_checks(values)
        if "type" in values:
            ok &= np.isin(values["type"], list(EVENT_TYPES))
        if "end_time" in values:
            ok &= values["end_time"] > values["start_time"]
        return ok


class MachineEventParser(ChunkParser):
    """machine_events rows straight into the canonical `machines` table."""

    source, table, schema = SOURCE, "machine_events", schemas.MACHINES

    def __init__(self, pool: str):
        self._pool = pool

    def parse_row(self, row):
        return (
            to_int(row.get("machine_id"), "machine_id"),
            to_int(row.get("time"), "time", min_value=0),
            MACHINE_EVENT_TYPES[to_enum(row.get("event_type"), "event_type",
                                        MACHINE_EVENT_TYPES)],
            to_float(row.get("cpus"), "cpus", required=False, min_value=0),
            to_float(row.get("memory"), "memory", required=False, min_value=0),
            text_or_none(row.get("platform_id"), "platform_id"),
            self._pool,
        )


# Per table: its columns in the files and its per-row parser.
TABLES = {"job_events": (JOB_EVENTS_COLUMNS, JobEventParser),
          "task_events": (TASK_EVENTS_COLUMNS, TaskEventParser),
          "task_usage": (TASK_USAGE_COLUMNS, TaskUsageParser)}


def job_instances(jobs: pa.Table, pool: str) -> pa.Table:
    """Canonical instances of unit JOBS from the job_events of whole jobs: one row per job
    with a SCHEDULE, its first SCHEDULE to its final end event (null end: still running)."""
    return job_runs(jobs, pool)[0]


def job_runs(jobs: pa.Table, pool: str,
             coverage: instance_runs.Coverage = instance_runs.NO_COVERAGE):
    """(job_instances, {exclusion reason: job events}): jobs whose first SCHEDULE is after
    the trace end or whose span crosses a gap of missing parts, and end events outside every
    job's span, are excluded (instance_runs.spans)."""
    col = {name: jobs.column(name).to_numpy() for name in ("time", "type", "collection_id")}
    start, end, excluded = instance_runs.spans(col["time"], col["type"], col["collection_id"],
                                               TRACE, coverage)
    starts = jobs.take(pa.array(start))
    columns = {
        "instance_id": starts.column("collection_id").cast(pa.string()),
        "pool": pa.array([pool] * len(start), pa.string()),
        "start_time": starts.column("time"),
        **instance_runs.end_columns(col["time"], col["type"], end, TRACE),
        **{name: starts.column(name) for name in JOB_COLUMNS},
    }
    return instance_runs.canonical(schemas.INSTANCES, columns, len(start)), excluded


def build_job_shard(element, pool: str,
                    coverage: instance_runs.Coverage = instance_runs.NO_COVERAGE):
    """(shard, {jobs}) → (tag, value) pairs of unit JOBS: instances, exclusions and the
    counts they move."""
    _, grouped = element
    jobs = instance_runs.shard_table(grouped, "jobs", JOB_EVENTS)
    if jobs.num_rows:
        instances, excluded = job_runs(jobs, pool, coverage)
        if instances.num_rows:
            yield "instances", instances
        yield from instance_runs.left_out_events(TRACE, "job_events", 0, excluded)


class ReadGoogle2011(beam.PTransform):
    """Google2011Source config → dict of PCollections of Arrow tables.

    Keys: machines, instances, usage (canonical tables), dead_letters, counts, exclusions
    (((source, table, reason), rows) pairs) and parts (((source, table), the parts read)).
    """

    def __init__(self, source, columnar_readers: bool = True):
        """`columnar_readers=False` reads every table row by row (the reference path)."""
        super().__init__()
        self._source = source
        self._columnar = columnar_readers
        self._parts = {}

    def _read(self, pbegin, name: str, parser: ChunkParser, columns):
        """(rows, dead letters, counts) of table `name` (empty if not configured); its parts
        checked first (RunFailed for a gap unless allow_missing_parts)."""
        pattern = getattr(self._source, name)
        if not pattern:
            empty = pbegin | f"No{name}" >> beam.Create([])
            return empty, empty, empty
        self._parts[name] = parts.read_parts(pattern, f"{SOURCE}.{name}",
                                             self._source.allow_missing_parts)
        if self._columnar and name in TABLES:
            parsed = pbegin | f"Read{name}" >> columnar.ParseFiles(
                pattern, CSV, _Columns(parser), fieldnames=columns)
        else:
            parsed = (pbegin
                      | f"Read{name}" >> ReadFileChunks(pattern, CSV, fieldnames=list(columns))
                      | f"Parse{name}" >> ParseChunks(parser))
        return parsed[ROWS], parsed[DEAD_LETTERS], parsed[COUNTS]

    def _coverage(self, pbegin, name: str, rows):
        """The Coverage side input of table `name`'s parsed `rows` (its gaps' neighbour parts
        parsed again for their times)."""
        columns, parser_class = TABLES[name]
        neighbours = instance_runs.gap_neighbour_rows(
            pbegin, self._parts[name].gap_neighbours(),
            lambda path: columnar.ParseFiles(path, CSV, _Columns(parser_class()),
                                             fieldnames=columns), f"GapParts{name}")
        return instance_runs.coverage(rows, neighbours, f"Coverage{name}")

    def expand(self, pbegin):
        source, pool = self._source, self._source.pool
        tasks = source.unit == Unit.TASKS
        reads = {name: self._read(pbegin, name, parser_class(), columns)
                 for name, (columns, parser_class) in TABLES.items()
                 if tasks or name == "job_events"}
        reads["machine_events"] = self._read(pbegin, "machine_events",
                                             MachineEventParser(pool), MACHINE_EVENTS_COLUMNS)
        events = "task_events" if tasks else "job_events"
        coverage = self._coverage(pbegin, events, reads[events][0])
        if tasks:
            grouped = instance_runs.group_by_collection_shard(
                {"events": reads["task_events"][0], "usage": reads["task_usage"][0],
                 "collections": reads["job_events"][0]}, source.num_shards, "GroupByJobShard")
            built = (
                grouped
                | "BuildTaskRunsAndJoinUsage" >> beam.FlatMap(
                    instance_runs.build_shard, pool, TRACE, coverage)
                | "SplitShardOutputs" >> SplitByTag(("instances", "usage", DEAD_LETTERS,
                                                     COUNTS, EXCLUSIONS)))
        else:
            grouped = instance_runs.group_by_collection_shard(
                {"jobs": reads["job_events"][0]}, source.num_shards, "GroupByJobShard")
            built = (
                grouped
                | "BuildJobs" >> beam.FlatMap(build_job_shard, pool, coverage)
                | "SplitShardOutputs" >> SplitByTag(("instances", COUNTS, EXCLUSIONS)))
            built.update({key: pbegin | f"No{key}" >> beam.Create([])
                          for key in ("usage", DEAD_LETTERS)})
        return {
            "machines": reads["machine_events"][0],
            "instances": built["instances"],
            "usage": built["usage"],
            "dead_letters": ([dead for _, dead, _ in reads.values()] + [built[DEAD_LETTERS]]
                             | "FlattenDeadLetters" >> beam.Flatten()),
            "counts": ([table_counts for _, _, table_counts in reads.values()]
                       + [built[COUNTS]] | "FlattenCounts" >> beam.Flatten()),
            "exclusions": built[EXCLUSIONS],
            "parts": pbegin | "Parts" >> beam.Create(parts.described(SOURCE, self._parts)),
        }
