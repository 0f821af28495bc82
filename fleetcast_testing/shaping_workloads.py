"""Random shaping workloads for the shaping tests and scripts/bench_shaping.py."""

import numpy as np

from policies.shaping.workload import Workload


def random_workload(num_apps: int, rng: np.random.Generator, max_components: int = 6,
                    max_length: int = 60, submit_span: int = 200,
                    cpu_request=(0.5, 4.0), memory_request=(1.0, 16.0),
                    elastic_fraction: float = 0.5, step_s: float = 300) -> Workload:
    """Applications of 1..max_components components, uniform requests, usage a noisy walk
    between 0 and 1.2 · request (clipped to the request by the Workload), priorities 0-2."""
    counts = rng.integers(1, max_components + 1, num_apps)
    total = int(counts.sum())
    request = np.column_stack([rng.uniform(*cpu_request, total),
                               rng.uniform(*memory_request, total)])
    series = []
    for c in range(total):
        length = int(rng.integers(2, max_length + 1))
        level = rng.uniform(0.1, 0.9, 2) + np.cumsum(rng.normal(0, 0.08, (length, 2)), axis=0)
        series.append(np.clip(level, 0, 1.2) * request[c])
    workload = Workload.from_series(step_s, np.sort(rng.integers(0, submit_span, num_apps)),
                                    rng.integers(0, 3, num_apps), counts, request,
                                    np.zeros(total, bool), series)
    return workload.with_elastic(elastic_fraction, rng)
