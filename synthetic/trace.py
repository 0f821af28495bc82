"""Trace: samples the fleet, the workload and its placement in one go (sample_trace), and writes
the four v3 tables (generate).

A cell of more than BLOCK_MACHINES machines is sampled in blocks of consecutive machines, each
with its own jobs and placement replay on the cell's fleet and catalog, so that blocks are
sampled in parallel; a cell of at most BLOCK_MACHINES machines is one block.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from configs.units import DAY_US
from synthetic import parallel
from synthetic.constants import FILE_SUFFIXES, LAYOUTS, TABLES, WINDOW_US
from synthetic.events import EventTables
from synthetic.fleet import Fleet, sample_fleet
from synthetic.placement import Placement, RandomFitReplay
from synthetic.usage import UsageModel
from synthetic.workload import Catalog, Jobs, Tasks, sample_workload
from synthetic.writers import _ShardWriter, shard_paths

DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR = 0.25
# Mean cpus x hours a collection requests: at the default arrival rate, about 65 % of the
# CPU of an average machine (0.5625) is requested.
_CPU_HOURS_PER_JOB = 0.65 * 0.5625 / DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR
# instance_usage is generated and written in time slices of about this many rows.
_USAGE_CHUNK_ROWS = 100_000
# The most machines sampled as one block (one placement replay).
BLOCK_MACHINES = 1_000


@dataclasses.dataclass
class Trace:
    """Everything sampled for one trace, before it is written."""
    seed: int
    horizon_us: int
    fleet: Fleet
    catalog: Catalog
    jobs: Jobs
    tasks: Tasks
    placement: Placement

    def event_tables(self) -> EventTables:
        return EventTables(self.seed, self.fleet, self.catalog, self.jobs, self.tasks,
                           self.placement, self.horizon_us)

    def usage_model(self) -> UsageModel:
        return UsageModel(self.seed, self.fleet, self.catalog, self.jobs, self.tasks,
                          self.placement, self.horizon_us)


def check_positive(**values):
    """ValueError naming the first of `values` (argument name: number) that is not a finite
    number > 0."""
    for argument, value in values.items():
        # An int is finite at any size (math.isfinite overflows on one beyond a float).
        finite = isinstance(value, int) or math.isfinite(value)
        if not (finite and value > 0):
            raise ValueError(f"{argument} must be {'' if finite else 'finite and '}positive, "
                             f"got {value!r}")


def trace_horizon_us(days: float) -> int:
    """The trace's length in µs for `days` (> 0); ValueError when it is shorter than 2 µs."""
    horizon = int(round(days * DAY_US))
    if horizon < 2:
        raise ValueError(f"days is too short: {days!r}")
    return horizon


def sample_trace(*, machines: int = 20, days: float = 2.0, seed: int = 0,
                 arrival_rate_per_machine_hour: float | None = None,
                 request_scale: float = 1.0, processes: int = 1) -> Trace:
    """Samples the fleet, the catalog, the workload and its placement (see generate); the
    blocks of a large cell on `processes` processes, with the same result for any number."""
    check_positive(machines=machines, days=days, request_scale=request_scale,
                   processes=processes)
    if arrival_rate_per_machine_hour is None:
        arrival_rate_per_machine_hour = DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR / request_scale
    check_positive(arrival_rate_per_machine_hour=arrival_rate_per_machine_hour)
    horizon_us = trace_horizon_us(days)
    fleet_rng, catalog_rng = (np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(s,)))
                              for s in (0, 1))
    fleet = sample_fleet(fleet_rng, machines, horizon_us)
    catalog = Catalog.sample(catalog_rng, n_names=30 + 2 * machines, n_users=5 + machines // 4,
                             cpu_hours_per_job=_CPU_HOURS_PER_JOB * request_scale,
                             request_scale=request_scale)
    bounds = np.linspace(0, machines, -(-machines // BLOCK_MACHINES) + 1).round().astype(int)
    blocks = [(seed, b, len(bounds) - 1, _sub_fleet(fleet, lo, hi), catalog,
               arrival_rate_per_machine_hour, horizon_us)
              for b, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))]
    with parallel.pool(min(processes, len(blocks))) as workers:
        sampled = workers.map(_sample_block, blocks, chunksize=1)
    jobs, tasks, placement = _merge_blocks(sampled, bounds[:-1])
    return Trace(seed, horizon_us, fleet, catalog, jobs, tasks, placement)


def _sub_fleet(fleet: Fleet, lo: int, hi: int) -> Fleet:
    """Machines lo <= m < hi of the fleet and their events, machines renumbered from 0."""
    events = (fleet.event_machine >= lo) & (fleet.event_machine < hi)
    return Fleet(fleet.machine_id[lo:hi], fleet.platform[lo:hi], fleet.switch[lo:hi],
                 fleet.event_time_us[events], fleet.event_machine[events] - lo,
                 fleet.event_type[events], fleet.event_cpu[events], fleet.event_memory[events])


def _sample_block(block: tuple) -> tuple[Jobs, Tasks, Placement]:
    """The jobs, tasks and placement of one block of machines, from its own random streams
    (a cell of one block: the streams of the cell itself)."""
    seed, index, n_blocks, fleet, catalog, arrival_rate_per_machine_hour, horizon_us = block
    key = (index,) if n_blocks > 1 else ()
    workload_rng, placement_rng = (
        np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(stream, *key)))
        for stream in (2, 3))
    jobs, tasks = sample_workload(workload_rng, catalog, len(fleet.machine_id),
                                  arrival_rate_per_machine_hour, horizon_us)
    placement = RandomFitReplay(placement_rng, fleet, jobs, tasks, horizon_us).run()
    return jobs, tasks, placement


def _merge_blocks(sampled: list, first_machine: np.ndarray) -> tuple[Jobs, Tasks, Placement]:
    """The blocks' jobs, tasks and placements as one cell's: indices offset, machines of
    the cell's fleet, collection ids made unique (block b of n: id * n + b)."""
    n_blocks = len(sampled)
    if n_blocks == 1:
        return sampled[0]
    job_offset = np.cumsum([0] + [len(jobs.submit_us) for jobs, _, _ in sampled])
    task_offset = np.cumsum([0] + [len(tasks.job) for _, tasks, _ in sampled])
    parts = {"jobs": [], "tasks": [], "placement": []}
    for b, (jobs, tasks, placement) in enumerate(sampled):
        jobs.collection_id = jobs.collection_id * n_blocks + b
        jobs.parent_collection_id = np.where(jobs.parent_collection_id >= 0,
                                             jobs.parent_collection_id * n_blocks + b, -1)
        tasks.job = tasks.job + job_offset[b]
        placement.run_task = placement.run_task + task_offset[b]
        placement.run_machine = placement.run_machine + first_machine[b]
        events = placement.events.copy()
        events[:, 2] += task_offset[b]
        events[:, 3] = np.where(events[:, 3] >= 0, events[:, 3] + first_machine[b], -1)
        placement.events = events
        for name, part in (("jobs", jobs), ("tasks", tasks), ("placement", placement)):
            parts[name].append(part)
    return tuple(type(items[0])(**{field.name: np.concatenate(
        [getattr(item, field.name) for item in items]) for field in dataclasses.fields(items[0])})
        for items in parts.values())


def generate(out_dir: str, *, machines: int = 20, days: float = 2.0, seed: int = 0,
             arrival_rate_per_machine_hour: float | None = None, request_scale: float = 1.0,
             shards: int = 4, file_format: str = "json", layout: str = "tables",
             processes: int = 1) -> dict:
    """Writes a synthetic Google cluster trace v3 under out_dir.

    Args:
      out_dir: output directory (any Beam FileSystems path: local, gs://...).
      machines: number of machines in the cell.
      days: trace length; the trace covers [0, days * 86400e6) µs.
      seed: random seed; the same arguments give byte-identical files, whatever
        `processes`.
      arrival_rate_per_machine_hour: collections (jobs) submitted per machine per hour, on
        average over the day (about 5 tasks each, most of them short batch tasks). The
        requested load scales with it: the default, 0.25 / request_scale, requests about
        65 % of the CPU, with about 4 to 8 / request_scale tasks running per machine.
      request_scale: every task's request (and so its usage) as a multiple of the default
        trace's; with the default arrival rate, 1 / request_scale times as many tasks per
        machine for the same load (lifetimes, priorities, utilizations and job shapes are
        the default's).
      shards: files per table.
      file_format: "json" (newline-delimited JSON, gzip), "csv" (gzip, header row, records
        flattened to dotted names, lists as JSON arrays) or "parquet".
      layout: "tables" (out_dir/TABLE/TABLE-00000-of-0000N.json.gz) or "public" (the
        public trace's buckets: out_dir/TABLE-000000000000.json.gz, 12 digits).
      processes: worker processes that sample the blocks and write the files.

    Returns:
      {"rows": {table: row count}, "paths": {table: [shard paths]}, "seconds": {stage:
      wall time}} for the tables machine_events, collection_events, instance_events,
      instance_usage (.csv.gz or .parquet files for those formats). Event tables are split
      into shards of consecutive rows in time order, instance_usage into consecutive time
      ranges.
    """
    check_positive(shards=shards, processes=processes)
    if file_format not in FILE_SUFFIXES:
        raise ValueError(f"file_format must be one of {sorted(FILE_SUFFIXES)}, got {file_format!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")
    clock = time.perf_counter()
    trace = sample_trace(machines=machines, days=days, seed=seed,
                         arrival_rate_per_machine_hour=arrival_rate_per_machine_hour,
                         request_scale=request_scale, processes=processes)
    seconds = {"sample": time.perf_counter() - clock}
    writing = _Writing(trace, out_dir, shards, file_format, layout)
    seconds["events"] = time.perf_counter() - clock - sum(seconds.values())
    with parallel.pool(processes, shared=writing) as workers:
        written = workers.map(_write_shard, writing.shard_tasks(), chunksize=1)
    seconds["write"] = time.perf_counter() - clock - sum(seconds.values())
    rows = dict.fromkeys(TABLES, 0)
    for (table, _), n_rows in zip(writing.shard_tasks(), written):
        rows[table] += n_rows
    return {"rows": rows, "paths": writing.paths, "seconds": seconds}


class _Writing:
    """The shard files of a sampled trace: which rows each holds, and writing one."""

    def __init__(self, trace: Trace, out_dir: str, shards: int, file_format: str, layout: str):
        self.events = trace.event_tables()
        self.usage = trace.usage_model()
        self.file_format = file_format
        self.paths = {table: shard_paths(out_dir, table, shards, file_format, layout)
                      for table in TABLES}
        self.event_rows = {table: np.array_split(np.arange(self.events.n_rows(table)), shards)
                           for table in TABLES[:3]}
        n_grid = -(-trace.horizon_us // WINDOW_US)
        self.usage_step = max(1, _USAGE_CHUNK_ROWS * n_grid // max(self.usage.n_windows, 1))
        self.usage_bounds = np.linspace(0, n_grid, shards + 1).round().astype(np.int64).tolist()

    def shard_tasks(self) -> list[tuple[str, int]]:
        """(table, shard index) of every file, instance_usage (the largest) first."""
        return [(table, i) for table in TABLES[::-1] for i in range(len(self.paths[table]))]

    def write(self, table: str, shard: int) -> int:
        """Writes one shard file; returns its row count."""
        writer = _ShardWriter(self.paths[table][shard], self.file_format)
        if table != "instance_usage":
            rows = self.event_rows[table][shard]
            writer.write(self.events.columns(table, rows), len(rows))
            writer.close()
            return len(rows)
        n_rows = 0
        k_lo, k_hi = self.usage_bounds[shard], self.usage_bounds[shard + 1]
        for k in range(k_lo, max(k_hi, k_lo + 1), self.usage_step):
            columns, n = self.usage.columns(k, min(k + self.usage_step, k_hi))
            writer.write(columns, n)
            n_rows += n
        writer.close()
        return n_rows


def _write_shard(task: tuple[str, int]) -> int:
    return parallel.shared().write(*task)

