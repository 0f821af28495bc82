"""Customer-history features of each arrival ([Barbalho23] §3.2.2, App. B.1) in one sorted sweep.

For instance i of key k arriving at t = start_us[i], over the *other* instances j of key k
(never i itself, nor one that also starts at t), with W the look-back (unlimited when
`lookback_s` is 0) and θ the long-lived threshold, both rounded to whole µs:

- prior_instances: #{j : t - W <= start_j < t};
- prior_long: #{j long-lived : t - W <= start_j + θ < t}, where j is long-lived when it ended
  with end_j - start_j > θ or has not ended (censored: known long once it passes θ);
- prior_ended: #{j : ended_j and lifetime_known_j and t - W <= end_j < t};
- lifetime_p50_s, lifetime_p75_s, lifetime_p90_s: nearest-rank percentiles (the k-th smallest,
  k = ceil(q·m): numpy's method="inverted_cdf") of the lifetimes L_j = (end_j - start_j) / 1e6
  s of those m prior_ended instances; log10_lifetime_mean, log10_lifetime_std: the mean and
  population std (ddof=0) of log10 L_j; NaN when m is 0.

Counts are float64; a row whose key is -1 is NaN throughout and in no one's history. An
instance with lifetime_known False (it started before the trace) counts as an arrival and can
be long-lived but enters no lifetime statistic. The end_us of an instance that has not ended
is never used.

The sweep: keyed instances sorted by (key, start), those with a known lifetime by (key, end)
and by (key, lifetime); per key, pointers move forward over those orders as t grows, and the
lifetimes whose end is in [t - W, t) are kept in a Fenwick tree over their ranks (k-th smallest
by binary lifting) and in double-double sums of log10 L and its square (so the std matches a
two-pass one even after many expiries). O(n log n). The kernels are compiled by numba and
cached on disk (`__pycache__`, or NUMBA_CACHE_DIR); they all live in this module, whose time
stamp numba's cache follows.
"""

import math
from typing import Dict, Tuple

import numba
import numpy as np

from configs.units import US_PER_S

HISTORY_STATISTICS = ("prior_instances", "prior_long", "prior_ended", "lifetime_p50_s",
                      "lifetime_p75_s", "lifetime_p90_s", "log10_lifetime_mean",
                      "log10_lifetime_std")
# The keys whose history the pipeline adds to the instances (pipelines/history.py): the
# customer, and the logical name of a recurring workload.
HISTORY_KEYS = ("customer", "logical_name")


def history_column(key: str, statistic: str) -> str:
    """The instances column (and lifetime feature) of `statistic` of `key`."""
    return f"{key}_{statistic}"


# Start and end times must lie within ±2^60 µs (36,000 years), so that t - θ - W cannot overflow.
TIME_LIMIT_US = 2 ** 60
_INT64_MAX = int(np.iinfo(np.int64).max)
_DEKKER_SPLIT = 134217729.0  # 2^27 + 1


def history_statistics(key, start_us, end_us, ended, lifetime_known, *,
                       long_lived_threshold_s: float,
                       lookback_s: float) -> Dict[str, np.ndarray]:
    """The customer-history statistics of every instance (the contract is the module's).

    Args:
      key: int64[n], the customer code of each instance; -1 for none.
      start_us: int64[n], arrival times (µs).
      end_us: int64[n], end times (µs); read only where `ended`.
      ended: bool[n], False for an instance still running at the trace end (censored).
      lifetime_known: bool[n], False for an instance that started before the trace.
      long_lived_threshold_s: θ (s), >= 0.
      lookback_s: W (s), > 0, or 0 for no look-back limit.

    Returns:
      {name: float64[n]} for each name of HISTORY_STATISTICS, rows in input order.

    Raises:
      ValueError: arrays of different lengths or kinds, a key below -1, a bad θ or W, a time
        beyond ±TIME_LIMIT_US, or an ended instance with a known lifetime that is not positive.
    """
    threshold_us, lookback_us = _window_us(long_lived_threshold_s, lookback_s)
    key, start_us, end_us, ended, lifetime_known = _checked_arrays(
        key=key, start_us=start_us, end_us=end_us, ended=ended, lifetime_known=lifetime_known)
    keyed = np.flatnonzero(key >= 0)
    keyed_ended = keyed[ended[keyed]]
    known = keyed_ended[lifetime_known[keyed_ended]]
    keyed_start_us, known_end_us = start_us[keyed], end_us[known]
    _check_times(keyed_start_us, end_us[keyed_ended], start_us[known], known_end_us)
    out = np.empty((len(HISTORY_STATISTICS), len(key)))
    if keyed.size < len(key):
        out[:, key < 0] = np.nan
    if keyed.size:
        threshold_us, lookback_us = _clipped_to_span(threshold_us, lookback_us, keyed_start_us,
                                                     known_end_us)
        by_start, sweep_arrays = _sweep_arrays(key, start_us, end_us, ended, keyed, known,
                                               threshold_us)
        sorted_out = np.empty((len(HISTORY_STATISTICS), len(by_start)))
        _sweep(*sweep_arrays, threshold_us, lookback_us, sorted_out)
        for statistic, sorted_statistic in zip(out, sorted_out):
            statistic[by_start] = sorted_statistic
    return dict(zip(HISTORY_STATISTICS, out))


def _checked_arrays(**arrays) -> Tuple[np.ndarray, ...]:
    """The inputs as contiguous int64 (key, times) and bool (flags) arrays of one length."""
    converted = []
    for name, values in arrays.items():
        values = np.asarray(values)
        boolean = name in ("ended", "lifetime_known")
        if values.ndim != 1 or values.dtype.kind not in ("b" if boolean else "iu"):
            kind = "bool" if boolean else "integer"
            raise ValueError(f"{name} must be a 1-D {kind} array, got {values.dtype}{values.shape}")
        converted.append(np.ascontiguousarray(values, bool if boolean else np.int64))
    if len({len(values) for values in converted}) > 1:
        raise ValueError(f"arrays of different lengths: {[len(values) for values in converted]}")
    if converted[0].size and converted[0].min() < -1:
        raise ValueError(f"key must be >= 0, or -1 for none; got {converted[0].min()}")
    return tuple(converted)


def _check_times(start_us, end_us, known_start_us, known_end_us) -> None:
    """Raises ValueError unless the times are within ±TIME_LIMIT_US and known lifetimes > 0."""
    for name, times in (("start_us", start_us), ("end_us", end_us)):
        if times.size and max(-int(times.min()), int(times.max())) > TIME_LIMIT_US:
            raise ValueError(f"{name} must lie within ±2^60 µs")
    bad = np.flatnonzero(known_end_us <= known_start_us)
    if bad.size:
        raise ValueError(f"{bad.size} ended instances with a known lifetime end at or before "
                         f"their start (e.g. start_us {known_start_us[bad[0]]}, end_us "
                         f"{known_end_us[bad[0]]})")


def _window_us(long_lived_threshold_s, lookback_s) -> Tuple[int, int]:
    """(θ, W) in whole µs, W = 0 for unlimited (a positive W is at least 1 µs)."""
    if not 0 <= long_lived_threshold_s < math.inf:
        raise ValueError(f"long_lived_threshold_s must be >= 0, got {long_lived_threshold_s}")
    if not 0 <= lookback_s < math.inf:
        raise ValueError(f"lookback_s must be > 0, or 0 for unlimited; got {lookback_s}")
    lookback_us = max(1, round(lookback_s * US_PER_S)) if lookback_s > 0 else 0
    return round(long_lived_threshold_s * US_PER_S), lookback_us


def _clipped_to_span(threshold_us, lookback_us, start_us, known_end_us) -> Tuple[int, int]:
    """(θ, W) clipped to the span of the times, so that t - θ - W stays within int64: a θ or
    W longer than every t - x gives the same answers (W then unlimited, 0)."""
    earliest_us = min(int(start_us.min()), int(known_end_us.min(initial=_INT64_MAX)))
    span_us = int(start_us.max()) - earliest_us
    return min(threshold_us, span_us + 1), (lookback_us if lookback_us <= span_us else 0)


def _sweep_arrays(key, start_us, end_us, ended, keyed, known, threshold_us):
    """(keyed rows by (key, start), the kernel's arrays). By (key, start): the per key offsets,
    the starts and the long-lived flags; of the known lifetimes: the per key offsets (the same
    by (key, end) and by (key, lifetime)), by (key, end): the ends and the ranks of the
    lifetimes; by (key, lifetime): the lifetimes (s) and their log10."""
    by_start = keyed[_order_by(key[keyed], start_us[keyed])]
    start_offsets = np.flatnonzero(np.diff(key[by_start], prepend=-1, append=-1))
    num_keys = len(start_offsets) - 1
    code = np.empty(len(key), np.int64)
    code[by_start] = np.repeat(np.arange(num_keys), np.diff(start_offsets))
    known_code, known_end_us = code[known], end_us[known]
    lifetime_us = known_end_us - start_us[known]
    end_offsets = np.concatenate([[0], np.cumsum(np.bincount(known_code, minlength=num_keys))])
    by_end = _order_by(known_code, known_end_us)
    by_lifetime = _order_by(known_code, lifetime_us)
    rank = np.empty(len(known), np.int64)
    rank[by_lifetime] = np.arange(len(known)) - np.repeat(end_offsets[:-1], np.diff(end_offsets))
    # 0 while running; on a row without a key (never read) a bad end may wrap around.
    lived_us = np.where(ended, end_us, start_us) - start_us
    long_lived = ~ended | (lived_us > threshold_us)
    lifetime_s = lifetime_us[by_lifetime] / US_PER_S
    return by_start, (start_offsets, start_us[by_start], long_lived[by_start], end_offsets,
                      known_end_us[by_end], rank[by_end], lifetime_s, np.log10(lifetime_s))


def _order_by(code: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Indices that sort rows by (code, value), int64[n]: one argsort of a combined int64 when
    code·span + value fits in one, else a lexsort."""
    if code.size == 0:
        return np.zeros(0, np.int64)
    code_low, value_low = int(code.min()), int(value.min())
    span = int(value.max()) - value_low + 1
    if (int(code.max()) - code_low + 1) * span <= _INT64_MAX:
        return np.argsort((code - code_low) * span + (value - value_low))
    return np.lexsort((value, code))


@numba.njit(cache=True)
def _sweep(start_offsets, start_us, long_lived, end_offsets, end_us, rank, lifetime_s,
           log10_lifetime, threshold_us, lookback_us, out):
    """Fills out, float64[8, n] (statistics × keyed rows in (key, start) order), key by key."""
    tree = np.zeros(len(end_us) + 1, np.int64)
    sums = np.zeros(4)
    for k in range(len(start_offsets) - 1):
        _sweep_key(start_offsets[k], start_offsets[k + 1], end_offsets[k], end_offsets[k + 1],
                   start_us, long_lived, end_us, rank, lifetime_s, log10_lifetime,
                   threshold_us, lookback_us, tree, sums, out)


@numba.njit(cache=True)
def _sweep_key(first, last, first_end, last_end, start_us, long_lived, end_us, rank, lifetime_s,
               log10_lifetime, threshold_us, lookback_us, tree, sums, out):
    """One key's rows [first, last) of the (key, start) order; its known lifetimes are
    [first_end, last_end) of the (key, end) order and of the (key, lifetime) order."""
    size = last_end - first_end
    for i in range(size + 1):
        tree[i] = 0
    top = 1  # the largest power of two <= size
    while top * 2 <= size:
        top *= 2
    _clear(sums)
    lifetimes = lifetime_s[first_end:last_end]
    logs = log10_lifetime[first_end:last_end]
    oldest = crossed = oldest_crossed = first  # the first start >= t - W, t - θ, t - θ - W
    num_long = 0  # long-lived instances among [oldest_crossed, crossed)
    ended_from = ended_to = first_end  # the ends in [t - W, t)
    row = first
    while row < last:
        t = start_us[row]
        while start_us[crossed] < t - threshold_us:
            num_long += long_lived[crossed]
            crossed += 1
        while ended_to < last_end and end_us[ended_to] < t:
            _update(tree, size, sums, rank[ended_to], logs, 1)
            ended_to += 1
        if lookback_us > 0:
            while start_us[oldest] < t - lookback_us:
                oldest += 1
            while start_us[oldest_crossed] < t - threshold_us - lookback_us:
                num_long -= long_lived[oldest_crossed]
                oldest_crossed += 1
            while ended_from < ended_to and end_us[ended_from] < t - lookback_us:
                _update(tree, size, sums, rank[ended_from], logs, -1)
                ended_from += 1
            if ended_from == ended_to:
                _clear(sums)  # an empty window: no rounding carried over
        tie_end = row + 1
        while tie_end < last and start_us[tie_end] == t:
            tie_end += 1
        out[0, row] = row - oldest
        out[1, row] = num_long
        _lifetime_statistics(tree, size, top, sums, ended_to - ended_from, lifetimes,
                             out[2:, row])
        for tied in range(row + 1, tie_end):
            for j in range(len(out)):
                out[j, tied] = out[j, row]
        row = tie_end


@numba.njit(cache=True, inline="always")
def _clear(sums):
    """Zeroes the double-double sums."""
    for i in range(len(sums)):
        sums[i] = 0.0


@numba.njit(cache=True, inline="always")
def _update(tree, size, sums, rank, logs, sign):
    """Adds (sign 1) or removes (sign -1) the lifetime of rank `rank` in the window."""
    i = rank + 1
    while i <= size:
        tree[i] += sign
        i += i & -i
    value = sign * logs[rank]
    square, square_error = _two_product(value, logs[rank])
    _add_double_double(sums, 0, value, 0.0)
    _add_double_double(sums, 2, square, square_error)


@numba.njit(cache=True, inline="always")
def _lifetime_statistics(tree, size, top, sums, count, lifetimes, out):
    """out[:] = count, p50, p75, p90 (s), mean and std of log10 of the window's lifetimes."""
    out[0] = count
    if count == 0:
        for j in range(1, len(out)):
            out[j] = np.nan
        return
    for j, percent in enumerate((50, 75, 90)):
        out[1 + j] = lifetimes[_kth_rank(tree, size, top, (percent * count + 99) // 100)]
    out[4] = (sums[0] + sums[1]) / count
    # count · Σx² - (Σx)², in double-double: the variance without cancellation.
    scaled_hi, scaled_lo = _two_product(sums[2], float(count))
    square_hi, square_lo = _two_product(sums[0], sums[0])
    difference_hi, difference_lo = _two_sum(scaled_hi, -square_hi)
    difference_lo += sums[3] * count - 2.0 * sums[0] * sums[1] + (scaled_lo - square_lo)
    out[5] = math.sqrt(max(difference_hi + difference_lo, 0.0)) / count


@numba.njit(cache=True, inline="always")
def _kth_rank(tree, size, top, k):
    """The rank of the k-th smallest (k >= 1) lifetime in the Fenwick tree, by binary lifting
    (top: the largest power of two <= size)."""
    position = 0
    step = top
    while step > 0:
        if position + step <= size and tree[position + step] < k:
            position += step
            k -= tree[position]
        step //= 2
    return position


@numba.njit(cache=True, inline="always")
def _two_sum(a, b):
    """(s, e): s = fl(a + b) and a + b = s + e exactly (Knuth)."""
    s = a + b
    v = s - a
    return s, (a - (s - v)) + (b - v)


@numba.njit(cache=True, inline="always")
def _two_product(a, b):
    """(p, e): p = fl(a · b) and a · b = p + e exactly (Dekker's split, no FMA)."""
    p = a * b
    a_big = _DEKKER_SPLIT * a
    a_hi = a_big - (a_big - a)
    b_big = _DEKKER_SPLIT * b
    b_hi = b_big - (b_big - b)
    a_lo, b_lo = a - a_hi, b - b_hi
    return p, ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo


@numba.njit(cache=True, inline="always")
def _add_double_double(sums, at, hi, lo):
    """(sums[at], sums[at + 1]) += (hi, lo), a double-double sum."""
    s, e = _two_sum(sums[at], hi)
    e += sums[at + 1] + lo
    total = s + e
    sums[at + 1] = e - (total - s)
    sums[at] = total
