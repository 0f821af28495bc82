"""CPU timing for the benchmarks (scripts/bench_*.py)."""

import time


def cpu_timed(function, repeats: int = 1):
    """(result, CPU seconds of this process, the least of `repeats` runs of `function()`):
    rates are per core, and other processes on a shared machine do not count."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        result = function()
        best = min(best, time.process_time() - started)
    return result, best
