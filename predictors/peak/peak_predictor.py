"""The peak-predictor interface of [Bashir21] and what its predictors share.

A peak predictor looks at one machine's samples and, for every step t, advertises the peak
usage it expects from the tasks present at t ([Bashir21] §3.2, §4). Its output is aligned with
`MachineSamples.times`. Conventions follow the public reference simulator
(googleinterns/cluster-resource-forecast) exactly:

- A predictor's output at step t has already seen the samples *at* t (the reference updates
  every task's state with the current snapshot before predicting); the oracle at t looks at
  the strictly later steps (see peak_oracle.py), so neither sees the other's data.
- Warm-up: a task is *cold* until its current run has min_num_samples samples, and a cold
  task counts at its current limit. The reference promotes a task only when it sees the
  task's second or later sample, so a run's first sample is always cold: warm means
  run_position >= max(min_num_samples, 2).
- A step without warm tasks predicts 0 for the warm part (the reference would otherwise call
  numpy on an empty list).
"""

import abc

import numpy as np

from predictors.peak.machine_samples import MachineSamples


class PeakPredictor(abc.ABC):
    """Predicts the future peak usage of a machine at each of its steps."""

    @abc.abstractmethod
    def predict(self, samples: MachineSamples) -> np.ndarray:
        """The advertised peak at each step: float64[T] (NaN where nothing is advertised)."""


class CombiningPredictor(PeakPredictor):
    """The element-wise combination of several predictors' outputs (the decorators).

    Subclasses set `combine`: a numpy reduction called as combine(outputs, axis=0)."""

    combine = None

    def __init__(self, predictors):
        if not predictors:
            raise ValueError(f"{type(self).__name__} needs at least one predictor")
        self.predictors = list(predictors)

    def predict(self, samples: MachineSamples) -> np.ndarray:
        return type(self).combine([p.predict(samples) for p in self.predictors], axis=0)


class WarmupPeakPredictor(PeakPredictor):
    """A predictor that predicts warm tasks and counts cold tasks at their limit.

    Subclasses implement `_predict_warm`, the prediction for the warm tasks only.
    """

    def __init__(self, min_num_samples: int):
        if min_num_samples < 0:
            raise ValueError(f"min_num_samples must be >= 0, got {min_num_samples}")
        self.min_num_samples = min_num_samples

    @property
    def min_warm_samples(self) -> int:
        """Run length from which a task is warm (see the module docstring)."""
        return max(self.min_num_samples, 2)

    def predict(self, samples: MachineSamples) -> np.ndarray:
        warm = samples.run_position >= self.min_warm_samples
        cold_limit = samples.per_step_sum(np.where(warm, 0.0, samples.limit))
        return self._predict_warm(samples, warm) + cold_limit

    @abc.abstractmethod
    def _predict_warm(self, samples: MachineSamples, warm: np.ndarray) -> np.ndarray:
        """Peak of the warm tasks (`warm`: bool[S]) at each step: float64[T]."""


class PerTaskPeakPredictor(WarmupPeakPredictor):
    """A warm-up predictor whose machine peak is a sum over tasks, each task's share a function
    of its own samples only (RC-like, per-task max and mean).

    `sample_peaks` gives every sample's share, so that a replay that moves tasks between
    machines (the placement replay's admission, policies/replay/admission.py) sums the shares
    of any set of tasks without predicting a machine again. Subclasses implement
    `_task_peaks`.
    """

    def sample_peaks(self, samples: MachineSamples) -> np.ndarray:
        """Each sample's share of its step's peak: float64[S] (a cold task's is its limit)."""
        warm = samples.run_position >= self.min_warm_samples
        return np.where(warm, self._task_peaks(samples, warm), samples.limit)

    def _predict_warm(self, samples: MachineSamples, warm: np.ndarray) -> np.ndarray:
        return samples.per_step_sum(np.where(warm, self._task_peaks(samples, warm), 0.0))

    @abc.abstractmethod
    def _task_peaks(self, samples: MachineSamples, warm: np.ndarray) -> np.ndarray:
        """Each warm sample's share (float64[S]; any value where `warm` is False)."""


class PercentileHistoryPredictor(WarmupPeakPredictor):
    """Shared knobs of the predictors that take a percentile over a sample history.

    Args:
      percentile: k, in [0, 100] (numpy 'linear'; larger values are clamped to 100).
      num_history_samples: history length (samples; 120 = 10 h of 5-minute steps).
      min_num_samples: warm-up length (samples; 24 = 2 h).
      cap_to_limit: cap every sample at its limit first.
    """

    def __init__(self, percentile: float = 100, num_history_samples: int = 120,
                 min_num_samples: int = 24, cap_to_limit: bool = False):
        super().__init__(min_num_samples)
        if percentile < 0 or num_history_samples < 1:
            raise ValueError("need percentile >= 0 and num_history_samples >= 1")
        self.percentile = min(percentile, 100)
        self.num_history_samples = num_history_samples
        self.cap_to_limit = cap_to_limit


def percentile_ranks(percentile: float, count: np.ndarray):
    """Where numpy's default ('linear') percentile reads a sorted array of `count` values.

    Returns (lower, upper, gamma): the result is lerp(sorted[lower], sorted[upper], gamma).
    The float operations are numpy's own, so results match np.percentile bit for bit.
    """
    quantile = np.true_divide(np.float64(percentile), 100)
    count = np.asarray(count, dtype=np.int64)
    virtual = (count - 1) * quantile
    lower = np.minimum(np.floor(virtual), count - 1).astype(np.int64)
    upper = np.minimum(lower + 1, count - 1)
    return lower, upper, virtual - lower


def lerp(lower_value: np.ndarray, upper_value: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """numpy's percentile interpolation, written the same way (exact for gamma >= 0.5 too)."""
    difference = upper_value - lower_value
    return np.where(gamma >= 0.5, upper_value - difference * (1 - gamma),
                    lower_value + difference * gamma)


def sorted_row_percentile(rows: np.ndarray, count: np.ndarray, percentile: float) -> np.ndarray:
    """np.percentile of the first count[r] values of each row r of `rows` (float64[R, W]).

    Values beyond count[r] are ignored. Rows with count 0 give NaN.
    """
    out = np.full(len(rows), np.nan)
    filled = np.flatnonzero(count > 0)
    count = count[filled]
    in_row = np.arange(rows.shape[1])[None, :] < count[:, None]
    ordered = np.sort(np.where(in_row, rows[filled], np.inf), axis=1)
    lower, upper, gamma = percentile_ranks(percentile, count)
    index = np.arange(len(filled))
    out[filled] = lerp(ordered[index, lower], ordered[index, upper], gamma)
    return out


class HistoryForecaster(WarmupPeakPredictor):
    """Forecast + safe-guard buffer on the warm tasks' ratio history ([Pace18] §III-A/B).

    At every step t with warm tasks, the model sees the last `num_history_samples` values of
    the warm tasks' usage-to-limit ratio (`MachineSamples.warm_ratio_history`, oldest first,
    with their step times) and returns a one-step-ahead forecast (mean, variance) of that
    ratio. The predictor advertises, for the warm tasks,

        clip(mean + k2 * uncertainty + k1, 0, 1) * warm_limit

    i.e. forecast + beta with beta = k1 * limit + k2 * uncertainty ([Pace18] §III-B: K1 times
    the request, K2 times the model's predictive variance), in units of the warm tasks'
    current total limit. `uncertainty` is the predictive variance of the ratio as in the
    paper, or its standard deviation (scale-consistent with the mean). The clip keeps the
    advertised peak within [0, limit], as the reference N-sigma predictor does.

    Working on the ratio (as the reference N-sigma predictor does) keeps one fitted model
    meaningful while tasks arrive and leave between refits. Until a model is available, or
    while the history is shorter than `min_fit_samples`, warm tasks count at their limit.

    Subclasses implement `new_schedule`: the per-machine model state that decides when to
    refit (every `refit_every_steps` steps) and how a fitted model is used in between.
    """

    def __init__(self, num_history_samples: int, refit_every_steps: int, min_fit_samples: int,
                 k1: float, k2: float, uncertainty: str, min_num_samples: int,
                 cap_to_limit: bool):
        super().__init__(min_num_samples)
        if uncertainty not in ("variance", "std"):
            raise ValueError(f"uncertainty must be 'variance' or 'std', got {uncertainty!r}")
        if refit_every_steps < 1:
            raise ValueError(f"refit_every_steps must be >= 1, got {refit_every_steps}")
        if not 2 <= min_fit_samples <= num_history_samples:
            raise ValueError("need 2 <= min_fit_samples <= num_history_samples, got "
                             f"{min_fit_samples} and {num_history_samples}")
        self.num_history_samples = num_history_samples
        self.refit_every_steps = refit_every_steps
        self.min_fit_samples = min_fit_samples
        self.k1 = k1
        self.k2 = k2
        self.uncertainty = uncertainty
        self.cap_to_limit = cap_to_limit

    def advertised_ratio(self, mean: float, variance: float) -> float:
        """The buffered ratio the predictor advertises for a (mean, variance) forecast."""
        spread = variance if self.uncertainty == "variance" else np.sqrt(max(variance, 0.0))
        return float(np.clip(mean + self.k2 * spread + self.k1, 0.0, 1.0))

    def _predict_warm(self, samples: MachineSamples, warm: np.ndarray) -> np.ndarray:
        history = samples.warm_ratio_history(self.num_history_samples, self.min_warm_samples,
                                             self.cap_to_limit)
        schedule = self.new_schedule()
        out = np.zeros(samples.num_steps)
        for t in range(samples.num_steps):
            length = int(history.length[t])
            if length == 0:
                continue
            series = history.ratio[t, :length][::-1].copy()
            step_times_us = samples.times[t - length + 1:t + 1]
            forecast = schedule.forecast(t, step_times_us, series)
            ratio = 1.0 if forecast is None else self.advertised_ratio(*forecast)
            out[t] = ratio * history.warm_limit[t]
        return out

    @abc.abstractmethod
    def new_schedule(self):
        """A fresh per-machine object whose forecast(t, step_times_us, series) returns
        (mean, variance) of the next ratio, or None when no forecast is available."""
