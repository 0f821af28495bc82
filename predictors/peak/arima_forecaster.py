"""ARIMA forecaster with a safe-guard buffer ([Pace18] §III-A.1, §III-B).

The model is predictors/peak/arima.py's closed-form ARIMA(p, 1, 0) (tested equal to
statsmodels) on the warm tasks' usage-to-limit ratio history (`HistoryForecaster`), p chosen
by AIC among `lags` at every fit: the paper's automatic order selection restricted to pure
AR orders on the differences. A fit at step r forecasts the next `refit_every_steps` steps at
once (mean and predictive variance), and step r + j advertises the forecast for step
r + j + 1, its variance and buffer growing with j. A fit is attempted at the first step with
enough history and whenever the current path is used up; until one succeeds the warm tasks
count at their limit. Steps are machine steps (a gap in the machine's times is not a step).
"""

from typing import Sequence

import numpy as np

from predictors.peak.arima import DEFAULT_LAGS, fit_forecast, supported_lags
from predictors.peak.peak_predictor import HistoryForecaster


class ArimaForecaster(HistoryForecaster):
    """ARIMA forecast + k1 * limit + k2 * uncertainty.

    Args:
      lags: candidate AR orders p of ARIMA(p, 1, 0); the lowest AIC wins at every refit (a
        short history fits only the orders it supports, `arima.supported_lags`).
      num_history_samples: history the model is fitted on (samples).
      refit_every_steps: steps between refits (each fit forecasts that many steps).
      min_fit_samples: shortest history a model is fitted on.
      k1, k2: buffer coefficients ([Pace18] §V: 0.05 and 3).
      uncertainty: 'variance' (the paper's V) or 'std' of the forecast ratio.
      min_num_samples: warm-up length of a task run (samples).
      cap_to_limit: cap every sample at its limit first.
    """

    def __init__(self, lags: Sequence[int] = DEFAULT_LAGS, num_history_samples: int = 120,
                 refit_every_steps: int = 12, min_fit_samples: int = 24, k1: float = 0.05,
                 k2: float = 3.0, uncertainty: str = "variance", min_num_samples: int = 24,
                 cap_to_limit: bool = False):
        super().__init__(num_history_samples, refit_every_steps, min_fit_samples, k1, k2,
                         uncertainty, min_num_samples, cap_to_limit)
        if not len(lags) or min(lags) < 0:
            raise ValueError(f"lags must name at least one order p >= 0, got {list(lags)}")
        self.lags = sorted(int(p) for p in lags)

    def forecast_path(self, series: np.ndarray):
        """Fits ARIMA(p, 1, 0) on `series` (float64[n], oldest first, n >= 2).

        Returns (mean, variance), both float64[refit_every_steps], of the lowest-AIC order, or
        None when the forecast is not finite (an explosive fit).
        """
        mean, variance, _ = fit_forecast(series[None, :], self.refit_every_steps,
                                         supported_lags(self.lags, len(series)))
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(variance))):
            return None
        return mean[0], variance[0]

    def new_schedule(self) -> "ArimaSchedule":
        return ArimaSchedule(self)


class ArimaSchedule:
    """Per-machine refit schedule of an ArimaForecaster (see the module docstring)."""

    def __init__(self, forecaster: ArimaForecaster):
        self.forecaster = forecaster
        self.fit_step = None
        self.path = None

    def forecast(self, step: int, step_times_us: np.ndarray, series: np.ndarray):
        """(mean, variance) of the ratio after `step`, or None; call with increasing steps."""
        if self.path is None or step - self.fit_step >= self.forecaster.refit_every_steps:
            self.path = None
            if len(series) >= self.forecaster.min_fit_samples:
                self.path = self.forecaster.forecast_path(series)
                self.fit_step = step
        if self.path is None:
            return None
        ahead = step - self.fit_step
        return float(self.path[0][ahead]), float(self.path[1][ahead])
