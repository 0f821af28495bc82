"""Gaussian-process forecaster with a history-dependent kernel ([Pace18] §III-A.2, §III-B).

The warm tasks' usage-to-limit ratio y (`HistoryForecaster`) is modelled as
y_t = f(y_{t-1}, ..., y_{t-h}) + noise (eq. 4), on patterns x~_t = [x_t, y_{t-h}, ...,
y_{t-1}] with x_t the step's time (eq. 5), with a squared-exponential kernel (eq. 6), one
length scale for the time and one shared by the h history coordinates:

    k(a, b) = s_f^2 exp(-(a_0 - b_0)^2 / (2 l_t^2) - |a_1: - b_1:|^2 / (2 l_h^2)).

The forecast is the posterior mean and variance of f (without the observation noise) at the
next pattern (eq. 7-8) given the last num_history_samples ratios. Hyperparameters (s_f, l_t,
l_h, noise) maximize the exact log marginal likelihood (L-BFGS-B with its gradient) every
`refit_every_steps` steps, from the previous fit; the posterior is recomputed at every step.
Deviation: targets are centred on their mean under the zero-mean prior (and the mean added
back), so that unfamiliar patterns revert to the recent mean usage rather than to zero.
"""

import math

import numba
import numpy as np
from scipy import optimize
from scipy.spatial import distance

from predictors.peak.peak_predictor import HistoryForecaster

US_PER_HOUR = 3.6e9
# log bounds of (s_f, l_t [hours], l_h [ratio], noise std [ratio]).
LOG_BOUNDS = np.log([(1e-4, 10.0), (0.05, 1e4), (1e-3, 1e2), (1e-4, 1.0)])
JITTER = 1e-10


class GaussianProcessForecaster(HistoryForecaster):
    """GP forecast + k1 * limit + k2 * uncertainty.

    Args:
      pattern_length: h, the number of past ratios in a pattern ([Pace18]: ten).
      num_history_samples: ratios the GP is trained on (N = num_history_samples - h patterns).
      refit_every_steps: steps between hyperparameter fits.
      min_fit_samples: shortest history used (> pattern_length + 1).
      step_s: time to the forecast step (seconds after the last sample).
      k1, k2, uncertainty, min_num_samples, cap_to_limit: see HistoryForecaster.
    """

    def __init__(self, pattern_length: int = 10, num_history_samples: int = 120,
                 refit_every_steps: int = 12, min_fit_samples: int = 24, step_s: float = 300,
                 k1: float = 0.05, k2: float = 3.0, uncertainty: str = "variance",
                 min_num_samples: int = 24, cap_to_limit: bool = False):
        super().__init__(num_history_samples, refit_every_steps, min_fit_samples, k1, k2,
                         uncertainty, min_num_samples, cap_to_limit)
        if not 1 <= pattern_length <= min_fit_samples - 2:
            raise ValueError("need 1 <= pattern_length <= min_fit_samples - 2 (two patterns)")
        self.pattern_length = pattern_length
        self.step_s = step_s

    def patterns(self, step_times_us: np.ndarray, series: np.ndarray):
        """Training patterns, targets and the next step's pattern (eq. 5).

        Args: step_times_us int64[n] and series float64[n], oldest first.
        Returns (inputs float64[n - h, h + 1], targets float64[n - h], query float64[h + 1]);
        times are in hours relative to the last sample.
        """
        h = self.pattern_length
        hours = (step_times_us - step_times_us[-1]) / US_PER_HOUR
        lagged = np.lib.stride_tricks.sliding_window_view(series, h)
        inputs = np.column_stack([hours[h:], lagged[:-1]])
        query = np.concatenate([[self.step_s * 1e6 / US_PER_HOUR], series[-h:]])
        return inputs, series[h:], query

    @staticmethod
    def _squared_distances(a: np.ndarray, b: np.ndarray):
        time = (a[:, None, 0] - b[None, :, 0]) ** 2
        return time, distance.cdist(a[:, 1:], b[:, 1:], "sqeuclidean")

    @staticmethod
    def negative_log_evidence(log_params, time_sq, history_sq, centred):
        """-log p(y | X, params) and its gradient float64[4] w.r.t. the log parameters
        ((inf, zeros) where the covariance is not positive definite)."""
        return _negative_log_evidence(np.asarray(log_params, np.float64), time_sq, history_sq,
                                      centred)

    def fit_hyperparameters(self, step_times_us: np.ndarray, series: np.ndarray, start=None):
        """Evidence-maximizing log (s_f, l_t, l_h, noise) for one history, or None.

        `start`: log parameters to start from (the previous fit); by default a guess from the
        spread of the targets (10 h time scale).
        """
        inputs, targets, _ = self.patterns(step_times_us, series)
        time_sq, history_sq = self._squared_distances(inputs, inputs)
        centred = targets - targets.mean()
        if start is None:
            spread = max(float(centred.std()), 1e-3)
            start = np.log([spread, 10.0, 0.1, 0.1 * spread])
        start = np.clip(start, LOG_BOUNDS[:, 0], LOG_BOUNDS[:, 1])
        result = optimize.minimize(self.negative_log_evidence, start, jac=True,
                                   args=(time_sq, history_sq, centred), method="L-BFGS-B",
                                   bounds=LOG_BOUNDS)
        return result.x if np.all(np.isfinite(result.x)) and np.isfinite(result.fun) else None

    def posterior(self, log_params, step_times_us: np.ndarray, series: np.ndarray):
        """Posterior (mean, variance) of f at the next pattern (eq. 7-8)."""
        inputs, targets, query = self.patterns(step_times_us, series)
        time_sq, history_sq = self._squared_distances(inputs, inputs)
        query_time_sq, query_history_sq = self._squared_distances(query[None, :], inputs)
        offset = targets.mean()
        mean, variance = _posterior(np.asarray(log_params, np.float64), time_sq, history_sq,
                                    targets - offset, query_time_sq[0], query_history_sq[0])
        return float(offset + mean), variance

    def new_schedule(self) -> "GaussianProcessSchedule":
        return GaussianProcessSchedule(self)


class GaussianProcessSchedule:
    """Per-machine hyperparameter refit schedule of a GaussianProcessForecaster."""

    def __init__(self, forecaster: GaussianProcessForecaster):
        self.forecaster = forecaster
        self.fit_step = None
        self.log_params = None

    def forecast(self, step: int, step_times_us: np.ndarray, series: np.ndarray):
        """(mean, variance) of the ratio after `step`, or None; call with increasing steps."""
        if len(series) < self.forecaster.min_fit_samples:
            return None
        if self.log_params is None or step - self.fit_step >= self.forecaster.refit_every_steps:
            fitted = self.forecaster.fit_hyperparameters(step_times_us, series, self.log_params)
            if fitted is not None:
                self.log_params, self.fit_step = fitted, step
        if self.log_params is None:
            return None
        return self.forecaster.posterior(self.log_params, step_times_us, series)


# Compiled kernels: a fit evaluates the evidence about 7 times on matrices of a few dozen
# rows, where numpy's and LAPACK's per-call costs would be most of the time.

@numba.njit(cache=True)
def _signal_kernel(log_params, time_sq, history_sq):
    """s_f^2 exp(-time_sq / (2 l_t^2) - history_sq / (2 l_h^2)), elementwise."""
    signal_var = math.exp(2 * log_params[0])
    time_scale_sq = math.exp(2 * log_params[1])
    history_scale_sq = math.exp(2 * log_params[2])
    return signal_var * np.exp(-0.5 * (time_sq / time_scale_sq + history_sq / history_scale_sq))


@numba.njit(cache=True)
def _cholesky(covariance):
    """Lower Cholesky factor of `covariance` (n, n), or an empty array when it is not
    positive definite (a non-positive or NaN pivot, as LAPACK's potrf)."""
    n = covariance.shape[0]
    factor = np.zeros((n, n))
    for j in range(n):
        pivot = covariance[j, j]
        for k in range(j):
            pivot -= factor[j, k] * factor[j, k]
        if not pivot > 0.0:
            return np.zeros((0, 0))
        diagonal = math.sqrt(pivot)
        factor[j, j] = diagonal
        for i in range(j + 1, n):
            value = covariance[i, j]
            for k in range(j):
                value -= factor[i, k] * factor[j, k]
            factor[i, j] = value / diagonal
    return factor


@numba.njit(cache=True)
def _forward(factor, b):
    """x with factor @ x = b (factor lower triangular)."""
    n = len(b)
    x = np.empty(n)
    for i in range(n):
        value = b[i]
        for k in range(i):
            value -= factor[i, k] * x[k]
        x[i] = value / factor[i, i]
    return x


@numba.njit(cache=True)
def _cho_solve(factor, b):
    """x with (factor @ factor.T) @ x = b."""
    x = _forward(factor, b)
    for i in range(len(b) - 1, -1, -1):
        value = x[i]
        for k in range(i + 1, len(b)):
            value -= factor[k, i] * x[k]
        x[i] = value / factor[i, i]
    return x


@numba.njit(cache=True)
def _covariance(log_params, time_sq, history_sq):
    """(signal kernel, signal kernel + (noise variance + JITTER) I)."""
    signal_kernel = _signal_kernel(log_params, time_sq, history_sq)
    covariance = signal_kernel.copy()
    noise_var = math.exp(2 * log_params[3])
    for i in range(covariance.shape[0]):
        covariance[i, i] += noise_var + JITTER
    return signal_kernel, covariance


@numba.njit(cache=True)
def _negative_log_evidence(log_params, time_sq, history_sq, centred):
    """`GaussianProcessForecaster.negative_log_evidence`, compiled."""
    n = len(centred)
    gradient = np.zeros(4)
    signal_kernel, covariance = _covariance(log_params, time_sq, history_sq)
    factor = _cholesky(covariance)
    if factor.shape[0] == 0:
        return np.inf, gradient
    alpha = _cho_solve(factor, centred)
    value = 0.5 * n * math.log(2 * math.pi)
    for i in range(n):
        value += 0.5 * centred[i] * alpha[i] + math.log(factor[i, i])
    # The inverse covariance, from the factor's inverse: C^-1 = L^-T L^-1.
    inverse_factor = np.zeros((n, n))
    for column in range(n):
        unit = np.zeros(n)
        unit[column] = 1.0
        inverse_factor[:, column] = _forward(factor, unit)
    inverse = inverse_factor.T @ inverse_factor
    time_scale_sq = math.exp(2 * log_params[1])
    history_scale_sq = math.exp(2 * log_params[2])
    noise_var = math.exp(2 * log_params[3])
    # d(-log evidence)/d(log param) = -1/2 sum((alpha alpha^T - C^-1) * dC/d(log param)).
    for i in range(n):
        for j in range(n):
            inner = alpha[i] * alpha[j] - inverse[i, j]
            kernel = signal_kernel[i, j]
            gradient[0] -= inner * kernel
            gradient[1] -= 0.5 * inner * kernel * time_sq[i, j] / time_scale_sq
            gradient[2] -= 0.5 * inner * kernel * history_sq[i, j] / history_scale_sq
        gradient[3] -= (alpha[i] * alpha[i] - inverse[i, i]) * noise_var
    return value, gradient


@numba.njit(cache=True)
def _posterior(log_params, time_sq, history_sq, centred, query_time_sq, query_history_sq):
    """(mean of the centred targets' f, variance of f) at the query pattern (eq. 7-8)."""
    _, covariance = _covariance(log_params, time_sq, history_sq)
    factor = _cholesky(covariance)
    if factor.shape[0] == 0:
        raise np.linalg.LinAlgError("the posterior's covariance is not positive definite")
    cross = _signal_kernel(log_params, query_time_sq, query_history_sq)
    mean = cross @ _cho_solve(factor, centred)
    explained = _forward(factor, cross)
    return mean, max(math.exp(2 * log_params[0]) - explained @ explained, 0.0)
