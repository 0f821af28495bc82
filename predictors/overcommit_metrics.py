"""Overcommit metrics of paper 004 §5.1.3, from per-step arrays.

Per (machine, step) the pipeline records total_usage, total_limit, predicted_peak and oracle
(all float64[T]). A step is *scored* when both predicted_peak and oracle are finite: the
oracle has no value over the last horizon of the data, and the reference joins predictor and
oracle outputs on (machine, time), which drops those steps.

- violation: predicted < oracle.
- severity: max(0, oracle - predicted) / oracle (0 without a violation).
- savings ratio: (limit - predicted) / limit.

Per machine, each is averaged over the scored steps. Per cell, limits and predictions are
first summed over the machines at each step (`cell_savings`).
"""

from typing import NamedTuple, Sequence

import numpy as np

from predictors.machine_samples import MachineSamples

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


class CellSavings(NamedTuple):
    """Cell-level savings: per step (float64[T], NaN where no machine is scored) and overall
    (sum over steps of the saved capacity / sum over steps of the total limit)."""

    per_step: np.ndarray
    overall: float


def cell_savings(limit: np.ndarray, predicted_peak: np.ndarray, oracle: np.ndarray) -> CellSavings:
    """Savings of a cell from stacked machine arrays aligned on time.

    Args: float64[M, T] each; NaN where a machine has no value at a time. A machine counts at
    a time when it is scored there (predicted and oracle finite), as in `step_metrics`.
    """
    scored = np.isfinite(predicted_peak) & np.isfinite(oracle) & np.isfinite(limit)
    cell_limit = np.where(scored, limit, 0.0).sum(axis=0)
    saved = np.where(scored, limit - predicted_peak, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_step = np.where(scored.any(axis=0), saved / cell_limit, np.nan)
    overall = saved.sum() / cell_limit.sum() if cell_limit.sum() > 0 else np.nan
    return CellSavings(per_step, float(overall))


def cdf_quantiles(values: Sequence[float], quantiles: Sequence[float] = CDF_QUANTILES) -> dict:
    """{quantile: value} of the finite `values` (e.g. per-machine violation rates)."""
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if len(finite) == 0:
        return {q: np.nan for q in quantiles}
    return dict(zip(quantiles, np.quantile(finite, quantiles).tolist()))
