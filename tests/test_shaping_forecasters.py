"""Forecasts over the shaping interval: causal (a forecast at age a uses ages before the
interval's start only), the oracle exact, ARIMA / GP finite on real-looking series."""

import numpy as np

from shaping.forecasters import (
    ArimaUsageForecaster,
    GaussianProcessUsageForecaster,
    OracleForecaster,
    forecast_workload,
)
from shaping.policies.optimistic import Optimistic
from shaping.workload import Workload


def _series(length=60, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(0.5 + 0.2 * np.sin(np.arange(length) / 5) + rng.normal(0, 0.03, length),
                   0, 1)


def test_oracle_is_the_ratio_with_no_uncertainty():
    mean, spread, fits = OracleForecaster().forecast_series(_series(), 300)
    np.testing.assert_array_equal(mean, _series())
    assert fits == 0 and not spread.any()


def test_forecasts_start_after_min_fit_samples_and_never_see_the_future():
    ratio = _series()
    for forecaster in (ArimaUsageForecaster(interval_steps=6, min_fit_samples=10),
                       GaussianProcessUsageForecaster(interval_steps=6, min_fit_samples=10)):
        mean, spread, fits = forecaster.forecast_series(ratio, 300)
        assert np.isnan(mean[:12]).all()  # first interval start >= 10 on the 6-step grid
        assert np.isfinite(mean[12:]).all() and (spread[12:] >= 0).all()
        assert fits == len(range(12, 60, 6))
        # Changing the future (ages >= 30) changes no forecast of the interval at 24..29.
        changed = ratio.copy()
        changed[30:] = 0.0
        again, _, _ = forecaster.forecast_series(changed, 300)
        np.testing.assert_array_equal(again[:30], mean[:30])


def test_std_option_is_the_square_root_of_the_variance():
    ratio = _series()
    _, variance, _ = ArimaUsageForecaster(interval_steps=6).forecast_series(ratio, 300)
    _, std, _ = ArimaUsageForecaster(interval_steps=6, uncertainty="std").forecast_series(
        ratio, 300)
    np.testing.assert_allclose(std, np.sqrt(variance))


def test_targets_are_the_interval_peak_plus_beta_capped_at_the_request():
    usage = np.column_stack([[1, 2, 3, 2, 1, 1, 4, 1], [1, 1, 1, 1, 1, 1, 1, 1]]) * 1.0
    workload = Workload.from_series(300, [0], [0], [1], [[4, 2]], [False], [usage])
    policy = Optimistic(k1=0.25, k2=0.0).fit(
        workload, forecast_workload(workload, OracleForecaster()), 3)
    targets = policy.targets(np.zeros(8, dtype=np.int64), np.arange(8))
    # Peak of the next 3 ages, + 0.25 · request, at most the request (4 CPU, 2 memory).
    np.testing.assert_allclose(targets[:, 0], np.minimum(np.array([3, 3, 3, 2, 4, 4, 4, 1]) + 1.0, 4))
    np.testing.assert_allclose(targets[:, 1], [1.5] * 8)
    # Without forecasts for some age of the interval, the target is the request.
    arima = Optimistic().fit(workload, forecast_workload(
        workload, ArimaUsageForecaster(interval_steps=3, min_fit_samples=10)), 3)
    np.testing.assert_allclose(arima.targets(np.zeros(8, dtype=np.int64), np.arange(8)),
                               np.tile([4.0, 2.0], (8, 1)))
