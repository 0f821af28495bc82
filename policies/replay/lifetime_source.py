"""Where a placement replay gets lifetime predictions (`LifetimeSource`), and how it caches
repredictions (`HostExitCache`).

Sources: `OracleLifetimes` (the truth); `NoisyOracleLifetimes` (the truth with a per-VM log10
error, [Ling25ext] App. G.1); `ModelLifetimes` (a model's `predict_remaining` on a feature
table, the uptime-augmented model of [Ling25] §3); `predictors.lifetime.curves.LifetimeCurves`
(the "uptime_model" source: a model's exact lifetime curves, a reprediction a lookup equal to
the model's answer); `OneShotLifetimes` (one prediction at arrival, then that minus the
uptime: LA, [Barbalho23]); `ClassifierLifetimes` (LA's long/short classifier at arrival,
[Barbalho23] §3.2).
"""

import collections
import heapq
import itertools
from typing import Any, Protocol

import numpy as np

from configs.units import US_PER_S
from policies.replay.pool import PoolState
from predictors.lifetime.noisy_oracle import NoisyOracle


class LifetimeSource(Protocol):
    """What a placement replay asks of a lifetime source.

    `predict_remaining_s(vm_index, uptime_s)` takes VMs as int64[K] indexes into the replay's
    trace arrays and their uptimes float64[K] (seconds), and returns their predicted remaining
    lifetimes float64[K] (seconds, >= 0). `repredicts` says whether the answer for a VM
    changes with its uptime.

    A source may also offer `exit_tracker(arrival_us)`, returning None or an object with lists
    `remaining_us` and `until_us` per VM and `advance(vms: list, now_us)`, after which
    `now_us + remaining_us[vm]` is the VM's predicted exit (`to_exit_us`), constant in
    `remaining_us` until `until_us[vm]` (`LifetimeCurves` does: a LightGBM model is a step
    function of the uptime). `HostExitCache` then repredicts host by host without numpy, in
    O(1) plus O(log) per VM placed on the host or moved to its next interval since the last
    reprediction.
    """

    repredicts: bool

    def predict_remaining_s(self, vm_index: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        ...


def to_exit_us(now_us: int, remaining_s: np.ndarray) -> np.ndarray:
    """Predicted exit times (int64 us) of VMs with `remaining_s` left at `now_us`."""
    return now_us + to_remaining_us(remaining_s)


def to_remaining_us(remaining_s: np.ndarray) -> np.ndarray:
    """Remaining lifetimes `remaining_s` (float64, seconds; negative counts as 0) as int64 us,
    rounded to the nearest."""
    return np.rint(np.maximum(remaining_s, 0.0) * US_PER_S).astype(np.int64)


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
        self._factor = 10.0 ** self._oracle.log10_errors(len(self._lifetime_s))

    def predict_remaining_s(self, vm_index: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        # `scale` floors the remaining lifetime at a second, so it is never negative.
        return self._oracle.scale(self._lifetime_s[vm_index] - uptime_s,
                                  self._factor[vm_index])


class ModelLifetimes:
    """Adapter for a trained model: `model.predict_remaining(feature_rows, uptime_s)` returns
    remaining lifetimes in seconds.

    Args:
      model: the model.
      features: one row per VM of the trace, in order: an array (V, ...) of the rows the
        model takes, or a table (pandas DataFrame, Arrow table) that the model's `encode`
        turns into one once here, so each reprediction only takes rows of an array.
    """

    repredicts = True

    def __init__(self, model: Any, features: Any):
        self._model = model
        if hasattr(features, "iloc") or hasattr(features, "column_names"):
            features = model.encode(features)
        self._features = np.asarray(features)

    def predict_remaining_s(self, vm_index: np.ndarray, uptime_s: np.ndarray) -> np.ndarray:
        remaining_s = self._model.predict_remaining(self._features[vm_index], uptime_s)
        return np.maximum(np.asarray(remaining_s, np.float64), 0.0)


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
    """Batched, cached repredictions of the hosts' exit estimates for a repredicting source,
    as [Ling25] §5 and [Ling25ext] App. G.3 describe.

    Before the next placement decision a host is repredicted (all its VMs at their current
    uptime, in one batch with every other host due) if a VM was placed on it or left it, if
    its exit estimate has passed, or if its last reprediction is older than
    `refresh_interval_s`. Bookkeeping per refresh is O(hosts due + their VMs): touched hosts
    are a set, hosts due by age a FIFO queue, hosts whose estimate passes sooner a heap by
    exit time; superseded entries are skipped when they come up.

    Args:
      source: the lifetime source.
      arrival_us: int64[V] arrival times of the trace's VMs (uptime = now - arrival).
      refresh_interval_s: repredict an unchanged host at least this often (seconds; 0:
        every used host before every decision, no cache).
    """

    def __init__(self, source: LifetimeSource, arrival_us: np.ndarray, refresh_interval_s: float):
        if refresh_interval_s < 0:
            raise ValueError(f"refresh_interval_s must be >= 0, got {refresh_interval_s}")
        self._source = source
        self._arrival_us = np.asarray(arrival_us, dtype=np.int64)
        self._interval_us = int(refresh_interval_s * US_PER_S)
        self.num_predictions = 0
        self.num_batches = 0

    @property
    def interval_us(self) -> int:
        """The refresh interval in µs (0: every used host before every decision)."""
        return self._interval_us

    def bind(self, pool: PoolState) -> None:
        self._pool = pool
        make_tracker = getattr(self._source, "exit_tracker", None)
        self._tracker = make_tracker(self._arrival_us) if make_tracker is not None else None
        self._dirty = set(h for h in range(pool.num_hosts) if pool.host_vms[h])
        if self._tracker is not None:
            # Every VM placed so far (the warm-up) is new to the first reprediction.
            new_vms = pool.track_new_vms()
            for host, vms in enumerate(pool.host_vms):
                new_vms[host].extend(vms)
            self._interval_ends = [[] for _ in range(pool.num_hosts)]
        self._due_us = [None] * pool.num_hosts  # when each host's reprediction is due
        self._due = collections.deque()  # (due_us, host), in due order
        self._exits = []  # heap of (host exit estimate at its reprediction, host)
        self._last_us = None

    def touch(self, host: int) -> None:
        """A VM was placed on or left `host`."""
        self._dirty.add(host)

    def refresh(self, now_us: int) -> list:
        """Repredicts every host that is due at `now_us` (non-decreasing from call to call)
        in one batch; returns the hosts whose exit estimate changed, ascending."""
        if self._last_us is not None and now_us < self._last_us:
            raise ValueError(f"refresh at {now_us} after one at {self._last_us}")
        self._last_us = now_us
        hosts = self._hosts_due(now_us)
        if not hosts:
            return []
        if self._tracker is not None:
            changed = self._refresh_tracked(hosts, now_us)
        else:
            changed = self._refresh_batch(hosts, now_us)
        self.num_batches += 1
        if self._interval_us:
            self._schedule(hosts, now_us)
        return changed

    def _refresh_tracked(self, hosts: list, now_us: int) -> list:
        """Repredicts `hosts` with the source's exit tracker; returns those that changed.

        A host's VMs whose remaining lifetime may differ from the value the pool holds are
        those placed since (`new_vms`) and those whose interval ended (popped from the
        host's heap of (interval end, VM); entries of VMs gone or moved on are skipped).
        The pool's values are written here (see `PoolState.exit_base_us`): this runs for
        about every event of a replay.
        """
        pool, tracker = self._pool, self._tracker
        host_vms, host_exit_us, new_vms = pool.host_vms, pool.host_exit_us, pool.new_vms
        exit_base_us, interval_ends = pool.exit_base_us, self._interval_ends
        remaining, until, advance = tracker.remaining_us, tracker.until_us, tracker.advance
        heappush, heappop = heapq.heappush, heapq.heappop
        changed = []
        num_predictions = 0
        for host in hosts:
            vms = host_vms[host]
            ends = interval_ends[host]
            new = new_vms[host]
            if new:
                moved = [vm for vm in new if vm in vms]
                new.clear()
            else:
                moved = []
            while ends and ends[0][0] < now_us:
                end_us, vm = heappop(ends)
                if until[vm] == end_us and vm in vms:
                    moved.append(vm)
            old_exit = host_exit_us[host]
            if moved:
                advance(moved, now_us)
                for vm in moved:
                    vms[vm] = remaining[vm]
                    heappush(ends, (until[vm], vm))
                new_exit = host_exit_us[host] = now_us + max(vms.values())
                if len(ends) > 2 * len(vms) + 16:
                    ends[:] = [(until[vm], vm) for vm in vms]
                    heapq.heapify(ends)
            else:
                new_exit = host_exit_us[host] = old_exit + now_us - exit_base_us[host]
            exit_base_us[host] = now_us
            num_predictions += len(vms)
            if new_exit != old_exit:
                changed.append(host)
        self.num_predictions += num_predictions
        return changed

    def _refresh_batch(self, hosts: list, now_us: int) -> list:
        """Repredicts `hosts` in one `predict_remaining_s` call; returns those that
        changed."""
        pool = self._pool
        vms = [list(pool.host_vms[h]) for h in hosts]
        num_vms = sum(map(len, vms))
        vm_index = np.fromiter(itertools.chain.from_iterable(vms), np.int64, num_vms)
        uptime_s = (now_us - self._arrival_us[vm_index]) / US_PER_S
        remaining_us = to_remaining_us(self._source.predict_remaining_s(vm_index, uptime_s))
        self.num_predictions += num_vms
        remaining_us = remaining_us.tolist()
        # Every VM of the host has a new remaining lifetime from `now_us` on.
        pool_vms, host_exit_us, exit_base_us = pool.host_vms, pool.host_exit_us, pool.exit_base_us
        changed = []
        start = 0
        for host, host_vms in zip(hosts, vms):
            end = start + len(host_vms)
            values = remaining_us[start:end]
            pool_vms[host].update(zip(host_vms, values))
            start = end
            exit_base_us[host] = now_us
            new_exit = now_us + max(values)
            if new_exit != host_exit_us[host]:
                host_exit_us[host] = new_exit
                changed.append(host)
        return changed

    def _hosts_due(self, now_us: int) -> list:
        """The used hosts to repredict at `now_us`, ascending."""
        host_vms = self._pool.host_vms
        if self._interval_us == 0:
            return [h for h in range(self._pool.num_hosts) if host_vms[h]]
        hosts = self._dirty
        self._dirty = set()
        due, due_us = self._due, self._due_us
        while due and due[0][0] <= now_us:
            time_us, host = due.popleft()
            if due_us[host] == time_us:
                hosts.add(host)
        exits, exit_us = self._exits, self._pool.host_exit_us
        while exits and exits[0][0] < now_us:
            time_us, host = heapq.heappop(exits)
            if exit_us[host] == time_us:
                hosts.add(host)
        return sorted(filter(host_vms.__getitem__, hosts))

    def _schedule(self, hosts: list, now_us: int) -> None:
        """Records the repredictions of `hosts` at `now_us`: next due time and, if earlier,
        exit."""
        due_at = now_us + self._interval_us
        due_us, due, exits, exit_us = self._due_us, self._due, self._exits, self._pool.host_exit_us
        for host in hosts:
            due_us[host] = due_at
            due.append((due_at, host))
            if exit_us[host] < due_at:
                heapq.heappush(exits, (exit_us[host], host))
        num_hosts = self._pool.num_hosts
        if len(exits) > 4 * num_hosts:
            host_vms = self._pool.host_vms
            self._exits = [(exit_us[h], h) for h in range(num_hosts) if host_vms[h]]
            heapq.heapify(self._exits)
        if len(due) > 4 * num_hosts:
            self._due = collections.deque(sorted(
                (t, h) for h, t in enumerate(due_us) if t is not None))
