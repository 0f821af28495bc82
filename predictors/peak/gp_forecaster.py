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

import numpy as np
from scipy import linalg, optimize
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
    def _signal_kernel(log_params, time_sq, history_sq):
        signal, time_scale, history_scale = np.exp(log_params[:3])
        return signal ** 2 * np.exp(-0.5 * (time_sq / time_scale ** 2
                                            + history_sq / history_scale ** 2))

    def negative_log_evidence(self, log_params, time_sq, history_sq, centred):
        """-log p(y | X, params) and its gradient w.r.t. the log parameters."""
        signal_kernel = self._signal_kernel(log_params, time_sq, history_sq)
        noise_var = np.exp(2 * log_params[3])
        covariance = signal_kernel + (noise_var + JITTER) * np.eye(len(centred))
        try:
            factor = linalg.cho_factor(covariance, lower=True)
        except linalg.LinAlgError:
            return np.inf, np.zeros(4)
        alpha = linalg.cho_solve(factor, centred)
        value = (0.5 * centred @ alpha + np.log(np.diag(factor[0])).sum()
                 + 0.5 * len(centred) * np.log(2 * np.pi))
        inverse, _ = linalg.lapack.dpotri(factor[0], lower=True)
        inverse = np.tril(inverse) + np.tril(inverse, -1).T
        inner = np.outer(alpha, alpha) - inverse
        time_scale, history_scale = np.exp(log_params[1:3])
        derivatives = (2 * signal_kernel,
                       signal_kernel * time_sq / time_scale ** 2,
                       signal_kernel * history_sq / history_scale ** 2,
                       2 * noise_var * np.eye(len(centred)))
        gradient = np.array([-0.5 * np.sum(inner * d) for d in derivatives])
        return value, gradient

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
        noise_var = np.exp(2 * log_params[3])
        covariance = (self._signal_kernel(log_params, time_sq, history_sq)
                      + (noise_var + JITTER) * np.eye(len(targets)))
        factor = linalg.cho_factor(covariance, lower=True)
        offset = targets.mean()
        query_time_sq, query_history_sq = self._squared_distances(query[None, :], inputs)
        cross = self._signal_kernel(log_params, query_time_sq, query_history_sq)[0]
        mean = offset + cross @ linalg.cho_solve(factor, targets - offset)
        explained = linalg.solve_triangular(factor[0], cross, lower=True)
        variance = max(float(np.exp(2 * log_params[0]) - explained @ explained), 0.0)
        return float(mean), variance

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
