"""The shaping metrics of [Pace18] §IV-A, per application and per run.

- turnaround: submission to finish, queueing and resubmissions included (seconds; NaN for
  an application unfinished when the run ends);
- slack: allocated minus used, as a percentage of allocated, per application and resource
  over all its component-steps (NaN where nothing was allocated, e.g. memory in a CPU-only
  workload);
- failures: an application fails when one of its core components is killed (by its
  overloaded host, or for using more than its own allocation: the simulator's failure
  models); the run's failure rate is the percentage of applications that failed at least
  once ([Pace18]: 37.67 % for optimistic with the oracle);
- preempted components (by the pessimistic shaper, those of fully preempted applications
  included) and work lost (component-seconds of work thrown away by kills and preemptions);
- the load every speed-up is read against: the workload's offered load (`offered_load`) and
  the run's mean queue length (applications waiting, averaged over the simulated steps).
"""

import numpy as np

from policies.shaping.cluster.simulator import SimulationResult
from policies.shaping.workload import Workload

PERCENTILES = (10, 25, 50, 75, 90, 95, 99)


def slack_pct(allocated: np.ndarray, used: np.ndarray) -> np.ndarray:
    """100 · (allocated - used) / allocated, NaN where allocated is 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(allocated > 0, 100.0 * (allocated - used) / allocated, np.nan)


def application_metrics(workload: Workload, result: SimulationResult) -> dict:
    """Column name → float64[A] / int64[A] / bool[A] of every application."""
    step_s = workload.step_s
    finished = result.finish_step >= 0
    core_length = np.where(workload.elastic, 0, workload.length)
    return {
        "submit_s": workload.submit_step * step_s,
        "runtime_s": np.maximum.reduceat(core_length, workload.app_start[:-1]) * step_s,
        "components": np.diff(workload.app_start),
        "finished": finished,
        "turnaround_s": np.where(finished, (result.finish_step - workload.submit_step) * step_s,
                                 np.nan),
        "wait_s": np.where(result.start_step >= 0,
                           (result.start_step - workload.submit_step) * step_s, np.nan),
        "cpu_slack_pct": slack_pct(result.allocated[:, 0], result.used[:, 0]),
        "memory_slack_pct": slack_pct(result.allocated[:, 1], result.used[:, 1]),
        "failures": result.failures,
        "preemptions": result.preemptions,
        "failed_components": result.failed_components,
        "preempted_components": result.preempted_components,
        "work_lost_s": result.lost_steps * step_s,
    }


def offered_load(workload: Workload, capacity: np.ndarray) -> float:
    """The work the workload offers per step over the cluster's capacity, the larger of CPU
    and memory: sum of request x length over its components / (total capacity x A x the
    mean inter-arrival time in steps), A applications. 1 = the baseline, which reserves the
    requests, is just saturated. NaN with fewer than two submission steps."""
    span = int(workload.submit_step[-1] - workload.submit_step[0]) if workload.num_apps else 0
    if span <= 0:
        return float("nan")
    work = (workload.request * workload.length[:, None]).sum(axis=0)
    mean_gap = span / (workload.num_apps - 1)
    return float(np.max(work / (capacity.sum(axis=0) * workload.num_apps * mean_gap)))


def run_metrics(apps: dict) -> dict:
    """The run's summary of `application_metrics` columns."""
    turnaround = apps["turnaround_s"]
    finished = apps["finished"]
    return {
        "applications": len(finished),
        "finished_applications": int(finished.sum()),
        "mean_turnaround_s": _mean(turnaround[finished]),
        "median_turnaround_s": _percentile(turnaround[finished], 50),
        "mean_cpu_slack_pct": _mean(apps["cpu_slack_pct"]),
        "mean_memory_slack_pct": _mean(apps["memory_slack_pct"]),
        "failed_applications_pct": 100.0 * float(np.mean(apps["failures"] > 0)),
        "preempted_applications_pct": 100.0 * float(np.mean(apps["preemptions"] > 0)),
        "failed_components": int(apps["failed_components"].sum()),
        "preempted_components": int(apps["preempted_components"].sum()),
        "work_lost_s": float(apps["work_lost_s"].sum()),
    }


def distribution(values: np.ndarray) -> dict:
    """{n, mean, p10 … p99} of the finite values (NaN when there are none)."""
    values = values[np.isfinite(values)]
    row = {"n": len(values), "mean": _mean(values)}
    row.update({f"p{q}": _percentile(values, q) for q in PERCENTILES})
    return row


def _mean(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else float("nan")


def _percentile(values: np.ndarray, q: float) -> float:
    values = values[np.isfinite(values)]
    return float(np.percentile(values, q)) if len(values) else float("nan")
