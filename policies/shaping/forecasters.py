"""Forecasts of every component's usage over the shaping interval ([Pace18] §III-A).

Forecasts are of a component's usage-to-request ratio (per component, as [Pace18]), so that
allocation = request · (forecast ratio + K1 + K2 · uncertainty of the ratio), i.e.
forecast + beta with beta = K1 · request + K2 · request · V ([Pace18] §III-B).

Usage is indexed by age (workload.py), so forecasts do not depend on the schedule: a series
is fitted once per forecaster at ages 0, S, 2S, ... (S the shaping interval, in steps) on the
last `num_history_samples` ratios before that age ([Pace18] §V: ten), and forecasts the
2S - 1 steps from it (`horizon_steps`). An allocation made at age a holds for ages
a .. a + S - 1, all in the path of the fit at S·floor(a / S), which saw ages < a only: the
shaper never sees the future, and one set of fits serves every (K1, K2, policy, seed). No
forecast (too little history, a failed fit) is a NaN mean: the shaper allocates the request.
A history window that is exactly constant is forecast as that constant with zero
uncertainty, without a fit (a GP's evidence is degenerate there).
"""

import dataclasses
from typing import Iterable, List, Optional, Sequence

import numpy as np

from configs.units import US_PER_S
from policies.shaping.workload import Workload
from predictors.peak.arima import DEFAULT_LAGS, fit_forecast, supported_lags
from predictors.peak.gp_forecaster import GaussianProcessForecaster
from predictors.peak.ima import forecast_from_starts


@dataclasses.dataclass(frozen=True)
class Forecasts:
    """The forecast paths of a workload's usage series, and which path covers each step.

    Attributes:
      mean: float64[F, H, 2] per fit, the forecast usage ratio of the H = 2S - 1 steps from
        the fit's age (NaN: no forecast; -inf past the end of the series, which no
        allocation needs).
      uncertainty: float64[F, H, 2] the forecaster's variance of it (or its standard
        deviation, as configured); 0 past the end of the series.
      fit_of_step: int64[N] per step of `Workload.usage`, the fit at the start of its
        interval (-1: none), and lead_of_step int64[N] the step's age minus the fit's.
      fits: models fitted.
    """

    mean: np.ndarray
    uncertainty: np.ndarray
    fit_of_step: np.ndarray
    lead_of_step: np.ndarray
    fits: int = 0

    def merged(self, other: "Forecasts") -> "Forecasts":
        """These forecasts completed with `other`'s where these have none (disjoint series
        forecast by different shards)."""
        take = (self.fit_of_step < 0) & (other.fit_of_step >= 0)
        return Forecasts(np.concatenate([self.mean, other.mean]),
                         np.concatenate([self.uncertainty, other.uncertainty]),
                         np.where(take, other.fit_of_step + len(self.mean), self.fit_of_step),
                         np.where(take, other.lead_of_step, self.lead_of_step),
                         self.fits + other.fits)

    def interval_peaks(self, k2: float, interval_steps: int) -> np.ndarray:
        """float64[N, 2] per step, the highest mean + k2 · uncertainty of its fit over the
        `interval_steps` steps from it (NaN where some of them has no forecast). The mean is
        clipped at 0 first: usage is never negative, and an ARIMA path that drifts below 0
        would otherwise cut the allocation below K1 · request (even K1 = 1 below the
        request). Past the end of a series the clipped -inf becomes 0, which changes no
        peak: every window holds a step of the series, whose clipped mean is >= 0. NaN
        stays NaN."""
        buffered = np.maximum(self.mean, 0.0) + k2 * self.uncertainty
        horizon = buffered.shape[1]
        # A fit covers the (horizon + 1) / 2 ages of its interval; each needs a window.
        leads = horizon - interval_steps + 1
        if leads < (horizon + 1) // 2:
            raise ValueError(f"forecasts of {horizon} steps cannot give peaks over "
                             f"{interval_steps}-step intervals")
        peak = buffered[:, :leads]
        for ahead in range(1, interval_steps):
            peak = np.maximum(peak, buffered[:, ahead:ahead + leads])
        step_peak = np.full((len(self.fit_of_step), 2), np.nan)
        covered = self.fit_of_step >= 0
        step_peak[covered] = peak[self.fit_of_step[covered], self.lead_of_step[covered]]
        return step_peak


class UsageForecaster:
    """Forecasts one usage-ratio series (float64[L], by age) interval by interval.

    Subclasses implement `forecast_interval(history, start)` for the interval that starts at
    age `start` given the ratios before it.

    Args:
      interval_steps: S, the shaping interval, in steps.
      num_history_samples: most recent ratios a model is fitted on.
      min_fit_samples: shortest history a model is fitted on.
      uncertainty: 'variance' ([Pace18]'s V) or 'std'.
      cyclic: series replay cyclically (the simulator's `elastic_progress`): past a series'
        end it starts again, so forecasts go on there (the oracle's wraps) instead of ending.
    """

    name = "forecaster"

    def __init__(self, interval_steps: int = 12, num_history_samples: int = 10,
                 min_fit_samples: int = 10, uncertainty: str = "variance",
                 cyclic: bool = False):
        if uncertainty not in ("variance", "std"):
            raise ValueError(f"uncertainty must be 'variance' or 'std', got {uncertainty!r}")
        self.interval_steps = interval_steps
        self.num_history_samples = num_history_samples
        self.min_fit_samples = min_fit_samples
        self.uncertainty = uncertainty
        self.cyclic = cyclic

    @property
    def horizon_steps(self) -> int:
        """Steps a fit forecasts: an allocation made anywhere in its interval must hold for
        S steps."""
        return 2 * self.interval_steps - 1

    def fit_starts(self, length: int) -> np.ndarray:
        """int64 ages at which a series of `length` steps is fitted."""
        first = -(-self.min_fit_samples // self.interval_steps) * self.interval_steps
        return np.arange(max(first, self.interval_steps), length, self.interval_steps)

    def forecast_series(self, ratio: np.ndarray, step_s: float):
        """(starts int64[F], mean, uncertainty float64[F, H], fits) for one series; NaN =
        no forecast, and past the series' end (unless `cyclic`) the mean is -inf and the
        uncertainty 0."""
        starts = self.fit_starts(len(ratio))
        mean = np.full((len(starts), self.horizon_steps), np.nan)
        variance = np.full((len(starts), self.horizon_steps), np.nan)
        histories = [ratio[max(0, start - self.num_history_samples):start] for start in starts]
        flat = np.array([np.all(h == h[0]) for h in histories], dtype=bool)
        paths = self.forecast_windows([h for h, f in zip(histories, flat) if not f],
                                      starts[~flat], step_s)
        fitted = iter(paths)
        for row, (history, constant) in enumerate(zip(histories, flat)):
            path = (history[0], 0.0) if constant else next(fitted)
            if path is not None:
                mean[row], variance[row] = path
        spread = variance if self.uncertainty == "variance" else np.sqrt(variance)
        return (starts,) + self.past_the_end(starts, len(ratio), mean, spread) + (len(paths),)

    def past_the_end(self, starts: np.ndarray, length: int, mean: np.ndarray,
                     spread: np.ndarray):
        """(mean, spread) with the steps at ages >= `length` marked (mean -inf, spread 0),
        or unchanged when series replay cyclically."""
        if self.cyclic:
            return mean, spread
        beyond = starts[:, None] + np.arange(mean.shape[1])[None, :] >= length
        return np.where(beyond, -np.inf, mean), np.where(beyond, 0.0, spread)

    def forecast_windows(self, histories: List[np.ndarray], starts: np.ndarray, step_s: float):
        """(mean, variance) float64[S] or None per window: one fit each (batched by the
        subclasses that can)."""
        return [self.forecast_interval(h, int(s), step_s) for h, s in zip(histories, starts)]

    def forecast_interval(self, history: np.ndarray, start: int, step_s: float):
        """(mean, variance) float64[S] of the S ratios from age `start`, or None."""
        raise NotImplementedError


class OracleForecaster(UsageForecaster):
    """The true future usage ([Pace18] §IV-B's oracle): mean = the ratio itself, no
    uncertainty; past the series' end the series again when `cyclic`."""

    name = "oracle"

    def fit_starts(self, length: int) -> np.ndarray:
        return np.arange(0, length, self.interval_steps)

    def forecast_series(self, ratio: np.ndarray, step_s: float):
        starts = self.fit_starts(len(ratio))
        ages = starts[:, None] + np.arange(self.horizon_steps)[None, :]
        mean = ratio[ages % len(ratio) if self.cyclic else np.minimum(ages, len(ratio) - 1)]
        return (starts,) + self.past_the_end(starts, len(ratio), mean,
                                             np.zeros_like(mean)) + (0,)


class ArimaUsageForecaster(UsageForecaster):
    """ARIMA ([Pace18] §III-A.1): ARIMA(p, 1, 0), p chosen by AIC among `lags` at every fit,
    fitted in closed form, all windows of a series at once (predictors/peak/arima.py: the
    model and its equality with statsmodels); it forecasts the interval's steps with their
    predictive variance, growing with the lead time.

    Args:
      lags: the AR orders p to choose from.
      **kwargs: `UsageForecaster`'s.
    """

    name = "arima"

    def __init__(self, lags: Sequence[int] = DEFAULT_LAGS, **kwargs):
        super().__init__(**kwargs)
        self.lags = tuple(int(p) for p in lags)

    def forecast_windows(self, histories, starts, step_s):
        paths = [None] * len(histories)
        lengths = np.array([len(h) for h in histories], dtype=np.int64)
        for length in np.unique(lengths):
            rows = np.flatnonzero(lengths == length)
            mean, variance, _ = fit_forecast(np.stack([histories[i] for i in rows]),
                                             self.horizon_steps,
                                             supported_lags(self.lags, int(length)))
            for i, m, v in zip(rows, mean, variance):
                if np.all(np.isfinite(m)) and np.all(np.isfinite(v)):
                    paths[i] = (m, v)
        return paths


class Arima011UsageForecaster(UsageForecaster):
    """ARIMA(0, 1, 1) refitted at every interval on up to `max_history` past ratios
    (predictors/peak/ima.py): [Pace18]'s evaluation simulator's ARIMA, where `ARIMA` is its
    text's (§V: an order search on ten observations). All fits of a series at once.

    Args:
      max_history: the most recent ratios a fit sees ([Pace18]'s simulator: 2,000).
      **kwargs: `UsageForecaster`'s (its num_history_samples only decides which histories
        are constant, forecast as such without a fit).
    """

    name = "arima_011"

    def __init__(self, max_history: int = 2000, **kwargs):
        super().__init__(**kwargs)
        self.max_history = max_history

    def forecast_series(self, ratio: np.ndarray, step_s: float):
        starts = self.fit_starts(len(ratio))
        mean, variance = forecast_from_starts(ratio, starts, self.max_history,
                                              self.horizon_steps)
        for row, start in enumerate(starts):
            history = ratio[max(0, start - self.num_history_samples):start]
            if np.all(history == history[0]):
                mean[row], variance[row] = history[0], 0.0
        spread = variance if self.uncertainty == "variance" else np.sqrt(variance)
        return (starts,) + self.past_the_end(starts, len(ratio), mean, spread) + (len(starts),)


class GaussianProcessUsageForecaster(UsageForecaster):
    """GP regression with [Pace18]'s history-dependent kernel (§III-A.2, eq. 4-8), through
    `predictors.peak.GaussianProcessForecaster`, hyperparameters by evidence maximization at
    every interval, each search started from the previous interval's optimum (a local
    optimum near it, as the overcommit forecaster's). The GP predicts one step ahead; the
    interval's steps are forecast recursively, each mean appended to the history as if
    observed. Deviation ([Pace18] does not say how it forecasts several steps): each step's
    variance is the posterior variance at its pattern, without the uncertainty of the
    appended means.

    Args:
      pattern_length: h, past ratios in a pattern ([Pace18] eq. 5).
      **kwargs: `UsageForecaster`'s.
    """

    name = "gaussian_process"

    def __init__(self, pattern_length: int = 3, **kwargs):
        super().__init__(**kwargs)
        self.model = GaussianProcessForecaster(
            pattern_length=pattern_length, num_history_samples=self.num_history_samples,
            min_fit_samples=self.min_fit_samples)

    def forecast_windows(self, histories, starts, step_s):
        """One fit per window, in order, each hyperparameter search started from the previous
        window's optimum (the overcommit forecaster's warm start,
        `predictors.peak.gp_forecaster.GaussianProcessSchedule`)."""
        paths, previous = [], None
        for history, start in zip(histories, starts):
            path, fitted = self.forecast_from(history, int(start), step_s, previous)
            paths.append(path)
            previous = previous if fitted is None else fitted
        return paths

    def forecast_interval(self, history, start, step_s):
        return self.forecast_from(history, start, step_s, None)[0]

    def forecast_from(self, history, start, step_s, initial):
        """((mean, variance) float64[S] or None, the fitted log hyperparameters or None) of
        the window before age `start`, the search started from `initial` (None: a guess)."""
        self.model.step_s = step_s
        step_us = int(step_s * US_PER_S)
        params = self.model.fit_hyperparameters(
            np.arange(start - len(history), start) * step_us, history, initial)
        if params is None:
            return None, None
        series, means, variances = list(history), [], []
        for ahead in range(self.horizon_steps):
            window = np.array(series[-self.num_history_samples:])
            ages = np.arange(start + ahead - len(window), start + ahead)
            mean, variance = self.model.posterior(params, ages * step_us, window)
            means.append(mean)
            variances.append(variance)
            series.append(mean)
        return (np.array(means), np.array(variances)), params


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
    only; the others have none), both resources."""
    num_steps = len(workload.usage)
    fit_of_step = np.full(num_steps, -1, dtype=np.int64)
    lead_of_step = np.zeros(num_steps, dtype=np.int64)
    means, spreads, fits, num_paths = [], [], 0, 0
    chosen = series_representatives(workload) if components is None else components
    for c in chosen:
        offset, length = workload.offset[c], workload.length[c]
        per_resource = [forecaster.forecast_series(usage_ratio(workload, c, resource),
                                                   workload.step_s) for resource in range(2)]
        starts = per_resource[0][0]
        means.append(np.stack([r[1] for r in per_resource], axis=-1))
        spreads.append(np.stack([r[2] for r in per_resource], axis=-1))
        fits += sum(r[3] for r in per_resource)
        if len(starts):
            ages = np.arange(starts[0], length)
            fit = (ages - starts[0]) // forecaster.interval_steps
            fit_of_step[offset + ages] = num_paths + fit
            lead_of_step[offset + ages] = ages - starts[fit]
        num_paths += len(starts)
    shape = (0, forecaster.horizon_steps, 2)
    return Forecasts(np.concatenate(means) if means else np.empty(shape),
                     np.concatenate(spreads) if spreads else np.empty(shape),
                     fit_of_step, lead_of_step, fits)
