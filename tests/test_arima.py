"""The one ARIMA, the batched closed-form ARIMA(p, 1, 0) of predictors/peak/arima.py, against
statsmodels on random series, directly and through both callers (the overcommit and the
shaping forecasters): the same AIC order, the same conditional-least-squares coefficients, the same
forecast mean and predictive variance to 1e-6 relative (statsmodels initializes the
states approximately diffuse, with a 1e6 variance, which leaves ~1e-7 relative in its
forecasts; without enforce_stationarity=False it would also replace an explosive OLS fit)."""

import numpy as np
import pytest
from statsmodels.tsa.ar_model import AutoReg, ar_select_order
from statsmodels.tsa.arima.model import ARIMA

from policies.shaping.forecasters import ArimaUsageForecaster
from predictors.peak.arima import fit_forecast
from predictors.peak.arima_forecaster import ArimaForecaster

HORIZON = 12


def _windows(count, length=10, seed=0):
    rng = np.random.default_rng(seed)
    walk = 0.5 + np.cumsum(rng.normal(0, 0.05, (count, length)), axis=1)
    cycle = 0.2 * np.sin(np.arange(length) / rng.uniform(0.5, 3, (count, 1)))
    return np.clip(walk + cycle * rng.integers(0, 2, (count, 1)), 0, 1.5)


def _reference(window, max_lag=2):
    """statsmodels: AIC lag selection on the differences, OLS fit, ARIMA forecast."""
    diffs = np.diff(window)
    selected = ar_select_order(diffs, maxlag=max_lag, ic="aic", trend="n")
    p = len(selected.ar_lags or [])
    if p:
        fitted = AutoReg(diffs, lags=p, trend="n", hold_back=max_lag).fit()
        params, sigma2 = np.asarray(fitted.params), fitted.sigma2
    else:
        params, sigma2 = np.zeros(0), np.mean(diffs[max_lag:] ** 2)
    forecast = ARIMA(window, order=(p, 1, 0), enforce_stationarity=False) \
        .filter(np.r_[params, sigma2]).get_forecast(HORIZON)
    return p, np.asarray(forecast.predicted_mean), np.asarray(forecast.var_pred_mean)


def test_fast_fit_equals_statsmodels_on_random_series():
    windows = _windows(60)
    mean, variance, lags = fit_forecast(windows, HORIZON)
    chosen = set()
    for i, window in enumerate(windows):
        p, ref_mean, ref_variance = _reference(window)
        assert lags[i] == p, i
        np.testing.assert_allclose(mean[i], ref_mean, rtol=1e-6, atol=1e-10)
        np.testing.assert_allclose(variance[i], ref_variance, rtol=1e-6, atol=1e-12)
        chosen.add(p)
    assert chosen == {0, 1, 2}  # every order is exercised


def test_variance_grows_with_the_lead_time_and_singular_orders_are_skipped():
    windows = _windows(20, seed=1)
    _, variance, _ = fit_forecast(windows, HORIZON)
    assert (np.diff(variance, axis=1) >= -1e-15).all() and (variance > 0).all()
    # One jump in an otherwise flat window: the lagged differences are all zero for AR(1)
    # and AR(2) (singular), so the random walk is fitted.
    step = np.r_[np.full(9, 0.3), 0.6][None, :]
    mean, variance, lags = fit_forecast(step, 3)
    assert lags[0] == 0
    np.testing.assert_allclose(mean[0], 0.6)
    assert np.isfinite(variance).all()


def test_too_short_a_window_is_refused():
    with pytest.raises(ValueError, match="cannot fit AR"):
        fit_forecast(np.zeros((1, 5)), 3)


def test_both_callers_forecast_statsmodels_paths():
    """The overcommit forecaster's refit path and the shaping forecaster's interval path of a
    10-sample window are statsmodels' ARIMA forecasts of that window."""
    overcommit = ArimaForecaster(num_history_samples=10, refit_every_steps=HORIZON,
                                 min_fit_samples=10)
    shaping = ArimaUsageForecaster(interval_steps=(HORIZON + 1) // 2)
    assert shaping.horizon_steps == HORIZON - 1
    for window in _windows(12, seed=2):
        _, ref_mean, ref_variance = _reference(window)
        mean, variance = overcommit.forecast_path(window)
        np.testing.assert_allclose(mean, ref_mean, rtol=1e-6, atol=1e-10)
        np.testing.assert_allclose(variance, ref_variance, rtol=1e-6, atol=1e-12)
        (mean, variance), = shaping.forecast_windows([window], np.array([10]), 300.0)
        np.testing.assert_allclose(mean, ref_mean[:-1], rtol=1e-6, atol=1e-10)
        np.testing.assert_allclose(variance, ref_variance[:-1], rtol=1e-6, atol=1e-12)


def test_a_short_history_fits_the_orders_it_supports():
    # Five samples support p <= 1 (2p + 2 <= 5): AR(2) is not tried, nothing fails.
    window = np.array([0.2, 0.4, 0.3, 0.5, 0.45])
    mean, variance = ArimaForecaster(min_fit_samples=2).forecast_path(window)
    reference, ref_variance, p = fit_forecast(window[None, :], 12, [0, 1])
    np.testing.assert_array_equal(mean, reference[0])
    np.testing.assert_array_equal(variance, ref_variance[0])
