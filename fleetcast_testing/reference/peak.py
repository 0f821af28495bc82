"""Per-step reference implementations of the peak oracle and the peak predictors.

They recompute everything from the raw samples one snapshot at a time, the way the public
reference simulator (googleinterns/cluster-resource-forecast) does: the oracle streams the
samples, caches snapshots until the horizon has passed, filters the future snapshots to the
tasks of the current one and sums them; the predictors keep per-task state (cold/warm sample
counts, history deques) that is dropped as soon as a task is missing from a snapshot. They are
slow (O(T * horizon * tasks) for the oracle) and exist to check the vectorized predictors.
"""

import collections
import statistics

import numpy as np

from predictors.peak.machine_samples import MachineSamples
from predictors.peak.peak_oracle import REFERENCE_STEP_S


def snapshots(samples: MachineSamples) -> list[list[tuple[int, float, float]]]:
    """The samples of each step as [(task, usage, limit), ...]."""
    out = [[] for _ in range(samples.num_steps)]
    for step, task, usage, limit in zip(samples.step.tolist(), samples.task.tolist(),
                                        samples.usage.tolist(), samples.limit.tolist()):
        out[step].append((task, usage, limit))
    return out


class ReferenceOracle:
    """Streaming peak oracle; NaN at the steps it never emits."""

    def __init__(self, horizon_s=86400, percentile=100, cap_to_limit=False,
                 step_s=REFERENCE_STEP_S):
        self.horizon_us = round(horizon_s * 1_000_000)
        self.step_us = round(step_s * 1_000_000)
        self.percentile = min(percentile, 100)
        self.cap_to_limit = cap_to_limit

    def predict(self, samples: MachineSamples) -> np.ndarray:
        snaps = snapshots(samples)
        times = samples.times.tolist()
        stream = [(step, times[step]) for step in samples.step.tolist()] + [(None, np.inf)]
        out = np.full(samples.num_steps, np.nan)
        cache = collections.deque()
        current_step, current_time = stream[0]
        threshold = current_time + self.horizon_us
        for step, time in stream:
            if time > current_time:
                cache.append(current_step)
                current_step, current_time = step, time
            if time > threshold:
                if not cache:
                    continue  # the public reference raises IndexError here
                emitted = cache.popleft()
                out[emitted] = self._peak(snaps[emitted], [snaps[s] for s in cache])
                if self.horizon_us == 0:
                    threshold = current_time
                else:
                    threshold = times[emitted] + self.horizon_us + self.step_us
        return out

    def _peak(self, current, future) -> float:
        limits = {task: limit for task, _, limit in current}
        totals = []
        for snap in future:
            kept = [(task, usage) for task, usage, _ in snap if task in limits]
            if self.cap_to_limit:
                kept = [(task, min(usage, limits[task])) for task, usage in kept]
            totals.append(sum(usage for _, usage in kept))
        peak = np.nanpercentile(np.array(totals), self.percentile) if totals else np.nan
        return sum(limits.values()) if np.isnan(peak) else float(peak)


class _TaskEntry:
    def __init__(self, state):
        self.state = state
        self.count = 1


class _StatefulReference:
    """Snapshot-by-snapshot warm/cold bookkeeping of the public StatefulPredictor."""

    def __init__(self, min_num_samples):
        self.min_num_samples = min_num_samples

    def predict(self, samples: MachineSamples) -> np.ndarray:
        warm, cold, limits = {}, {}, {}
        out = []
        times = samples.times.tolist()
        for step, snap in enumerate(snapshots(samples)):
            present = []
            for task, usage, limit in snap:
                if task in warm:
                    self.update(warm[task].state, usage, limit, times[step])
                    warm[task].count += 1
                elif task in cold:
                    self.update(cold[task].state, usage, limit, times[step])
                    cold[task].count += 1
                    if cold[task].count >= self.min_num_samples:
                        warm[task] = cold.pop(task)
                else:
                    cold[task] = _TaskEntry(self.new_state())
                    self.update(cold[task].state, usage, limit, times[step])
                limits[task] = limit
                present.append(task)
            warm = {task: warm[task] for task in present if task in warm}
            cold = {task: cold[task] for task in present if task in cold}
            limits = {task: limits[task] for task in present}
            peak = self.predict_warm(step, list(warm.values())) if warm else 0.0
            out.append(peak + sum(limits[task] for task in cold))
        return np.array(out)


class _HistoryState:
    def __init__(self, size):
        self.usage = collections.deque(maxlen=size)
        self.limit = collections.deque(maxlen=size)
        self.time = collections.deque(maxlen=size)


class _MachineRatioReference(_StatefulReference):
    """Builds the warm tasks' ratio history (newest first) like the reference N-sigma."""

    def __init__(self, min_num_samples, num_history_samples, cap_to_limit):
        super().__init__(min_num_samples)
        self.num_history_samples = num_history_samples
        self.cap_to_limit = cap_to_limit

    def new_state(self):
        return _HistoryState(self.num_history_samples)

    def update(self, state, usage, limit, time):
        state.usage.appendleft(min(usage, limit) if self.cap_to_limit else usage)
        state.limit.appendleft(limit)
        state.time.appendleft(time)

    def ratio_history(self, entries):
        ratios, times = [], []
        for age in range(self.num_history_samples):
            total_usage = total_limit = 0.0
            count = 0
            for entry in entries:
                if age < len(entry.state.usage):
                    total_usage += entry.state.usage[age]
                    total_limit += entry.state.limit[age]
                    time = entry.state.time[age]
                    count += 1
            if count == 0:
                continue
            ratios.append(total_usage / total_limit if total_limit > 0 else 0.0)
            times.append(time)
        return ratios, times

    @staticmethod
    def current_limit(entries):
        return sum(entry.state.limit[0] for entry in entries)


class ReferenceNSigma(_MachineRatioReference):
    """Step-by-step N-sigma: min(1, mean + n stdev of the warm ratio history) × the warm limit."""

    def __init__(self, n=5, num_history_samples=120, min_num_samples=24, cap_to_limit=False):
        super().__init__(min_num_samples, num_history_samples, cap_to_limit)
        self.n = n

    def predict_warm(self, step, entries):
        ratios, _ = self.ratio_history(entries)
        bound = min(1.0, np.mean(ratios) + self.n * statistics.stdev(ratios))
        return bound * self.current_limit(entries)


class ReferencePerMachinePercentile(_MachineRatioReference):
    """Step-by-step per-machine percentile of the warm ratio history × the warm limit."""

    def __init__(self, percentile=100, num_history_samples=120, min_num_samples=24,
                 cap_to_limit=False):
        super().__init__(min_num_samples, num_history_samples, cap_to_limit)
        self.percentile = min(percentile, 100)

    def predict_warm(self, step, entries):
        ratios, _ = self.ratio_history(entries)
        value = min(1.0, np.percentile(np.array(ratios), self.percentile))
        return value * self.current_limit(entries)


class ReferenceForecaster(_MachineRatioReference):
    """Runs a HistoryForecaster's per-machine schedule on the reference ratio history."""

    def __init__(self, forecaster):
        super().__init__(forecaster.min_num_samples, forecaster.num_history_samples,
                         forecaster.cap_to_limit)
        self.forecaster = forecaster

    def predict(self, samples: MachineSamples) -> np.ndarray:
        self.schedule = self.forecaster.new_schedule()
        return super().predict(samples)

    def predict_warm(self, step, entries):
        ratios, times = self.ratio_history(entries)
        forecast = self.schedule.forecast(step, np.array(times[::-1], dtype=np.int64),
                                          np.array(ratios[::-1]))
        ratio = 1.0 if forecast is None else self.forecaster.advertised_ratio(*forecast)
        return ratio * self.current_limit(entries)


class ReferenceRcLike(_StatefulReference):
    """Step-by-step RC-like: the sum over warm tasks of a percentile of their usage-to-limit
    ratios × their current limit."""

    def __init__(self, percentile=100, num_history_samples=120, min_num_samples=24,
                 cap_to_limit=False):
        super().__init__(min_num_samples)
        self.percentile = min(percentile, 100)
        self.num_history_samples = num_history_samples
        self.cap_to_limit = cap_to_limit

    def new_state(self):
        return _HistoryState(self.num_history_samples)

    def update(self, state, usage, limit, time):
        state.usage.append(min(usage, limit) if self.cap_to_limit else usage)
        state.limit.append(limit)

    def predict_warm(self, step, entries):
        total = 0.0
        for entry in entries:
            ratios = [usage / limit for usage, limit in zip(entry.state.usage, entry.state.limit)]
            total += np.percentile(np.array(ratios), self.percentile) * entry.state.limit[-1]
        return total


class _RunningState:
    def __init__(self):
        self.value = 0.0


class ReferenceMax(_StatefulReference):
    """Step-by-step sum over warm tasks of their largest usage in the current run."""

    def __init__(self, min_num_samples=24, cap_to_limit=False):
        super().__init__(min_num_samples)
        self.cap_to_limit = cap_to_limit

    def new_state(self):
        return _RunningState()

    def update(self, state, usage, limit, time):
        state.value = max(min(usage, limit) if self.cap_to_limit else usage, state.value)

    def predict_warm(self, step, entries):
        return sum(entry.state.value for entry in entries)


class ReferenceAvg(_StatefulReference):
    """Step-by-step sum over warm tasks of their mean usage in the current run."""

    def __init__(self, min_num_samples=24, cap_to_limit=False):
        super().__init__(min_num_samples)
        self.cap_to_limit = cap_to_limit

    def new_state(self):
        return _RunningState()

    def update(self, state, usage, limit, time):
        state.value += min(usage, limit) if self.cap_to_limit else usage

    def predict_warm(self, step, entries):
        return sum(entry.state.value / entry.count for entry in entries)


class ReferenceBorgDefault:
    """phi * limit of tasks with >= min_num_samples samples in their run, limit otherwise."""

    def __init__(self, phi=0.9, min_num_samples=0):
        self.phi = phi
        self.min_num_samples = min_num_samples

    def predict(self, samples: MachineSamples) -> np.ndarray:
        counts = {}
        out = []
        for snap in snapshots(samples):
            counts = {task: counts.get(task, 0) + 1 for task, _, _ in snap}
            out.append(sum((self.phi if counts[task] >= self.min_num_samples else 1.0) * limit
                           for task, _, limit in snap))
        return np.array(out)


class ReferenceMaxDecorator:
    """Step-by-step maximum of several reference predictors' outputs."""

    def __init__(self, predictors):
        self.predictors = predictors

    def predict(self, samples: MachineSamples) -> np.ndarray:
        outputs = [p.predict(samples) for p in self.predictors]
        return np.array([np.max([o[t] for o in outputs]) for t in range(samples.num_steps)])


class ReferenceAvgDecorator:
    """Step-by-step mean of several reference predictors' outputs."""

    def __init__(self, predictors):
        self.predictors = predictors

    def predict(self, samples: MachineSamples) -> np.ndarray:
        outputs = [p.predict(samples) for p in self.predictors]
        return np.array([np.mean([o[t] for o in outputs]) for t in range(samples.num_steps)])


def gp_negative_log_evidence(log_params, time_sq, history_sq, centred):
    """[Pace18] eq. 6's GP: -log p(y | X, params) and its gradient w.r.t. the log parameters
    (s_f, l_t, l_h, noise std), from the dense inverse and log-determinant of the
    covariance ((inf, zeros) when it is not positive definite)."""
    signal, time_scale, history_scale, noise = np.exp(log_params)
    kernel = signal ** 2 * np.exp(-0.5 * (time_sq / time_scale ** 2
                                          + history_sq / history_scale ** 2))
    n = len(centred)
    covariance = kernel + (noise ** 2 + 1e-10) * np.eye(n)
    sign, log_det = np.linalg.slogdet(covariance)
    if sign <= 0 or np.any(np.linalg.eigvalsh(covariance) <= 0):
        return np.inf, np.zeros(4)
    inverse = np.linalg.inv(covariance)
    alpha = inverse @ centred
    value = 0.5 * centred @ alpha + 0.5 * log_det + 0.5 * n * np.log(2 * np.pi)
    derivatives = (2 * kernel, kernel * time_sq / time_scale ** 2,
                   kernel * history_sq / history_scale ** 2, 2 * noise ** 2 * np.eye(n))
    inner = np.outer(alpha, alpha) - inverse
    return value, np.array([-0.5 * np.trace(inner @ d) for d in derivatives])
