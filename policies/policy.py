"""The interface between the placement replay and a placement policy."""

from typing import Callable, Sequence

import numpy as np

from configs.registry import PluginFailed, raised_text
from policies.replay.pool import PoolState

# schedule_timer(time_us, host): asks the replay to call `on_timer(host, time_us)` then.
ScheduleTimer = Callable[[int, int], None]


class PlacementPolicy:
    """A placement policy: picks a host per VM and keeps its own indexes current.

    The replay calls `bind` once with the pool (possibly already holding warm-up VMs), then
    `select` for every VM to place, and `placed` / `removed` / `update` after every change of
    a host (a VM placed or gone, a new exit estimate, the host drained or released).

    Class attributes:
      name: short name used in outputs.
      one_shot: True if the policy is defined on the prediction made at arrival only (LA);
        the replay then never repredicts for it.
      uses_exit_estimates: False if the policy never reads the exit estimates of VMs already
        placed (`pool.host_exit_us`, `vm_exit_us`; the arriving VM's own `exit_us` does not
        count): the replay then does not repredict them, which changes no decision and
        saves the repredictions. A subclass that reads them must say True.
      uses_lifetimes: False if no decision reads any lifetime prediction, the arriving VM's
        `exit_us` included (Best-Fit, PBFR): it then decides the same with every lifetime
        source, and the placement stage replays it once for all of them.
    """

    name = "policy"
    one_shot = False
    uses_exit_estimates = True
    uses_lifetimes = True

    def bind(self, pool: PoolState, schedule_timer: ScheduleTimer, now_us: int) -> None:
        raise NotImplementedError

    def select(self, vm: int, demand: Sequence[float], exit_us: int, now_us: int) -> int:
        """The host for `vm` (demand float[D], predicted exit `exit_us`), or -1 if none fits."""
        raise NotImplementedError

    def update(self, host: int, now_us: int) -> None:
        """Re-indexes `host` after its capacity, exit estimate or availability changed."""
        raise NotImplementedError

    def exits_changed(self, hosts: Sequence[int], now_us: int) -> None:
        """Re-indexes `hosts` after a reprediction changed their exit estimates and nothing
        else (the replay calls it after each refresh of a repredicting source)."""
        for host in hosts:
            self.update(host, now_us)

    def placed(self, vm: int, host: int, now_us: int) -> None:
        self.update(host, now_us)

    def removed(self, vm: int, host: int, now_us: int) -> None:
        self.update(host, now_us)

    def on_timer(self, host: int, now_us: int) -> None:
        """A timer set through `schedule_timer` fired (may be stale: check it)."""


class CheckedPolicy:
    """A plug-in policy whose `select` answers are checked against the pool it is bound to,
    and whose every callback's exception names it.

    An answer must be -1 (no host fits) or the index of a host of the pool, an int or a
    numpy integer, that is available (not being drained) and has room for the VM by the
    pool's own accounting (`PoolState.fits`). A bad answer, or a callback that raises,
    raises PluginFailed naming `label` (the plug-in and its class path), the call and the
    answer. Attributes (`name`, `one_shot`, ...) are read through.

    Args:
      policy: the plug-in's policy object (a PlacementPolicy).
      label: how messages name it: "placement policy plug-in 'mine' (my_pkg.fit:Mine) on
        pool 'a'".
    """

    def __init__(self, policy, label: str):
        self.policy = policy
        self.label = label
        self._select = policy.select
        self._pool = None

    def __getattr__(self, name: str):
        if name == "policy":  # not set yet (an object being copied)
            raise AttributeError(name)
        return getattr(self.policy, name)

    def _call(self, method: str, *args):
        try:
            return getattr(self.policy, method)(*args)
        except (Exception, SystemExit) as e:  # pylint: disable=broad-except
            raise PluginFailed(f"{self.label}: {method}{args!r:.200} {raised_text(e)}") from e

    def bind(self, pool: PoolState, schedule_timer: ScheduleTimer, now_us: int) -> None:
        self._pool = pool
        self._call("bind", pool, schedule_timer, now_us)

    def update(self, host: int, now_us: int) -> None:
        self._call("update", host, now_us)

    def exits_changed(self, hosts: Sequence[int], now_us: int) -> None:
        self._call("exits_changed", hosts, now_us)

    def placed(self, vm: int, host: int, now_us: int) -> None:
        self._call("placed", vm, host, now_us)

    def removed(self, vm: int, host: int, now_us: int) -> None:
        self._call("removed", vm, host, now_us)

    def on_timer(self, host: int, now_us: int) -> None:
        self._call("on_timer", host, now_us)

    def select(self, vm: int, demand: Sequence[float], exit_us: int, now_us: int) -> int:
        try:
            host = self._select(vm, demand, exit_us, now_us)
        except (Exception, SystemExit) as e:  # pylint: disable=broad-except
            raise PluginFailed(f"{self.label}: select for VM {vm} {raised_text(e)}") from e
        pool = self._pool
        if type(host) is int and (host == -1 or (  # pylint: disable=unidiomatic-typecheck
                0 <= host < pool.num_hosts and pool.available[host]
                and pool.fits(host, demand))):
            return host
        return self._judged(vm, demand, host)

    def _judged(self, vm: int, demand: Sequence[float], host) -> int:
        """`host` as an int if it is a valid answer that is not an int (a numpy integer);
        else raises PluginFailed saying what is wrong with it."""
        pool = self._pool
        if isinstance(host, bool) or not isinstance(host, (int, np.integer)):
            problem = (f"select returned {host!r} ({type(host).__name__}) for VM {vm}, which "
                       "is not a host index (an integer; -1 when no host fits)")
        elif not -1 <= host < pool.num_hosts:
            problem = (f"select returned host {host} for VM {vm}, which is not a host of the "
                       f"pool (hosts 0 to {pool.num_hosts - 1}; -1 when no host fits)")
        elif host == -1 or (pool.available[host] and pool.fits(host, demand)):
            return int(host)
        elif not pool.available[host]:
            problem = (f"select returned host {host} for VM {vm}, which is being drained "
                       "(not available for new VMs)")
        else:
            short = ", ".join(
                f"{name} {free:g} free of {needed:g} needed" for name, free, needed
                in zip(pool.spec.dimensions, pool.room[host], demand) if needed > free)
            problem = (f"select returned host {host} for VM {vm}, which has no room for it "
                       f"({short})")
        raise PluginFailed(f"{self.label}: {problem}")
