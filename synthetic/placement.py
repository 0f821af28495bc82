"""Placement: the event-driven replay that puts the tasks on the fleet, up to the horizon.

Each task goes on a random machine with room for its request; tasks that fit nowhere wait
(highest priority first). Requests never exceed a machine's capacity. A machine removal
evicts its tasks, which are resubmitted; tasks planned to fail or be evicted once are
resubmitted; an UPDATE_RUNNING changes a task's request (cut to the machine's free room).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq

import numpy as np

from configs.units import US_PER_S
from synthetic.constants import ENABLE, EVICT, MACHINE_REMOVE, SCHEDULE, SUBMIT, UPDATE_RUNNING
from synthetic.fleet import _MIN_REQUEST_UNITS, Fleet
from synthetic.workload import Jobs, Tasks


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
        self._request = [jobs.cpu_request[tasks.job].tolist(),
                         jobs.memory_request[tasks.job].tolist()]
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
