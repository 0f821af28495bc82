"""The interface between the placement replay and a placement policy."""

from typing import Callable, Sequence

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
