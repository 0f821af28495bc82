"""ARIMA(0, 1, 1) forecasts of a series from every fit start at once: the ARIMA of [Pace18]'s
evaluation simulator (the Workday timeseries-forecast library's ARIMA with p = 0, d = 1,
q = 1, fitted on up to 2,000 past observations at every forecast).

Model: y_t - y_{t-1} = e_t + theta e_{t-1}, e white noise of variance sigma^2. theta is fitted
by conditional sum of squares (residuals e_t = d_t - theta e_{t-1} from e = 0 before the
first difference) over the differences of the history, on a grid of THETA_GRID; sigma^2 =
that sum / the number of differences. The forecast is flat, y_{s-1} + theta e_{s-1}, with
variance sigma^2 (1 + (h - 1)(1 + theta)^2) at lead h >= 1. A history longer than the
series' first `max_history` observations keeps its residuals' recursion from the series'
start (theta < 1 in absolute value forgets it geometrically).
"""

import numpy as np
from scipy.signal import lfilter

THETA_GRID = np.round(np.linspace(-0.98, 0.98, 99), 10)


def residuals(series: np.ndarray) -> np.ndarray:
    """float64[G, L - 1] the residuals e_t of the series' differences under every theta of
    THETA_GRID."""
    diffs = np.diff(series)
    return np.stack([lfilter([1.0], [1.0, theta], diffs) for theta in THETA_GRID])


def forecast_from_starts(series: np.ndarray, starts: np.ndarray, max_history: int,
                         horizon_steps: int):
    """(mean, variance) float64[F, horizon_steps]: the forecasts of series[s:s + horizon]
    from series[max(0, s - max_history):s] for every start s of `starts` (int64[F], each
    >= 2, ascending)."""
    starts = np.asarray(starts, dtype=np.int64)
    if not len(starts):
        return np.zeros((0, horizon_steps)), np.zeros((0, horizon_steps))
    errors = residuals(series[:starts[-1]])
    summed = np.concatenate([np.zeros((len(THETA_GRID), 1)), np.cumsum(errors ** 2, axis=1)],
                            axis=1)
    last = starts - 2  # the index of the history's last difference
    first = np.maximum(starts - max_history, 0)  # its first difference's index
    css = summed[:, last + 1] - summed[:, first]  # [G, F]
    best = np.argmin(css, axis=0)
    theta = THETA_GRID[best]
    count = last + 1 - first
    sigma2 = css[best, np.arange(len(starts))] / count
    mean = series[starts - 1] + theta * errors[best, last]
    lead = np.arange(horizon_steps)[None, :]
    variance = sigma2[:, None] * (1.0 + lead * (1.0 + theta[:, None]) ** 2)
    return np.repeat(mean[:, None], horizon_steps, axis=1), variance
