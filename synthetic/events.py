"""Event tables: machine_events, collection_events and instance_events of a sampled trace,
as v3 columns (ids and names obfuscated like the real trace's)."""

from __future__ import annotations

import base64
import hashlib

import numpy as np

from synthetic.constants import (
    ENABLE,
    FAIL,
    FINISH,
    JOB,
    KILL,
    NO_ALLOC_COLLECTION,
    NO_ALLOC_INDEX,
    NO_MACHINE,
    QUEUE,
    RESOURCE_UNITS,
    SCHEDULE,
    SUBMIT,
)
from synthetic.fleet import _PLATFORMS, Fleet
from synthetic.placement import Placement
from synthetic.workload import Catalog, Jobs, Tasks
from synthetic.writers import Column


def _obfuscated(namespace: str, ids) -> np.ndarray:
    """v3-style obfuscated strings (base64 of a SHA-256), one per id."""
    return np.array([
        base64.b64encode(hashlib.sha256(f"{namespace}:{i}".encode()).digest()).decode()
        for i in ids], dtype=object)


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
            np.column_stack([first_schedule[started], np.full(started.sum(), SCHEDULE),
                             job[started]]),
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

    def _job_event_columns(self, time_us: np.ndarray, event_type: np.ndarray,
                           job: np.ndarray) -> list[Column]:
        """The columns collection_events and instance_events start with."""
        jobs = self._jobs
        n = len(job)
        return [
            Column("time", "int", time_us),
            Column("type", "int", event_type),
            Column("collection_id", "int", jobs.collection_id[job]),
            Column("scheduling_class", "int", jobs.scheduling_class[job]),
            Column("missing_type", "null"),
            Column("collection_type", "int", np.full(n, JOB)),
            Column("priority", "int", jobs.priority[job]),
            Column("alloc_collection_id", "int", np.full(n, NO_ALLOC_COLLECTION)),
        ]

    def _collection_columns(self, rows: np.ndarray) -> list[Column]:
        jobs = self._jobs
        time_us, event_type, job = self._collection[rows].T
        n = len(rows)
        return self._job_event_columns(time_us, event_type, job) + [
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
        tasks = self._tasks
        time_us, event_type, task, machine, cpu, memory = self._instance[rows].T
        job = tasks.job[task]
        n = len(rows)
        return self._job_event_columns(time_us, event_type, job) + [
            Column("instance_index", "int", tasks.instance_index[task]),
            Column("machine_id", "int",
                   np.where(machine >= 0, self._fleet.machine_id[machine], NO_MACHINE)),
            Column("alloc_instance_index", "int", np.full(n, NO_ALLOC_INDEX)),
            Column("resource_request.cpus", "float", cpu / RESOURCE_UNITS),
            Column("resource_request.memory", "float", memory / RESOURCE_UNITS),
            Column("constraint", "empty_constraint_list"),
        ]
