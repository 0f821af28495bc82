"""The simulated cluster's hosts."""

import dataclasses

import numpy as np

from policies.shaping.cluster.scheduler import place_all


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Hosts of the simulated cluster.

    Attributes:
      capacity: float64[H, 2] (cpu, memory) capacity of every host, in the workload's units
        ([Pace18] §IV-A: 250 homogeneous hosts of 32 cores and 128 GB).
    """

    capacity: np.ndarray

    @classmethod
    def homogeneous(cls, cpu: float, memory: float, count: int) -> "Cluster":
        return cls(np.tile(np.array([[cpu, memory]], dtype=np.float64), (count, 1)))

    @property
    def num_hosts(self) -> int:
        return len(self.capacity)

    def fits_empty(self, demand: np.ndarray) -> bool:
        """Whether components of demand float[k, 2] fit on the empty cluster, first fit in
        order (the admission test of an application's core components)."""
        return place_all(self.capacity.copy(), demand) is not None
