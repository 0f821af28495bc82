"""The admission's per-window sums over each host's residents (policies/replay/admission.py),
compiled with numba, kept per host from one window to the next.

Residents are given in VM order with their host, their sample at the window in the pool's
VmUsage arrays and its run's position. A host's sums over its lags are kept in a ring of
slots indexed by absolute grid step, shared by all hosts. When a host keeps the same
residents (and, for the oracle, the same caps) from the window before, its sums are those of
the window before, shifted one step: only the newest lag is summed (one sample per resident);
otherwise all its lags are summed again. Either way each sum adds the same samples in the same
order (residents in VM order), so the values are those of a sum from scratch, to the bit.
"""

import numba
import numpy as np


@numba.njit(cache=True)
def _group(hosts, keep, num_hosts):
    """(offsets int64[H + 1], rows int64[m]): the rows r with keep[r], grouped by host, in
    order (host h's rows are rows[offsets[h]:offsets[h + 1]])."""
    offsets = np.zeros(num_hosts + 1, np.int64)
    for r in range(len(hosts)):
        if keep[r]:
            offsets[hosts[r] + 1] += 1
    for h in range(num_hosts):
        offsets[h + 1] += offsets[h]
    rows = np.empty(offsets[num_hosts], np.int64)
    filled = offsets[:num_hosts].copy()
    for r in range(len(hosts)):
        if keep[r]:
            rows[filled[hosts[r]]] = r
            filled[hosts[r]] += 1
    return offsets, rows


@numba.njit(cache=True)
def _unchanged(h, offsets, rows, vms, cap, prev_offsets, prev_vms, prev_cap):
    """Whether host h's grouped residents (their VMs and caps) are those of the window before."""
    lo, prev_lo = offsets[h], prev_offsets[h]
    if offsets[h + 1] - lo != prev_offsets[h + 1] - prev_lo:
        return False
    for i in range(offsets[h + 1] - lo):
        r = rows[lo + i]
        if vms[r] != prev_vms[prev_lo + i] or cap[r] != prev_cap[prev_lo + i]:
            return False
    return True


@numba.njit(cache=True)
def future_sums(hosts, vms, number, remaining, usage, cap, width, num_hosts, step, ring,
                prev_offsets, prev_vms, prev_cap, fresh):
    """Each host's residents' usage summed 1 .. `width` windows after `step` (0 past their
    last sample, `remaining` of them), each capped at the resident's `cap` (inf for none):
    kept in `ring` float64[num_hosts, width], lag j of host h at slot (step + j) % width.

    The window before's (offsets, vms, caps) are prev_*; `fresh` sums every host anew.
    Returns this window's (offsets, vms, caps) for the next."""
    offsets, rows = _group(hosts, np.ones(len(hosts), np.bool_), num_hosts)
    for h in range(num_hosts):
        lo, hi = offsets[h], offsets[h + 1]
        if lo == hi:
            continue
        if not fresh and _unchanged(h, offsets, rows, vms, cap, prev_offsets, prev_vms,
                                    prev_cap):
            total = 0.0
            for i in range(lo, hi):
                r = rows[i]
                if remaining[r] >= width:
                    value, limit = usage[number[r] + width], cap[r]
                    total += value if value < limit else limit
            ring[h, (step + width) % width] = total
            continue
        ring[h, :] = 0.0
        first = (step + 1) % width  # lag 1's slot; lag l's is first + l - 1, wrapped
        for i in range(lo, hi):
            r = rows[i]
            at, limit = number[r], cap[r]
            lags = min(width, remaining[r])
            for lag in range(1, lags + 1):
                slot = first + lag - 1
                if slot >= width:
                    slot -= width
                value = usage[at + lag]
                ring[h, slot] += value if value < limit else limit
    return offsets, vms[rows], cap[rows]


@numba.njit(cache=True)
def warm_ratio_sums(hosts, vms, number, position, usage, limit, cap_to_limit, window, min_warm,
                    num_hosts, step, usage_ring, limit_ring, prev_offsets, prev_vms, fresh):
    """The sums of the warm residents' ratio history per host ([Bashir21] N-sigma,
    per-machine percentile; predictors/peak/machine_samples.WarmRatioHistory), `window`
    samples back from `step`: kept in `usage_ring` and `limit_ring` float64[num_hosts,
    window], lag j of host h at slot (step - j) % window.

    A resident is warm when its run (`position` samples up to the window) has at least
    `min_warm` samples; lag j sums the warm residents' samples j windows back whose run
    reaches that far (each usage capped at its limit with `cap_to_limit`). Returns (offsets
    and vms of the warm residents, for the next window; warm_limit, cold_limit float64[H];
    length int64[H], the longest warm run, at most `window`)."""
    warm = position >= min_warm
    offsets, rows = _group(hosts, warm, num_hosts)
    warm_limit = np.zeros(num_hosts)
    cold_limit = np.zeros(num_hosts)
    length = np.zeros(num_hosts, np.int64)
    for r in range(len(hosts)):
        if not warm[r]:
            cold_limit[hosts[r]] += limit[number[r]]
    no_cap, no_prev_cap = np.zeros(len(hosts)), np.zeros(len(prev_vms))
    slot = step % window
    for h in range(num_hosts):
        lo, hi = offsets[h], offsets[h + 1]
        if lo == hi:
            continue
        for i in range(lo, hi):
            r = rows[i]
            warm_limit[h] += limit[number[r]]
            length[h] = max(length[h], min(position[r], window))
        if not fresh and _unchanged(h, offsets, rows, vms, no_cap, prev_offsets, prev_vms,
                                    no_prev_cap):
            usage_ring[h, slot] = 0.0
            limit_ring[h, slot] = 0.0
            backs = 1
        else:
            usage_ring[h, :] = 0.0
            limit_ring[h, :] = 0.0
            backs = window
        for i in range(lo, hi):
            r = rows[i]
            at = number[r]
            for back in range(min(position[r], backs)):
                at_slot = slot - back
                if at_slot < 0:
                    at_slot += window
                value, bound = usage[at - back], limit[at - back]
                usage_ring[h, at_slot] += value if not cap_to_limit or value < bound else bound
                limit_ring[h, at_slot] += bound
    return offsets, vms[rows], warm_limit, cold_limit, length
