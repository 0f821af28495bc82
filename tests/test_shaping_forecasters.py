"""Forecasts over the shaping interval: causal (a forecast at age a uses ages before the
interval's start only), the oracle exact, ARIMA / GP finite on real-looking series."""

import numpy as np

from policies.shaping.forecasters import (
    ArimaUsageForecaster,
    Forecasts,
    GaussianProcessUsageForecaster,
    OracleForecaster,
    forecast_workload,
)
from policies.shaping.shapers.optimistic import Optimistic
from policies.shaping.workload import Workload


def _series(length=60, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(0.5 + 0.2 * np.sin(np.arange(length) / 5) + rng.normal(0, 0.03, length),
                   0, 1)


def test_oracle_paths_are_the_ratio_from_every_interval_start():
    ratio = _series()
    starts, mean, spread, fits = OracleForecaster(interval_steps=6).forecast_series(ratio, 300)
    np.testing.assert_array_equal(starts, np.arange(0, 60, 6))
    assert mean.shape == (10, 11) and fits == 0 and not spread.any()
    np.testing.assert_array_equal(mean[2], ratio[12:23])
    # Past the end of the series: -inf, which no interval peak takes.
    np.testing.assert_array_equal(mean[9], np.r_[ratio[54:], [-np.inf] * 5])


def test_forecasts_start_after_min_fit_samples_and_never_see_the_future():
    ratio = _series()
    for forecaster in (ArimaUsageForecaster(interval_steps=6, min_fit_samples=10),
                       GaussianProcessUsageForecaster(interval_steps=6, min_fit_samples=10)):
        starts, mean, spread, fits = forecaster.forecast_series(ratio, 300)
        # The first start >= 10 on the 6-step grid; each fit forecasts 2 · 6 - 1 steps.
        np.testing.assert_array_equal(starts, np.arange(12, 60, 6))
        within = np.isfinite(mean)
        assert within.sum() == sum(min(11, 60 - s) for s in starts)
        assert (spread[within] >= 0).all() and fits == len(starts)
        # Changing the future (ages >= 30) changes no fit that starts at 30 or before.
        changed = ratio.copy()
        changed[30:] = 0.0
        _, again, _, _ = forecaster.forecast_series(changed, 300)
        np.testing.assert_array_equal(again[starts <= 30], mean[starts <= 30])


def test_a_target_depends_on_the_usage_before_its_age_only():
    """The allocation at age a holds for a .. a + S - 1 and uses the fit at S·floor(a/S):
    changing the usage from any age m on changes no target before m."""
    usage = np.column_stack([_series(), _series(seed=1)])
    for forecaster in (ArimaUsageForecaster(interval_steps=6, min_fit_samples=10),
                       GaussianProcessUsageForecaster(interval_steps=6, min_fit_samples=10)):
        def targets(series, forecaster=forecaster):
            workload = Workload.from_series(300, [0], [0], [1], [[1.0, 1.0]], [False],
                                            [series])
            policy = Optimistic(k1=0.0, k2=1.0).fit(
                workload, forecast_workload(workload, forecaster), 6)
            return policy.targets(np.zeros(60, dtype=np.int64), np.arange(60))

        expected = targets(usage)
        assert np.isfinite(expected[12:]).all()
        for m in (13, 20, 31, 44):
            changed = usage.copy()
            changed[m:] = 0.05
            np.testing.assert_array_equal(targets(changed)[:m], expected[:m], err_msg=str(m))


def test_std_option_is_the_square_root_of_the_variance():
    ratio = _series()
    _, _, variance, _ = ArimaUsageForecaster(interval_steps=6).forecast_series(ratio, 300)
    _, _, std, _ = ArimaUsageForecaster(interval_steps=6, uncertainty="std").forecast_series(
        ratio, 300)
    np.testing.assert_allclose(std, np.sqrt(variance))


def test_targets_are_the_interval_peak_plus_beta_capped_at_the_request():
    usage = np.column_stack([[1, 2, 3, 2, 1, 1, 4, 1], [1, 1, 1, 1, 1, 1, 1, 1]]) * 1.0
    workload = Workload.from_series(300, [0], [0], [1], [[4, 2]], [False], [usage])
    policy = Optimistic(k1=0.25, k2=0.0).fit(
        workload, forecast_workload(workload, OracleForecaster()), 3)
    targets = policy.targets(np.zeros(8, dtype=np.int64), np.arange(8))
    # Peak of the next 3 ages, + 0.25 · request, at most the request (4 CPU, 2 memory).
    np.testing.assert_allclose(targets[:, 0],
                               np.minimum(np.array([3, 3, 3, 2, 4, 4, 4, 1]) + 1.0, 4))
    np.testing.assert_allclose(targets[:, 1], [1.5] * 8)
    # Without forecasts for some age of the interval, the target is the request.
    arima = Optimistic().fit(workload, forecast_workload(
        workload, ArimaUsageForecaster(interval_steps=3, min_fit_samples=10)), 3)
    np.testing.assert_allclose(arima.targets(np.zeros(8, dtype=np.int64), np.arange(8)),
                               np.tile([4.0, 2.0], (8, 1)))


def test_a_negative_forecast_mean_is_clipped_at_zero():
    """An ARIMA path below 0 must not cut the allocation below K1 · request: with K1 = 1 the
    target is exactly the request, with K1 = 0.25 it is 0.25 · request (+ K2 · V)."""
    mean = np.full((1, 5, 2), -0.4)
    mean[0, 4] = -np.inf  # past the end of the series
    forecasts = Forecasts(mean, np.full((1, 5, 2), 0.1), np.zeros(3, dtype=np.int64),
                          np.arange(3), fits=1)
    np.testing.assert_allclose(forecasts.interval_peaks(2.0, 3), np.full((3, 2), 0.2))
    workload = Workload.from_series(300, [0], [0], [1], [[4.0, 2.0]], [False],
                                    [np.ones((3, 2))])
    for k1, k2, expected in ((1.0, 0.0, [4.0, 2.0]), (0.25, 0.0, [1.0, 0.5]),
                             (0.25, 2.0, [1.8, 0.9])):
        policy = Optimistic(k1=k1, k2=k2).fit(workload, forecasts, 3)
        np.testing.assert_allclose(policy.targets(np.zeros(3, dtype=np.int64), np.arange(3)),
                                   np.tile(expected, (3, 1)), err_msg=f"{k1} {k2}")
