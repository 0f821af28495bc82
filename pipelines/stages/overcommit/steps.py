"""The overcommit stage's per-table steps, in [Bashir21]'s order: filter, metric,
reset_and_shift, scheduler (pipelines/stages/overcommit/__init__.py draws the stage).

Each step maps one Arrow table to (tag, value) pairs: the rows it keeps (ROWS), dead letters
and its counts (read = kept + filtered + rejected). `RunSteps` chains them in one ParDo.

- filter: rows outside the configured ranges are `filtered` (a row lacking the tested field,
  e.g. a null priority under a priority range, counts as outside).
- metric: a window without the chosen value (null avg_cpu, a distribution too short for the
  percentile) or without a limit is rejected.
- scheduler.by_machine_id: a window without a machine id is rejected.
"""

import hashlib
from typing import List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf import text_format

from pipelines import progress, schemas
from pipelines.io import sharding
from pipelines.io.dead_letters import COUNTS, DEAD_LETTERS, ROWS, SplitByTag, rows_as_dead_letters

SOURCE = "overcommit"
# Samples before the scheduler: the trace's machine_id, possibly null.
SAMPLES = pa.schema([f.with_nullable(f.name != "machine_id")
                     for f in schemas.OVERCOMMIT_SCHEDULED_USAGE])


# --- Step counts ------------------------------------------------------------------------------

def step_counts(step: str, read: int, kept: int, filtered: int = 0, rejected: int = 0):
    """One (COUNTS, (step, [read, kept, filtered, rejected])) element; the same numbers go to
    the Beam counters overcommit.<step>.rows_read / _kept / _filtered / _rejected."""
    numbers = np.array([read, kept, filtered, rejected], dtype=np.int64)
    for name, value in zip(("read", "kept", "filtered", "rejected"), numbers):
        progress.count(f"overcommit.{step}.rows_{name}", value)
    return COUNTS, (step, numbers)


def counts_table(element) -> pa.Table:
    step, (read, kept, filtered, rejected) = element
    return pa.table({"step": [step], "read": [int(read)], "kept": [int(kept)],
                     "filtered": [int(filtered)], "rejected": [int(rejected)]},
                    schema=schemas.OVERCOMMIT_COUNTS)


def sum_counts(values) -> np.ndarray:
    return np.sum(list(values), axis=0)


def rejected_rows(table: pa.Table, rows: np.ndarray, reasons: Sequence[str], source_table: str):
    return DEAD_LETTERS, rows_as_dead_letters(SOURCE, source_table,
                                              table.take(pa.array(rows)), reasons)


# --- Filter -----------------------------------------------------------------------------------

def filter_mask(usage: pa.Table, config) -> np.ndarray:
    """bool[n]: the rows of a `usage` table that the Filter config keeps."""
    keep = np.ones(usage.num_rows, dtype=bool)

    def require(condition):
        nonlocal keep
        keep &= np.asarray(pc.fill_null(condition, False))

    start = usage.column("start_time")
    if config.HasField("start_time"):
        require(pc.greater_equal(start, config.start_time))
    if config.HasField("end_time"):
        require(pc.less(start, config.end_time))
    if config.top_level_only:
        require(pc.equal(pc.fill_null(usage.column("alloc_collection_id"), 0), 0))
    for name, bounds in (("priority", config.priority_range),
                         ("scheduling_class", config.scheduling_class_range)):
        if bounds.HasField("lower_bound"):
            require(pc.greater_equal(usage.column(name), bounds.lower_bound))
        if bounds.HasField("upper_bound"):
            require(pc.less_equal(usage.column(name), bounds.upper_bound))
    if config.machine_id:
        require(pc.is_in(usage.column("machine_id"),
                         value_set=pa.array(list(config.machine_id), pa.int64())))
    return keep


def filter_columns(config) -> List[str]:
    """The usage columns `filter_mask` reads under the Filter config."""
    columns = ["start_time"]
    if config.top_level_only:
        columns.append("alloc_collection_id")
    for name, bounds in (("priority", config.priority_range),
                         ("scheduling_class", config.scheduling_class_range)):
        if bounds.HasField("lower_bound") or bounds.HasField("upper_bound"):
            columns.append(name)
    if config.machine_id:
        columns.append("machine_id")
    return columns


def filter_tagged(usage: pa.Table, config):
    """(tag, value) pairs: the kept rows and the filter's counts."""
    keep = filter_mask(usage, config)
    kept = int(keep.sum())
    yield step_counts("filter", usage.num_rows, kept, filtered=usage.num_rows - kept)
    if kept:
        yield ROWS, usage if kept == usage.num_rows else usage.filter(pa.array(keep))


def filter_kept_nothing(counts: pa.Table, config) -> Optional[str]:
    """Why a run's overcommit tables are all empty when its Filter `config` read usage
    windows and kept none (a warning, not a failure: the windows are valid, the selection is
    the user's); None otherwise. `counts` is the run's overcommit_counts table."""
    filtered = [row for row in counts.to_pylist() if row["step"] == "filter"]
    if not filtered or not filtered[0]["read"] or filtered[0]["kept"]:
        return None
    times = config.HasField("start_time") or config.HasField("end_time")
    return (f"overcommit.filter kept 0 of {filtered[0]['read']:,} usage windows: "
            f"{text_format.MessageToString(config, as_one_line=True)}"
            f"{' (times are µs from the trace start)' if times else ''}; every overcommit "
            "table is empty")


# --- Metric -----------------------------------------------------------------------------------

def metric_name(config) -> str:
    which = config.WhichOneof("metric")
    return f"p{config.cpu_percentile} cpu" if which == "cpu_percentile" else which


def list_element(column, index: int) -> Tuple[np.ndarray, np.ndarray]:
    """(values float64[n], present bool[n]): element `index` of each list of a list<double>
    column; absent (NaN) for a null list or one too short."""
    lists = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = lists.offsets.to_numpy()
    flat = lists.values.to_numpy(zero_copy_only=False).astype(np.float64)
    present = ~np.asarray(lists.is_null()) & (np.diff(offsets) > index)
    values = np.full(len(lists), np.nan)
    values[present] = flat[offsets[:-1][present] + index]
    return values, present


def metric_columns(config) -> List[str]:
    """The usage columns `metric_values` reads: the metric's and its limit's."""
    which = config.WhichOneof("metric")
    if which == "cpu_percentile":
        value = ("tail_cpu_usage_distribution"
                 if config.cpu_percentile in schemas.TAIL_CPU_DISTRIBUTION_PERCENTILES
                 else "cpu_usage_distribution")
    else:
        value = which
    return [value, "memory_limit" if "memory" in which else "cpu_limit"]


def _column_values(table: pa.Table, name: str) -> Tuple[np.ndarray, np.ndarray]:
    column = table.column(name)
    return (column.to_numpy(zero_copy_only=False).astype(np.float64),
            np.asarray(column.is_valid()))


def metric_values(usage: pa.Table, config):
    """(usage, usage present, limit, limit present): float64[n] and bool[n] arrays of the
    configured metric and the matching limit (cpu_limit, or memory_limit for memory)."""
    which = config.WhichOneof("metric")
    if which == "cpu_percentile":
        percentile = config.cpu_percentile
        if percentile in schemas.TAIL_CPU_DISTRIBUTION_PERCENTILES:
            values = list_element(usage.column("tail_cpu_usage_distribution"),
                                  schemas.TAIL_CPU_DISTRIBUTION_PERCENTILES.index(percentile))
        else:
            values = list_element(usage.column("cpu_usage_distribution"),
                                  schemas.CPU_DISTRIBUTION_PERCENTILES.index(percentile))
    else:
        values = _column_values(usage, which)
    limit = _column_values(usage, "memory_limit" if "memory" in which else "cpu_limit")
    return (*values, *limit)


def floor_to_grid(time_us: np.ndarray, step_us: int) -> np.ndarray:
    return np.floor_divide(time_us, step_us) * step_us


def metric_tagged(usage: pa.Table, config, step_us: int):
    """(tag, value) pairs: samples (SAMPLES schema, times floored to the grid), dead letters
    for windows without the metric's value or without a limit, and counts.

    Present values are passed on as they are; `build_machine_samples` judges them.
    """
    values, has_value, limit, has_limit = metric_values(usage, config)
    keep = has_value & has_limit
    rejected = np.flatnonzero(~keep)
    yield step_counts("metric", usage.num_rows, usage.num_rows - len(rejected),
                      rejected=len(rejected))
    if len(rejected):
        no_value = f"usage window has no {metric_name(config)} value"
        reasons = [no_value if not has_value[i] else "usage window has no limit"
                   for i in rejected]
        yield rejected_rows(usage, rejected, reasons, "usage")
    if keep.any():
        mask = pa.array(keep)
        start = usage.column("start_time").to_numpy(zero_copy_only=False)[keep]
        yield ROWS, pa.table({
            "machine_id": usage.column("machine_id").filter(mask),
            "instance_id": usage.column("instance_id").filter(mask),
            "time": pa.array(floor_to_grid(start, step_us), pa.int64()),
            "usage": pa.array(values[keep], pa.float64()),
            "limit": pa.array(limit[keep], pa.float64()),
        }, schema=SAMPLES)


# --- Reset and shift --------------------------------------------------------------------------

def instance_hashes(instance_ids, salt: str) -> np.ndarray:
    """uint64[n]: a stable hash of (salt, instance id) per row, the same on every runner and
    in every process (BLAKE2b of the UTF-8 text, once per distinct id)."""
    codes, distinct = sharding.dictionary_codes(instance_ids)
    prefix = f"{salt}\x00".encode()
    hashes = [int.from_bytes(hashlib.blake2b(prefix + value.encode(), digest_size=8).digest(),
                             "little") for value in distinct.to_pylist()]
    return np.array(hashes, dtype=np.uint64)[codes]


def random_shifts(instance_ids, config, step_us: int) -> np.ndarray:
    """int64[n]: each row's instance shift, uniform in [lower_bound, upper_bound] µs by
    (seed, instance id), floored to the grid."""
    lower, upper = config.random_shift.lower_bound, config.random_shift.upper_bound
    span = np.uint64(upper - lower + 1)
    drawn = lower + (instance_hashes(instance_ids, f"shift:{config.seed}") % span).astype(np.int64)
    return floor_to_grid(drawn, step_us)


def reset_and_shift(samples: pa.Table, config, step_us: int) -> pa.Table:
    """`samples` with each instance's times reset to start at 0 (if configured) and shifted.

    With reset_time_to_zero the table must hold every sample of its instances.
    """
    time = samples.column("time").to_numpy(zero_copy_only=False).copy()
    instance_ids = samples.column("instance_id")
    if config.reset_time_to_zero:
        codes, distinct = sharding.dictionary_codes(instance_ids)
        first = np.full(len(distinct), np.iinfo(np.int64).max)
        np.minimum.at(first, codes, time)
        time -= first[codes]
    if config.HasField("random_shift"):
        time += random_shifts(instance_ids, config, step_us)
    return samples.set_column(samples.schema.get_field_index("time"), "time",
                              pa.array(time, pa.int64()))


def _reset_shard(element, config, step_us: int):
    _, tables = element
    return reset_and_shift(sharding.concat(tables, SAMPLES), config, step_us)


class ResetToZeroAndShift(beam.PTransform):
    """SAMPLES tables → SAMPLES tables with each instance's times reset to start at 0 and
    shifted (deterministically). A shift alone is a per-table step (`shift_tagged`)."""

    def __init__(self, config, step_us: int):
        super().__init__()
        self._config = config
        self._step_us = step_us

    def expand(self, samples):
        config, step_us = self._config, self._step_us
        # An instance's first time needs all of its samples: regroup them by instance shard.
        return (samples
                | "ShardByInstance" >> beam.FlatMap(sharding.split_by_key,
                                                      "instance_id", config.num_shards)
                | "GroupInstances" >> beam.GroupByKey()
                | "ResetAndShift" >> beam.Map(_reset_shard, config, step_us))


# --- Scheduler --------------------------------------------------------------------------------

def schedule_tagged(samples: pa.Table, config):
    """(tag, value) pairs: samples with the simulated machine_id (OVERCOMMIT_SCHEDULED_USAGE),
    dead letters for samples that cannot be placed, and counts."""
    if config.WhichOneof("scheduler") == "at_random":
        at_random = config.at_random
        machine = (instance_hashes(samples.column("instance_id"), f"scheduler:{at_random.seed}")
                   % np.uint64(at_random.num_machines)).astype(np.int64)
        placed = samples.set_column(samples.schema.get_field_index("machine_id"), "machine_id",
                                    pa.array(machine, pa.int64()))
        rejected = np.zeros(0, dtype=np.int64)
    else:
        has_machine = np.asarray(pc.is_valid(samples.column("machine_id")))
        rejected = np.flatnonzero(~has_machine)
        placed = samples.filter(pa.array(has_machine)) if len(rejected) else samples
    yield step_counts("scheduler", samples.num_rows, placed.num_rows, rejected=len(rejected))
    if len(rejected):
        yield rejected_rows(samples, rejected, ["sample has no machine_id to schedule it by "
                                            "(scheduler.by_machine_id)"] * len(rejected),
                        "overcommit_scheduled_usage")
    if placed.num_rows:
        yield ROWS, placed.cast(schemas.OVERCOMMIT_SCHEDULED_USAGE)


# --- Per-table steps in one ParDo ------------------------------------------------------------

def shift_tagged(samples: pa.Table, config, step_us: int):
    """(ROWS, samples moved in time): reset_and_shift as a step of a chain."""
    yield ROWS, reset_and_shift(samples, config, step_us)


def chain_tagged(table: pa.Table, steps):
    """(tag, value) pairs of per-table steps run one after another: the ROWS a step yields
    feed the next step, its other pairs (dead letters, counts) pass through; the last step's
    ROWS are the chain's."""
    tables = [table]
    for step in steps:
        produced = []
        for rows in tables:
            for tag, value in step(rows):
                if tag == ROWS:
                    produced.append(value)
                else:
                    yield tag, value
        tables = produced
    for rows in tables:
        yield ROWS, rows


class RunSteps(beam.PTransform):
    """Arrow tables → {rows, dead_letters, counts}: a chain of per-table steps (functions
    table → (tag, value) pairs) in a single ParDo.

    The steps need no grouping, and on the DirectRunner every Beam step has a fixed cost per
    run whatever it does, so filter, metric, shift and scheduler run as one.
    """

    def __init__(self, steps):
        super().__init__()
        self._steps = list(steps)

    def expand(self, tables):
        return (tables
                | "Steps" >> beam.FlatMap(chain_tagged, self._steps)
                | "Split" >> SplitByTag((ROWS, DEAD_LETTERS, COUNTS)))
