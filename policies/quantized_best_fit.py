"""Quantized Best-Fit: PBFR and its lifetime-aware variant DPBFR ([Barbalho23] §4.3-4.4, App. C).

PBFR ("Prefer Best Fit rule") scores a host by how full it would be after the placement and
quantizes the score into a few buckets, so that lower-ranked rules still have a choice
(rule smoothing). Here the score is the weighted free capacity left after placing the VM,
in units of the largest host's weighted capacity, split into `num_buckets` equal buckets;
the lowest bucket wins and, standing in for the lower-ranked rules, the lowest host id
breaks ties within it. As in Best-Fit, empty hosts are used only when no used host fits.

DPBFR uses `long_lived_num_buckets` (finer) buckets for VMs predicted to live at least
`long_lived_threshold_s` (paper: 5 buckets for long-lived, 3 otherwise, 2-hour threshold).
"""

from typing import Optional, Sequence

from configs.units import US_PER_S
from policies.best_fit import UsedOrEmptyPolicy
from policies.policy import ScheduleTimer
from policies.replay.host_index import NO_HOST
from policies.replay.pool import PoolState


def bucket_of(score: float, weighted_size: float, span: float, num_buckets: int) -> int:
    """Bucket of the free capacity `score - weighted_size` left after a placement."""
    return min(int((score - weighted_size) / span * num_buckets), num_buckets - 1)


class QuantizedBestFit(UsedOrEmptyPolicy):
    """PBFR, Best-Fit on quantized free capacity; DPBFR when `long_lived_num_buckets` is set.

    Args:
      num_buckets: buckets of the free weighted capacity left after a placement (>= 1).
      long_lived_num_buckets: buckets for VMs predicted to live at least
        `long_lived_threshold_s` (DPBFR), or None (PBFR).
      long_lived_threshold_s: seconds from which a predicted lifetime is long.
    """

    uses_exit_estimates = False  # DPBFR reads the arriving VM's prediction only

    def __init__(self, num_buckets: int = 3, long_lived_num_buckets: Optional[int] = None,
                 long_lived_threshold_s: float = 7200.0):
        if num_buckets < 1 or (long_lived_num_buckets is not None and long_lived_num_buckets < 1):
            raise ValueError("bucket counts must be positive")
        self.num_buckets = num_buckets
        self.long_lived_num_buckets = long_lived_num_buckets
        self.long_lived_threshold_us = int(long_lived_threshold_s * US_PER_S)
        self.name = "pbfr" if long_lived_num_buckets is None else "dpbfr"
        self.uses_lifetimes = long_lived_num_buckets is not None

    def bind(self, pool: PoolState, schedule_timer: ScheduleTimer, now_us: int) -> None:
        super().bind(pool, schedule_timer, now_us)
        # Weighted capacity of the largest host: free capacity after a placement is in [0, span].
        self._span = max(pool.weighted_size(limit) for limit in pool.limit.tolist())

    def num_buckets_for(self, exit_us: int, now_us: int) -> int:
        if (self.long_lived_num_buckets is not None
                and exit_us - now_us >= self.long_lived_threshold_us):
            return self.long_lived_num_buckets
        return self.num_buckets

    def select(self, vm: int, demand: Sequence[float], exit_us: int, now_us: int) -> int:
        weighted_size = self._pool.weighted_size(demand)
        num_buckets = self.num_buckets_for(exit_us, now_us)
        for index in (self._used_hosts, self._empty_hosts):
            host = self._lowest_bucket_first_host(index, demand, weighted_size, num_buckets)
            if host != NO_HOST:
                return host
        return NO_HOST

    def _lowest_bucket_first_host(self, index, demand, weighted_size, num_buckets) -> int:
        best_host = index.best_fit(demand, weighted_size)
        if best_host == NO_HOST:
            return NO_HOST
        first = self._pool.free_key[best_host]
        # The lowest bucket with a fitting host is the first fit's; buckets do not decrease
        # along the Best-Fit order, so that bucket's hosts follow the first fit. bucket_of
        # inlined: the loop may visit a third of the hosts.
        span = self._span
        bucket = bucket_of(first[0], weighted_size, span, num_buckets)
        bucket_may_end = bucket < num_buckets - 1
        demand_0, demand_last = demand[0], demand[-1]
        fits = self._pool.fits
        for score, host, room_0, room_last in index.keys_from(first):
            if (bucket_may_end
                    and int((score - weighted_size) / span * num_buckets) > bucket):
                break
            if (host < best_host and demand_0 <= room_0 and demand_last <= room_last
                    and fits(host, demand)):
                best_host = host
        return best_host
