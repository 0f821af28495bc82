"""Synthetic Google cluster trace v3 (2019) generator: fleetcast's embedded default data.

Writes the four tables a user would export from the public BigQuery dataset --
machine_events, collection_events, instance_events, instance_usage -- with the v3 field names
and enums of google/cluster-data `clusterdata_trace_format_v3.proto`, so that fleetcast reads
it exactly like the real trace. Seeded and deterministic: the same arguments give
byte-identical files. Times are integer microseconds from the trace start; resources are
normalized so that the largest machine has cpus = memory = 1.

The workload model, in the order the generator applies it:

1. Fleet: machines of a few platforms, all ADDed at time 0; now and then one is REMOVEd for
   a repair and ADDed back, a few get an UPDATE (memory upgrade).
2. Catalog: logical names ("workloads"), either batch (minutes, low priority bands) or
   service (days, production bands). A name fixes its user, priority, scheduling class,
   typical request, lifetime scale and usage pattern.
3. Collections (jobs) arrive as a diurnal Poisson process from 30 days before the trace
   start, so that long-running tasks are already running at time 0 (their events are at
   time 0). A job has several tasks with the same request. log10 lifetime = name mean +
   feature effects (request size, scheduling class, priority band) + job noise + task
   noise, with a name-specific chance of an early crash: most tasks live under an hour,
   most core-hours are in tasks living over a day, and features explain a good part (not
   all) of the variance.
4. Placement: an event-driven replay puts each task on a random machine with room for its
   request; tasks that fit nowhere wait (highest priority first). Requests never exceed a
   machine's capacity. A machine removal evicts its tasks, which are resubmitted; some
   tasks fail or are evicted once and are resubmitted; some get an UPDATE_RUNNING that
   changes their request.
5. Usage: per 5-minute window, mean CPU = task base × diurnal cycle × job-level slow
   variation and noise (shared by the tasks of a job) × task noise × rare job-wide bursts;
   the window's CPU percentiles are those of a lognormal per-second distribution around
   that mean. Window noise is a counter-based hash of (seed, job or task, window), so the
   usage table is generated in time slices with results independent of the slicing.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import dataclasses
import gzip
import hashlib
import heapq
import json
import time
from concurrent.futures import ThreadPoolExecutor
from statistics import NormalDist
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from configs.units import DAY_US, HOUR_US, US_PER_S

WINDOW_US = 300 * US_PER_S
MAX_LIFETIME_US = 30 * DAY_US
MIN_LIFETIME_US = 10 * US_PER_S
# The placer counts resources in integer units of 1e-5 machine: exact capacity accounting,
# and requests that print short.
RESOURCE_UNITS = 100_000
USAGE_DECIMALS = 7

# v3 EventType (collection_events.type, instance_events.type).
SUBMIT, QUEUE, ENABLE, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST = range(9)
UPDATE_PENDING, UPDATE_RUNNING = 9, 10
# v3 MachineEvent.EventType.
MACHINE_ADD, MACHINE_REMOVE, MACHINE_UPDATE = 1, 2, 3
NO_MACHINE = 0
NO_ALLOC_COLLECTION = 0
NO_ALLOC_INDEX = -1
JOB = 0

TABLES = ("machine_events", "collection_events", "instance_events", "instance_usage")
FILE_SUFFIXES = {"json": ".json.gz", "csv": ".csv.gz", "parquet": ".parquet"}

# (cpus, memory, share of machines, cycles-per-instruction scale) per platform.
_PLATFORMS = np.array([
    (0.50, 0.50, 0.45, 1.00),
    (0.50, 0.25, 0.20, 1.10),
    (0.75, 0.50, 0.15, 0.90),
    (1.00, 1.00, 0.10, 0.85),
    (0.25, 0.25, 0.10, 1.25),
])
_MACHINES_PER_SWITCH = 16
_REMOVALS_PER_MACHINE_DAY = 1 / 30
_UPGRADED_MACHINE_SHARE = 0.05
# Largest request as a fraction of a machine: every task fits on the smallest platform.
_MAX_REQUEST_UNITS = 20_000
_MIN_REQUEST_UNITS = 10

# v3 priority bands: free 0-99, best-effort batch 100-115, mid 116-119, production 120-359,
# monitoring 360+.
_BATCH_PRIORITIES = np.array([0, 25, 100, 103, 105, 107, 110, 115, 116, 118, 119])
_SERVICE_PRIORITIES = np.array([120, 200, 200, 205, 360])
_PRODUCTION_PRIORITY = 120
_SERVICE_NAME_SHARE = 0.25
# Log-sd of log10 lifetime around a name's mean (job, task and request-size terms), and of
# the job request and task count around a name's typical values.
_JOB_LOG10_LIFETIME_SD = 0.3
_TASK_LOG10_LIFETIME_SD = 0.2
_JOB_REQUEST_SD = 0.35
_TASK_COUNT_SD = 0.6
# Final fate probabilities (FINISH, KILL, FAIL): batch tasks mostly finish, services are
# mostly killed by their owner.
_BATCH_FATES = (0.85, 0.10, 0.05)
_SERVICE_FATES = (0.20, 0.75, 0.05)

# Arrivals and usage follow one cluster-wide day, peaking at 15:00 trace time.
_DIURNAL_PEAK_RAD = 2 * np.pi * 15 / 24
_ARRIVAL_DIURNAL_AMPLITUDE = 0.3

# Window-level CPU noise (log-sd), shared by a job's tasks and per task.
_JOB_NOISE = 0.15
_TASK_NOISE = 0.12
_MAX_SAMPLES_PER_WINDOW = 300
_NORMAL = NormalDist()
# z of the 10th..90th and 91st..99th percentiles of a standard normal.
_DECILE_Z = np.array([_NORMAL.inv_cdf(p / 100) for p in range(10, 100, 10)])
_TAIL_Z = np.array([_NORMAL.inv_cdf(p / 100) for p in range(91, 100)])
# Expected largest of n standard normal samples (Blom's approximation), n = 0..300; the
# min and max of a window with n per-second samples.
_EXTREME_Z = np.array(
    [0.0] + [_NORMAL.inv_cdf((n - 0.375) / (n + 0.25)) for n in range(1, _MAX_SAMPLES_PER_WINDOW + 1)])


def _obfuscated(namespace: str, ids) -> np.ndarray:
    """v3-style obfuscated strings (base64 of a SHA-256), one per id."""
    return np.array([
        base64.b64encode(hashlib.sha256(f"{namespace}:{i}".encode()).digest()).decode()
        for i in ids], dtype=object)


def _lognormal(rng: np.random.Generator, median, sigma: float, size=None) -> np.ndarray:
    """Lognormal samples with the given median(s) and log-sd; one per median by default."""
    return median * np.exp(sigma * rng.standard_normal(np.shape(median) if size is None else size))


def _to_units(fraction) -> np.ndarray:
    """Machine fractions -> integer 1e-5 units."""
    return np.round(np.asarray(fraction) * RESOURCE_UNITS).astype(np.int64)


class Fleet(NamedTuple):
    """Machines and their machine_events.

    machine_id, platform (row of _PLATFORMS), switch: (n_machines,) int64. Events, sorted by
    time, each (n_events,) int64: event_time_us, event_machine (index into machine_id),
    event_type (MACHINE_ADD, ...), event_cpu and event_memory (capacity from the event on,
    in 1e-5 units).
    """
    machine_id: np.ndarray
    platform: np.ndarray
    switch: np.ndarray
    event_time_us: np.ndarray
    event_machine: np.ndarray
    event_type: np.ndarray
    event_cpu: np.ndarray
    event_memory: np.ndarray


def sample_fleet(rng: np.random.Generator, n_machines: int, horizon_us: int) -> Fleet:
    """Machines of a few platforms, ADDed at time 0; about one repair (REMOVE, then ADD after
    a lognormal 2-hour median) per machine-month; a few machines get a memory upgrade, an
    UPDATE event if the machine is up at that time."""
    platform = rng.choice(len(_PLATFORMS), size=n_machines, p=_PLATFORMS[:, 2])
    cpu = _to_units(_PLATFORMS[platform, 0])
    memory = _to_units(_PLATFORMS[platform, 1])
    machine_id = 100_000_000 + np.cumsum(rng.integers(1, 10_000_000, n_machines))
    switch = rng.permutation(n_machines) // _MACHINES_PER_SWITCH
    expected_removals = _REMOVALS_PER_MACHINE_DAY * horizon_us / DAY_US
    events = []
    for m in range(n_machines):
        upgraded_memory = min(RESOURCE_UNITS, 2 * int(memory[m]))
        upgrade_us = horizon_us
        if rng.random() < _UPGRADED_MACHINE_SHARE and upgraded_memory > memory[m]:
            upgrade_us = int(rng.integers(1, horizon_us))
        removals = np.sort(rng.integers(1, horizon_us, rng.poisson(expected_removals)))
        repairs = _lognormal(rng, 2 * HOUR_US, 1.0, len(removals)).astype(np.int64)
        timeline = [(0, MACHINE_ADD)]
        up_again_us = 0
        upgrade_while_up = True
        for remove_us, repair_us in zip(removals.tolist(), repairs.tolist()):
            if remove_us < up_again_us:
                continue
            timeline.append((remove_us, MACHINE_REMOVE))
            up_again_us = remove_us + max(repair_us, US_PER_S)
            upgrade_while_up &= not remove_us <= upgrade_us < up_again_us
            if up_again_us < horizon_us:
                timeline.append((up_again_us, MACHINE_ADD))
        if upgrade_us < horizon_us and upgrade_while_up:
            timeline.append((upgrade_us, MACHINE_UPDATE))
        for t, event_type in timeline:
            events.append((t, m, event_type, cpu[m], upgraded_memory if t >= upgrade_us else memory[m]))
    events.sort()
    columns = np.array(events, dtype=np.int64).T
    return Fleet(machine_id, platform, switch, *columns)


@dataclasses.dataclass(frozen=True)
class Catalog:
    """Logical names (workloads) and the traits their collections share.

    Every field is (n_names,). Requests are machine fractions, lifetimes log10 seconds,
    utilizations mean usage / request, cpu_spread the log-sd of per-second CPU in a window.
    """
    is_service: np.ndarray
    popularity: np.ndarray
    user: np.ndarray
    priority: np.ndarray
    scheduling_class: np.ndarray
    scheduler: np.ndarray
    vertical_scaling: np.ndarray
    log10_lifetime_s: np.ndarray
    crash_probability: np.ndarray
    cpu_request: np.ndarray
    memory_per_cpu: np.ndarray
    median_tasks: np.ndarray
    cpu_utilization: np.ndarray
    memory_utilization: np.ndarray
    diurnal_amplitude: np.ndarray
    diurnal_phase_rad: np.ndarray
    burst_probability: np.ndarray
    cpu_spread: np.ndarray
    cycles_per_instruction: np.ndarray
    memory_accesses_per_instruction: np.ndarray
    page_cache_fraction: np.ndarray

    @classmethod
    def sample(cls, rng: np.random.Generator, n_names: int, n_users: int,
               cpu_hours_per_job: float) -> "Catalog":
        """A random catalog whose collections request cpu_hours_per_job (cpus x hours of
        all tasks) on average.

        Names get Zipf popularity; a service name's is divided by the square root of its
        expected cpu-hours per job, and all service names are scaled together to meet
        the mean. One collection of a long-lived service outweighs thousands of batch
        jobs: without the division the load of a small cell hinges on which few heavy
        service names it draws, with a full division services become most collections.
        """
        service = rng.random(n_names) < _SERVICE_NAME_SHARE
        user_weight = np.arange(1, n_users + 1) ** -1.0
        catalog = cls(
            is_service=service,
            popularity=(rng.permutation(n_names) + 1.0) ** -1.1,
            user=rng.choice(n_users, n_names, p=user_weight / user_weight.sum()),
            priority=np.where(service, rng.choice(_SERVICE_PRIORITIES, n_names),
                              rng.choice(_BATCH_PRIORITIES, n_names)),
            scheduling_class=np.where(service, 2 + (rng.random(n_names) < 0.3),
                                      rng.random(n_names) < 0.5).astype(np.int64),
            scheduler=np.where(service, 0, rng.random(n_names) < 0.6).astype(np.int64),
            vertical_scaling=np.where(service, rng.choice([1, 2, 3], n_names, p=[0.3, 0.3, 0.4]),
                                      rng.choice([0, 1, 3], n_names, p=[0.1, 0.6, 0.3])),
            # Batch: 1 minute to 1 hour; service: half a day to 10 days.
            log10_lifetime_s=np.where(service, rng.uniform(4.6, 6.0, n_names),
                                      rng.uniform(2.1, 3.5, n_names)),
            crash_probability=np.where(service, rng.uniform(0.02, 0.2, n_names),
                                       rng.uniform(0.0, 0.08, n_names)),
            cpu_request=np.clip(np.where(service, _lognormal(rng, 0.07, 0.5, n_names),
                                         _lognormal(rng, 0.012, 0.7, n_names)), 0.0005, 0.15),
            memory_per_cpu=_lognormal(rng, 0.7, 0.4, n_names),
            median_tasks=np.where(service, _lognormal(rng, 2.0, 0.5, n_names),
                                  _lognormal(rng, 5.0, 0.8, n_names)),
            cpu_utilization=np.where(service, rng.uniform(0.1, 0.45, n_names),
                                     rng.uniform(0.25, 0.6, n_names)),
            memory_utilization=rng.uniform(0.3, 0.9, n_names),
            diurnal_amplitude=np.where(service, rng.uniform(0.15, 0.5, n_names),
                                       rng.uniform(0.0, 0.1, n_names)),
            diurnal_phase_rad=0.3 * rng.standard_normal(n_names),
            burst_probability=rng.uniform(0.0, 0.02, n_names),
            cpu_spread=rng.uniform(0.1, 0.4, n_names),
            cycles_per_instruction=_lognormal(rng, 1.5, 0.25, n_names),
            memory_accesses_per_instruction=_lognormal(rng, 0.005, 0.5, n_names),
            page_cache_fraction=rng.uniform(0.02, 0.3, n_names),
        )
        cpu_hours = catalog.expected_cpu_hours_per_job()
        weight = catalog.popularity
        batch_weight, service_weight = weight * ~service, weight * service / np.sqrt(cpu_hours)
        scale = ((cpu_hours_per_job * batch_weight.sum() - batch_weight @ cpu_hours)
                 / (service_weight @ cpu_hours - cpu_hours_per_job * service_weight.sum()))
        if not scale > 0:
            raise ValueError(f"cpu_hours_per_job={cpu_hours_per_job} is out of this catalog's range")
        popularity = batch_weight + scale * service_weight
        return dataclasses.replace(catalog, popularity=popularity / popularity.sum())

    def expected_cpu_hours_per_job(self) -> np.ndarray:
        """(n_names,) mean cpus x hours requested by one collection of each name (lognormal
        means, ignoring the clipping of lifetimes and requests)."""
        log10_sd2 = (_JOB_LOG10_LIFETIME_SD ** 2 + _TASK_LOG10_LIFETIME_SD ** 2
                     + (0.5 * _JOB_REQUEST_SD / np.log(10)) ** 2)
        lifetime_h = 10 ** self.log10_lifetime_s * np.exp(log10_sd2 * np.log(10) ** 2 / 2) / 3600
        crash_h = 10 ** 1.9 * np.exp(0.5 ** 2 * np.log(10) ** 2 / 2) / 3600
        task_h = (1 - self.crash_probability) * lifetime_h + self.crash_probability * crash_h
        return (self.median_tasks * np.exp(_TASK_COUNT_SD ** 2 / 2)
                * self.cpu_request * np.exp(_JOB_REQUEST_SD ** 2 / 2) * task_h)


@dataclasses.dataclass
class Jobs:
    """Collections (jobs) in submission order; every field is (n_jobs,) unless noted.

    Times in µs (clamped to 0 for jobs submitted before the trace); requests in 1e-5 units;
    parent_collection_id < 0 means none. cpu_utilization is mean usage / request, cpu_spread
    the log-sd of per-second CPU in a window, slow_* (n_jobs, 2) two sinusoids of job-level
    log-CPU variation (amplitude, period in s, phase in rad).
    """
    collection_id: np.ndarray
    submit_us: np.ndarray
    enable_us: np.ndarray
    name: np.ndarray
    priority: np.ndarray
    scheduling_class: np.ndarray
    scheduler: np.ndarray
    vertical_scaling: np.ndarray
    cpu_request: np.ndarray
    memory_request: np.ndarray
    parent_collection_id: np.ndarray
    cpu_utilization: np.ndarray
    cpu_spread: np.ndarray
    slow_amplitude: np.ndarray
    slow_period_s: np.ndarray
    slow_phase_rad: np.ndarray


@dataclasses.dataclass
class Tasks:
    """Tasks (instances) and their run plans; every field is (n_tasks,).

    A task with interrupted_type >= 0 runs for interrupted_us, ends with that type (FAIL or
    EVICT) and is resubmitted after resubmit_delay_us; then it runs for final_us and ends
    with final_type (FINISH, KILL, FAIL). update_fraction >= 0: an UPDATE_RUNNING at that
    fraction of the final run, to update_cpu / update_memory (1e-5 units). cpu_base and
    memory_base: mean usage in machine fractions.
    """
    job: np.ndarray
    instance_index: np.ndarray
    interrupted_us: np.ndarray
    interrupted_type: np.ndarray
    final_us: np.ndarray
    final_type: np.ndarray
    resubmit_delay_us: np.ndarray
    update_fraction: np.ndarray
    update_cpu: np.ndarray
    update_memory: np.ndarray
    cpu_base: np.ndarray
    memory_base: np.ndarray


def _pick_fate(rng: np.random.Generator, probabilities: tuple, n: int) -> np.ndarray:
    """FINISH / KILL / FAIL drawn with the given probabilities."""
    index = (rng.random(n)[:, None] > np.cumsum(probabilities)[None, :-1]).sum(axis=1)
    return np.array([FINISH, KILL, FAIL])[index]


def sample_workload(rng: np.random.Generator, catalog: Catalog, n_machines: int,
                    arrival_rate_per_machine_hour: float, horizon_us: int) -> tuple[Jobs, Tasks]:
    """Jobs arriving from MAX_LIFETIME_US before the trace start to the horizon, and their
    tasks; of the jobs submitted before the start, only the tasks still alive at time 0 are
    kept, each with its remaining lifetime as one final run."""
    jobs, job_log10_lifetime, n_tasks = _sample_jobs(
        rng, catalog, n_machines, arrival_rate_per_machine_hour, horizon_us)
    tasks, lifetime_us = _sample_tasks(rng, catalog, jobs, job_log10_lifetime, n_tasks)
    return _alive_from_start(jobs, tasks, jobs.enable_us[tasks.job] + lifetime_us)


def _sample_jobs(rng: np.random.Generator, catalog: Catalog, n_machines: int,
                 arrival_rate_per_machine_hour: float, horizon_us: int) -> tuple:
    """(Jobs, log10 lifetime in s of each job's tasks before task noise, task counts)."""
    start_us = -MAX_LIFETIME_US
    peak_rate_per_us = (arrival_rate_per_machine_hour * n_machines
                        * (1 + _ARRIVAL_DIURNAL_AMPLITUDE) / HOUR_US)
    submit = np.sort(rng.integers(start_us, horizon_us,
                                  rng.poisson(peak_rate_per_us * (horizon_us - start_us))))
    day_angle = 2 * np.pi * submit / DAY_US - _DIURNAL_PEAK_RAD
    accept = (rng.random(len(submit)) * (1 + _ARRIVAL_DIURNAL_AMPLITUDE)
              < 1 + _ARRIVAL_DIURNAL_AMPLITUDE * np.cos(day_angle))
    submit = submit[accept]
    n_jobs = len(submit)
    name = rng.choice(len(catalog.popularity), n_jobs, p=catalog.popularity)
    service = catalog.is_service[name]

    # Job-level feature variation around the name's defaults, with its lifetime effect.
    other_priority = np.where(service, rng.choice(_SERVICE_PRIORITIES, n_jobs),
                              rng.choice(_BATCH_PRIORITIES, n_jobs))
    priority = np.where(rng.random(n_jobs) < 0.1, other_priority, catalog.priority[name])
    class_shift = np.where(rng.random(n_jobs) < 0.15, rng.choice([-1, 1], n_jobs), 0)
    scheduling_class = np.clip(catalog.scheduling_class[name] + class_shift, 0, 3)
    cpu_request = np.clip(_to_units(_lognormal(rng, catalog.cpu_request[name], _JOB_REQUEST_SD)),
                          _MIN_REQUEST_UNITS, _MAX_REQUEST_UNITS)
    memory_request = np.clip(
        _to_units(cpu_request / RESOURCE_UNITS * _lognormal(rng, catalog.memory_per_cpu[name], 0.15)),
        _MIN_REQUEST_UNITS, _MAX_REQUEST_UNITS)
    size_effect = np.log10(cpu_request / RESOURCE_UNITS / catalog.cpu_request[name])
    production_shift = ((priority >= _PRODUCTION_PRIORITY).astype(np.int64)
                        - (catalog.priority[name] >= _PRODUCTION_PRIORITY))
    job_log10_lifetime = (catalog.log10_lifetime_s[name] + 0.5 * size_effect
                          + 0.25 * (scheduling_class - catalog.scheduling_class[name])
                          + 0.3 * production_shift
                          + _JOB_LOG10_LIFETIME_SD * rng.standard_normal(n_jobs))
    scheduler = catalog.scheduler[name]
    queue_delay = np.where(scheduler == 1, _lognormal(rng, 60 * US_PER_S, 1.2, n_jobs), 0)
    enable = submit + queue_delay.astype(np.int64)
    n_tasks = np.clip(np.round(_lognormal(rng, catalog.median_tasks[name], _TASK_COUNT_SD)),
                      1, 100).astype(np.int64)
    collection_id = 300_000_000_000 + np.cumsum(rng.integers(1, 2_000, n_jobs))
    # About 10 % of jobs are children of the same user's previous job.
    user = catalog.user[name]
    by_user = np.lexsort((submit, user))
    previous = np.full(n_jobs, -1)
    previous[by_user[1:]] = by_user[:-1]
    has_parent = (previous >= 0) & (user[previous] == user) & (rng.random(n_jobs) < 0.1)
    parent_collection_id = np.where(has_parent, collection_id[previous], -1)
    jobs = Jobs(
        collection_id=collection_id, submit_us=submit, enable_us=enable, name=name,
        priority=priority, scheduling_class=scheduling_class, scheduler=scheduler,
        vertical_scaling=catalog.vertical_scaling[name], cpu_request=cpu_request,
        memory_request=memory_request, parent_collection_id=parent_collection_id,
        cpu_utilization=_lognormal(rng, catalog.cpu_utilization[name], 0.25),
        cpu_spread=_lognormal(rng, catalog.cpu_spread[name], 0.2),
        slow_amplitude=np.where(service, 0.15, 0.1)[:, None] * rng.random((n_jobs, 2)),
        slow_period_s=rng.uniform(3600, 8 * 3600, (n_jobs, 2)),
        slow_phase_rad=rng.uniform(0, 2 * np.pi, (n_jobs, 2)),
    )
    return jobs, job_log10_lifetime, n_tasks


def _sample_tasks(rng: np.random.Generator, catalog: Catalog, jobs: Jobs,
                  job_log10_lifetime: np.ndarray, n_tasks: np.ndarray) -> tuple:
    """(Tasks, total running time of each task in µs)."""
    job = np.repeat(np.arange(len(n_tasks)), n_tasks)
    n = len(job)
    instance_index = np.arange(n) - np.repeat(np.cumsum(n_tasks) - n_tasks, n_tasks)
    task_name = jobs.name[job]
    task_service = catalog.is_service[task_name]
    log10_lifetime = job_log10_lifetime[job] + _TASK_LOG10_LIFETIME_SD * rng.standard_normal(n)
    crashed = rng.random(n) < catalog.crash_probability[task_name]
    log10_lifetime = np.where(crashed, 1.9 + 0.5 * rng.standard_normal(n), log10_lifetime)
    lifetime_us = np.clip(np.round(10.0 ** log10_lifetime * US_PER_S),
                          MIN_LIFETIME_US, MAX_LIFETIME_US).astype(np.int64)
    final_type = np.where(task_service, _pick_fate(rng, _SERVICE_FATES, n),
                          _pick_fate(rng, _BATCH_FATES, n))
    final_type[crashed] = FAIL
    # Free-tier tasks get evicted more often; any task may fail once and be retried.
    task_priority = jobs.priority[job]
    evict_probability = np.where(task_priority < 100, 0.15, np.where(task_priority < 116, 0.05, 0.0))
    draw = rng.random(n)
    interrupted_type = np.where(draw < evict_probability, EVICT,
                                np.where(draw < evict_probability + 0.04, FAIL, -1))
    interrupted_us = np.where(interrupted_type >= 0,
                              (rng.uniform(0.05, 0.95, n) * lifetime_us).astype(np.int64), 0)
    final_us = np.maximum(lifetime_us - interrupted_us, US_PER_S)
    updated = ((rng.random(n) < np.where(jobs.vertical_scaling[job] >= 2, 0.25, 0.02))
               & (final_us > 900 * US_PER_S))
    update_fraction = np.where(updated, rng.uniform(0.2, 0.8, n), -1.0)
    update_cpu = np.clip(np.round(jobs.cpu_request[job] * _lognormal(rng, 1.0, 0.3, n)),
                         _MIN_REQUEST_UNITS, _MAX_REQUEST_UNITS).astype(np.int64)
    update_memory = np.clip(np.round(jobs.memory_request[job] * _lognormal(rng, 1.0, 0.2, n)),
                            _MIN_REQUEST_UNITS, _MAX_REQUEST_UNITS).astype(np.int64)
    cpu_fraction = jobs.cpu_request[job] / RESOURCE_UNITS
    memory_fraction = jobs.memory_request[job] / RESOURCE_UNITS
    tasks = Tasks(
        job=job, instance_index=instance_index, interrupted_us=interrupted_us,
        interrupted_type=interrupted_type, final_us=final_us, final_type=final_type,
        resubmit_delay_us=_lognormal(rng, 20 * US_PER_S, 1.0, n).astype(np.int64) + 1,
        update_fraction=update_fraction, update_cpu=update_cpu, update_memory=update_memory,
        cpu_base=np.minimum(cpu_fraction * jobs.cpu_utilization[job] * _lognormal(rng, 1.0, 0.1, n),
                            0.7 * cpu_fraction),
        memory_base=np.minimum(memory_fraction * catalog.memory_utilization[task_name]
                               * _lognormal(rng, 1.0, 0.1, n), 0.95 * memory_fraction),
    )
    return tasks, lifetime_us


def _alive_from_start(jobs: Jobs, tasks: Tasks, end_us: np.ndarray) -> tuple[Jobs, Tasks]:
    """Drops tasks that ended before time 0 (and jobs left without tasks); a task running
    at time 0 keeps its remaining lifetime as one final run, its job's times become 0."""
    before_start = jobs.enable_us[tasks.job] < 0
    keep_task = ~before_start | (end_us > 0)
    tasks.final_us = np.where(before_start, end_us, tasks.final_us)
    tasks.interrupted_type = np.where(before_start, -1, tasks.interrupted_type)
    tasks.interrupted_us = np.where(before_start, 0, tasks.interrupted_us)
    tasks.update_fraction = np.where(before_start, -1.0, tasks.update_fraction)
    tasks = Tasks(**{k: v[keep_task] for k, v in vars(tasks).items()})
    keep_job = np.zeros(len(jobs.submit_us), dtype=bool)
    keep_job[tasks.job] = True
    new_index = np.cumsum(keep_job) - 1
    tasks.job = new_index[tasks.job]
    jobs = Jobs(**{k: v[keep_job] for k, v in vars(jobs).items()})
    jobs.submit_us = np.maximum(jobs.submit_us, 0)
    jobs.enable_us = np.maximum(jobs.enable_us, 0)
    return jobs, tasks


@dataclasses.dataclass
class Placement:
    """The outcome of the placement replay.

    Runs, (n_runs,) each: run_task, run_machine (machine index), run_start_us, run_end_us
    (-1: still running at the horizon), run_end_type (-1 likewise), run_cpu and run_memory
    (request at the run's start, 1e-5 units). events: (n_events, 6) int64 rows (time, type,
    task, machine index or -1, cpu, memory) of every instance event except the first
    SUBMIT / QUEUE. Per task, (n_tasks,): update_us (int64 max if none), update_cpu and
    update_memory (request after its UPDATE_RUNNING), final_end_us (-1: not finished by the
    horizon), final_type.
    """
    run_task: np.ndarray
    run_machine: np.ndarray
    run_start_us: np.ndarray
    run_end_us: np.ndarray
    run_end_type: np.ndarray
    run_cpu: np.ndarray
    run_memory: np.ndarray
    events: np.ndarray
    update_us: np.ndarray
    update_cpu: np.ndarray
    update_memory: np.ndarray
    final_end_us: np.ndarray
    final_type: np.ndarray


# Kinds of replay events, in the order they are handled at equal times: a removed machine
# takes nothing more, ends free room before updates and arrivals use it.
_MACHINE_EVENT, _RUN_END, _REQUEST_UPDATE, _TASK_ENABLE = range(4)
# A freed machine is offered to at most this many waiting tasks (keeps an overloaded
# replay linear; Borg also considers a bounded number of pending tasks per pass).
_WAITING_SCAN = 256


class RandomFitReplay:
    """Event-driven placement of the tasks on the fleet, up to the horizon.

    A task goes to a machine drawn uniformly among those that are up and have room for its
    request (cpus and memory); one that fits nowhere waits (highest priority, then earliest
    first) until a machine frees room. Requests on a machine never exceed its capacity: an
    UPDATE_RUNNING that asks for more than the free room is cut to it. Random rather than
    first fit: first fit piles the load on the lowest machine ids and leaves the last ones
    idle (so does packing into the fullest machine), while Borg spreads it.
    """

    def __init__(self, rng: np.random.Generator, fleet: Fleet, jobs: Jobs, tasks: Tasks,
                 horizon_us: int):
        self._rng = rng
        self._fleet = fleet
        self._tasks = tasks
        self._horizon_us = horizon_us
        n_machines = len(fleet.machine_id)
        n_tasks = len(tasks.job)
        # Free room and machine state as lists for per-task checks, mirrored in arrays for
        # the search over all machines.
        self._capacity = [[0] * n_machines, [0] * n_machines]
        self._free = [[0] * n_machines, [0] * n_machines]
        self._up = [False] * n_machines
        self._free_array = np.zeros((2, n_machines), dtype=np.int64)
        self._up_array = np.zeros(n_machines, dtype=bool)
        self._running = [set() for _ in range(n_machines)]
        self._request = [jobs.cpu_request[tasks.job].tolist(), jobs.memory_request[tasks.job].tolist()]
        self._priority = jobs.priority[tasks.job].tolist()
        self._delay = tasks.resubmit_delay_us.tolist()
        self._update_fraction = tasks.update_fraction.tolist()
        self._plan = [
            ([(i_us, i_type)] if i_type >= 0 else []) + [(f_us, f_type)]
            for i_us, i_type, f_us, f_type in zip(
                tasks.interrupted_us.tolist(), tasks.interrupted_type.tolist(),
                tasks.final_us.tolist(), tasks.final_type.tolist())]
        self._current_run = [-1] * n_tasks
        self._enabled_before = [False] * n_tasks
        self._runs = []  # [task, machine, start, end, end type, cpu, memory]
        self._planned_end = []
        self._events = []
        self._update = {}  # task -> (time, cpu, memory)
        self._final = {}  # task -> (time, type)
        self._waiting = []
        self._heap = []
        self._seq = 0
        for i, t in enumerate(fleet.event_time_us.tolist()):
            self._push(t, _MACHINE_EVENT, i)
        # Ties at time 0 go oldest first: tasks are in submission order.
        for task, t in enumerate(jobs.enable_us[tasks.job].tolist()):
            self._push(t, _TASK_ENABLE, task)

    def run(self) -> Placement:
        """Replays the events up to the horizon (once per object)."""
        handlers = {_MACHINE_EVENT: self._on_machine_event, _RUN_END: self._on_run_end,
                    _REQUEST_UPDATE: self._on_request_update, _TASK_ENABLE: self._on_enable}
        while self._heap:
            t, kind, _, payload = heapq.heappop(self._heap)
            if t >= self._horizon_us:
                break
            handlers[kind](t, payload)
        return self._placement(len(self._tasks.job))

    def _push(self, t: int, kind: int, payload: int):
        heapq.heappush(self._heap, (t, kind, self._seq, payload))
        self._seq += 1

    def _record(self, t: int, event_type: int, task: int, machine: int):
        self._events.append((t, event_type, task, machine,
                             self._request[0][task], self._request[1][task]))

    def _fits(self, task: int, machine: int) -> bool:
        return (self._up[machine] and self._free[0][machine] >= self._request[0][task]
                and self._free[1][machine] >= self._request[1][task])

    def _add_free(self, machine: int, cpu: int, memory: int):
        for r, delta in enumerate((cpu, memory)):
            self._free[r][machine] += delta
            self._free_array[r, machine] = self._free[r][machine]

    def _start(self, task: int, machine: int, t: int):
        duration_us, _ = self._plan[task][0]
        run = len(self._runs)
        cpu, memory = self._request[0][task], self._request[1][task]
        self._runs.append([task, machine, t, -1, -1, cpu, memory])
        self._planned_end.append(t + duration_us)
        self._add_free(machine, -cpu, -memory)
        self._running[machine].add(run)
        self._current_run[task] = run
        self._record(t, SCHEDULE, task, machine)
        self._push(t + duration_us, _RUN_END, run)
        if (len(self._plan[task]) == 1 and self._update_fraction[task] >= 0
                and task not in self._update):
            self._push(t + int(self._update_fraction[task] * duration_us), _REQUEST_UPDATE, run)

    def _end(self, run: int, t: int, end_type: int):
        task, machine = self._runs[run][0], self._runs[run][1]
        self._add_free(machine, self._request[0][task], self._request[1][task])
        self._running[machine].discard(run)
        self._current_run[task] = -1
        self._runs[run][3:5] = [t, end_type]
        self._record(t, end_type, task, machine)

    def _place_waiting(self, machine: int, t: int):
        """Offers the machine's free room to the waiting tasks, in queue order."""
        still_waiting = []
        for position, key in enumerate(self._waiting):
            if (position >= _WAITING_SCAN or self._free[0][machine] < _MIN_REQUEST_UNITS
                    or self._free[1][machine] < _MIN_REQUEST_UNITS):
                still_waiting.extend(self._waiting[position:])
                break
            task = key[-1]
            if self._fits(task, machine):
                self._start(task, machine, t)
            else:
                still_waiting.append(key)
        self._waiting = still_waiting

    def _on_enable(self, t: int, task: int):
        if self._enabled_before[task]:
            self._record(t, SUBMIT, task, -1)
        self._enabled_before[task] = True
        self._record(t, ENABLE, task, -1)
        fits = np.flatnonzero(self._up_array & (self._free_array[0] >= self._request[0][task])
                              & (self._free_array[1] >= self._request[1][task]))
        if len(fits):
            self._start(task, int(fits[self._rng.integers(len(fits))]), t)
        else:
            bisect.insort(self._waiting, (-self._priority[task], t, self._seq, task))
            self._seq += 1

    def _on_run_end(self, t: int, run: int):
        task = self._runs[run][0]
        if self._current_run[task] != run:  # evicted by a machine removal
            return
        _, end_type = self._plan[task].pop(0)
        self._end(run, t, end_type)
        if self._plan[task]:
            self._push(t + self._delay[task], _TASK_ENABLE, task)
        else:
            self._final[task] = (t, end_type)
        self._place_waiting(self._runs[run][1], t)

    def _on_request_update(self, t: int, run: int):
        task = self._runs[run][0]
        if self._current_run[task] != run:
            return
        machine = self._runs[run][1]
        wanted = (int(self._tasks.update_cpu[task]), int(self._tasks.update_memory[task]))
        old = (self._request[0][task], self._request[1][task])
        new = [min(wanted[r], old[r] + self._free[r][machine]) for r in range(2)]
        self._add_free(machine, old[0] - new[0], old[1] - new[1])
        self._request[0][task], self._request[1][task] = new
        shrinks = new[0] < old[0] or new[1] < old[1]
        self._update[task] = (t, self._request[0][task], self._request[1][task])
        self._record(t, UPDATE_RUNNING, task, machine)
        if shrinks:
            self._place_waiting(machine, t)

    def _on_machine_event(self, t: int, i: int):
        fleet = self._fleet
        machine = int(fleet.event_machine[i])
        if fleet.event_type[i] == MACHINE_REMOVE:
            for run in sorted(self._running[machine]):
                task = self._runs[run][0]
                # The evicted run's remaining work becomes the task's next run.
                remaining_us = max(self._planned_end[run] - t, US_PER_S)
                self._plan[task][0] = (remaining_us, self._plan[task][0][1])
                self._end(run, t, EVICT)
                self._push(t + self._delay[task], _TASK_ENABLE, task)
            self._up[machine] = self._up_array[machine] = False
            return
        capacity = (int(fleet.event_cpu[i]), int(fleet.event_memory[i]))
        self._add_free(machine, capacity[0] - self._capacity[0][machine],
                       capacity[1] - self._capacity[1][machine])
        self._capacity[0][machine], self._capacity[1][machine] = capacity
        self._up[machine] = self._up_array[machine] = True
        self._place_waiting(machine, t)

    def _placement(self, n_tasks: int) -> Placement:
        runs = np.array(self._runs, dtype=np.int64).reshape(-1, 7).T
        update = np.full((3, n_tasks), np.iinfo(np.int64).max, dtype=np.int64)
        final = np.full((2, n_tasks), -1, dtype=np.int64)
        for task, values in self._update.items():
            update[:, task] = values
        for task, values in self._final.items():
            final[:, task] = values
        return Placement(
            run_task=runs[0], run_machine=runs[1], run_start_us=runs[2], run_end_us=runs[3],
            run_end_type=runs[4], run_cpu=runs[5], run_memory=runs[6],
            events=np.array(self._events, dtype=np.int64).reshape(-1, 6),
            update_us=update[0], update_cpu=update[1], update_memory=update[2],
            final_end_us=final[0], final_type=final[1])


# Counter-based random numbers for the usage windows: splitmix64 of (stream key, entity, k).
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


def _hash_uniform(key: np.uint64, entity: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) per element, a pure function of (key, entity, window)."""
    x = _splitmix64(_splitmix64(entity.astype(np.uint64) ^ key) ^ window.astype(np.uint64))
    return (x >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def _hash_normals(keys: tuple, entity: np.ndarray, window: np.ndarray) -> tuple:
    """Two independent standard normal arrays (Box-Muller on two hashed uniforms)."""
    radius = np.sqrt(-2.0 * np.log1p(-_hash_uniform(keys[0], entity, window)))
    angle = 2 * np.pi * _hash_uniform(keys[1], entity, window)
    return radius * np.cos(angle), radius * np.sin(angle)


class Column(NamedTuple):
    """One output column of a v3 table.

    name is dotted for a field of a record ("resource_request.cpus"). kind: "int", "float",
    "str", "optional_int" (negative values are null), "float_list" (values (n, k)),
    "null" (always null), "empty_int_list" or "empty_constraint_list" (always []);
    values is None for the last three.
    """
    name: str
    kind: str
    values: np.ndarray | None = None


class UsageModel:
    """instance_usage rows of the placed runs.

    columns(k_lo, k_hi) gives the rows of the 5-minute grid windows k_lo <= k < k_hi (a run's
    first and last windows are cut to its start and end), sorted by (start_time,
    machine_id, collection_id, instance_index). Every random draw is a hash of (seed, job or
    task, k): any slicing of the grid gives the same rows.
    """

    def __init__(self, seed: int, fleet: Fleet, catalog: Catalog, jobs: Jobs, tasks: Tasks,
                 placement: Placement, horizon_us: int):
        self._fleet, self._catalog, self._jobs, self._tasks = fleet, catalog, jobs, tasks
        self._placement = placement
        self._start_us = placement.run_start_us
        self._stop_us = np.where(placement.run_end_us < 0, horizon_us, placement.run_end_us)
        self._keys = [np.uint64(int.from_bytes(
            hashlib.sha256(f"usage:{seed}:{stream}".encode()).digest()[:8], "little"))
            for stream in range(11)]
        self.n_windows = int(np.sum(-(-self._stop_us // WINDOW_US) - self._start_us // WINDOW_US))

    def columns(self, k_lo: int, k_hi: int) -> tuple[list[Column], int]:
        """(the v3 instance_usage columns, number of rows) of grid windows [k_lo, k_hi)."""
        lo_us, hi_us = k_lo * WINDOW_US, k_hi * WINDOW_US
        runs = np.flatnonzero((self._start_us < hi_us) & (self._stop_us > lo_us))
        first_k = np.maximum(self._start_us[runs] // WINDOW_US, k_lo)
        counts = np.minimum(-(-self._stop_us[runs] // WINDOW_US), k_hi) - first_k
        run = np.repeat(runs, counts)
        k = np.repeat(first_k - (np.cumsum(counts) - counts), counts) + np.arange(len(run))
        start = np.maximum(k * WINDOW_US, self._start_us[run])
        end = np.minimum((k + 1) * WINDOW_US, self._stop_us[run])
        p, tasks, jobs, catalog = self._placement, self._tasks, self._jobs, self._catalog
        task = p.run_task[run]
        job = tasks.job[task]
        name = jobs.name[job]
        machine = p.run_machine[run]
        order = np.lexsort((tasks.instance_index[task], jobs.collection_id[job],
                            self._fleet.machine_id[machine], start))
        run, k, start, end, task, job, name, machine = (
            a[order] for a in (run, k, start, end, task, job, name, machine))
        keys = self._keys

        mid_s = (start + end) * (0.5 / US_PER_S)
        diurnal = 1 + catalog.diurnal_amplitude[name] * np.cos(
            2 * np.pi * mid_s / (DAY_US / US_PER_S) - _DIURNAL_PEAK_RAD + catalog.diurnal_phase_rad[name])
        slow = np.sum(jobs.slow_amplitude[job] * np.sin(
            2 * np.pi * mid_s[:, None] / jobs.slow_period_s[job] + jobs.slow_phase_rad[job]), axis=1)
        z_job, z_page_cache = _hash_normals(keys[0:2], job, k)
        z_task, z_random = _hash_normals(keys[2:4], task, k)
        z_memory, z_memory_peak = _hash_normals(keys[4:6], task, k)
        z_cpi, z_mapi = _hash_normals(keys[6:8], task, k)
        burst = _hash_uniform(keys[8], job, k) < catalog.burst_probability[name]
        burst_size = 1 + 1.5 * _hash_uniform(keys[9], job, k)
        rate_draw = _hash_uniform(keys[10], task, k)

        cpu_mean = (tasks.cpu_base[task] * diurnal
                    * np.exp(slow + _JOB_NOISE * z_job + _TASK_NOISE * z_task
                             - (_JOB_NOISE ** 2 + _TASK_NOISE ** 2) / 2)
                    * np.where(burst, burst_size, 1.0))
        spread = jobs.cpu_spread[job] * np.where(burst, 1.5, 1.0)
        # A few windows have missing samples.
        sample_rate = np.where(rate_draw < 0.03, np.round(0.5 + rate_draw / 0.06, 3), 1.0)
        n_samples = np.clip(np.round((end - start) / US_PER_S * sample_rate), 1,
                            _MAX_SAMPLES_PER_WINDOW).astype(np.int64)
        z_max = _EXTREME_Z[n_samples][:, None]
        log_median = (np.log(cpu_mean) - spread ** 2 / 2)[:, None]
        spread = spread[:, None]
        lowest = np.exp(log_median - spread * z_max)[:, 0]
        highest = np.exp(log_median + spread * z_max)[:, 0]
        distribution = np.column_stack([
            np.minimum(lowest, cpu_mean),
            np.exp(log_median + spread * np.clip(_DECILE_Z, -z_max, z_max)),
            np.maximum(highest, cpu_mean)])
        tail = np.exp(log_median + spread * np.clip(_TAIL_Z, -z_max, z_max))
        random_sample = np.exp(log_median + spread * np.clip(z_random[:, None], -z_max, z_max))[:, 0]

        assigned_memory = np.where(start >= p.update_us[task], p.update_memory[task],
                                   p.run_memory[run]) / RESOURCE_UNITS
        memory_mean = np.minimum(tasks.memory_base[task] * np.exp(0.03 * z_memory), assigned_memory)
        memory_peak = np.minimum(memory_mean * (1 + 0.05 * np.abs(z_memory_peak)), assigned_memory)
        page_cache = memory_mean * catalog.page_cache_fraction[name] * np.exp(0.1 * z_page_cache)
        cpi = (catalog.cycles_per_instruction[name] * _PLATFORMS[self._fleet.platform[machine], 3]
               * np.exp(0.08 * z_cpi))
        mapi = catalog.memory_accesses_per_instruction[name] * np.exp(0.1 * z_mapi)

        n = len(run)
        rounded = {name: np.round(values, USAGE_DECIMALS) for name, values in (
            ("cpu_mean", cpu_mean), ("distribution", distribution), ("tail", tail),
            ("random_sample", random_sample), ("memory_mean", memory_mean),
            ("memory_peak", memory_peak), ("page_cache", page_cache), ("cpi", cpi), ("mapi", mapi))}
        columns = [
            Column("start_time", "int", start),
            Column("end_time", "int", end),
            Column("collection_id", "int", jobs.collection_id[job]),
            Column("instance_index", "int", tasks.instance_index[task]),
            Column("machine_id", "int", self._fleet.machine_id[machine]),
            Column("alloc_collection_id", "int", np.full(n, NO_ALLOC_COLLECTION)),
            Column("alloc_instance_index", "int", np.full(n, NO_ALLOC_INDEX)),
            Column("collection_type", "int", np.full(n, JOB)),
            Column("average_usage.cpus", "float", rounded["cpu_mean"]),
            Column("average_usage.memory", "float", rounded["memory_mean"]),
            Column("maximum_usage.cpus", "float", rounded["distribution"][:, -1]),
            Column("maximum_usage.memory", "float", rounded["memory_peak"]),
            Column("random_sample_usage.cpus", "float", rounded["random_sample"]),
            Column("assigned_memory", "float", assigned_memory),
            Column("page_cache_memory", "float", rounded["page_cache"]),
            Column("cycles_per_instruction", "float", rounded["cpi"]),
            Column("memory_accesses_per_instruction", "float", rounded["mapi"]),
            Column("sample_rate", "float", sample_rate),
            Column("cpu_usage_distribution", "float_list", rounded["distribution"]),
            Column("tail_cpu_usage_distribution", "float_list", rounded["tail"]),
        ]
        return columns, n


class EventTables:
    """machine_events, collection_events and instance_events of a generated trace.

    They are small next to instance_usage, so they are built whole, in time order;
    columns(table, rows) gives the v3 columns of the rows (positions in that order).
    """

    def __init__(self, seed: int, fleet: Fleet, catalog: Catalog, jobs: Jobs, tasks: Tasks,
                 placement: Placement, horizon_us: int):
        self._fleet, self._jobs, self._tasks = fleet, jobs, tasks
        self._switch_id = _obfuscated(f"switch:{seed}", range(int(fleet.switch.max()) + 1))
        self._platform_id = _obfuscated("platform", range(len(_PLATFORMS)))
        self._user = _obfuscated(f"user:{seed}", catalog.user[jobs.name])
        self._logical_name = _obfuscated(f"logical_name:{seed}", jobs.name)
        self._collection_name = _obfuscated(f"collection:{seed}", jobs.collection_id)
        self._instance = self._instance_rows(jobs, tasks, placement, horizon_us)
        self._collection = self._collection_rows(jobs, tasks, placement, horizon_us)

    @staticmethod
    def _instance_rows(jobs, tasks, placement, horizon_us) -> np.ndarray:
        """(n, 6) rows (time, type, task, machine index or -1, cpu, memory) in time order."""
        job = tasks.job
        queued = np.flatnonzero(jobs.scheduler[job] == 1)
        first = [np.column_stack([jobs.submit_us[job[t]], np.full(len(t), event_type), t,
                                  np.full(len(t), -1), jobs.cpu_request[job[t]],
                                  jobs.memory_request[job[t]]])
                 for t, event_type in ((np.arange(len(job)), SUBMIT), (queued, QUEUE))]
        rows = np.concatenate(first + [placement.events])
        rows = rows[rows[:, 0] < horizon_us]
        order = np.lexsort((rows[:, 1], tasks.instance_index[rows[:, 2]],
                            jobs.collection_id[job[rows[:, 2]]], rows[:, 0]))
        return rows[order]

    @staticmethod
    def _collection_rows(jobs, tasks, placement, horizon_us) -> np.ndarray:
        """(n, 2) rows (time, type, job) in time order: SUBMIT, QUEUE (batch scheduler),
        ENABLE, SCHEDULE when the first task starts, and once every task has finished,
        KILL if any was killed, else FAIL if any failed, else FINISH."""
        n_jobs = len(jobs.submit_us)
        job = np.arange(n_jobs)
        scheduled = placement.events[placement.events[:, 1] == SCHEDULE]
        first_schedule = np.full(n_jobs, np.iinfo(np.int64).max)
        np.minimum.at(first_schedule, tasks.job[scheduled[:, 2]], scheduled[:, 0])
        finished = placement.final_end_us >= 0
        all_finished = (np.bincount(tasks.job, weights=finished, minlength=n_jobs)
                        == np.bincount(tasks.job, minlength=n_jobs))
        last_end = np.full(n_jobs, -1)
        np.maximum.at(last_end, tasks.job, placement.final_end_us)
        killed, failed = (np.bincount(tasks.job, weights=placement.final_type == t,
                                      minlength=n_jobs) > 0 for t in (KILL, FAIL))
        end_type = np.where(killed, KILL, np.where(failed, FAIL, FINISH))
        queued = jobs.scheduler == 1
        started = first_schedule < horizon_us
        rows = np.concatenate([
            np.column_stack([jobs.submit_us, np.full(n_jobs, SUBMIT), job]),
            np.column_stack([jobs.submit_us[queued], np.full(queued.sum(), QUEUE), job[queued]]),
            np.column_stack([jobs.enable_us, np.full(n_jobs, ENABLE), job]),
            np.column_stack([first_schedule[started], np.full(started.sum(), SCHEDULE), job[started]]),
            np.column_stack([last_end[all_finished], end_type[all_finished], job[all_finished]]),
        ]).astype(np.int64)
        rows = rows[rows[:, 0] < horizon_us]
        order = np.lexsort((rows[:, 1], jobs.collection_id[rows[:, 2]], rows[:, 0]))
        return rows[order]

    def n_rows(self, table: str) -> int:
        return {"machine_events": len(self._fleet.event_time_us),
                "collection_events": len(self._collection),
                "instance_events": len(self._instance)}[table]

    def columns(self, table: str, rows: np.ndarray) -> list[Column]:
        return {"machine_events": self._machine_columns,
                "collection_events": self._collection_columns,
                "instance_events": self._instance_columns}[table](rows)

    def _machine_columns(self, rows: np.ndarray) -> list[Column]:
        fleet = self._fleet
        machine = fleet.event_machine[rows]
        return [
            Column("time", "int", fleet.event_time_us[rows]),
            Column("machine_id", "int", fleet.machine_id[machine]),
            Column("type", "int", fleet.event_type[rows]),
            Column("switch_id", "str", self._switch_id[fleet.switch[machine]]),
            Column("capacity.cpus", "float", fleet.event_cpu[rows] / RESOURCE_UNITS),
            Column("capacity.memory", "float", fleet.event_memory[rows] / RESOURCE_UNITS),
            Column("platform_id", "str", self._platform_id[fleet.platform[machine]]),
            Column("missing_data_reason", "null"),
        ]

    def _collection_columns(self, rows: np.ndarray) -> list[Column]:
        jobs = self._jobs
        time_us, event_type, job = self._collection[rows].T
        n = len(rows)
        return [
            Column("time", "int", time_us),
            Column("type", "int", event_type),
            Column("collection_id", "int", jobs.collection_id[job]),
            Column("scheduling_class", "int", jobs.scheduling_class[job]),
            Column("missing_type", "null"),
            Column("collection_type", "int", np.full(n, JOB)),
            Column("priority", "int", jobs.priority[job]),
            Column("alloc_collection_id", "int", np.full(n, NO_ALLOC_COLLECTION)),
            Column("user", "str", self._user[job]),
            Column("collection_name", "str", self._collection_name[job]),
            Column("collection_logical_name", "str", self._logical_name[job]),
            Column("parent_collection_id", "optional_int", jobs.parent_collection_id[job]),
            Column("start_after_collection_ids", "empty_int_list"),
            Column("max_per_machine", "int", np.zeros(n, dtype=np.int64)),
            Column("max_per_switch", "int", np.zeros(n, dtype=np.int64)),
            Column("vertical_scaling", "int", jobs.vertical_scaling[job]),
            Column("scheduler", "int", jobs.scheduler[job]),
        ]

    def _instance_columns(self, rows: np.ndarray) -> list[Column]:
        jobs, tasks = self._jobs, self._tasks
        time_us, event_type, task, machine, cpu, memory = self._instance[rows].T
        job = tasks.job[task]
        n = len(rows)
        return [
            Column("time", "int", time_us),
            Column("type", "int", event_type),
            Column("collection_id", "int", jobs.collection_id[job]),
            Column("scheduling_class", "int", jobs.scheduling_class[job]),
            Column("missing_type", "null"),
            Column("collection_type", "int", np.full(n, JOB)),
            Column("priority", "int", jobs.priority[job]),
            Column("alloc_collection_id", "int", np.full(n, NO_ALLOC_COLLECTION)),
            Column("instance_index", "int", tasks.instance_index[task]),
            Column("machine_id", "int", np.where(machine >= 0, self._fleet.machine_id[machine], NO_MACHINE)),
            Column("alloc_instance_index", "int", np.full(n, NO_ALLOC_INDEX)),
            Column("resource_request.cpus", "float", cpu / RESOURCE_UNITS),
            Column("resource_request.memory", "float", memory / RESOURCE_UNITS),
            Column("constraint", "empty_constraint_list"),
        ]


_CONSTRAINT_TYPE = pa.struct([("name", pa.string()), ("value", pa.string()), ("relation", pa.int64())])


def _float_text(values: np.ndarray) -> pa.Array:
    """Shortest round-trip text of float64 values, always with a '.' or an exponent (Arrow
    prints 1.0 as "1", which readers would take for an integer)."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    text = pc.cast(pa.array(values), pa.string())
    if np.any(values == np.trunc(values)):
        bare = pc.invert(pc.match_substring_regex(text, "[.e]"))
        text = pc.if_else(bare, pc.binary_join_element_wise(text, ".0", ""), text)
    return text


class _LineBuilder:
    """Joins literal text and per-row text arrays into one line per row, in Arrow."""

    def __init__(self):
        self._parts = []

    def text(self, literal: str):
        if self._parts and isinstance(self._parts[-1], str):
            self._parts[-1] += literal
        else:
            self._parts.append(literal)

    def values(self, strings: pa.Array):
        self._parts.append(strings)

    def encoded(self) -> memoryview:
        parts = [pa.scalar(p) if isinstance(p, str) else p for p in self._parts]
        lines = pc.binary_join_element_wise(*parts, "")
        offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1,
                                offset=lines.offset * 4)
        return memoryview(lines.buffers()[2])[offsets[0]:offsets[-1]]


def _add_value_text(builder: _LineBuilder, column: Column, json_format: bool):
    kind, values = column.kind, column.values
    if kind == "int":
        builder.values(pc.cast(pa.array(values, pa.int64()), pa.string()))
    elif kind == "float":
        builder.values(_float_text(values))
    elif kind == "str":
        # Obfuscated names are base64: nothing to escape in JSON or CSV.
        quote = '"' if json_format else ""
        builder.text(quote)
        builder.values(pa.array(values, pa.string()))
        builder.text(quote)
    elif kind == "optional_int":
        strings = pc.cast(pa.array(values, pa.int64(), mask=values < 0), pa.string())
        builder.values(pc.fill_null(strings, "null" if json_format else ""))
    elif kind == "null":
        builder.text("null" if json_format else "")
    elif kind == "float_list":
        builder.text("[" if json_format else '"[')
        for j in range(values.shape[1]):
            if j:
                builder.text(",")
            builder.values(_float_text(values[:, j]))
        builder.text("]" if json_format else ']"')
    else:
        builder.text("[]" if json_format else '"[]"')


def encode_lines(columns: list[Column], file_format: str) -> memoryview:
    """The rows as newline-terminated text: JSON objects with nested records, or CSV with
    dotted names flattened and lists as quoted JSON arrays. Needs at least one row."""
    builder = _LineBuilder()
    if file_format == "csv":
        for i, column in enumerate(columns):
            if i:
                builder.text(",")
            _add_value_text(builder, column, json_format=False)
        builder.text("\n")
        return builder.encoded()
    builder.text("{")
    open_record = ""
    for i, column in enumerate(columns):
        record, _, field = column.name.rpartition(".")
        if record != open_record:
            if open_record:
                builder.text("}")
            if i:
                builder.text(",")
            if record:
                builder.text(f'"{record}":{{')
            open_record = record
        elif i:
            builder.text(",")
        builder.text(f'"{field}":')
        _add_value_text(builder, column, json_format=True)
    builder.text("}}\n" if open_record else "}\n")
    return builder.encoded()


def _arrow_values(column: Column, n_rows: int) -> pa.Array:
    kind, values = column.kind, column.values
    if kind == "int":
        return pa.array(values, pa.int64())
    if kind == "float":
        return pa.array(values, pa.float64())
    if kind == "str":
        return pa.array(values, pa.string())
    if kind == "optional_int":
        return pa.array(values, pa.int64(), mask=values < 0)
    if kind == "null":
        return pa.nulls(n_rows, pa.int64())
    if kind == "float_list":
        width = values.shape[1]
        offsets = pa.array(np.arange(0, n_rows * width + 1, width, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, pa.array(values.ravel(), pa.float64()))
    empty = pa.array([], pa.int64() if kind == "empty_int_list" else _CONSTRAINT_TYPE)
    return pa.ListArray.from_arrays(pa.array(np.zeros(n_rows + 1, dtype=np.int32)), empty)


def to_arrow(columns: list[Column], n_rows: int) -> pa.Table:
    """The rows as an Arrow table, dotted names grouped into struct columns."""
    fields = {}
    for column in columns:
        record, _, field = column.name.rpartition(".")
        values = _arrow_values(column, n_rows)
        if record:
            fields.setdefault(record, {})[field] = values
        else:
            fields[field] = values
    return pa.table({
        name: pa.StructArray.from_arrays(list(v.values()), list(v)) if isinstance(v, dict) else v
        for name, v in fields.items()})


# Level 1: three times faster than the default 6 for 20 % larger files; compression is the
# slowest step of writing JSON.
_GZIP_LEVEL = 1


class _ShardWriter:
    """Writes one shard file through Beam's FileSystems (local, gs://, ...): gzip'd JSON
    lines or CSV (gzip header without time or name: byte-identical reruns), or Parquet.

    Text is compressed in a background thread while the caller builds the next chunk (zlib
    and Arrow release the GIL); chunks are written in order, one at a time.
    """

    def __init__(self, path: str, file_format: str):
        self._format = file_format
        self._handle = FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
        self._parquet = None
        self._compressing = None
        if file_format == "parquet":
            self._buffer = pa.BufferOutputStream()
        else:
            self._gzip = gzip.GzipFile(filename="", mode="wb", fileobj=self._handle,
                                       compresslevel=_GZIP_LEVEL, mtime=0)
            self._compressor = ThreadPoolExecutor(max_workers=1)
        self._started = False

    def _compress(self, data):
        if self._compressing is not None:
            self._compressing.result()
        self._compressing = self._compressor.submit(self._gzip.write, data)

    def write(self, columns: list[Column], n_rows: int):
        """Appends rows; call at least once per shard (with zero rows for an empty one)."""
        if self._format == "parquet":
            table = to_arrow(columns, n_rows)
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self._buffer, table.schema)
            self._parquet.write_table(table)
            return
        if self._format == "csv" and not self._started:
            self._compress((",".join(c.name for c in columns) + "\n").encode())
        self._started = True
        if n_rows:
            self._compress(encode_lines(columns, self._format))

    def close(self):
        if self._format == "parquet":
            self._parquet.close()
            self._handle.write(self._buffer.getvalue().to_pybytes())
        else:
            if self._compressing is not None:
                self._compressing.result()
            self._compressor.shutdown()
            self._gzip.close()
        self._handle.close()


def _shard_paths(out_dir: str, table: str, shards: int, file_format: str) -> list[str]:
    suffix = FILE_SUFFIXES[file_format]
    return [FileSystems.join(out_dir, table, f"{table}-{i:05d}-of-{shards:05d}{suffix}")
            for i in range(shards)]


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


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--machines", type=int, default=20)
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arrival-rate-per-machine-hour", type=float,
                        default=DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--file-format", choices=sorted(FILE_SUFFIXES), default="json")
    args = parser.parse_args(argv)
    clock = time.perf_counter()
    summary = generate(args.out_dir, machines=args.machines, days=args.days, seed=args.seed,
                       arrival_rate_per_machine_hour=args.arrival_rate_per_machine_hour,
                       shards=args.shards, file_format=args.file_format)
    print(json.dumps(summary["rows"]))
    print(f"wrote {sum(summary['rows'].values())} rows to {args.out_dir} "
          f"in {time.perf_counter() - clock:.1f} s "
          + " ".join(f"{stage}={s:.1f}s" for stage, s in summary["seconds"].items()))
    return summary


if __name__ == "__main__":
    main()
