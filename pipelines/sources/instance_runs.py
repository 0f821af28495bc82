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

What the events cannot make a run of is counted, so that read = kept + rejected + excluded
for the events table: a SCHEDULE followed by another is a dead letter (it contradicts the
schema); an end event that ends no run, a SCHEDULE after the trace end, a run still going
after its collection ended and a run across the time gap of missing parts are exclusions
(EXCLUDED), each counted as one row: the end event, or the run's SCHEDULE. The last two need
what the whole table covers (`Coverage`, a side input of each shard).
"""

import dataclasses
from typing import Dict, List, Sequence, Tuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines import schemas
from pipelines.io import sharding, spill
from pipelines.io.dead_letters import (
    COUNTS,
    DEAD_LETTERS,
    EXCLUSIONS,
    ROWS,
    counts,
    rows_as_dead_letters,
)
from pipelines.sources import join

# The traces mark times after the end of the trace with the largest int64.
AFTER_TRACE_END = np.iinfo(np.int64).max
# Rows of a parsed table sharded at a time (see `group_by_collection_shard`).
SHARD_BATCH_ROWS = 1 << 18
SCHEDULE_TWICE = ("SCHEDULE followed by another SCHEDULE of the same instance without a "
                  "terminal event")
NO_REQUEST = "no instance event with cpus > 0 and memory > 0 at or before the window start"
# Why events make no run (exclusions of the source's events table, EXCLUDED).
END_NOT_RUNNING = ("end event of an instance not running (it had ended, or was never "
                   "scheduled)")
END_FIRST = ("end event with no earlier event of its instance (its SCHEDULE is before the "
             "parts read, or in a missing part)")
AFTER_END_SCHEDULE = "SCHEDULE after the trace end (time 2^63 - 1)"
STILL_RUNNING = ("run with no end event though its job (collection) ended before the last "
                 "event read (its end event is missing)")
ACROSS_GAP = "run across the time gap of missing parts (its end may be in them)"
EXCLUDED = (END_NOT_RUNNING, END_FIRST, AFTER_END_SCHEDULE, STILL_RUNNING, ACROSS_GAP)
# Their codes in arrays of reasons (KEPT: not excluded).
KEPT = -1
NOT_RUNNING_CODE, FIRST_CODE, AFTER_END_CODE, STILL_RUNNING_CODE, ACROSS_GAP_CODE = range(5)
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


@dataclasses.dataclass(frozen=True)
class Coverage:
    """What the events read cover, for the checks that need the whole table.

    Attributes:
      last_time: the latest event time before AFTER_TRACE_END (-1: none).
      gaps: (the latest time before, the earliest after) each gap of missing parts whose
        neighbours do not overlap in time (parts in time order, as the 2011 trace's are).
    """

    last_time: int = -1
    gaps: Tuple[Tuple[int, int], ...] = ()


# Nothing known of the whole table: no run is checked against its collection's end or a gap.
NO_COVERAGE = Coverage()


def latest_time(table: pa.Table) -> int:
    """The latest `time` of parsed events before AFTER_TRACE_END (-1: none)."""
    time = table.column("time").to_numpy()
    time = time[time < AFTER_TRACE_END]
    return int(time.max()) if len(time) else -1


def earliest_time(table: pa.Table) -> int:
    """The earliest `time` of parsed events (AFTER_TRACE_END: none)."""
    time = table.column("time").to_numpy()
    return int(time.min()) if len(time) else AFTER_TRACE_END


class CoverageFn(beam.CombineFn):
    """("last", time) and ("gap", i, latest before, earliest after) pieces → Coverage."""

    def create_accumulator(self):
        return -1, {}

    def add_input(self, accumulator, piece):
        return self.merge_accumulators([accumulator, _accumulated(piece)])

    def merge_accumulators(self, accumulators):
        last, gaps = -1, {}
        for other_last, other_gaps in accumulators:
            last = max(last, other_last)
            for i, (before, after) in other_gaps.items():
                known = gaps.get(i, (-1, AFTER_TRACE_END))
                gaps[i] = (max(known[0], before), min(known[1], after))
        return last, gaps

    def extract_output(self, accumulator):
        last, gaps = accumulator
        return Coverage(last, tuple(gaps[i] for i in sorted(gaps)
                                    if 0 <= gaps[i][0] < gaps[i][1] < AFTER_TRACE_END))


def _accumulated(piece):
    if piece[0] == "last":
        return piece[1], {}
    return -1, {piece[1]: piece[2:]}


def coverage(events: beam.PCollection, neighbours: Sequence[Tuple], label: str):
    """The Coverage of parsed `events` as a side input; `neighbours`: (rows of the part
    before, rows of the part after) each gap of missing parts, parsed tables."""
    pieces = [events | f"{label}Latest" >> beam.Map(lambda t: ("last", latest_time(t)))]
    for i, (before, after) in enumerate(neighbours):
        pieces.append(before | f"{label}Before{i}" >> beam.Map(
            lambda t, i: ("gap", i, latest_time(t), AFTER_TRACE_END), i))
        pieces.append(after | f"{label}After{i}" >> beam.Map(
            lambda t, i: ("gap", i, -1, earliest_time(t)), i))
    return beam.pvalue.AsSingleton(pieces | f"{label}Pieces" >> beam.Flatten()
                                   | label >> beam.CombineGlobally(CoverageFn()))


def gap_neighbour_rows(pbegin, neighbours: Sequence[Tuple[str, str]], parse, label: str):
    """(rows of the part before, rows of the part after) each gap: the two files
    (`neighbours`, paths) parsed again by `parse` (path → a PTransform giving {ROWS: ...}),
    for their times only (their counts and dead letters are the table's already)."""
    return [tuple((pbegin | f"{label}{i}{side}" >> parse(path))[ROWS]
                  for side, path in (("Before", before), ("After", after)))
            for i, (before, after) in enumerate(neighbours)]


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


def _spans(sorted_key: np.ndarray, sorted_type: np.ndarray, trace: Trace):
    """(first, final): sorted positions of each key's first SCHEDULE and of its final end
    event, the first end event after its last SCHEDULE (-1: none); keys in order."""
    schedules = np.flatnonzero(sorted_type == trace.schedule)
    keys = sorted_key[schedules]
    new_key = np.ones(len(keys), bool)
    new_key[1:] = keys[1:] != keys[:-1]
    last_of_key = np.ones(len(keys), bool)
    last_of_key[:-1] = new_key[1:]
    final_end = next_of(np.flatnonzero(np.isin(sorted_type, trace.ends)),
                        schedules[last_of_key], sorted_key)
    return schedules[new_key], final_end


def _within(positions: np.ndarray, sorted_key: np.ndarray, first: np.ndarray,
            last: np.ndarray) -> np.ndarray:
    """Whether each sorted position lies in its key's span [first, last] (keys in order)."""
    if not len(first):
        return np.zeros(len(positions), bool)
    span_keys = sorted_key[first]
    span = np.minimum(np.searchsorted(span_keys, sorted_key[positions]), len(first) - 1)
    return ((span_keys[span] == sorted_key[positions]) & (positions >= first[span])
            & (positions <= last[span]))


def spans(time: np.ndarray, type_: np.ndarray, key: np.ndarray, trace: Trace,
          coverage: Coverage):
    """(start, end, {exclusion reason: events}): the event rows of each key's span, its
    first SCHEDULE to its final end event, the first end event after its last SCHEDULE (-1:
    none, still running), less the spans `run_exclusions` names (a first SCHEDULE after the
    trace end, a span across a gap). A key without a SCHEDULE has no span; end events
    outside every span are excluded too."""
    order, sorted_key, sorted_type = sort_events(time, type_, key)
    first, final_end = _spans(sorted_key, sorted_type, trace)
    key_last = np.searchsorted(sorted_key, sorted_key[first], side="right") - 1
    ends = np.flatnonzero(np.isin(sorted_type, trace.ends))
    used = _within(ends, sorted_key, first, np.where(final_end >= 0, final_end, key_last))
    start, end = order[first], np.where(final_end >= 0, order[np.maximum(final_end, 0)], -1)
    end_time = np.where(end >= 0, time[np.maximum(end, 0)], AFTER_TRACE_END)
    reasons = run_exclusions(time[start], end_time, np.full(len(start), -1), coverage)
    excluded = counted(np.concatenate([
        reasons[reasons != KEPT], unmatched_ends(order, key, sorted_type, ends[used], trace)]))
    return start[reasons == KEPT], end[reasons == KEPT], excluded


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
    if not len(request_rows):  # no event of the shard requests anything
        return np.full(len(start), -1, np.int64)
    request = join.latest_at_or_before(
        code[request_rows], col["time"][request_rows], code[start], col["time"][start],
        tiebreak=(col["type"][request_rows],))
    return np.where(request >= 0, request_rows[np.maximum(request, 0)], -1)


def _taken(table: pa.Table, name: str, rows: np.ndarray):
    """Column `name` at `rows` (-1: null)."""
    values = table.column(name).take(pa.array(np.maximum(rows, 0)))
    return pc.if_else(pa.array(rows < 0), pa.nulls(len(rows), values.type), values)


def unmatched_ends(order: np.ndarray, code: np.ndarray, sorted_type: np.ndarray,
                   matched: np.ndarray, trace: Trace) -> np.ndarray:
    """Exclusion code (EXCLUDED) of each end event that ends no run (the sorted positions
    `matched` do): END_FIRST without an earlier event of its instance, else
    END_NOT_RUNNING."""
    ends = np.flatnonzero(np.isin(sorted_type, trace.ends))
    ends = ends[~np.isin(ends, matched)]
    sorted_code = code[order]
    earlier = (ends > 0) & (sorted_code[np.maximum(ends - 1, 0)] == sorted_code[ends])
    return np.where(earlier, NOT_RUNNING_CODE, FIRST_CODE)


def collection_end_times(collection_id: np.ndarray, collections: pa.Table,
                         trace: Trace) -> np.ndarray:
    """Per id in `collection_id`, the time of its collection's end: its latest event (by
    time, then type) when that is an end event before AFTER_TRACE_END; -1 otherwise."""
    if collections is None or collections.num_rows == 0:
        return np.full(len(collection_id), -1, np.int64)
    time = collections.column("time").to_numpy()
    order, ids, types = sort_events(time, collections.column("type").to_numpy(),
                                    collections.column("collection_id").to_numpy())
    last = np.concatenate([ids[1:] != ids[:-1], [True]])
    ended = np.isin(types[last], trace.ends) & (time[order][last] < AFTER_TRACE_END)
    end_time = np.where(ended, time[order][last], -1)
    ids = ids[last]
    position = np.minimum(np.searchsorted(ids, collection_id), len(ids) - 1)
    return np.where(ids[position] == collection_id, end_time[position], -1)


def across_gaps(start_time: np.ndarray, end_time: np.ndarray, coverage: Coverage):
    """Whether each [start, end] holds a gap of missing parts (it starts at or before the
    gap's latest time before and ends at or after its earliest time after)."""
    across = np.zeros(len(start_time), bool)
    for before, after in coverage.gaps:
        across |= (start_time <= before) & (end_time >= after)
    return across


def run_exclusions(start_time: np.ndarray, end_time: np.ndarray, collection_end: np.ndarray,
                   coverage: Coverage) -> np.ndarray:
    """Exclusion code (EXCLUDED) of each run (KEPT for one kept), from its start and end
    times (end AFTER_TRACE_END: censored) and its collection's end (-1: none): a SCHEDULE
    after the trace end; a censored run whose collection ended before the last event read;
    a run whose start and end lie either side of a gap of missing parts."""
    reasons = np.full(len(start_time), KEPT, np.int64)
    censored = end_time == AFTER_TRACE_END
    reasons[across_gaps(start_time, end_time, coverage) & ~censored] = ACROSS_GAP_CODE
    reasons[censored & (collection_end >= 0) & (collection_end < coverage.last_time)] = (
        STILL_RUNNING_CODE)
    reasons[start_time == AFTER_TRACE_END] = AFTER_END_CODE
    return reasons


def build_runs(events: pa.Table, collections: pa.Table, pool: str, trace: Trace,
               coverage: Coverage = NO_COVERAGE):
    """Instance runs (SCHEDULE → end event) from the events of whole collections.

    Returns (INSTANCES table, dead letters, {exclusion reason: events}). A run ends at the
    first end event after its SCHEDULE; without one it is still running at trace end
    (end_time null). A SCHEDULE followed by another SCHEDULE with no end event between is
    contradictory and goes to the dead letters, unless a gap of missing parts lies between
    them (then it is a run across the gap); end events that end no run and the runs
    `run_exclusions` names are excluded (see the module docstring). The request is the
    latest one with cpus > 0 and memory > 0 at or before the SCHEDULE (null if none).
    """
    col = {name: events.column(name).to_numpy(zero_copy_only=False) for name in
           ("time", "type", "collection_id", "instance_index", "cpus", "memory")}
    code, _ = join.factorize(col["collection_id"], col["instance_index"])
    order, schedules, next_end, broken = schedule_runs(col["time"], col["type"], code, trace)
    # A SCHEDULE whose next SCHEDULE of the instance (the next one sorted) lies past a gap of
    # missing parts ended in the gap: a run across it, not a contradiction.
    broken_at = np.flatnonzero(broken)
    time = col["time"][order]
    gap_ended = across_gaps(time[schedules[broken_at]], time[schedules[broken_at + 1]],
                            coverage)
    dead = rows_as_dead_letters(trace.source, trace.events_table,
                                events.take(order[schedules[broken_at[~gap_ended]]]),
                                SCHEDULE_TWICE)
    schedules, next_end = schedules[~broken], next_end[~broken]
    start = order[schedules]
    end = np.where(next_end >= 0, order[np.maximum(next_end, 0)], -1)
    end_time = np.where(end >= 0, col["time"][np.maximum(end, 0)], AFTER_TRACE_END)
    reasons = run_exclusions(col["time"][start], end_time, collection_end_times(
        col["collection_id"][start], collections, trace), coverage)
    excluded = counted(np.concatenate([
        reasons[reasons != KEPT], np.full(gap_ended.sum(), ACROSS_GAP_CODE),
        unmatched_ends(order, code, col["type"][order], next_end[next_end >= 0], trace)]))
    start, end = start[reasons == KEPT], end[reasons == KEPT]
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
    return canonical(schemas.INSTANCES, columns, len(start)), dead, excluded


def counted(codes: np.ndarray) -> Dict[str, int]:
    """{EXCLUDED reason: how many} of an array of exclusion codes."""
    n = np.bincount(codes.astype(np.int64), minlength=len(EXCLUDED))
    return {reason: int(k) for reason, k in zip(EXCLUDED, n) if k}


def build_instances(events: pa.Table, collections: pa.Table, pool: str, trace: Trace,
                    coverage: Coverage = NO_COVERAGE):
    """(INSTANCES table, dead letters) of `build_runs`, its exclusions left uncounted."""
    instances, dead, _ = build_runs(events, collections, pool, trace, coverage)
    return instances, dead


def left_out_events(trace: Trace, table: str, dead: int, excluded: Dict[str, int]):
    """(tag, value) pairs for parsed events of `table` that turn out to be dead letters
    (`dead` rows) or exclusions: they move from kept to rejected or excluded, so that read =
    kept + rejected + excluded."""
    moved = dead + sum(excluded.values())
    if moved:
        yield COUNTS, counts(trace.source, table, 0, -moved, dead)
    for reason, n in excluded.items():
        yield EXCLUSIONS, ((trace.source, table, reason), n)


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


def build_shard(element, pool: str, trace: Trace, coverage: Coverage = NO_COVERAGE):
    """(shard, {events, usage, collections}) → (tag, table) pairs: instances, usage, dead
    letters, exclusions and the counts they move (`coverage`: of the whole events table)."""
    _, grouped = element
    events = shard_table(grouped, "events", trace.events)
    usage = shard_table(grouped, "usage", trace.usage)
    collections = shard_table(grouped, "collections", trace.collections)
    if events.num_rows:
        instances, dead, excluded = build_runs(events, collections, pool, trace, coverage)
        if instances.num_rows:
            yield "instances", instances
        yield from left_out_events(trace, trace.events_table, dead.num_rows, excluded)
        if dead.num_rows:
            yield DEAD_LETTERS, dead
    if usage.num_rows:
        joined, dead = join_usage(events, usage, trace)
        yield COUNTS, counts(trace.source, "usage_join", usage.num_rows, joined.num_rows,
                             dead.num_rows)
        if joined.num_rows:
            yield "usage", joined
        if dead.num_rows:
            yield DEAD_LETTERS, dead
