"""Synthetic Google cluster trace v3 (2019) generator: fleetcast's embedded default data
(`fleetcast synth`).

Writes the four tables of the public BigQuery dataset (machine_events, collection_events,
instance_events, instance_usage) with the v3 field names and enums of google/cluster-data's
`clusterdata_trace_format_v3.proto`, so fleetcast reads it exactly like the real trace.
Seeded: the same arguments give byte-identical files. Times are integer microseconds from the
trace start; resources are normalized so that the largest machine has cpus = memory = 1.

Modules, in the order the generator applies them: fleet (machines and their events), workload
(logical names; jobs arriving as a diurnal Poisson process from 30 days before the start;
their tasks' lifetimes and fates), placement (each task on a random machine with room), usage
(instance_usage per 5-minute window), events (the event tables), writers (JSON / CSV lines,
Arrow tables, shard files), trace (`sample_trace` and `generate`: a large cell in blocks of
machines), parallel (the worker processes that sample blocks and write files), constants
(shared enums, table names, file suffixes and layouts, units). The `fleetcast synth` command
adds bounds (its arguments' limits) and ownership (its output directory's manifest, lock and
atomic publication); they import the pipeline's modules, so this package does not import
them.
"""

from synthetic.constants import (
    ENABLE,
    EVICT,
    FAIL,
    FILE_SUFFIXES,
    FINISH,
    JOB,
    KILL,
    LAYOUTS,
    LOST,
    MACHINE_ADD,
    MACHINE_REMOVE,
    MACHINE_UPDATE,
    MAX_LIFETIME_US,
    MIN_LIFETIME_US,
    NO_ALLOC_COLLECTION,
    NO_ALLOC_INDEX,
    NO_MACHINE,
    QUEUE,
    RESOURCE_UNITS,
    SCHEDULE,
    SUBMIT,
    TABLES,
    UPDATE_PENDING,
    UPDATE_RUNNING,
    USAGE_DECIMALS,
    WINDOW_US,
)
from synthetic.events import EventTables
from synthetic.fleet import Fleet, sample_fleet
from synthetic.placement import Placement, RandomFitReplay
from synthetic.trace import (
    BLOCK_MACHINES,
    DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR,
    Trace,
    generate,
    sample_trace,
)
from synthetic.usage import UsageModel
from synthetic.workload import Catalog, Jobs, Tasks, sample_workload
from synthetic.writers import Column, encode_lines, to_arrow

__all__ = [
    # Generating a trace.
    "generate", "sample_trace", "Trace", "DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR",
    "BLOCK_MACHINES",
    # Its parts.
    "Fleet", "sample_fleet", "Catalog", "Jobs", "Tasks", "sample_workload", "Placement",
    "RandomFitReplay", "UsageModel", "EventTables", "Column", "encode_lines", "to_arrow",
    # The v3 format and units.
    "WINDOW_US", "MAX_LIFETIME_US", "MIN_LIFETIME_US", "RESOURCE_UNITS", "USAGE_DECIMALS",
    "SUBMIT", "QUEUE", "ENABLE", "SCHEDULE", "EVICT", "FAIL", "FINISH", "KILL", "LOST",
    "UPDATE_PENDING", "UPDATE_RUNNING", "MACHINE_ADD", "MACHINE_REMOVE", "MACHINE_UPDATE",
    "NO_MACHINE", "NO_ALLOC_COLLECTION", "NO_ALLOC_INDEX", "JOB", "TABLES", "FILE_SUFFIXES",
    "LAYOUTS",
]
