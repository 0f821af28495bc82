"""Forecasts of every component's usage over the shaping interval (002 §III-A).

The forecasting module predicts each component's CPU and memory usage (002 forecasts per
component: "the resource utilization of every application component"). Forecasts are of the
usage-to-request ratio, as the overcommit forecasters' are of the usage-to-limit ratio, so
that the uncertainty term of beta has the request's units once multiplied by it:
allocation = request · (forecast ratio + K1 + K2 · uncertainty of the ratio), i.e.
forecast + beta with beta = K1 · request + K2 · request · V (002 §III-B).

A component's usage is indexed by its age (see workload.py), so its forecasts do not depend on
the schedule: a forecaster is fitted once per usage series, at ages 0, S, 2S, ... (S the
shaping interval, in steps) on the ratios before that age (the last `num_history_samples`,
002 §V: ten), and forecasts the S steps of the next interval. Forecasts at age a use only
ages < S·floor(a / S) <= a, so the shaper never sees the future, and one set of fits serves
every (K1, K2, policy, seed) of a run. Where no forecast exists (too little history, a failed
fit) the mean is NaN and the shaper allocates the request.

Deviation: a history window that is exactly constant (e.g. an idle component) is forecast
as that constant with zero uncertainty, without fitting (an ARIMA fit gives the same, and a
GP's evidence is degenerate there).
"""

import dataclasses
from typing import Iterable, List, Optional, Sequence

import numpy as np

from predictors.peak.gp_forecaster import GaussianProcessForecaster
from shaping.arima import DEFAULT_LAGS, fit_forecast
from shaping.workload import Workload

US_PER_S = 1e6


@dataclasses.dataclass(frozen=True)
class Forecasts:
    """Per-step forecasts aligned with `Workload.usage` (float64[N, 2] each, NaN = none).

    `mean` is the forecast usage ratio, `uncertainty` the forecaster's variance of it (or its
    standard deviation, as configured). `fits` counts the models fitted."""

    mean: np.ndarray
    uncertainty: np.ndarray
    fits: int = 0

    def merged(self, other: "Forecasts") -> "Forecasts":
        """These forecasts completed with `other`'s where these have none (disjoint series
        forecast by different shards)."""
        take = np.isnan(self.mean) & ~np.isnan(other.mean)
        return Forecasts(np.where(take, other.mean, self.mean),
                         np.where(take, other.uncertainty, self.uncertainty),
                         self.fits + other.fits)


class UsageForecaster:
    """Forecasts one usage-ratio series (float64[L], by age) interval by interval.

    Subclasses implement `forecast_interval(history, start)` for the interval that starts at
    age `start` given the ratios before it. Args:
      interval_steps: S, the shaping interval.
      num_history_samples: most recent ratios a model is fitted on.
      min_fit_samples: shortest history a model is fitted on.
      uncertainty: 'variance' (002's V) or 'std'.
    """

    name = "forecaster"

    def __init__(self, interval_steps: int = 12, num_history_samples: int = 10,
                 min_fit_samples: int = 10, uncertainty: str = "variance"):
        if uncertainty not in ("variance", "std"):
            raise ValueError(f"uncertainty must be 'variance' or 'std', got {uncertainty!r}")
        self.interval_steps = interval_steps
        self.num_history_samples = num_history_samples
        self.min_fit_samples = min_fit_samples
        self.uncertainty = uncertainty

    def forecast_series(self, ratio: np.ndarray, step_s: float):
        """(mean, uncertainty, fits) for one series: float64[L] each (NaN = none), int."""
        mean = np.full(len(ratio), np.nan)
        variance = np.full(len(ratio), np.nan)
        first = -(-self.min_fit_samples // self.interval_steps) * self.interval_steps
        starts = np.arange(max(first, self.interval_steps), len(ratio), self.interval_steps)
        histories = [ratio[max(0, start - self.num_history_samples):start] for start in starts]
        flat = np.array([np.all(h == h[0]) for h in histories], dtype=bool)
        paths = self.forecast_windows([h for h, f in zip(histories, flat) if not f],
                                      starts[~flat], step_s)
        fitted = iter(paths)
        for start, history, constant in zip(starts, histories, flat):
            end = min(start + self.interval_steps, len(ratio))
            path = (history[0], 0.0) if constant else next(fitted)
            if path is not None:
                mean[start:end], variance[start:end] = (np.broadcast_to(p, (
                    self.interval_steps,))[:end - start] for p in path)
        spread = variance if self.uncertainty == "variance" else np.sqrt(variance)
        return mean, spread, len(paths)

    def forecast_windows(self, histories: List[np.ndarray], starts: np.ndarray, step_s: float):
        """(mean, variance) float64[S] or None per window: one fit each (batched by the
        subclasses that can)."""
        return [self.forecast_interval(h, int(s), step_s) for h, s in zip(histories, starts)]

    def forecast_interval(self, history: np.ndarray, start: int, step_s: float):
        """(mean, variance) float64[S] of the S ratios from age `start`, or None."""
        raise NotImplementedError


class OracleForecaster(UsageForecaster):
    """The true future usage (002 §IV-B's oracle): mean = the ratio itself, no uncertainty."""

    name = "oracle"

    def forecast_series(self, ratio: np.ndarray, step_s: float):
        return ratio.copy(), np.zeros(len(ratio)), 0


class ArimaUsageForecaster(UsageForecaster):
    """ARIMA (002 §III-A.1): ARIMA(p, 1, 0) with p chosen by AIC among `lags` at every fit,
    conditional least squares in closed form, all windows of a series fitted at once (see
    shaping/arima.py for the model, why it is not statsmodels' ARIMA(1, 1, 1), and its
    equality with statsmodels); the S steps of the interval with the predictive variance,
    growing with the lead time."""

    name = "arima"

    def __init__(self, lags: Sequence[int] = DEFAULT_LAGS, **kwargs):
        super().__init__(**kwargs)
        self.lags = tuple(int(p) for p in lags)

    def forecast_windows(self, histories, starts, step_s):
        paths = [None] * len(histories)
        lengths = np.array([len(h) for h in histories], dtype=np.int64)
        for length in np.unique(lengths):
            rows = np.flatnonzero(lengths == length)
            # The highest order a window this short supports (shaping/arima.py).
            lags = [p for p in self.lags if 2 * p + 2 <= length] or [0]
            mean, variance, _ = fit_forecast(np.stack([histories[i] for i in rows]),
                                             self.interval_steps, lags)
            for i, m, v in zip(rows, mean, variance):
                if np.all(np.isfinite(m)) and np.all(np.isfinite(v)):
                    paths[i] = (m, v)
        return paths


class GaussianProcessUsageForecaster(UsageForecaster):
    """GP regression with 002's history-dependent kernel (§III-A.2, eq. 4-8), through
    `predictors.peak.GaussianProcessForecaster`, hyperparameters by evidence maximization at
    every interval. The GP predicts one step ahead; the interval's S steps are forecast
    recursively, each mean appended to the history as if observed. Deviation: each step's
    variance is the posterior variance at that step's pattern, without propagating the
    uncertainty of the appended means (002 does not say how it forecasts several steps)."""

    name = "gaussian_process"

    def __init__(self, pattern_length: int = 3, **kwargs):
        super().__init__(**kwargs)
        self.model = GaussianProcessForecaster(
            pattern_length=pattern_length, num_history_samples=self.num_history_samples,
            min_fit_samples=self.min_fit_samples)

    def forecast_interval(self, history, start, step_s):
        self.model.step_s = step_s
        step_us = int(step_s * US_PER_S)
        params = self.model.fit_hyperparameters(
            np.arange(start - len(history), start) * step_us, history)
        if params is None:
            return None
        series, means, variances = list(history), [], []
        for ahead in range(self.interval_steps):
            window = np.array(series[-self.num_history_samples:])
            ages = np.arange(start + ahead - len(window), start + ahead)
            mean, variance = self.model.posterior(params, ages * step_us, window)
            means.append(mean)
            variances.append(variance)
            series.append(mean)
        return np.array(means), np.array(variances)


def usage_ratio(workload: Workload, component: int, resource: int) -> np.ndarray:
    """float64[L] usage / request of a component's series (0 where the request is 0)."""
    request = workload.request[component, resource]
    series = workload.usage[workload.offset[component]:
                            workload.offset[component] + workload.length[component], resource]
    return series / request if request > 0 else np.zeros(len(series))


def series_representatives(workload: Workload) -> np.ndarray:
    """int64[S] one component per distinct usage series (the first with that offset)."""
    _, first = np.unique(workload.offset, return_index=True)
    return np.sort(first)


def forecast_workload(workload: Workload, forecaster: UsageForecaster,
                      components: Optional[Iterable[int]] = None) -> Forecasts:
    """Forecasts of every distinct series of `workload` (or of the series of `components`
    only; the others stay NaN), both resources."""
    mean = np.full(workload.usage.shape, np.nan)
    spread = np.full(workload.usage.shape, np.nan)
    fits = 0
    chosen = series_representatives(workload) if components is None else components
    for c in chosen:
        rows = slice(workload.offset[c], workload.offset[c] + workload.length[c])
        for resource in range(2):
            m, s, n = forecaster.forecast_series(usage_ratio(workload, c, resource),
                                                 workload.step_s)
            mean[rows, resource], spread[rows, resource] = m, s
            fits += n
    return Forecasts(mean, spread, fits)
