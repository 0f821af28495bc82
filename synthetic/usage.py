"""Usage: the instance_usage rows of the placed runs.

Per 5-minute window, mean CPU = task base × diurnal cycle × job-level slow variation and
noise (shared by the tasks of a job) × task noise × rare job-wide bursts; the window's CPU
percentiles are those of a lognormal per-second distribution around that mean. Window noise
is a counter-based hash of (seed, job or task, window), so the usage table is generated in
time slices with results independent of the slicing.
"""

from __future__ import annotations

import hashlib
from statistics import NormalDist

import numpy as np

from configs.units import DAY_US, US_PER_S
from synthetic.constants import (
    JOB,
    NO_ALLOC_COLLECTION,
    NO_ALLOC_INDEX,
    RESOURCE_UNITS,
    USAGE_DECIMALS,
    WINDOW_US,
)
from synthetic.fleet import _PLATFORMS, Fleet
from synthetic.placement import Placement
from synthetic.workload import _DIURNAL_PEAK_RAD, Catalog, Jobs, Tasks
from synthetic.writers import Column

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
    [0.0] + [_NORMAL.inv_cdf((n - 0.375) / (n + 0.25))
             for n in range(1, _MAX_SAMPLES_PER_WINDOW + 1)])


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
        run, k, start, end, task, job, name, machine = self._windows(k_lo, k_hi)
        p, tasks, jobs, catalog = self._placement, self._tasks, self._jobs, self._catalog
        keys = self._keys
        z_job, z_page_cache = _hash_normals(keys[0:2], job, k)
        cpu_mean, distribution, tail, random_sample, sample_rate = self._cpu_usage(
            k, start, end, task, job, name, z_job)
        z_memory, z_memory_peak = _hash_normals(keys[4:6], task, k)
        z_cpi, z_mapi = _hash_normals(keys[6:8], task, k)

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

    def _windows(self, k_lo: int, k_hi: int) -> tuple:
        """(run, k, start, end, task, job, name, machine), one element per row of grid windows
        [k_lo, k_hi), in row order."""
        lo_us, hi_us = k_lo * WINDOW_US, k_hi * WINDOW_US
        runs = np.flatnonzero((self._start_us < hi_us) & (self._stop_us > lo_us))
        first_k = np.maximum(self._start_us[runs] // WINDOW_US, k_lo)
        counts = np.minimum(-(-self._stop_us[runs] // WINDOW_US), k_hi) - first_k
        run = np.repeat(runs, counts)
        k = np.repeat(first_k - (np.cumsum(counts) - counts), counts) + np.arange(len(run))
        start = np.maximum(k * WINDOW_US, self._start_us[run])
        end = np.minimum((k + 1) * WINDOW_US, self._stop_us[run])
        p, tasks, jobs = self._placement, self._tasks, self._jobs
        task = p.run_task[run]
        job = tasks.job[task]
        name = jobs.name[job]
        machine = p.run_machine[run]
        order = np.lexsort((tasks.instance_index[task], jobs.collection_id[job],
                            self._fleet.machine_id[machine], start))
        return tuple(a[order] for a in (run, k, start, end, task, job, name, machine))

    def _cpu_usage(self, k, start, end, task, job, name, z_job) -> tuple:
        """(mean, (n, 11) min / deciles / max, (n, 9) 91st..99th percentiles, random sample,
        sample rate) of CPU per row; z_job: the rows' job-level normal draws."""
        tasks, jobs, catalog, keys = self._tasks, self._jobs, self._catalog, self._keys
        mid_s = (start + end) * (0.5 / US_PER_S)
        diurnal = 1 + catalog.diurnal_amplitude[name] * np.cos(
            2 * np.pi * mid_s / (DAY_US / US_PER_S) - _DIURNAL_PEAK_RAD
            + catalog.diurnal_phase_rad[name])
        slow = np.sum(jobs.slow_amplitude[job] * np.sin(
            2 * np.pi * mid_s[:, None] / jobs.slow_period_s[job] + jobs.slow_phase_rad[job]),
            axis=1)
        z_task, z_random = _hash_normals(keys[2:4], task, k)
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
        random_sample = np.exp(
            log_median + spread * np.clip(z_random[:, None], -z_max, z_max))[:, 0]
        return cpu_mean, distribution, tail, random_sample, sample_rate
