"""Host pool definition and the mutable state of one pool during a placement replay.

Resources are float vectors of D dimensions in the trace's units; by convention dimension 0
is CPU and dimension 1 is memory (packing density and stranding name them so). A VM fits on a
host when every dimension fits. Times are integer microseconds.

The state keeps per-host values in Python lists: the replay reads and writes one host at a
time, where list access is cheaper than numpy scalar access. Metrics read the whole pool at
once through `used()` / `capacity`, as numpy arrays.
"""

import dataclasses
import itertools
import math
import operator
from typing import Optional, Sequence

import numpy as np

# Relative slack on every capacity, so that float rounding of `room` after many placements
# and exits never rejects a VM that fits exactly. A host may so exceed its capacity by at
# most 1e-9 of it.
FIT_TOLERANCE = 1e-9
# Exit estimate of a host without VMs (sorts before every real time).
NO_EXIT_US = -(1 << 62)


def used_above_room(capacity: np.ndarray, fraction: float) -> np.ndarray:
    """Room below which more than `fraction` of a dimension is used: float64[H, D].

    `room[h][d] < used_above_room(...)[h, d]` means host h uses more than `fraction` of
    dimension d; the fast and the reference replays compare it the same way.
    """
    return capacity * (1.0 + FIT_TOLERANCE) - fraction * capacity


@dataclasses.dataclass(frozen=True)
class PoolSpec:
    """The hosts of one pool: `capacity` float64[H, D] and the dimensions' names."""
    capacity: np.ndarray
    dimensions: tuple = ("cpu", "memory")

    def __post_init__(self):
        capacity = np.asarray(self.capacity, dtype=np.float64)
        if capacity.ndim != 2 or capacity.shape[1] != len(self.dimensions):
            raise ValueError(f"capacity must be [hosts, {len(self.dimensions)}], "
                             f"got shape {capacity.shape}")
        if capacity.shape[0] == 0 or not np.all(capacity > 0):
            raise ValueError("a pool needs at least one host and positive capacities")
        object.__setattr__(self, "capacity", capacity)

    @property
    def num_hosts(self) -> int:
        return self.capacity.shape[0]

    @classmethod
    def from_shape(cls, shape: Sequence[float], count: int,
                   dimensions: tuple = ("cpu", "memory")) -> "PoolSpec":
        """`count` identical hosts of capacity `shape` (float[D])."""
        if count < 1:
            raise ValueError(f"host count must be positive, got {count}")
        return cls(np.tile(np.asarray(shape, dtype=np.float64), (count, 1)), dimensions)

    @classmethod
    def from_machines(cls, cpu_capacity: np.ndarray, memory_capacity: np.ndarray) -> "PoolSpec":
        """Hosts of a trace's machines table (one row per machine)."""
        return cls(np.column_stack([cpu_capacity, memory_capacity]), ("cpu", "memory"))

    @classmethod
    def from_peak_demand(cls, shape: Sequence[float], arrival_us: np.ndarray,
                         exit_us: np.ndarray, demand: np.ndarray, target_utilization: float,
                         dimensions: tuple = ("cpu", "memory")) -> "PoolSpec":
        """Identical hosts of `shape`, as many as hold the peak demand at `target_utilization`.

        For traces without hosts (Azure vmtable): count = ceil(max_d peak_d / (shape_d *
        target_utilization)), the peak taken over time of the summed demand of live VMs.
        """
        if not 0.0 < target_utilization <= 1.0:
            raise ValueError(f"target_utilization must be in (0, 1], got {target_utilization}")
        shape = np.asarray(shape, dtype=np.float64)
        peak = peak_demand(arrival_us, exit_us, demand)
        count = int(math.ceil(np.max(peak / (shape * target_utilization))))
        return cls.from_shape(shape, max(count, 1), dimensions)


def peak_demand(arrival_us: np.ndarray, exit_us: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """Per-dimension maximum over time of the demand of live VMs: float64[D].

    A VM is live on [arrival, exit); exits at a time count before arrivals at that time.
    """
    demand = np.asarray(demand, dtype=np.float64)
    times = np.concatenate([exit_us, arrival_us])
    is_arrival = np.concatenate([np.zeros(len(exit_us), bool), np.ones(len(arrival_us), bool)])
    deltas = np.concatenate([-demand, demand])
    order = np.lexsort((is_arrival, times))
    return np.max(np.cumsum(deltas[order], axis=0), axis=0, initial=0.0)


def peak_demand_time(arrival_us: np.ndarray, exit_us: np.ndarray, demand: np.ndarray,
                     dimension: int) -> int:
    """The first time (µs) the demand of live VMs in `dimension` reaches its peak
    (`peak_demand`'s); -1 without VMs."""
    if not len(arrival_us):
        return -1
    demand = np.asarray(demand, dtype=np.float64)[:, dimension]
    times = np.concatenate([exit_us, arrival_us])
    is_arrival = np.concatenate([np.zeros(len(exit_us), bool), np.ones(len(arrival_us), bool)])
    order = np.lexsort((is_arrival, times))
    live = np.cumsum(np.concatenate([-demand, demand])[order])
    return int(times[order][np.argmax(live)])


class PoolState:
    """Capacity in use, live VMs and exit estimates of every host of one pool.

    Args:
      spec: the hosts.
      weights: float[D] weights of the weighted sum that Best-Fit ranks hosts by ([Barbalho23]
        §3.1.2 item 4); default 1 / (largest capacity of the dimension), i.e. every
        dimension counts as a fraction of a host.
      smallest_demand: float[D], per dimension the least demand of any VM to be placed
        (default 0); a host with less room in some dimension is full: no VM fits there, and
        indexes leave it out.

    Attributes (per host h, Python lists):
      room[h]: list of D floats, capacity * (1 + FIT_TOLERANCE) minus the demand placed.
      host_vms[h]: dict live VM index -> its predicted exit time (us) minus
        `exit_base_us[h]`; read exits with `vm_exit_us` / `host_exits_us`.
      exit_base_us[h]: 0, or for a repredicting lifetime source the time of the host's last
        reprediction, when every value of host_vms[h] not placed since is that VM's
        remaining lifetime (us): a reprediction that changes no remaining lifetime then
        moves every exit of the host by moving the base, in O(1). Repredictions
        (`HostExitCache`, policies/replay/lifetime_source.py) write host_vms[h],
        exit_base_us[h] and host_exit_us[h] directly: they run for about every event.
      host_exit_us[h]: the latest predicted exit of the host's VMs (NO_EXIT_US if none).
      new_vms[h]: None, or (after `track_new_vms`) the VMs placed on h since the caller
        last cleared the list.
      occupancy[h]: live VMs plus in-flight migration reservations; 0 means empty.
      available[h]: False while the host is being drained (no new placements).
      free_key[h]: the host's Best-Fit key `(score(h), h, room[h][0], room[h][-1])`, or None
        if the host is full; a new tuple whenever the room changes. Indexes sort by it (the
        room values let them test fits and bound groups of hosts without reading `room`).
    """

    def __init__(self, spec: PoolSpec, weights: Optional[Sequence[float]] = None,
                 smallest_demand: Optional[Sequence[float]] = None):
        self.spec = spec
        self.capacity = spec.capacity
        self.num_hosts, self.num_dims = spec.capacity.shape
        if weights is None:
            weights = 1.0 / spec.capacity.max(axis=0)
        self.weights = tuple(float(w) for w in weights)
        if len(self.weights) != self.num_dims or min(self.weights) < 0:
            raise ValueError(f"need {self.num_dims} non-negative weights, got {weights}")
        self.limit = spec.capacity * (1.0 + FIT_TOLERANCE)
        self._limit_rows = self.limit.tolist()
        self.room = self.limit.tolist()
        self.host_vms = [dict() for _ in range(self.num_hosts)]
        self.host_exit_us = [NO_EXIT_US] * self.num_hosts
        self.exit_base_us = [0] * self.num_hosts
        self.new_vms = None
        self.occupancy = [0] * self.num_hosts
        self.available = [True] * self.num_hosts
        self.vm_host = {}
        self.num_empty = self.num_hosts
        self.smallest_demand = tuple(float(x) for x in (
            smallest_demand if smallest_demand is not None else np.zeros(self.num_dims)))
        # CPU and memory only (the usual case): unrolled arithmetic, cheaper per event than
        # loops over the dimensions.
        self._two_dims = self.num_dims == 2
        self._weight_0, self._weight_1 = self.weights[0], self.weights[-1]
        self._smallest_0, self._smallest_1 = self.smallest_demand[0], self.smallest_demand[-1]
        self.free_key = [self._free_key(host, room) for host, room in enumerate(self.room)]

    def score(self, host: int) -> float:
        """Weighted free capacity of `host` (Best-Fit prefers the lowest)."""
        return self.weighted_size(self.room[host])

    def weighted_size(self, demand: Sequence[float]) -> float:
        """Weighted sum of a VM's demand, on the scale of `score`.

        Summed from 0.0 in dimension order, as the reference replay does, so that equal
        scores (ties, broken by host id) are equal in both replays.
        """
        if self._two_dims:
            return self._weight_0 * demand[0] + self._weight_1 * demand[1]
        total = 0.0
        for weight, value in zip(self.weights, demand):
            total += weight * value
        return total

    def _free_key(self, host: int, room: Sequence[float]) -> Optional[tuple]:
        """`free_key` of `host` with `room` (`hold` and `_release` inline it for two
        dimensions)."""
        if all(map(operator.le, self.smallest_demand, room)):
            return self.weighted_size(room), host, room[0], room[-1]
        return None

    def fits(self, host: int, demand: Sequence[float]) -> bool:
        return all(map(operator.le, demand, self.room[host]))

    def place(self, vm: int, host: int, demand: Sequence[float], exit_us: int) -> None:
        """Puts `vm` on `host` with predicted exit `exit_us`; the caller checked the fit."""
        self.hold(host, demand)
        self.host_vms[host][vm] = exit_us - self.exit_base_us[host]
        if exit_us > self.host_exit_us[host]:
            self.host_exit_us[host] = exit_us
        self.vm_host[vm] = host
        if self.new_vms is not None:
            self.new_vms[host].append(vm)

    def remove(self, vm: int, demand: Sequence[float]) -> int:
        """Takes `vm` off its host and returns the host."""
        host = self.vm_host.pop(vm)
        vms = self.host_vms[host]
        exit_us = vms.pop(vm) + self.exit_base_us[host]
        self._release(host, demand)
        if not vms:
            self.host_exit_us[host] = NO_EXIT_US
        elif exit_us == self.host_exit_us[host]:
            self.host_exit_us[host] = max(vms.values()) + self.exit_base_us[host]
        return host

    def vm_exit_us(self, vm: int) -> int:
        """The predicted exit (us) of live `vm`."""
        host = self.vm_host[vm]
        return self.host_vms[host][vm] + self.exit_base_us[host]

    def host_exits_us(self, host: int) -> dict:
        """{live VM on `host`: its predicted exit (us)}."""
        base = self.exit_base_us[host]
        return {vm: value + base for vm, value in self.host_vms[host].items()}

    def track_new_vms(self) -> list:
        """Starts recording the VMs placed on each host in `new_vms`; returns it."""
        self.new_vms = [[] for _ in range(self.num_hosts)]
        return self.new_vms

    def hold(self, host: int, demand: Sequence[float]) -> None:
        """Takes `demand` on `host` without a VM (an in-flight migration's reservation)."""
        room = self.room[host]
        if self._two_dims:
            # Unrolled, with `_free_key` inlined: the hottest path of a replay.
            room_0 = room[0] = room[0] - demand[0]
            room_1 = room[1] = room[1] - demand[1]
            self.free_key[host] = (
                (self._weight_0 * room_0 + self._weight_1 * room_1, host, room_0, room_1)
                if self._smallest_0 <= room_0 and self._smallest_1 <= room_1 else None)
        else:
            for d, value in enumerate(demand):
                room[d] -= value
            self.free_key[host] = self._free_key(host, room)
        count = self.occupancy[host]
        if not count:
            self.num_empty -= 1
        self.occupancy[host] = count + 1

    def release(self, host: int, demand: Sequence[float]) -> None:
        """Ends a reservation made by `hold`."""
        self._release(host, demand)

    def _release(self, host: int, demand: Sequence[float]) -> None:
        count = self.occupancy[host] = self.occupancy[host] - 1
        room = self.room[host]
        if not count:
            # Exact reset: float drift never survives an empty host.
            room[:] = self._limit_rows[host]
            self.num_empty += 1
            self.free_key[host] = self._free_key(host, room)
        elif self._two_dims:
            room_0 = room[0] = room[0] + demand[0]
            room_1 = room[1] = room[1] + demand[1]
            self.free_key[host] = (
                (self._weight_0 * room_0 + self._weight_1 * room_1, host, room_0, room_1)
                if self._smallest_0 <= room_0 and self._smallest_1 <= room_1 else None)
        else:
            for d, value in enumerate(demand):
                room[d] += value
            self.free_key[host] = self._free_key(host, room)

    def used(self) -> np.ndarray:
        """Demand placed per host and dimension: float64[H, D]."""
        # Flattened through an iterator: cheaper than np.array(list of lists).
        flat_room = np.fromiter(itertools.chain.from_iterable(self.room), np.float64,
                                self.num_hosts * self.num_dims)
        return self.limit - flat_room.reshape(self.num_hosts, self.num_dims)

    def occupancy_array(self) -> np.ndarray:
        return np.array(self.occupancy, dtype=np.int64)

    def residents(self):
        """(vms, hosts) int64[n]: the live VMs in index order and their hosts."""
        vms = np.fromiter(self.vm_host.keys(), np.int64, len(self.vm_host))
        hosts = np.fromiter(self.vm_host.values(), np.int64, len(self.vm_host))
        order = np.argsort(vms)
        return vms[order], hosts[order]


def requested(vms: np.ndarray, hosts: np.ndarray, demand: np.ndarray,
              num_hosts: int) -> np.ndarray:
    """The demand of `vms` (in index order) summed per host: float64[H, D]."""
    return np.column_stack([np.bincount(hosts, demand[vms, d], minlength=num_hosts)
                            for d in range(demand.shape[1])])
