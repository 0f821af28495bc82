"""The shaping workload and cluster from the canonical tables, and their dead letters.

Applications are collections (an instance without a collection id, e.g. an Azure VM, is its
own); components are their instances, each task's *first* run (a later run is the trace
scheduler's restart, which the simulator replays itself). A component requests its
instance's request and uses the configured statistic (`usage_statistic`) of its usage windows
on the step grid from its first window (a missing window repeats the previous one), or, with
a step shorter than the windows, per-step usage synthesised from each window's mean and
maximum (`sub_window_usage`, policies/shaping/workload.py's `sub_window_steps`); an
application is submitted at its first component's start, at its components' highest
priority. A usage series of an instance the trace does not list (the Azure CPU readings) is
an application of its own, requesting its rows' limits (`with_usage_only_instances`).

Left out (stage "shaping", table "instances"): a zero or missing request, an unknown machine
id (with the trace's machines as hosts), or core components that do not fit the empty cluster
leave out the whole application (its other components with REASON_SIBLING); a component
without usage windows or a later run of a task is left out alone. An unknown machine id is a
dead letter (the row contradicts the machines table); the rest are exclusions (EXCLUDED).
"""

import dataclasses
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from configs import fleetcast_pb2
from configs.units import US_PER_S
from pipelines import schemas
from pipelines.io import sharding, spill
from pipelines.io.dead_letters import left_out
from pipelines.io.failures import RunFailed
from pipelines.stages.placement.pools import hosts_of_machines
from policies.shaping.cluster.cluster import Cluster
from policies.shaping.random_walk_usage import RANDOM_WALK_SEED
from policies.shaping.workload import SUB_WINDOW_SEED, Workload, sub_window_steps

SOURCE = "shaping"
WORKLOAD = "workload"
REASON_NO_REQUEST = "zero or missing cpu_request or memory_request"
REASON_UNKNOWN_MACHINE = "machine_id not in the machines table"
REASON_NO_USAGE = "no usage windows"
REASON_LATER_RUN = "a later run of a task (each task's first run is replayed)"
REASON_TOO_LARGE = "core components do not fit the empty cluster"
REASON_SIBLING = "another component of the application was rejected"
ALONE_REASONS = (REASON_LATER_RUN, REASON_NO_USAGE)
EXCLUDED = frozenset((REASON_NO_REQUEST, REASON_NO_USAGE, REASON_LATER_RUN, REASON_TOO_LARGE,
                      REASON_SIBLING))
# With step_s the usage windows' length a window is one series step (a missing window
# repeats the previous one); 300 steps per window is a 1 s step on 300-s windows.
MAX_STEPS_PER_WINDOW = 16
# Fewer steps (16 MB of series) are never a problem, however few the windows.
MIN_STEPS_CHECKED = 1_000_000
# runtime_scale's bound on the workload's component-steps (3.2 GB of usage series).
MAX_SCALED_STEPS = 2 * 10 ** 8
# usage_model RANDOM_WALK's bound on component-seconds of curves (~10^7 per second of compute).
MAX_CURVE_SECONDS = 10 ** 10


@dataclasses.dataclass(frozen=True)
class ShapingInput:
    """The trace's workload (every component core; seeds mark elastic ones later) and the
    cluster it runs on."""
    workload: Workload
    cluster: Cluster


def application_keys(instances: pa.Table) -> np.ndarray:
    """int64[n] application codes: the collection id, else the instance id (its own app)."""
    keys = pc.if_else(pc.is_valid(instances.column("collection_id")),
                      pc.cast(instances.column("collection_id"), pa.string()),
                      pc.binary_join_element_wise("vm:", instances.column("instance_id"), ""))
    return sharding.sorted_codes(keys)


def cluster_of(config, machines: pa.Table):
    """The configured homogeneous hosts, else the machines' (None without any)."""
    if config.HasField("host_shape"):
        cluster = Cluster.homogeneous(config.host_shape.cpu, config.host_shape.memory,
                                      config.host_count)
    else:
        capacity = hosts_of_machines(machines)
        if capacity is None:
            return None
        cluster = Cluster(capacity)
    if config.cpu_only:
        # Memory is left out: one unit per host, zero per component.
        cluster = Cluster(np.column_stack([cluster.capacity[:, 0], np.ones(cluster.num_hosts)]))
    return cluster


def instance_reasons(instances: pa.Table, machines: pa.Table, config) -> np.ndarray:
    """object[n] dead-letter reason per instance row ("" = kept), before usage is read."""
    cpu = np.nan_to_num(instances.column("cpu_request").to_numpy(zero_copy_only=False)
                        .astype(np.float64))
    memory = np.nan_to_num(instances.column("memory_request").to_numpy(zero_copy_only=False)
                           .astype(np.float64))
    reasons = np.full(instances.num_rows, "", dtype=object)
    task = pc.binary_join_element_wise(pc.cast(instances.column("collection_id"), pa.string()),
                                       pc.cast(instances.column("instance_index"), pa.string()),
                                       ":")
    task = pc.if_else(pc.is_valid(task), task, instances.column("instance_id"))
    codes = sharding.sorted_codes(task)
    reasons[np.concatenate([[False], codes[1:] == codes[:-1]])] = REASON_LATER_RUN
    if not config.HasField("host_shape"):
        known = pc.is_in(instances.column("machine_id"),
                         pa.array(np.unique(machines.column("machine_id").to_numpy())))
        unknown = pc.and_(pc.is_valid(instances.column("machine_id")), pc.invert(known))
        reasons[np.asarray(unknown.to_numpy(zero_copy_only=False), dtype=bool)] = (
            REASON_UNKNOWN_MACHINE)
    reasons[(cpu <= 0) | ((memory <= 0) & (not config.cpu_only))] = REASON_NO_REQUEST
    return reasons


def usage_series(instances: pa.Table, usage: pa.Table, config):
    """(lengths int64[n], series float64[sum, 2]) of the kept instances (rows in order) on
    the step grid; a length of 0 = no usage window. A window covers its length / step_s
    steps (at least one) of its `usage_statistic`, or, with `sub_window_usage: SYNTHESISED`,
    of `sub_window_steps` usage (each window's mean and maximum kept)."""
    step_us = config.step_s * US_PER_S
    synthesised = config.sub_window_usage == fleetcast_pb2.ShapingConfig.SYNTHESISED
    statistics = ("avg", "max") if synthesised else (
        "avg" if config.usage_statistic == 1 else "max",)
    ids = instances.column("instance_id")
    usage = usage.filter(pc.is_in(usage.column("instance_id"), ids))
    resources = ("cpu",) if config.cpu_only else ("cpu", "memory")
    valid = [pc.is_valid(usage.column(f"{s}_{r}")) for s in statistics for r in resources]
    for condition in valid[1:]:
        valid[0] = pc.and_(valid[0], condition)
    usage = usage.filter(valid[0])
    row = pc.index_in(usage.column("instance_id"), ids).to_numpy(zero_copy_only=False)
    start = usage.column("start_time").to_numpy()
    run_start = instances.column("start_time").to_numpy()[row]
    run_end = (instances.column("end_time").to_numpy(zero_copy_only=False)
               .astype(np.float64)[row])
    keep = (start >= run_start) & ~(start >= run_end)  # a null end (NaN) keeps every window
    order = np.lexsort((start[keep], row[keep]))
    row, start = row[keep][order], start[keep][order]

    def window_values(statistic):
        """float64[w, 2] the kept windows' (cpu, memory) `statistic`, memory 0 if cpu_only."""
        columns = [usage.column(f"{statistic}_{r}").to_numpy(zero_copy_only=False)
                   [keep][order] for r in resources]
        return np.column_stack(columns + [np.zeros(len(row))] * (2 - len(columns)))

    first = np.concatenate([[True], row[1:] != row[:-1]]) if len(row) else np.zeros(0, bool)
    first_start = np.maximum.accumulate(np.where(first, start, -1))
    step = (start - first_start) // step_us
    # A window covers its length / step_s steps (at least one).
    end = usage.column("end_time").to_numpy(zero_copy_only=False)[keep][order]
    sub_steps = np.maximum(np.round((end - start) / step_us), 1).astype(np.int64)
    lengths = np.zeros(instances.num_rows, dtype=np.int64)
    np.maximum.at(lengths, row, step + sub_steps)
    check_series_size(int(lengths.sum()), usage, config)
    if synthesised:
        values = sub_window_steps(window_values("avg"), window_values("max"), sub_steps,
                                  np.random.default_rng(SUB_WINDOW_SEED))
    else:
        values = np.repeat(window_values(statistics[0]), sub_steps, axis=0)
    within = np.arange(sub_steps.sum()) - np.repeat(np.cumsum(sub_steps) - sub_steps,
                                                   sub_steps)
    row, step = np.repeat(row, sub_steps), np.repeat(step, sub_steps) + within
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    position = np.full(offsets[-1], -1)
    position[offsets[row] + step] = np.arange(len(row))
    # Missing windows repeat the previous one (a component's first window is always there).
    position = np.maximum.accumulate(position) if len(position) else position
    return lengths, values[position] if len(position) else np.zeros((0, 2))


def check_series_size(steps: int, usage: pa.Table, config):
    """Raises RunFailed naming shaping.step_s when the usage series would hold more than
    MAX_STEPS_PER_WINDOW steps per usage window (and MIN_STEPS_CHECKED in all): a step
    shorter than the windows repeats each of them."""
    windows = usage.num_rows
    if steps <= max(MAX_STEPS_PER_WINDOW * windows, MIN_STEPS_CHECKED):
        return
    window_s = np.median(usage.column("end_time").to_numpy(zero_copy_only=False)
                         - usage.column("start_time").to_numpy()) / US_PER_S
    raise RunFailed(
        f"shaping.step_s: {config.step_s} s makes the {windows:,} usage windows "
        f"{steps:,} series steps ({steps / windows:,.0f} per window, 16 bytes each and more "
        f"in the forecasts): step_s must be the windows' length ({window_s:g} s)")


def with_usage_only_instances(instances: pa.Table, usage: pa.Table) -> pa.Table:
    """`instances` and one row per instance id of `usage` that it lacks: requests = the
    usage rows' cpu_limit and memory_limit (the first window's), start = the first window's
    start, end = the last window's end (µs)."""
    missing = usage.filter(pc.invert(pc.is_in(usage.column("instance_id"),
                                              value_set=instances.column("instance_id"))))
    if not missing.num_rows:
        return instances
    order = np.lexsort((missing.column("start_time").to_numpy(),
                        sharding.sorted_codes(missing.column("instance_id"))))
    missing = missing.take(pa.array(order))
    codes = sharding.sorted_codes(missing.column("instance_id"))
    first = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    end = missing.column("end_time").to_numpy(zero_copy_only=False)
    columns = {
        "instance_id": missing.column("instance_id").take(pa.array(first)),
        "start_time": missing.column("start_time").take(pa.array(first)),
        "end_time": pa.array(np.maximum.reduceat(end, first), pa.int64()),
        "cpu_request": missing.column("cpu_limit").take(pa.array(first)),
        "memory_request": missing.column("memory_limit").take(pa.array(first)),
    }
    n = len(first)
    added = pa.Table.from_arrays([columns.get(f.name, pa.nulls(n, f.type))
                                  for f in schemas.INSTANCES], schema=schemas.INSTANCES)
    return pa.concat_tables([instances, added])


def prepare(element, config, spill_to: Optional[spill.SpillTo] = None):
    """(key, {instances, usage, machines}: tables or Spilled references) → (WORKLOAD,
    ShapingInput, as a SpilledObject when `spill_to` says so), dead letters and
    exclusions."""
    _, grouped = element
    usage = sharding.concat(map(spill.load, grouped["usage"]), schemas.USAGE)
    instances = with_usage_only_instances(
        sharding.concat(map(spill.load, grouped["instances"]), schemas.INSTANCES), usage)
    machines = sharding.concat(map(spill.load, grouped["machines"]), schemas.MACHINES)
    if not instances.num_rows:
        return
    cluster = cluster_of(config, machines)
    apps = application_keys(instances)
    instances = instances.take(pa.array(np.lexsort((
        instances.column("start_time").to_numpy(),
        instances.column("instance_index").to_numpy(zero_copy_only=False), apps))))
    apps = application_keys(instances)
    reasons = instance_reasons(instances, machines, config)
    if cluster is None:
        reasons[:] = REASON_UNKNOWN_MACHINE
    lengths, series = usage_series(instances, usage, config)
    reasons = reject_siblings(apps, reasons)
    # A component without usage is left out alone; an application without any is left out.
    reasons[(reasons == "") & (lengths == 0)] = REASON_NO_USAGE
    if cluster is not None:
        reasons = reject_siblings(apps, too_large(instances, apps, reasons, cluster, config))
    rejected = reasons != ""
    if rejected.any():
        yield from left_out(SOURCE, "instances", instances.filter(pa.array(rejected)),
                            reasons[rejected], EXCLUDED)
    if not rejected.all():
        workload = workload_of(instances, apps, lengths, series, ~rejected, config)
        workload = workload.with_runtime_scale(scaled_runtime(workload, config))
        if config.usage_model == fleetcast_pb2.ShapingConfig.RANDOM_WALK:
            workload = random_walk_usage(workload, config)
        yield WORKLOAD, spill.spilled_object(ShapingInput(workload, cluster), spill_to)


def scaled_runtime(workload: Workload, config) -> int:
    """config.runtime_scale, after checking that the longer series fit MAX_SCALED_STEPS
    (else RunFailed naming the field)."""
    steps = workload.component_steps() * config.runtime_scale
    if steps > MAX_SCALED_STEPS:
        raise RunFailed(
            f"shaping.runtime_scale: {config.runtime_scale} makes the workload's "
            f"{workload.component_steps():,} component-steps {steps:,}, more than "
            f"{MAX_SCALED_STEPS:,} (16 bytes each, and more in the forecasts)")
    return config.runtime_scale


def random_walk_usage(workload: Workload, config) -> Workload:
    """`workload` with [Pace18]'s simulator's usage curves (usage_model: RANDOM_WALK);
    raises RunFailed naming the field when they would take more than MAX_CURVE_SECONDS."""
    seconds = workload.component_steps() * config.step_s
    if seconds > MAX_CURVE_SECONDS:
        raise RunFailed(
            f"shaping.usage_model: RANDOM_WALK builds a per-second curve of every component: "
            f"{seconds:,} component-seconds, more than {MAX_CURVE_SECONDS:,} (about "
            f"{MAX_CURVE_SECONDS // 10 ** 7:,} s of compute); use TRACE or fewer components")
    return workload.with_random_walk_usage(np.random.default_rng(RANDOM_WALK_SEED))


def reject_siblings(apps: np.ndarray, reasons: np.ndarray) -> np.ndarray:
    """`reasons` with every kept component of an application with a rejected one rejected
    (components left out alone, ALONE_REASONS, do not reject their application)."""
    bad = np.zeros(apps.max() + 1, dtype=bool)
    bad[apps[(reasons != "") & ~np.isin(reasons, ALONE_REASONS)]] = True
    reasons = reasons.copy()
    reasons[(reasons == "") & bad[apps]] = REASON_SIBLING
    return reasons


def requests(instances: pa.Table, config) -> np.ndarray:
    """float64[n, 2] (cpu, memory) requests; memory 0 with cpu_only."""
    cpu = instances.column("cpu_request").to_numpy(zero_copy_only=False).astype(np.float64)
    memory = instances.column("memory_request").to_numpy(zero_copy_only=False).astype(
        np.float64)
    return np.column_stack([cpu, np.zeros(len(cpu)) if config.cpu_only else memory])


def too_large(instances, apps, reasons, cluster: Cluster, config) -> np.ndarray:
    """`reasons` with REASON_TOO_LARGE for the kept applications that fit no empty cluster."""
    reasons = reasons.copy()
    demand = requests(instances, config)
    kept = np.flatnonzero(reasons == "")
    for rows in np.split(kept, np.flatnonzero(np.diff(apps[kept])) + 1):
        if len(rows) and not cluster.fits_empty(demand[rows]):
            reasons[rows] = REASON_TOO_LARGE
    return reasons


def workload_of(instances, apps, lengths, series, kept, config) -> Workload:
    """The Workload of the kept instance rows (grouped by application, in row order)."""
    step_us = config.step_s * US_PER_S
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    rows = np.flatnonzero(kept)
    app_codes, first, counts = np.unique(apps[rows], return_index=True, return_counts=True)
    start = instances.column("start_time").to_numpy()[rows]
    origin = start.min()
    priority = np.nan_to_num(instances.column("priority").to_numpy(zero_copy_only=False)
                             .astype(np.float64))[rows]
    app_start = np.concatenate([[0], np.cumsum(counts)])
    # The collection id; an application without one (a VM) gets a negative id.
    collection = (instances.column("collection_id").to_numpy(zero_copy_only=False)
                  .astype(np.float64)[rows][first])
    app_id = np.where(np.isnan(collection), -1 - app_codes,
                      np.nan_to_num(collection)).astype(np.int64)
    return Workload.from_series(
        config.step_s, (np.minimum.reduceat(start, app_start[:-1]) - origin) // step_us,
        np.maximum.reduceat(priority, app_start[:-1]).astype(np.int64), counts,
        requests(instances, config)[rows], np.zeros(len(rows), dtype=bool),
        [series[offsets[r]:offsets[r + 1]] for r in rows], app_id=app_id)
