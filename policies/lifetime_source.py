"""Where a placement replay gets lifetime predictions, and how it caches repredictions.

A lifetime source answers, for a batch of VMs (indexes into the replay's trace arrays) and
their uptimes, the predicted remaining lifetime:

    predict_remaining_s(vm_index: int64[K], uptime_s: float64[K]) -> float64[K]  (seconds, >= 0)

and says whether its answer for a VM changes with uptime (`repredicts`). Sources:

- `OracleLifetimes`: the true remaining lifetime.
- `NoisyOracleLifetimes`: the true remaining lifetime with the per-VM log10 error of
  predictors.noisy_oracle (paper 001 App. G.1), the same error at every uptime.
- `ModelLifetimes`: any model with `predict_remaining(features, uptime_s)` and its feature
  table, one row per VM of the trace (the uptime-augmented model of paper 000 §3).
- `OneShotLifetimes`: wraps a source and predicts once, at uptime 0; later the remaining
  lifetime is that prediction minus the uptime, floored at 0 (LA, paper 003).
- `ClassifierLifetimes`: a long/short classification at arrival (the LA classifier of paper
  003 §3.2) as one-shot lifetimes on either side of its threshold.

`HostExitCache` keeps the hosts' exit estimates of a repredicting source current the way
paper 000 §5 and 001 App. G.3 describe: a host is repredicted (all its VMs at their current
uptime, in one batch with every other host due) before the next placement decision if a VM
was placed on it or left it, if its exit estimate has passed, or if its last reprediction
is older than `refresh_interval_s`. `refresh_interval_s = 0` repredicts every used host before
every decision (no cache).
"""

import heapq
from typing import Any, Protocol

import numpy as np

from predictors.noisy_oracle import NoisyOracle
from policies.pool import PoolState

US_PER_S = 1_000_000


class LifetimeSource(Protocol):
    repredicts: bool

    def predict_remaining_s(self, vm_index: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        ...


def to_exit_us(now_us: int, remaining_s: np.ndarray) -> np.ndarray:
    """Predicted exit times (int64 us) of VMs with `remaining_s` left at `now_us`."""
    return now_us + np.rint(np.maximum(remaining_s, 0.0) * US_PER_S).astype(np.int64)


class OracleLifetimes:
    """True remaining lifetimes from `lifetime_s` float64[V] (censored VMs: see the replay)."""

    repredicts = False

    def __init__(self, lifetime_s: np.ndarray):
        self._lifetime_s = np.asarray(lifetime_s, dtype=np.float64)

    def predict_remaining_s(self, vm_index: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        return np.maximum(self._lifetime_s[vm_index] - uptime_s, 0.0)


class NoisyOracleLifetimes:
    """Noisy-oracle remaining lifetimes; deterministic for (`lifetime_s`, accuracy, seed)."""

    repredicts = True

    def __init__(self, lifetime_s: np.ndarray, accuracy: float, seed: int = 0):
        self._lifetime_s = np.asarray(lifetime_s, dtype=np.float64)
        self._oracle = NoisyOracle(accuracy, seed)
        self._log10_error = self._oracle.log10_errors(len(self._lifetime_s))

    def predict_remaining_s(self, vm_index: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        remaining_s = np.maximum(self._lifetime_s[vm_index] - uptime_s, 0.0)
        return self._oracle.apply(remaining_s, self._log10_error[vm_index])


def take_rows(features: Any, vm_index: np.ndarray) -> Any:
    """Rows `vm_index` of a feature table: pandas DataFrame, Arrow table, dict of arrays
    or 2-D array."""
    if hasattr(features, "iloc"):
        return features.iloc[vm_index]
    if hasattr(features, "take"):
        return features.take(vm_index)
    if isinstance(features, dict):
        return {name: np.asarray(column)[vm_index] for name, column in features.items()}
    return np.asarray(features)[vm_index]


class ModelLifetimes:
    """Adapter for a trained model: `model.predict_remaining(feature_rows, uptime_s)` returns
    remaining lifetimes in seconds; `features` has one row per VM of the trace, in order."""

    repredicts = True

    def __init__(self, model: Any, features: Any):
        self._model = model
        self._features = features

    def predict_remaining_s(self, vm_index: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        rows = take_rows(self._features, vm_index)
        remaining_s = np.asarray(self._model.predict_remaining(rows, uptime_s), np.float64)
        return np.maximum(remaining_s, 0.0)


class OneShotLifetimes:
    """Predicts each VM once, at uptime 0, with `source`; `num_vms` is the trace's length."""

    repredicts = False

    def __init__(self, source: LifetimeSource, num_vms: int):
        self._source = source
        self._lifetime_s = np.full(num_vms, np.nan)

    def predict_remaining_s(self, vm_index: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        vm_index = np.asarray(vm_index, dtype=np.int64)
        missing = np.unique(vm_index[np.isnan(self._lifetime_s[vm_index])])
        if len(missing):
            self._lifetime_s[missing] = self._source.predict_remaining_s(
                missing, np.zeros(len(missing)))
        return np.maximum(self._lifetime_s[vm_index] - uptime_s, 0.0)


class ClassifierLifetimes:
    """One-shot lifetimes from a long-lived classification: `long_lived` bool[V] per VM.

    A classifier says only on which side of `threshold_s` a lifetime lies, so a VM predicted
    long lives `long_factor` * threshold and a short one threshold / `long_factor` (seconds).
    With a threshold equal to LA-Binary's, LA-Binary sees exactly the classifier's classes;
    policies with finer classes see two lifetimes only.
    """

    repredicts = False

    def __init__(self, long_lived: np.ndarray, threshold_s: float, long_factor: float = 2.0):
        if threshold_s <= 0 or long_factor <= 1:
            raise ValueError("threshold_s must be > 0 and long_factor > 1")
        self._lifetime_s = np.where(np.asarray(long_lived, dtype=bool),
                                    threshold_s * long_factor, threshold_s / long_factor)

    def predict_remaining_s(self, vm_index: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        return np.maximum(self._lifetime_s[vm_index] - uptime_s, 0.0)


class HostExitCache:
    """Batched, cached repredictions of host exit estimates for a repredicting source.

    Args:
      source: the lifetime source.
      arrival_us: int64[V] arrival times of the trace's VMs (uptime = now - arrival).
      refresh_interval_s: repredict an unchanged host at least this often (0: always).
    """

    def __init__(self, source: LifetimeSource, arrival_us: np.ndarray, refresh_interval_s: float):
        if refresh_interval_s < 0:
            raise ValueError(f"refresh_interval_s must be >= 0, got {refresh_interval_s}")
        self._source = source
        self._arrival_us = arrival_us
        self._interval_us = int(refresh_interval_s * US_PER_S)
        self.num_predictions = 0
        self.num_batches = 0

    def bind(self, pool: PoolState) -> None:
        self._pool = pool
        self._dirty = set(h for h in range(pool.num_hosts) if pool.host_vms[h])
        self._due_us = [None] * pool.num_hosts
        self._due = []
        self._exits = []

    def touch(self, host: int) -> None:
        """A VM was placed on or left `host`."""
        self._dirty.add(host)

    def refresh(self, now_us: int) -> list:
        """Repredicts every host that is due; returns the hosts whose exit estimate changed."""
        pool = self._pool
        if self._interval_us == 0:
            hosts = [h for h in range(pool.num_hosts) if pool.host_vms[h]]
        else:
            hosts = self._dirty
            due, due_us = self._due, self._due_us
            while due and due[0][0] <= now_us:
                time_us, host = heapq.heappop(due)
                if due_us[host] == time_us:
                    hosts.add(host)
            expired, exit_us = self._exits, pool.host_exit_us
            while expired and expired[0][0] < now_us:
                time_us, host = heapq.heappop(expired)
                if exit_us[host] == time_us:
                    hosts.add(host)
            hosts = sorted(h for h in hosts if pool.host_vms[h])
            self._dirty = set()
        if not hosts:
            return []
        vms = [list(pool.host_vms[h]) for h in hosts]
        vm_index = np.fromiter((vm for host_vms in vms for vm in host_vms), np.int64)
        uptime_s = (now_us - self._arrival_us[vm_index]) / US_PER_S
        exits_us = to_exit_us(now_us, self._source.predict_remaining_s(vm_index, uptime_s))
        self.num_predictions += len(vm_index)
        self.num_batches += 1
        exits_us = exits_us.tolist()
        changed = []
        start = 0
        for host, host_vms in zip(hosts, vms):
            end = start + len(host_vms)
            old_exit = pool.host_exit_us[host]
            pool.set_predicted_exits(host, host_vms, exits_us[start:end])
            start = end
            new_exit = pool.host_exit_us[host]
            if new_exit != old_exit:
                changed.append(host)
            if self._interval_us:
                self._due_us[host] = now_us + self._interval_us
                heapq.heappush(self._due, (now_us + self._interval_us, host))
                heapq.heappush(self._exits, (new_exit, host))
        self._compact()
        return changed

    def _compact(self) -> None:
        """Drops stale heap entries once they outnumber the hosts (memory ~ hosts)."""
        pool = self._pool
        if len(self._exits) > 4 * pool.num_hosts:
            self._exits = [(pool.host_exit_us[h], h) for h in range(pool.num_hosts)
                           if pool.host_vms[h]]
            heapq.heapify(self._exits)
        if len(self._due) > 4 * pool.num_hosts:
            self._due = [(t, h) for h, t in enumerate(self._due_us) if t is not None]
            heapq.heapify(self._due)
