"""A pool ready to replay: its VMs as a `PlacementTrace`, its hosts as a `PoolSpec`, and the
instances it cannot replay as dead letters (see the package docstring)."""

import dataclasses
import zlib
from typing import List, Optional, Sequence, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from configs.units import US_PER_S
from pipelines import progress, schemas
from pipelines.io import sharding, spill
from pipelines.io.dead_letters import left_out
from pipelines.io.failures import RunFailed
from pipelines.stages.placement.usage import PoolUsage, pool_usage
from pipelines.stages.placement.validation import MAX_SAMPLES
from policies.replay.pool import PoolSpec, peak_demand, peak_demand_time
from policies.replay.simulator import (
    PlacementTrace,
)
from policies.replay.usage import VmUsage
from predictors.lifetime import features

SOURCE = "placement"
POOLS = "pools"
# Why an instance is left out of the replays: a dead letter when its row contradicts the
# schema, an exclusion when the replay cannot model it (EXCLUDED).
REASON_NO_REQUEST = "no cpu_request or memory_request"
REASON_ZERO_REQUEST = "zero cpu_request and memory_request"
REASON_ENDS_BEFORE_START = "end_time before start_time"
REASON_TOO_LARGE = "request larger than every host of the pool"
REASON_NO_HOSTS = "pool has no machine with capacities"
EXCLUDED = frozenset((REASON_NO_REQUEST, REASON_ZERO_REQUEST, REASON_TOO_LARGE,
                      REASON_NO_HOSTS))
# Where a pool's hosts come from (placement_summary.hosts_from).
HOSTS_FROM_MACHINES, HOSTS_FROM_COUNT, HOSTS_FROM_PEAK = "machines", "host_count", "peak_demand"
# The instance columns a pool keeps for its model lifetime sources: those the models' features
# read (the ids, names and end columns stay behind).
MODEL_COLUMNS = tuple(name for name in schemas.INSTANCES.names
                      if name in features.SOURCE_COLUMNS)


@dataclasses.dataclass
class PoolInput:
    """A pool ready to replay (the replays' side input): its trace, hosts, window, for
    model lifetime sources only the instance rows in trace order (in a run, their
    MODEL_COLUMNS; a table, or a Spilled reference to one: `instance_rows` reads either),
    and for an admission its VMs' usage samples (`vm_usage` maps them if spilled); where
    its hosts come from (HOSTS_FROM_*) and, sized by peak demand, the peak's time (µs)."""
    pool: str
    trace: PlacementTrace
    spec: PoolSpec
    start_us: int
    end_us: int
    instances: Optional[Union[pa.Table, spill.Spilled]] = None
    usage: Optional[Union[VmUsage, PoolUsage]] = None
    hosts_from: str = HOSTS_FROM_MACHINES
    peak_demand_time_us: Optional[int] = None

    def instance_rows(self) -> Optional[pa.Table]:
        """The instance rows (memory-mapped from the run's spill file if spilled)."""
        return spill.load(self.instances)

    def vm_usage(self) -> Optional[VmUsage]:
        """The VMs' usage samples (memory-mapped from the run's spill files if spilled)."""
        return self.usage.load() if isinstance(self.usage, PoolUsage) else self.usage


def pool_seed(seed: int, pool: str) -> int:
    """A seed for `pool`'s random draws, stable across runs and processes."""
    return int(np.random.SeedSequence([seed, zlib.crc32(pool.encode())]).generate_state(1)[0])


def split_by_pool(table: pa.Table, spill_to: Optional[spill.SpillTo] = None):
    """(pool, rows) for every pool of a table with a `pool` column (null pool: ""); the rows
    a Spilled reference when `spill_to` says so."""
    for pool, rows in sharding.split_by_key(table, pc.fill_null(table.column("pool"), "")):
        yield pool, spill.spilled(rows, spill_to)


def hosts_of_machines(machines: pa.Table) -> Optional[np.ndarray]:
    """Capacity float64[H, 2] (cpu, memory) of a pool's machines: each machine's latest event
    with both capacities; None without any. Machines that come and go during the trace count
    as present throughout (the replay's pool is fixed)."""
    machines = machines.filter(pc.and_(pc.is_valid(machines.column("cpu_capacity")),
                                       pc.is_valid(machines.column("memory_capacity"))))
    if not machines.num_rows:
        return None
    latest = machines.sort_by([("machine_id", "ascending"), ("time", "descending")])
    ids = latest.column("machine_id").to_numpy()
    first = np.concatenate([[True], ids[1:] != ids[:-1]])
    capacity = np.column_stack([latest.column("cpu_capacity").to_numpy()[first],
                                latest.column("memory_capacity").to_numpy()[first]])
    capacity = capacity[np.all(capacity > 0, axis=1)]
    return capacity if len(capacity) else None


def request_reasons(cpu: np.ndarray, memory: np.ndarray, start: np.ndarray,
                    end: np.ndarray) -> np.ndarray:
    """Dead-letter reason per VM ("" for a replayable one), object[n], from its requests and
    times, float64[n] each (NaN where null)."""
    reasons = np.full(len(cpu), "", dtype=object)
    reasons[end < start] = REASON_ENDS_BEFORE_START
    reasons[(cpu == 0) & (memory == 0)] = REASON_ZERO_REQUEST
    missing = ~(np.isfinite(cpu) & np.isfinite(memory)) | (cpu < 0) | (memory < 0)
    reasons[missing] = REASON_NO_REQUEST
    return reasons


def fits_some_host(demand: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """bool[V]: demand float[V, D] fits at least one host of capacity float[H, D] when empty."""
    shapes = np.unique(capacity, axis=0)
    return np.any(np.all(demand[:, None, :] <= shapes[None, :, :], axis=2), axis=1)


def pool_spec(config, capacity: Optional[np.ndarray], trace: PlacementTrace) -> PoolSpec:
    """The pool's hosts: configured shape and count (or count from peak demand), else the
    machines' capacities."""
    if config.HasField("host_shape"):
        shape = (config.host_shape.cpu, config.host_shape.memory)
        if config.HasField("host_count"):
            return PoolSpec.from_shape(shape, config.host_count)
        return PoolSpec.from_peak_demand(shape, trace.arrival_us, trace.exit_us, trace.demand,
                                         config.target_utilization)
    return PoolSpec(capacity)


def hosts_origin(config, trace: PlacementTrace):
    """(HOSTS_FROM_* of the pool's hosts, the time in µs of the peak demand that sized them
    or None): the machines table's, host_shape × host_count, or host_shape × as many as the
    peak demand needs (the peak of the dimension that sets the count)."""
    if not config.HasField("host_shape"):
        return HOSTS_FROM_MACHINES, None
    if config.HasField("host_count"):
        return HOSTS_FROM_COUNT, None
    shape = np.array([config.host_shape.cpu, config.host_shape.memory])
    binding = int(np.argmax(peak_demand(trace.arrival_us, trace.exit_us, trace.demand) / shape))
    return HOSTS_FROM_PEAK, peak_demand_time(trace.arrival_us, trace.exit_us, trace.demand,
                                             binding)


def prepare_pool(element, config, keep_instances: bool,
                 spill_to: Optional[spill.SpillTo] = None,
                 columns: Sequence[str] = MODEL_COLUMNS, step_s: Optional[float] = None):
    """(pool, {instances, machines[, samples]}: tables or Spilled references) → (tag, value)
    pairs: one (POOLS, PoolInput) and the pool's dead letters; `keep_instances` keeps the
    rows' `columns` (by default those the models' features read), spilled as `spill_to`
    says; with `step_s` (an admission's grid step, seconds), the VMs' usage from the
    pool's UsagePieces under "samples" (pipelines/stages/placement/usage.py).

    The pool's rows stay as they came (memory-mapped when spilled): the order and the checks
    read a few columns, and the kept rows are taken in order once (`spill.spilled_take`),
    so a pool's rows are never copied whole."""
    pool, grouped = element
    instances = sharding.concat(map(spill.load, grouped["instances"]), schemas.INSTANCES)
    if not instances.num_rows:
        return
    order = pc.sort_indices(instances.select(["start_time", "instance_id"]), sort_keys=[
        ("start_time", "ascending"), ("instance_id", "ascending")]).to_numpy()
    capacity = None
    if not config.HasField("host_shape"):
        capacity = hosts_of_machines(sharding.concat(map(spill.load, grouped["machines"]),
                                                     schemas.MACHINES))
        if capacity is None:
            yield from left_out(SOURCE, "instances", instances, [REASON_NO_HOSTS]
                                * instances.num_rows, EXCLUDED)
            return
    cpu, memory, end = (instances.column(c).to_numpy().astype(np.float64)[order]
                        for c in ("cpu_request", "memory_request", "end_time"))
    start = instances.column("start_time").to_numpy()[order]
    reasons = request_reasons(cpu, memory, start.astype(np.float64), end)
    host_shapes = (capacity if capacity is not None
                   else np.array([[config.host_shape.cpu, config.host_shape.memory]]))
    demand = np.column_stack([cpu, memory])
    too_large = (reasons == "") & ~fits_some_host(np.nan_to_num(demand), host_shapes)
    reasons[too_large] = REASON_TOO_LARGE
    rejected = reasons != ""
    if rejected.any():
        yield from left_out(SOURCE, "instances", instances.take(order[rejected]),
                            reasons[rejected], EXCLUDED)
    kept = order[~rejected]
    if not len(kept):
        return
    start, end = start[~rejected], end[~rejected]
    # Censored VMs run until the latest time the pool's rows show (they never exit within
    # the replay, which ends at the last arrival unless configured).
    latest_us = int(max(start.max(), np.nanmax(end) if np.isfinite(end).any() else start.max()))
    trace = PlacementTrace.from_arrays(start, end, demand[~rejected], end_us=latest_us)
    start_us = config.start_time_us if config.HasField("start_time_us") else max(
        0, int(start.min()))
    end_us = config.end_time_us if config.HasField("end_time_us") else int(start.max())
    check_samples(pool, start_us, end_us, config)
    rows = (spill.spilled_take(instances.select(list(columns)), kept, spill_to)
            if keep_instances else None)
    usage = None
    if step_s is not None:
        usage = pool_usage(grouped.get("samples", ()),
                           instances.column("instance_id").take(pa.array(kept)), start, step_s,
                           spill_to)
    spec = pool_spec(config, capacity, trace)
    hosts_from, peak_us = hosts_origin(config, trace)
    if hosts_from == HOSTS_FROM_PEAK:
        progress.report("placement: pool %r: %d hosts of cpu %g, memory %g derived from its "
                        "peak demand at t = %.0f s (no placement.host_count)", pool,
                        spec.num_hosts, *spec.capacity[0], peak_us / US_PER_S)
    yield POOLS, PoolInput(pool, trace, spec, start_us, end_us, rows, usage, hosts_from,
                           peak_us)


def check_samples(pool: str, start_us: int, end_us: int, config):
    """Raises RunFailed naming placement.sample_period_s when a replay of `pool` over
    [start_us, end_us] would take more than MAX_SAMPLES metric samples."""
    samples = (end_us - start_us - config.warmup_s * US_PER_S) // (
        config.sample_period_s * US_PER_S) + 1
    if samples > MAX_SAMPLES:
        raise RunFailed(
            f"placement.sample_period_s: {config.sample_period_s} s over pool {pool!r}'s "
            f"replay window [{start_us}, {end_us}] µs gives {samples:,} metric samples per "
            f"replay, more than {MAX_SAMPLES:,} (each a pass over the hosts and a "
            "placement_timeseries row): raise sample_period_s or narrow the window "
            "(start_time_us, end_time_us)")


def pool_inputs(instances: pa.Table, config,
                machines: Optional[pa.Table] = None) -> List[PoolInput]:
    """Every pool's `PoolInput`, instance rows kept whole: what the stage replays, for code
    that replays a run's pools again outside the pipeline (and may read any column). Hosts
    come from the config, else from `machines` (the run's machines table)."""
    machines_of = dict(split_by_pool(machines)) if machines is not None else {}
    pools = []
    for pool, rows in split_by_pool(instances):
        element = (pool, {"instances": [rows],
                          "machines": [machines_of[pool]] if pool in machines_of else []})
        pools += [value for tag, value in prepare_pool(element, config, True,
                                                       columns=schemas.INSTANCES.names)
                  if tag == POOLS]
    return pools
