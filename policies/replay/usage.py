"""The VMs' usage samples of one pool, for a replay that needs the usage of any set of VMs at
a step (admission by predicted peak, policies/replay/admission.py).

Samples lie on a grid of `step_us` from `grid_start_us`: sample k of the grid covers the
window [grid_start_us + k * step_us, + step_us). A VM's samples are made contiguous from its
first to its last: a missing window in between repeats the VM's previous sample (a replay
cannot leave a resident VM out of a step; the overcommit stage would start a new run there),
and two samples of one VM in one window merge into one with the max usage and the max limit,
as the overcommit stage merges them.
"""

import dataclasses

import numpy as np

from predictors.peak.machine_samples import MachineSamples

NO_SAMPLE = -1


@dataclasses.dataclass(frozen=True)
class VmUsage:
    """Contiguous per-VM samples on a grid.

    Attributes:
      grid_start_us: time (µs) of grid step 0.
      step_us: the grid's step (µs).
      first_step: int64[V], the grid step of each VM's first sample (NO_SAMPLE if none).
      offsets: int64[V + 1]; VM v's sample at grid step first_step[v] + j is number
        offsets[v] + j, for j < offsets[v + 1] - offsets[v].
      usage: float64[S], finite and >= 0 (the metric's units).
      limit: float64[S], the limit (request) in force, finite and > 0.
    """
    grid_start_us: int
    step_us: int
    first_step: np.ndarray
    offsets: np.ndarray
    usage: np.ndarray
    limit: np.ndarray

    @property
    def num_vms(self) -> int:
        return len(self.first_step)

    @property
    def num_samples(self) -> np.ndarray:
        """int64[V]: each VM's number of samples."""
        return np.diff(self.offsets)

    @property
    def last_step(self) -> int:
        """The last grid step with a sample (-1 without samples)."""
        has = self.first_step >= 0
        return int(np.max(self.first_step[has] + self.num_samples[has] - 1, initial=-1))

    def time_us(self, step: int) -> int:
        return self.grid_start_us + step * self.step_us

    @classmethod
    def from_samples(cls, vm, time_us, usage, limit, num_vms: int, step_us: int,
                     grid_start_us: int = 0) -> "VmUsage":
        """From unsorted samples: `vm` int[n] in [0, num_vms), `time_us` int[n] (floored to the
        grid), `usage` and `limit` float[n]. Samples with a usage that is negative or not
        finite, or a limit that is not > 0, are dropped (the overcommit stage's dead
        letters)."""
        vm = np.asarray(vm, dtype=np.int64)
        usage = np.asarray(usage, dtype=np.float64)
        limit = np.asarray(limit, dtype=np.float64)
        step = (np.asarray(time_us, dtype=np.int64) - grid_start_us) // step_us
        valid = (np.isfinite(usage) & (usage >= 0) & np.isfinite(limit) & (limit > 0)
                 & (step >= 0))
        vm, step, usage, limit = vm[valid], step[valid], usage[valid], limit[valid]
        width = int(step.max(initial=0)) + 1
        key = vm * width + step
        order = np.argsort(key, kind="stable")
        key, usage, limit = key[order], usage[order], limit[order]
        new = np.ones(len(key), dtype=bool)
        new[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(new)
        key = key[starts]
        if len(starts):
            usage = np.maximum.reduceat(usage, starts)
            limit = np.maximum.reduceat(limit, starts)
        vm, step = key // width, key % width
        first_step = np.full(num_vms, NO_SAMPLE, dtype=np.int64)
        last_step = np.full(num_vms, NO_SAMPLE - 1, dtype=np.int64)
        # Samples are sorted by (vm, step): the first and last of each VM.
        first_of_vm = np.ones(len(vm), dtype=bool)
        first_of_vm[1:] = vm[1:] != vm[:-1]
        first_step[vm[first_of_vm]] = step[first_of_vm]
        last_of_vm = np.ones(len(vm), dtype=bool)
        last_of_vm[:-1] = vm[1:] != vm[:-1]
        last_step[vm[last_of_vm]] = step[last_of_vm]
        counts = np.maximum(last_step - first_step + 1, 0)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        # Every grid step of each VM's span, and the sample in force there (the last at or
        # before it).
        dense_vm = np.repeat(np.arange(num_vms), counts)
        dense_step = (np.arange(offsets[-1]) - np.repeat(offsets[:-1], counts)
                      + np.repeat(first_step, counts))
        source = np.searchsorted(key, dense_vm * width + dense_step, side="right") - 1
        return cls(int(grid_start_us), int(step_us), first_step, offsets,
                   usage[source], limit[source])

    def at_step(self, vms: np.ndarray, step: int):
        """(present bool[n], sample int64[n]): which of `vms` have a sample at grid `step`,
        and its number (valid where present)."""
        first = self.first_step[vms]
        position = step - first
        present = (first >= 0) & (position >= 0) & (position < self.num_samples[vms])
        return present, self.offsets[vms] + position

    def machine_samples(self, first_vm: int = 0, stop_vm: int = None):
        """(MachineSamples, number int64[S']): VMs first_vm .. stop_vm - 1 (default all) as
        the tasks of one machine (task = VM index), a step per grid step with a sample, so
        that each VM's run is its contiguous samples as on any host; `number[i]` is the
        sample here of the machine's sample i. None for VMs without samples."""
        stop_vm = self.num_vms if stop_vm is None else stop_vm
        counts = self.num_samples[first_vm:stop_vm]
        start = self.offsets[first_vm]
        if not counts.sum():
            return None
        vm = np.repeat(np.arange(first_vm, stop_vm), counts)
        step = (np.arange(start, self.offsets[stop_vm])
                - np.repeat(self.offsets[first_vm:stop_vm], counts)
                + np.repeat(self.first_step[first_vm:stop_vm], counts))
        steps, dense = np.unique(step, return_inverse=True)
        order = np.lexsort((vm, dense))
        number = start + order
        samples = MachineSamples(times=self.grid_start_us + steps * self.step_us,
                                 step=dense.astype(np.int64)[order], task=vm[order],
                                 usage=self.usage[number], limit=self.limit[number])
        return samples, number
