"""Bin-packing metrics of a placement replay: a time series of samples, its summary, and
differences vs a baseline.

Columns per sample (`PlacementMetrics.timeseries()`, percentages of the pool's hosts or
capacity): `time_us`; `empty_hosts` (no VM, no in-flight migration) and `empty_hosts_pct`
([Ling25] §2.3, the main metric); `upper_bound_empty_hosts_pct` given the demand placed
([Ling25ext] App. G.2: the fewest largest hosts covering it in every dimension stay used);
`packing_density_pct`, allocated CPU / CPU of used hosts ([Barbalho23] §4.2);
`empty_to_free_ratio_pct`, CPU of empty hosts / free CPU ([Ling25ext] App. D);
`<dim>_allocated_pct`; `stranded_<dim>_pct` ([Ling25] §2.3; NaN at samples without
inflation); `live_vms`, and `placements`, `failed_placements`, `migrations` since metrics
started. Dimension 0 is CPU.

Stranding is by inflation: every host is filled independently with copies of a VM mix in
weighted round-robin order (each round places up to `weights[i]` copies of shape i) until no
shape fits; what is left free is stranded.
"""

import dataclasses
import math
from typing import Dict, Optional

import numpy as np

from policies.replay.pool import PoolState

# A shape counts as fitting when it exceeds the free capacity by at most this fraction.
_FIT_SLACK = 1e-9


@dataclasses.dataclass(frozen=True)
class InflationMix:
    """VM shapes float64[M, D] and copies per round int64[M] (their relative frequency)."""
    shapes: np.ndarray
    weights: np.ndarray

    def __post_init__(self):
        shapes = np.asarray(self.shapes, dtype=np.float64)
        weights = np.asarray(self.weights, dtype=np.int64)
        if shapes.ndim != 2 or len(weights) != len(shapes) or len(shapes) == 0:
            raise ValueError("an inflation mix needs shapes [M, D] and M weights, M > 0")
        if np.any(weights < 1) or np.any(shapes < 0) or np.any(shapes.sum(axis=1) <= 0):
            raise ValueError("mix weights must be >= 1 and shapes non-negative and non-zero")
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "weights", weights)

    @classmethod
    def from_demand(cls, demand: np.ndarray, max_shapes: int = 8,
                    copies_per_round: int = 20) -> "InflationMix":
        """The `max_shapes` most frequent VM shapes of `demand` float[V, D], weighted by
        frequency (about `copies_per_round` copies per round, at least one of each)."""
        shapes, counts = np.unique(np.asarray(demand, np.float64), axis=0, return_counts=True)
        keep = shapes.sum(axis=1) > 0
        shapes, counts = shapes[keep], counts[keep]
        top = np.argsort(-counts, kind="stable")[:max_shapes]
        weights = np.maximum(1, np.rint(copies_per_round * counts[top] / counts[top].sum()))
        return cls(shapes[top], weights.astype(np.int64))


def inflate(free: np.ndarray, mix: InflationMix) -> np.ndarray:
    """Free capacity float64[H, D] left after inflating every host with `mix` (see module)."""
    free = np.array(free, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            placed = False
            for shape, weight in zip(mix.shapes, mix.weights):
                ratio = np.where(shape > 0, free / np.where(shape > 0, shape, 1.0), np.inf)
                copies = np.minimum(np.floor(ratio.min(axis=1) + _FIT_SLACK), weight)
                copies = np.maximum(copies, 0.0)
                if copies.any():
                    placed = True
                    free -= copies[:, None] * shape
            if not placed:
                return np.maximum(free, 0.0)


def empty_hosts_upper_bound(sorted_capacity_cumsum: np.ndarray, used_total: np.ndarray) -> int:
    """Most hosts that could be empty: hosts minus the fewest that cover `used_total`.

    `sorted_capacity_cumsum` float64[H, D]: per dimension, the cumulative sum of host
    capacities sorted in descending order. No placement can empty more hosts, since the
    used hosts must hold the demand in every dimension.
    """
    num_hosts = len(sorted_capacity_cumsum)
    needed = 0
    for d, used in enumerate(used_total):
        if used > 0:
            # The last host may be over-full by the fit tolerance.
            position = np.searchsorted(sorted_capacity_cumsum[:, d], used * (1 - _FIT_SLACK))
            needed = max(needed, min(int(position) + 1, num_hosts))
    return num_hosts - needed


class PlacementMetrics:
    """Samples a pool's metrics over time and summarizes them.

    Args:
      pool: the pool being replayed.
      inflation_mix: mix for stranding, or None to skip stranding.
      stranding_every: run inflation at every n-th sample (it is the costliest metric).
    """

    def __init__(self, pool: PoolState, inflation_mix: Optional[InflationMix] = None,
                 stranding_every: int = 1):
        if stranding_every < 1:
            raise ValueError(f"stranding_every must be >= 1, got {stranding_every}")
        self._pool = pool
        self._mix = inflation_mix
        self._stranding_every = stranding_every
        self._dims = pool.spec.dimensions
        capacity = pool.capacity
        self._capacity_total = capacity.sum(axis=0)
        self._sorted_cumsum = np.cumsum(-np.sort(-capacity, axis=0), axis=0)
        self._rows: Dict[str, list] = {name: [] for name in self.columns()}

    def columns(self) -> list:
        dims = self._dims
        return (["time_us", "empty_hosts", "empty_hosts_pct", "upper_bound_empty_hosts_pct",
                 "packing_density_pct", "empty_to_free_ratio_pct"]
                + [f"{d}_allocated_pct" for d in dims] + [f"stranded_{d}_pct" for d in dims]
                + ["live_vms", "placements", "failed_placements", "migrations"])

    def sample(self, now_us: int, placements: int, failed_placements: int,
               migrations: int) -> None:
        pool = self._pool
        capacity = pool.capacity
        used = pool.used()
        empty = pool.occupancy_array() == 0
        num_hosts = pool.num_hosts
        used_total = used.sum(axis=0)
        cpu_used_hosts = capacity[~empty, 0].sum()
        cpu_free = self._capacity_total[0] - used_total[0]
        row = {
            "time_us": now_us,
            "empty_hosts": int(empty.sum()),
            "empty_hosts_pct": 100.0 * empty.sum() / num_hosts,
            "upper_bound_empty_hosts_pct": 100.0 * empty_hosts_upper_bound(
                self._sorted_cumsum, used_total) / num_hosts,
            "packing_density_pct": (100.0 * used_total[0] / cpu_used_hosts
                                    if cpu_used_hosts > 0 else math.nan),
            "empty_to_free_ratio_pct": (100.0 * capacity[empty, 0].sum() / cpu_free
                                        if cpu_free > 0 else math.nan),
            "live_vms": len(pool.vm_host),
            "placements": placements,
            "failed_placements": failed_placements,
            "migrations": migrations,
        }
        allocated = 100.0 * used_total / self._capacity_total
        stranded = np.full(len(self._dims), math.nan)
        if self._mix is not None and len(self._rows["time_us"]) % self._stranding_every == 0:
            left = inflate(np.maximum(capacity - used, 0.0), self._mix)
            stranded = 100.0 * left.sum(axis=0) / self._capacity_total
        for d, name in enumerate(self._dims):
            row[f"{name}_allocated_pct"] = allocated[d]
            row[f"stranded_{name}_pct"] = stranded[d]
        for name, value in row.items():
            self._rows[name].append(value)

    def timeseries(self) -> Dict[str, np.ndarray]:
        """The samples: one array per column (time_us and counts int64, the rest float64)."""
        ints = {"time_us", "empty_hosts", "live_vms", "placements", "failed_placements",
                "migrations"}
        return {name: np.asarray(values, dtype=np.int64 if name in ints else np.float64)
                for name, values in self._rows.items()}

    def summary(self) -> Dict[str, float]:
        """Mean of every *_pct column over the samples, and the final counts."""
        series = self.timeseries()
        summary = {"num_samples": len(series["time_us"])}
        for name, values in series.items():
            if name.endswith("_pct"):
                finite = values[np.isfinite(values)]
                summary[name] = float(finite.mean()) if len(finite) else math.nan
        for name in ("placements", "failed_placements", "migrations"):
            values = series[name]
            summary[name] = int(values[-1]) if len(values) else 0
        return summary


def difference_vs_baseline(summary: Dict[str, float],
                           baseline: Dict[str, float]) -> Dict[str, float]:
    """Percentage-point differences `summary - baseline` of every *_pct metric both have a
    value of (not None), named `<metric>_vs_baseline_pp` (e.g.
    empty_hosts_pct_vs_baseline_pp)."""
    return {f"{name}_vs_baseline_pp": summary[name] - baseline[name]
            for name in summary if name.endswith("_pct") and summary[name] is not None
            and baseline.get(name) is not None}
