"""Admission by predicted peak in the placement replay, and the usage replayed on its hosts
([Bashir21] §2, §6: a machine takes a task when the predicted peak of its tasks plus the new
request fits; docs/stages/placement.md, "Overcommit-aware placement").

At the end of every usage window k (time grid_start + (k + 1) * step), the replay asks each
host's fortune teller for the peak of the VMs resident then, from their samples up to window
k: exactly what the overcommit stage computes at step k for a machine holding those VMs (a
VM's samples are contiguous, policies/replay/usage.py, so its runs are the same on any host).
A resident without a sample in window k counts at its CPU request. The host's CPU room
becomes capacity - predicted peak; until the next window's end, a placement takes its request
off the room, the exit of a VM placed since gives it back, and the exit of a VM that the
prediction counted gives nothing back (its share is reserved until the next prediction); a
host left empty has its whole capacity. Memory is admitted by request throughout.

The same step records the usage replay: per host, the residents' total limit, the admitted
peak (the teller's, or the total limit when admitting by requests), the scoring oracle's
future peak of those residents, and their usage in window k. Violation, severity and
savings are [Bashir21] §5.1.3's (predictors/peak/overcommit_metrics.py); an overflow is a
window whose usage exceeds the host's CPU capacity.
"""

import copy
from typing import List, NamedTuple, Optional

import numpy as np

from policies.replay.admission_kernels import future_sums, warm_ratio_sums
from policies.replay.pool import PoolState, requested
from policies.replay.usage import VmUsage
from predictors.peak.machine_samples import WarmRatioHistory
from predictors.peak.overcommit_metrics import step_metrics
from predictors.peak.peak_predictor import sorted_row_percentile


class Residents(NamedTuple):
    """The VMs on hosts at a step, and their samples at it.

    Attributes: step (grid step k), num_hosts, vms and hosts int64[n] (resident VM, its
    host), present bool[n] (a sample at k), number int64[n] (that sample's number in the
    VmUsage, valid where present).
    """
    step: int
    num_hosts: int
    vms: np.ndarray
    hosts: np.ndarray
    present: np.ndarray
    number: np.ndarray

    def per_host(self, values: np.ndarray) -> np.ndarray:
        """Sums per-sample `values` (float64[S] of the VmUsage) over each host's present
        residents: float64[H]."""
        present = self.present
        return np.bincount(self.hosts[present], values[self.number[present]],
                           minlength=self.num_hosts)


class HostPeaks:
    """A fortune teller's peak of each host's residents present at a step (the residents
    without a sample are the caller's)."""

    def peaks(self, residents: Residents) -> np.ndarray:
        """float64[H]; 0 (NaN for an oracle) on hosts without a present resident."""
        raise NotImplementedError

    def bind(self, num_hosts: int) -> "HostPeaks":
        """This teller for one replay of `num_hosts` hosts, which may keep sums from one
        window to the next (asked at consecutive window ends, it sums each host's newest
        lag only while its residents stay); itself when it keeps nothing."""
        return self


# VMs' samples per machine of TaskSharePeaks (bounds its memory on a large pool).
_SHARE_CHUNK_SAMPLES = 2_000_000


class TaskSharePeaks(HostPeaks):
    """A predictor whose peak is a sum of per-task shares (`sample_peaks`: borg-default,
    RC-like, per-task max and mean): each sample's share is computed once for the pool, on
    machines of consecutive VMs of about _SHARE_CHUNK_SAMPLES samples (VMs are
    independent)."""

    def __init__(self, predictor, usage: VmUsage):
        self.share = np.zeros(usage.offsets[-1])
        bounds = np.searchsorted(usage.offsets, np.arange(
            _SHARE_CHUNK_SAMPLES, usage.offsets[-1], _SHARE_CHUNK_SAMPLES))
        edges = np.unique(np.concatenate([[0], bounds, [usage.num_vms]]))
        for first_vm, stop_vm in zip(edges[:-1].tolist(), edges[1:].tolist()):
            machine = usage.machine_samples(first_vm, stop_vm)
            if machine is not None:
                self.share[machine[1]] = predictor.sample_peaks(machine[0])

    def peaks(self, residents: Residents) -> np.ndarray:
        return residents.per_host(self.share)


class HistoryPeaks(HostPeaks):
    """A predictor of the warm tasks' ratio history (N-sigma, per-machine percentile:
    `warm_peaks(WarmRatioHistory)`): the history of each host's present residents is summed
    in one pass (`admission_kernels.warm_ratio_sums`, only the newest lag of a host whose
    warm residents are those of the window before), the cold residents count at their
    limit."""

    def __init__(self, predictor, usage: VmUsage):
        self.predictor = predictor
        self.usage = usage
        self._kept = None

    def bind(self, num_hosts: int) -> "HistoryPeaks":
        bound = copy.copy(self)
        bound._kept = _Kept()
        return bound

    def peaks(self, residents: Residents) -> np.ndarray:
        out = np.zeros(residents.num_hosts)
        present = residents.present
        if not present.any():
            return out
        predictor, usage = self.predictor, self.usage
        vms, number = residents.vms[present], residents.number[present]
        hosts = residents.hosts[present]
        position = residents.step - usage.first_step[vms] + 1
        window = predictor.num_history_samples
        kept = self._kept or _Kept()
        fresh = kept.start(residents.step, (residents.num_hosts, window), 2)
        usage_ring, limit_ring = kept.rings
        offsets, warm_vms, warm_limit, cold_limit, length = warm_ratio_sums(
            hosts, vms, number, position, usage.usage, usage.limit, predictor.cap_to_limit,
            window, predictor.min_warm_samples, residents.num_hosts, residents.step,
            usage_ring, limit_ring, *kept.residents[:2], fresh)
        kept.residents = (offsets, warm_vms)
        host_ids = np.flatnonzero(np.bincount(hosts, minlength=residents.num_hosts))
        lags = (residents.step - np.arange(window)) % window
        length = length[host_ids]
        ratio = np.full((len(host_ids), window), np.nan)
        valid = np.arange(window)[None, :] < length[:, None]
        np.divide(usage_ring[host_ids][:, lags], limit_ring[host_ids][:, lags], out=ratio,
                  where=valid)
        history = WarmRatioHistory(ratio=ratio, length=length, warm_limit=warm_limit[host_ids])
        out[host_ids] = predictor.warm_peaks(history) + cold_limit[host_ids]
        return out


class CombinedPeaks(HostPeaks):
    """The element-wise combination of several tellers' peaks (max_of, avg_of)."""

    def __init__(self, combine, parts: List[HostPeaks]):
        self.combine = combine
        self.parts = parts

    def bind(self, num_hosts: int) -> "CombinedPeaks":
        return CombinedPeaks(self.combine, [part.bind(num_hosts) for part in self.parts])

    def peaks(self, residents: Residents) -> np.ndarray:
        return self.combine(np.stack([part.peaks(residents) for part in self.parts]), axis=0)


class OraclePeaks(HostPeaks):
    """The peak oracle ([Bashir21] §3, predictors/peak/peak_oracle.py) of each host's
    residents present at step k: the max (or a percentile) over the next `horizon_steps`
    windows of their summed usage (0 for a VM without a sample then), each capped at its
    limit at k with `cap_to_limit`. Where the horizon reaches past the pool's last sample,
    NaN (the stage leaves the last horizon of a machine's data unscored), or with `partial`
    (an oracle that admits) the windows up to that sample; a horizon of 0, or no window
    left, gives the residents' total limit, as the stage's oracle does."""

    def __init__(self, usage: VmUsage, horizon_steps: int, percentile: float = 100,
                 cap_to_limit: bool = False, partial: bool = False):
        self.usage = usage
        self.horizon_steps = horizon_steps
        self.percentile = min(percentile, 100)
        self.cap_to_limit = cap_to_limit
        self.partial = partial
        self._last_step = usage.last_step
        self._kept = None

    def bind(self, num_hosts: int) -> "OraclePeaks":
        bound = copy.copy(self)
        bound._kept = _Kept()
        return bound

    def peaks(self, residents: Residents) -> np.ndarray:
        usage, width = self.usage, self.horizon_steps
        if self.partial:
            width = max(min(width, self._last_step - residents.step), 0)
        if width == 0:
            return np.where(np.bincount(residents.hosts[residents.present],
                                        minlength=residents.num_hosts) > 0,
                            residents.per_host(usage.limit), np.nan)
        out = np.full(residents.num_hosts, np.nan)
        present = residents.present
        if residents.step + width > self._last_step or not present.any():
            return out
        vms, number = residents.vms[present], residents.number[present]
        hosts = residents.hosts[present]
        cap = usage.limit[number] if self.cap_to_limit else np.full(len(number), np.inf)
        kept = self._kept or _Kept()
        fresh = kept.start(residents.step, (residents.num_hosts, width), 1)
        kept.residents = future_sums(
            hosts, vms, number, usage.offsets[vms + 1] - 1 - number, usage.usage, cap, width,
            residents.num_hosts, residents.step, kept.rings[0], *kept.residents, fresh)
        host_ids = np.flatnonzero(np.diff(kept.residents[0]))  # hosts with residents
        sums = kept.rings[0][host_ids][:, (residents.step + 1 + np.arange(width)) % width]
        if self.percentile >= 100:
            out[host_ids] = sums.max(axis=1)
        else:
            out[host_ids] = sorted_row_percentile(sums, np.full(len(host_ids), width),
                                                  self.percentile)
        return out


class _Kept:
    """A teller's per-host sums from its last window (admission_kernels): the rings, and the
    residents they summed (grouped by host), to carry to the next window."""

    def __init__(self):
        self.step = None
        self.rings = ()
        self.residents = None

    def start(self, step: int, shape: tuple, num_rings: int) -> bool:
        """Whether the sums at `step` start anew (no sums of the step before, or of another
        shape: float64[hosts, lags]); the rings are resized then."""
        fresh = self.step is None or step != self.step + 1 or self.rings[0].shape != shape
        if not self.rings or self.rings[0].shape != shape:
            self.rings = tuple(np.zeros(shape) for _ in range(num_rings))
            self.residents = (np.zeros(shape[0] + 1, np.int64), np.zeros(0, np.int64),
                              np.zeros(0))
        self.step = step
        return fresh


class AdmittedPool(PoolState):
    """A PoolState whose CPU room (dimension 0) the admission sets at every window's end
    (`set_cpu_rooms`), as the module says; `used()` stays the requests placed, so packing
    density is by request (above 100 % on an overcommitted host).

    Args: those of PoolState, and `demand` float64[V, D], the VMs' demand.

    Attributes: fresh, the VMs placed since the last prediction.
    """

    def __init__(self, spec, weights=None, smallest_demand=None, *, demand: np.ndarray):
        super().__init__(spec, weights, smallest_demand)
        self.fresh = set()
        self.demand = demand

    def place(self, vm: int, host: int, demand, exit_us: int) -> None:
        super().place(vm, host, demand, exit_us)
        self.fresh.add(vm)

    def remove(self, vm: int, demand) -> int:
        if vm in self.fresh:
            self.fresh.discard(vm)
            return super().remove(vm, demand)
        return super().remove(vm, (0.0, *demand[1:]))

    def set_cpu_rooms(self, hosts: np.ndarray, rooms: np.ndarray) -> list:
        """Sets the CPU room of `hosts` (int64[n]) to `rooms` (float64[n]); returns the hosts
        whose room changed (the policy re-indexes them)."""
        changed = []
        for host, room in zip(hosts.tolist(), rooms.tolist()):
            row = self.room[host]
            if row[0] != room:
                row[0] = room
                self.free_key[host] = self._free_key(host, row)
                changed.append(host)
        return changed

    def new_window(self) -> None:
        """The admission predicted: the VMs placed so far are counted."""
        self.fresh.clear()

    def used(self) -> np.ndarray:
        return requested(*self.residents(), self.demand, self.num_hosts)


class UsageTotals(NamedTuple):
    """Per host, counts and sums over the windows recorded (int64[H] / float64[H])."""
    windows: np.ndarray
    scored: np.ndarray
    violations: np.ndarray
    severity: np.ndarray
    savings: np.ndarray
    overflows: np.ndarray


class Admission:
    """The admission and usage replay of one placement replay (see the module).

    Args:
      usage: the pool's VMs' samples (VM = trace index).
      request_cpu: float64[V], each VM's CPU request in the samples' units.
      scoring: the oracle the usage replay scores against.
      peaks: the admitting teller, or None to admit by requests (the usage replay only).
      name: the admission's name in the outputs ("requests" or the teller's).
    """

    def __init__(self, usage: VmUsage, request_cpu: np.ndarray, scoring: OraclePeaks,
                 peaks: Optional[HostPeaks], name: str):
        self.usage = usage
        self.request_cpu = np.asarray(request_cpu, dtype=np.float64)
        self.scoring = scoring
        self.peaks = peaks
        self.name = name
        self.totals = None

    def first_event_us(self, start_us: int) -> int:
        """The first window end at or after `start_us`."""
        usage = self.usage
        ends = max(-(-(start_us - usage.grid_start_us) // usage.step_us), 1)
        return usage.time_us(ends)

    def bind(self, pool: PoolState) -> None:
        """Starts a replay on `pool`: its totals, and the tellers bound to it."""
        self.pool = pool
        self._scoring = self.scoring.bind(pool.num_hosts)
        self._peaks = None if self.peaks is None else self.peaks.bind(pool.num_hosts)
        zeros = np.zeros(pool.num_hosts)
        self.totals = UsageTotals(*(zeros.astype(np.int64) for _ in range(3)), zeros.copy(),
                                  zeros.copy(), zeros.astype(np.int64))

    def residents(self, now_us: int) -> Residents:
        """The residents at window end `now_us` (in VM order) and their samples in the
        window."""
        vms, hosts = self.pool.residents()
        step = (now_us - self.usage.grid_start_us) // self.usage.step_us - 1
        present, number = self.usage.at_step(vms, step)
        return Residents(int(step), self.pool.num_hosts, vms, hosts, present, number)

    def window_end(self, now_us: int, record: bool) -> List[int]:
        """Predicts every host at window end `now_us`, records the usage replay if `record`,
        and (admitting by a teller) sets the rooms; returns the hosts whose room changed."""
        residents = self.residents(now_us)
        absent = ~residents.present
        absent_request = np.bincount(residents.hosts[absent],
                                     self.request_cpu[residents.vms[absent]],
                                     minlength=residents.num_hosts)
        total_limit = residents.per_host(self.usage.limit) + absent_request
        predicted = total_limit
        if self.peaks is not None:
            # A teller without a value (an oracle past the data) admits by the limits.
            peaks = self._peaks.peaks(residents)
            predicted = np.where(np.isnan(peaks), total_limit, peaks + absent_request)
        occupied = np.bincount(residents.hosts, minlength=residents.num_hosts) > 0
        if record:
            self._record(residents, occupied, total_limit, predicted)
        if self.peaks is None:
            return []
        pool = self.pool
        pool.new_window()
        hosts = np.flatnonzero(occupied)
        return pool.set_cpu_rooms(hosts, pool.limit[hosts, 0] - predicted[hosts])

    def _record(self, residents: Residents, occupied, total_limit, predicted) -> None:
        oracle = self._scoring.peaks(residents)
        used = residents.per_host(self.usage.usage)
        has_sample = np.bincount(residents.hosts[residents.present],
                                 minlength=residents.num_hosts) > 0
        oracle = np.where(has_sample, oracle, np.nan)
        metrics = step_metrics(total_limit, predicted, oracle)
        totals = self.totals
        totals.windows[occupied] += 1
        totals.scored[metrics.scored] += 1
        totals.violations[metrics.violation] += 1
        totals.severity[:] += metrics.severity
        totals.savings[:] += metrics.savings
        totals.overflows[occupied & (used > self.pool.capacity[:, 0])] += 1

    def summary(self) -> dict:
        """Pool-wide rates over the recorded host windows (percentages; None without any, a
        null in the table)."""
        totals = self.totals
        scored = int(totals.scored.sum())
        windows = int(totals.windows.sum())

        def pct(value, count):
            return 100.0 * float(value) / count if count else None

        return {"admission_windows": windows, "admission_scored_windows": scored,
                "violation_rate_pct": pct(totals.violations.sum(), scored),
                "mean_severity_pct": pct(totals.severity.sum(), scored),
                "savings_pct": pct(totals.savings.sum(), scored),
                "overflow_pct": pct(totals.overflows.sum(), windows)}
