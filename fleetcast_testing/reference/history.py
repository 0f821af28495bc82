"""Brute-force customer-history statistics: every instance masks every other one (O(n²)). For
tests and benchmarks only; `predictors.lifetime.history.history_statistics` is the real one."""

import numpy as np

STATISTICS = ("prior_instances", "prior_long", "prior_ended", "lifetime_p50_s",
              "lifetime_p75_s", "lifetime_p90_s", "log10_lifetime_mean", "log10_lifetime_std")


def history_statistics(key, start_us, end_us, ended, lifetime_known, *,
                       long_lived_threshold_s: float, lookback_s: float):
    """Same contract as predictors.lifetime.history.history_statistics, row by row."""
    key, start_us, end_us = (np.asarray(a, np.int64) for a in (key, start_us, end_us))
    ended, lifetime_known = np.asarray(ended, bool), np.asarray(lifetime_known, bool)
    threshold_us = round(long_lived_threshold_s * 1_000_000)
    lookback_us = max(1, round(lookback_s * 1_000_000)) if lookback_s > 0 else None
    lifetime_us = np.where(ended, end_us - start_us, 0)
    long_lived = ~ended | (lifetime_us > threshold_us)
    out = {name: np.full(len(key), np.nan) for name in STATISTICS}
    for i in np.flatnonzero(key >= 0):
        t = int(start_us[i])  # a Python int: t - θ - W cannot overflow
        others = (key == key[i]) & (np.arange(len(key)) != i)
        out["prior_instances"][i] = (others & _in_window(start_us, t, lookback_us)).sum()
        # start + θ in [t - W, t), i.e. start in [t - θ - W, t - θ).
        crossed = _in_window(start_us, t - threshold_us, lookback_us)
        out["prior_long"][i] = (others & crossed & long_lived).sum()
        prior_ended = others & ended & lifetime_known & _in_window(end_us, t, lookback_us)
        out["prior_ended"][i] = prior_ended.sum()
        if prior_ended.any():
            lifetimes_s = lifetime_us[prior_ended] / 1e6
            percentiles = np.percentile(lifetimes_s, [50, 75, 90], method="inverted_cdf")
            for name, value in zip(STATISTICS[3:6], percentiles):
                out[name][i] = value
            out["log10_lifetime_mean"][i] = np.mean(np.log10(lifetimes_s))
            out["log10_lifetime_std"][i] = np.std(np.log10(lifetimes_s))
    return out


def _in_window(times_us, until_us, lookback_us):
    """times_us in [until_us - lookback_us, until_us) (no lower bound when lookback_us is None)."""
    window = times_us < until_us
    if lookback_us is not None:
        window &= times_us >= until_us - lookback_us
    return window
