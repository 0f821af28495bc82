"""Lifetime-class First-Fit ([Barbalho23] §3.1.1, Algorithm 1), the provable ancestor of LA.

VMs whose predicted lifetime lies in [2^(i-1), 2^i) time units form class i. Every class
has its own hosts: a VM goes to the host of its class opened earliest (First-Fit) among
those it fits on, and otherwise opens an empty host (the smallest that fits) for its class.
A host returns to the shared empty pool when its last VM exits. Unlike LA, classes never mix,
which is what [Barbalho23] Example 1 needs: k long VMs share one host instead of one host each.
"""

import math
from typing import Sequence

from configs.units import US_PER_S
from policies.best_fit import UsedOrEmptyPolicy
from policies.policy import ScheduleTimer
from policies.replay.pool import PoolState


class ClassFirstFit(UsedOrEmptyPolicy):
    """Algorithm 1 of [Barbalho23]: lifetime classes in powers of two of a time unit, each
    class on its own hosts, First-Fit within it.

    Args:
      time_unit_s: the time unit, seconds (> 0): class i holds predicted lifetimes in
        [2^(i-1), 2^i) units.
    """

    name = "class_first_fit"
    one_shot = True

    def __init__(self, time_unit_s: float = 60.0):
        if time_unit_s <= 0:
            raise ValueError(f"time_unit_s must be positive, got {time_unit_s}")
        self.time_unit_us = time_unit_s * US_PER_S

    def lifetime_class(self, remaining_us: int) -> int:
        """i such that the lifetime is in [2^(i-1), 2^i) units (below one unit: class 0)."""
        units = remaining_us / self.time_unit_us
        return 0 if units < 1 else math.floor(math.log2(units)) + 1

    def bind(self, pool: PoolState, schedule_timer: ScheduleTimer, now_us: int) -> None:
        super().bind(pool, schedule_timer, now_us)
        # Per class, its hosts in opening order; per host, its class (None: not open).
        self._class_hosts = {}
        self._host_class = [None] * pool.num_hosts
        for host in range(pool.num_hosts):
            if pool.host_vms[host]:
                self._open(host, self.lifetime_class(pool.host_exit_us[host] - now_us))

    def _open(self, host: int, host_class: int) -> None:
        self._host_class[host] = host_class
        self._class_hosts.setdefault(host_class, []).append(host)

    def select(self, vm: int, demand: Sequence[float], exit_us: int, now_us: int) -> int:
        pool = self._pool
        for host in self._class_hosts.get(self.lifetime_class(exit_us - now_us), ()):
            if pool.available[host] and pool.fits(host, demand):
                return host
        return self._empty_hosts.best_fit(demand, pool.weighted_size(demand))

    def placed(self, vm: int, host: int, now_us: int) -> None:
        if self._host_class[host] is None:
            self._open(host, self.lifetime_class(self._pool.vm_exit_us(vm) - now_us))
        super().placed(vm, host, now_us)

    def removed(self, vm: int, host: int, now_us: int) -> None:
        if not self._pool.host_vms[host] and self._host_class[host] is not None:
            self._class_hosts[self._host_class[host]].remove(host)
            self._host_class[host] = None
        super().removed(vm, host, now_us)
