"""Overcommit metrics of [Bashir21] §5.1.3, from per-step arrays.

Per (machine, step) the pipeline records total_usage, total_limit, predicted_peak and oracle
(all float64[T]). A step is *scored* when both predicted_peak and oracle are finite: the
oracle has no value over the last horizon of the data, and the reference joins predictor and
oracle outputs on (machine, time), which drops those steps.

- violation: predicted < oracle.
- severity: max(0, oracle - predicted) / oracle (0 without a violation).
- savings ratio: (limit - predicted) / limit.

Per machine, each is averaged over the scored steps. Per cell, limits and predictions are
first summed over the machines scored at each time (`CellSums`), then divided
(`cell_savings`).
"""

from typing import NamedTuple, Sequence

import numpy as np

from predictors.peak.machine_samples import MachineSamples

CDF_QUANTILES = (0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99)


def total_usage(samples: MachineSamples) -> np.ndarray:
    """Sum of the tasks' usage at each step, each capped at its limit: float64[T].

    The reference (fortune_teller.py) always caps here, whatever cap_to_limit says.
    """
    return samples.per_step_sum(samples.capped_usage)


def total_limit(samples: MachineSamples) -> np.ndarray:
    """Sum of the tasks' limits at each step: float64[T]."""
    return samples.per_step_sum(samples.limit)


class StepMetrics(NamedTuple):
    """Per-step metrics; `scored` (bool[T]) marks the steps that count, the rest are 0."""

    scored: np.ndarray
    violation: np.ndarray
    severity: np.ndarray
    savings: np.ndarray


def step_metrics(limit: np.ndarray, predicted_peak: np.ndarray, oracle: np.ndarray) -> StepMetrics:
    """Violation (bool[T]), severity and savings ratio (float64[T]) of one machine's steps."""
    scored = np.isfinite(predicted_peak) & np.isfinite(oracle)
    violation = scored & (predicted_peak < oracle)
    with np.errstate(invalid="ignore", divide="ignore"):
        severity = np.where(violation, (oracle - predicted_peak) / oracle, 0.0)
        savings = np.where(scored, (limit - predicted_peak) / limit, 0.0)
    return StepMetrics(scored, violation, severity, savings)


class MachineMetrics(NamedTuple):
    """One machine's metrics averaged over its scored steps (NaN if it has none)."""

    num_steps: int
    violation_rate: float
    mean_severity: float
    savings_ratio: float


def machine_metrics(limit: np.ndarray, predicted_peak: np.ndarray,
                    oracle: np.ndarray) -> MachineMetrics:
    """Per-machine violation rate, mean violation severity and mean savings ratio."""
    steps = step_metrics(limit, predicted_peak, oracle)
    count = int(steps.scored.sum())
    if count == 0:
        return MachineMetrics(0, np.nan, np.nan, np.nan)
    return MachineMetrics(count, steps.violation.sum() / count, steps.severity.sum() / count,
                          steps.savings.sum() / count)


class CellSums(NamedTuple):
    """Sums over the machines of a cell at each time, counting a machine at a time only when it
    is scored there (predicted and oracle finite, as in `step_metrics`).

    Attributes (all [K], sorted by time): time int64 (µs), num_machines int64, and float64
    total_limit, predicted_peak, oracle.
    """

    time: np.ndarray
    num_machines: np.ndarray
    total_limit: np.ndarray
    predicted_peak: np.ndarray
    oracle: np.ndarray


def cell_sums(time_us: np.ndarray, limit: np.ndarray, predicted_peak: np.ndarray,
              oracle: np.ndarray) -> CellSums:
    """One machine's contribution to its cell: its scored steps (arrays of [T])."""
    scored = np.isfinite(predicted_peak) & np.isfinite(oracle)
    return CellSums(np.asarray(time_us, dtype=np.int64)[scored],
                    np.ones(int(scored.sum()), dtype=np.int64), limit[scored],
                    predicted_peak[scored], oracle[scored])


def merge_cell_sums(parts: Sequence[CellSums]) -> CellSums:
    """The CellSums of the union of the machines of `parts` (sums per time)."""
    if not parts:
        return CellSums(np.zeros(0, np.int64), np.zeros(0, np.int64), *np.zeros((3, 0)))
    time, inverse = np.unique(np.concatenate([p.time for p in parts]), return_inverse=True)

    def summed(field, dtype=np.float64):
        values = np.concatenate([getattr(p, field) for p in parts])
        return np.bincount(inverse, weights=values, minlength=len(time)).astype(dtype)

    return CellSums(time, summed("num_machines", np.int64), summed("total_limit"),
                    summed("predicted_peak"), summed("oracle"))


def cell_savings(sums: CellSums) -> np.ndarray:
    """The cell's savings ratio at each of its times: (limit - predicted) / limit, float64[K].

    Machines are weighted by their limit, unlike the average of per-machine savings.
    """
    return (sums.total_limit - sums.predicted_peak) / sums.total_limit


def cdf_quantiles(values: Sequence[float], quantiles: Sequence[float] = CDF_QUANTILES) -> dict:
    """{quantile: value} of the finite `values` (e.g. per-machine violation rates)."""
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if len(finite) == 0:
        return {q: np.nan for q in quantiles}
    return dict(zip(quantiles, np.quantile(finite, quantiles).tolist()))
