"""ARIMA(0, 1, 1) of predictors/peak/ima.py ([Pace18]'s simulator's ARIMA): theta and sigma^2
equal a brute-force conditional-sum-of-squares search on random series, and the forecast,
given them, equals statsmodels' ARIMA(0, 1, 1) forecast (mean and predictive variance)."""

import numpy as np
import pytest
from statsmodels.tsa.arima.model import ARIMA

from policies.shaping.forecasters import Arima011UsageForecaster
from predictors.peak.ima import THETA_GRID, forecast_from_starts

HORIZON = 5


def _series(length, theta, seed):
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, 0.05, length)
    diffs = noise[1:] + theta * noise[:-1]
    return 0.5 + np.concatenate([[0.0], np.cumsum(diffs)])


def _brute_force(series, start, max_history):
    """(theta, sigma^2, one-step mean) by a loop over THETA_GRID: residuals from the series'
    first difference, squared sum over the history's differences."""
    diffs = np.diff(series[:start])
    first = max(start - max_history, 0)
    best = None
    for theta in THETA_GRID:
        errors, previous = [], 0.0
        for d in diffs:
            previous = d - theta * previous
            errors.append(previous)
        css = float(np.sum(np.square(errors[first:])))
        if best is None or css < best[0] - 1e-15:
            best = (css, theta, errors[-1])
    css, theta, last_error = best
    return theta, css / len(diffs[first:]), series[start - 1] + theta * last_error


@pytest.mark.parametrize("true_theta,seed", [(-0.6, 0), (0.0, 1), (0.5, 2), (0.9, 3)])
def test_fits_equal_a_brute_force_search(true_theta, seed):
    series = _series(120, true_theta, seed)
    starts = np.array([2, 3, 10, 40, 77, 119])
    mean, variance = forecast_from_starts(series, starts, 50, HORIZON)
    for row, start in enumerate(starts):
        theta, sigma2, one_step = _brute_force(series, start, 50)
        assert mean[row, 0] == pytest.approx(one_step, rel=1e-12, abs=1e-12)
        assert np.all(mean[row] == mean[row, 0])  # flat forecast
        lead = np.arange(HORIZON)
        np.testing.assert_allclose(variance[row], sigma2 * (1 + lead * (1 + theta) ** 2),
                                   rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("true_theta,seed", [(-0.5, 4), (0.3, 5)])
def test_the_forecast_given_the_fit_is_statsmodels(true_theta, seed):
    # 400 observations: the zero start of the residuals is forgotten (|theta|^400 ~ 0);
    # statsmodels starts its states approximately diffuse (~1e-9 relative in its forecasts).
    series = _series(400, true_theta, seed)
    mean, variance = forecast_from_starts(series, np.array([400]), 2000, HORIZON)
    theta, sigma2, _ = _brute_force(series, 400, 2000)
    reference = ARIMA(series, order=(0, 1, 1)).filter(np.array([theta, sigma2])) \
        .get_forecast(HORIZON)
    np.testing.assert_allclose(mean[0], reference.predicted_mean, rtol=1e-7)
    np.testing.assert_allclose(variance[0], reference.var_pred_mean, rtol=1e-6)


def test_a_hand_made_step():
    # One step up from 0.2 to 0.6: the forecast stays at the last value whatever theta
    # (theta e_last with theta chosen on 0, ..., 0, 0.4), and the flat rule holds a
    # constant history at its value with zero uncertainty.
    ratio = np.array([0.2] * 12 + [0.6] + [0.6] * 3)
    forecaster = Arima011UsageForecaster(max_history=2000, interval_steps=1,
                                         num_history_samples=3, min_fit_samples=10)
    starts, mean, spread, fits = forecaster.forecast_series(ratio, 60.0)
    assert list(starts) == list(range(10, 16)) and fits == 6
    assert mean[0, 0] == 0.2 and spread[0, 0] == 0.0  # constant history
    theta, _, one_step = _brute_force(ratio, 13, 2000)
    assert mean[3, 0] == pytest.approx(one_step) == pytest.approx(0.6 + theta * 0.4)
    assert mean[5, 0] == 0.6 and spread[5, 0] == 0.0  # the last 3 ratios constant again
