"""Brute-force reference of the placement replay's admission (policies/replay/admission.py):
a host's peak at a window end is computed from scratch, from its residents' samples alone.

A predictor is run on a MachineSamples of the present residents' samples from their first
up to the window (the overcommit stage's machine, with nothing but those tasks); an oracle
sums the residents' future usage window by window in a Python loop.
"""

import math
from typing import Sequence

import numpy as np

from policies.replay.usage import VmUsage
from predictors.peak.machine_samples import MachineSamples


class BruteForceAdmission:
    """`host_peak(now_us, vms)` of the reference replay.

    Args:
      usage: the VMs' samples.
      request_cpu: float64[V], each VM's CPU request.
      predictor: a PeakPredictor, or None with `oracle_horizon_steps`.
      oracle_horizon_steps: an oracle's horizon (windows), used when `predictor` is None;
        windows past the last sample are left out (an admitting oracle).
      cap_to_limit: the oracle's cap of each future usage at the VM's limit at the window.
    """

    def __init__(self, usage: VmUsage, request_cpu: np.ndarray, predictor=None,
                 oracle_horizon_steps: int = 0, cap_to_limit: bool = False):
        self.usage = usage
        self.request_cpu = request_cpu
        self.predictor = predictor
        self.horizon = oracle_horizon_steps
        self.cap_to_limit = cap_to_limit
        self.step_us = usage.step_us

    def first_event_us(self, start_us: int) -> int:
        step = max(math.ceil((start_us - self.usage.grid_start_us) / self.step_us), 1)
        return self.usage.time_us(step)

    def sample(self, vm: int, step: int):
        """(usage, limit) of `vm` at grid `step`, or None."""
        first = int(self.usage.first_step[vm])
        count = int(self.usage.num_samples[vm])
        if first < 0 or not first <= step < first + count:
            return None
        number = int(self.usage.offsets[vm]) + step - first
        return float(self.usage.usage[number]), float(self.usage.limit[number])

    def host_peak(self, now_us: int, vms: Sequence[int]) -> float:
        """The admitted CPU peak of a host holding `vms` at window end `now_us`."""
        step = (now_us - self.usage.grid_start_us) // self.step_us - 1
        present = [vm for vm in vms if self.sample(vm, step) is not None]
        absent = sum(float(self.request_cpu[vm]) for vm in vms if vm not in present)
        total_limit = sum(self.sample(vm, step)[1] for vm in present) + absent
        if not present:
            return absent
        peak = (self._predicted(present, step) if self.predictor is not None
                else self._oracle(present, step))
        return total_limit if math.isnan(peak) else peak + absent

    def _predicted(self, present, step: int) -> float:
        times, tasks, usage, limit = [], [], [], []
        for vm in present:
            for s in range(int(self.usage.first_step[vm]), step + 1):
                value, vm_limit = self.sample(vm, s)
                times.append(s)
                tasks.append(vm)
                usage.append(value)
                limit.append(vm_limit)
        samples = MachineSamples.from_arrays(np.array(times) * self.step_us, np.array(tasks),
                                             np.array(usage), np.array(limit))
        return float(self.predictor.predict(samples)[-1])

    def _oracle(self, present, step: int) -> float:
        last = self.usage.last_step
        width = min(self.horizon, last - step)
        if width <= 0:
            return sum(self.sample(vm, step)[1] for vm in present)
        sums = []
        for s in range(step + 1, step + width + 1):
            total = 0.0
            for vm in present:
                later = self.sample(vm, s)
                if later is not None:
                    value = later[0]
                    if self.cap_to_limit:
                        value = min(value, self.sample(vm, step)[1])
                    total += value
            sums.append(total)
        return max(sums)
