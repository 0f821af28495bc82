"""The admission's per-window sums over each host's residents (policies/replay/admission.py),
compiled with numba: one pass over the present residents and their samples, no temporaries.

Residents are given as (block, number) pairs: the row of their host among the hosts with
present residents, and their sample at the window in the pool's VmUsage arrays.
"""

import numba
import numpy as np


@numba.njit(cache=True)
def future_sums(block, number, remaining, usage, cap, width, num_blocks):
    """float64[num_blocks, width]: out[b, j] = sum over the residents of block b of their
    usage j + 1 windows ahead (0 past their last sample, `remaining` of them), each capped at
    the resident's `cap` (inf for none)."""
    out = np.zeros((num_blocks, width))
    for r in range(len(number)):
        row, at, limit = block[r], number[r], cap[r]
        for lag in range(1, min(width, remaining[r]) + 1):
            value = usage[at + lag]
            out[row, lag - 1] += value if value < limit else limit
    return out


@numba.njit(cache=True)
def warm_ratio_sums(block, number, position, usage, limit, cap_to_limit, window, min_warm,
                    num_blocks):
    """The sums of the warm residents' ratio history per block ([Bashir21] N-sigma, per-machine
    percentile; predictors/peak/machine_samples.WarmRatioHistory): (usage float64[B, window],
    limit float64[B, window], length int64[B], warm_limit float64[B], cold_limit float64[B]).

    A resident is warm when its run (`position` samples up to the window) has at least
    `min_warm` samples; column j sums the warm residents' samples j windows back whose run
    reaches that far (each usage capped at its limit with `cap_to_limit`); length is the
    longest warm run, at most `window`."""
    usage_sums = np.zeros((num_blocks, window))
    limit_sums = np.zeros((num_blocks, window))
    length = np.zeros(num_blocks, np.int64)
    warm_limit = np.zeros(num_blocks)
    cold_limit = np.zeros(num_blocks)
    for r in range(len(number)):
        row, at = block[r], number[r]
        if position[r] < min_warm:
            cold_limit[row] += limit[at]
            continue
        warm_limit[row] += limit[at]
        reach = min(position[r], window)
        if reach > length[row]:
            length[row] = reach
        for back in range(reach):
            value, bound = usage[at - back], limit[at - back]
            usage_sums[row, back] += value if not cap_to_limit or value < bound else bound
            limit_sums[row, back] += bound
    return usage_sums, limit_sums, length, warm_limit, cold_limit
