"""Workload: the catalog of logical names, and the collections (jobs) and tasks sampled from it.

1. Catalog: logical names ("workloads"), either batch (minutes, low priority bands) or
   service (days, production bands). A name fixes its user, priority, scheduling class,
   typical request, lifetime scale and usage pattern.
2. Collections (jobs) arrive as a diurnal Poisson process from 30 days before the trace
   start, so that long-running tasks are already running at time 0 (their events are at
   time 0). A job has several tasks with the same request. log10 lifetime = name mean +
   feature effects (request size, scheduling class, priority band) + job noise + task
   noise, with a name-specific chance of an early crash: most tasks live under an hour,
   most core-hours are in tasks living over a day, and features explain a good part (not
   all) of the variance. Some tasks fail or are evicted once and are resubmitted; some get
   an UPDATE_RUNNING that changes their request (the placement replays these plans).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from configs.units import DAY_US, HOUR_US, US_PER_S
from synthetic.constants import (
    EVICT,
    FAIL,
    FINISH,
    KILL,
    MAX_LIFETIME_US,
    MIN_LIFETIME_US,
    RESOURCE_UNITS,
)
from synthetic.fleet import _MAX_REQUEST_UNITS, _MIN_REQUEST_UNITS, _lognormal, _to_units

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
               cpu_hours_per_job: float, request_scale: float = 1.0) -> Catalog:
        """A random catalog whose collections request cpu_hours_per_job (cpus x hours of
        all tasks) on average; every name's typical request is request_scale times the
        default catalog's (the same draws: a scale and a mean scaled alike give the same
        popularities).

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
            cpu_request=request_scale * np.clip(
                np.where(service, _lognormal(rng, 0.07, 0.5, n_names),
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
            raise ValueError(
                f"cpu_hours_per_job={cpu_hours_per_job} is out of this catalog's range")
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
        _to_units(cpu_request / RESOURCE_UNITS
                  * _lognormal(rng, catalog.memory_per_cpu[name], 0.15)),
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
    evict_probability = np.where(task_priority < 100, 0.15,
                                 np.where(task_priority < 116, 0.05, 0.0))
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
