"""Trace: samples the fleet, the workload and its placement in one go (sample_trace), and writes
the four v3 tables (generate)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from configs.units import DAY_US
from synthetic.constants import FILE_SUFFIXES, TABLES, WINDOW_US
from synthetic.events import EventTables
from synthetic.fleet import Fleet, sample_fleet
from synthetic.placement import Placement, RandomFitReplay
from synthetic.usage import UsageModel
from synthetic.workload import Catalog, Jobs, Tasks, sample_workload
from synthetic.writers import _shard_paths, _ShardWriter

DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR = 0.25
# Mean cpus x hours a collection requests: at the default arrival rate, about 65 % of the
# CPU of an average machine (0.5625) is requested.
_CPU_HOURS_PER_JOB = 0.65 * 0.5625 / DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR
# instance_usage is generated and written in time slices of about this many rows.
_USAGE_CHUNK_ROWS = 100_000


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


def sample_trace(*, machines: int = 20, days: float = 2.0, seed: int = 0,
                 arrival_rate_per_machine_hour: float = DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR
                 ) -> Trace:
    """Samples the fleet, the catalog, the workload and its placement (see generate)."""
    for argument, value in (("machines", machines), ("days", days),
                            ("arrival_rate_per_machine_hour", arrival_rate_per_machine_hour)):
        if not value > 0:
            raise ValueError(f"{argument} must be positive, got {value!r}")
    horizon_us = int(round(days * DAY_US))
    if horizon_us < 2:
        raise ValueError(f"days is too short: {days!r}")
    fleet_rng, catalog_rng, workload_rng, placement_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4))
    fleet = sample_fleet(fleet_rng, machines, horizon_us)
    catalog = Catalog.sample(catalog_rng, n_names=30 + 2 * machines, n_users=5 + machines // 4,
                             cpu_hours_per_job=_CPU_HOURS_PER_JOB)
    jobs, tasks = sample_workload(workload_rng, catalog, machines, arrival_rate_per_machine_hour,
                                  horizon_us)
    placement = RandomFitReplay(placement_rng, fleet, jobs, tasks, horizon_us).run()
    return Trace(seed, horizon_us, fleet, catalog, jobs, tasks, placement)


def generate(out_dir: str, *, machines: int = 20, days: float = 2.0, seed: int = 0,
             arrival_rate_per_machine_hour: float = DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR,
             shards: int = 4, file_format: str = "json") -> dict:
    """Writes a synthetic Google cluster trace v3 under out_dir.

    Args:
      out_dir: output directory (any Beam FileSystems path: local, gs://...).
      machines: number of machines in the cell.
      days: trace length; the trace covers [0, days * 86400e6) µs.
      seed: random seed; the same arguments give byte-identical files.
      arrival_rate_per_machine_hour: collections (jobs) submitted per machine per hour, on
        average over the day (about 5 tasks each, most of them short batch tasks). The
        requested load scales with it: the default requests about 65 % of the CPU, with
        about 4 to 8 tasks running per machine.
      shards: files per table.
      file_format: "json" (newline-delimited JSON, gzip), "csv" (gzip, header row, records
        flattened to dotted names, lists as JSON arrays) or "parquet".

    Returns:
      {"rows": {table: row count}, "paths": {table: [shard paths]}, "seconds": {stage:
      wall time}} for the tables machine_events, collection_events, instance_events,
      instance_usage, each written to out_dir/TABLE/TABLE-00000-of-0000N.json.gz (or
      .csv.gz, .parquet). Event tables are split into shards of consecutive rows in time
      order, instance_usage into consecutive time ranges.
    """
    if not shards > 0:
        raise ValueError(f"shards must be positive, got {shards!r}")
    if file_format not in FILE_SUFFIXES:
        raise ValueError(f"file_format must be one of {sorted(FILE_SUFFIXES)}, got {file_format!r}")
    clock = time.perf_counter()
    trace = sample_trace(machines=machines, days=days, seed=seed,
                         arrival_rate_per_machine_hour=arrival_rate_per_machine_hour)
    seconds = {"sample": time.perf_counter() - clock}

    rows, paths = {}, {}
    events = trace.event_tables()
    for table in TABLES[:3]:
        paths[table] = _shard_paths(out_dir, table, shards, file_format)
        rows[table] = events.n_rows(table)
        for path, shard_rows in zip(paths[table], np.array_split(np.arange(rows[table]), shards)):
            writer = _ShardWriter(path, file_format)
            writer.write(events.columns(table, shard_rows), len(shard_rows))
            writer.close()
    seconds["events"] = time.perf_counter() - clock - sum(seconds.values())

    usage = trace.usage_model()
    n_grid = -(-trace.horizon_us // WINDOW_US)
    step = max(1, _USAGE_CHUNK_ROWS * n_grid // max(usage.n_windows, 1))
    bounds = np.linspace(0, n_grid, shards + 1).round().astype(np.int64).tolist()
    paths["instance_usage"] = _shard_paths(out_dir, "instance_usage", shards, file_format)
    rows["instance_usage"] = 0
    for path, k_lo, k_hi in zip(paths["instance_usage"], bounds[:-1], bounds[1:]):
        writer = _ShardWriter(path, file_format)
        for k in range(k_lo, max(k_hi, k_lo + 1), step):
            columns, n_rows = usage.columns(k, min(k + step, k_hi))
            writer.write(columns, n_rows)
            rows["instance_usage"] += n_rows
        writer.close()
    seconds["usage"] = time.perf_counter() - clock - sum(seconds.values())
    return {"rows": rows, "paths": paths, "seconds": seconds}
