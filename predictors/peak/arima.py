"""ARIMA(p, 1, 0) fits and forecasts in closed form, batched ([Pace18] §III-A.1, §V): the one
ARIMA of fleetcast, used by the overcommit forecaster (predictors/peak/arima_forecaster.py)
and the shaping forecaster (policies/shaping/forecasters.py).

[Pace18] fits ARIMA by an automatic order search (AIC) on the last ten observations at every
forecast. Here, for every window of a batch at once (numpy over the batch, a p x p solve per
window):

- the model is an AR(p) on the first differences, no constant, p chosen per window by AIC
  among `lags` (default 0, 1, 2): [Pace18]'s AIC selection restricted to pure AR orders. There
  is no MA term, so that a fit is closed form; on nine differences p <= 2 is also what an AIC
  search can support;
- the coefficients are conditional least squares, the first max(lags) differences held back
  so that every candidate's AIC is on the same sample, sigma^2 = RSS / nobs: statsmodels'
  `AutoReg(diff, lags=p, trend="n", hold_back=max(lags))`;
- the forecast mean and predictive variance are statsmodels' ARIMA(p, 1, 0) `get_forecast`
  with those parameters (tests/test_arima.py checks them on random series).
"""

from typing import Sequence

import numpy as np

DEFAULT_LAGS = (0, 1, 2)
# A window whose lagged-difference matrix is this close to singular cannot support the order.
SINGULAR_TOLERANCE = 1e-12


def supported_lags(lags: Sequence[int], length: int) -> list:
    """The orders of `lags` that a window of `length` observations can fit (2p + 2 <= length),
    or [0] (the random walk) when none can."""
    return [p for p in lags if 2 * p + 2 <= length] or [0]


def fit_forecast(histories: np.ndarray, horizon_steps: int, lags: Sequence[int] = DEFAULT_LAGS):
    """ARIMA(p, 1, 0) forecasts of every window, p chosen by AIC among `lags`.

    Args: histories float64[M, n] (oldest first, n >= 2 · max(lags) + 2).
    Returns (mean, variance) float64[M, horizon_steps] and the chosen p int64[M].
    """
    diffs = np.diff(histories, axis=1)
    hold_back = max(lags)
    if diffs.shape[1] - hold_back < hold_back + 1:
        raise ValueError(f"{histories.shape[1]} observations cannot fit AR({hold_back}) "
                         "on their differences")
    best_aic = np.full(len(diffs), np.inf)
    best_p = np.zeros(len(diffs), dtype=np.int64)
    phi = np.zeros((len(diffs), hold_back))
    sigma2 = np.zeros(len(diffs))
    for p in sorted(lags):
        coefficients, residual_var = conditional_least_squares(diffs, p, hold_back)
        nobs = diffs.shape[1] - hold_back
        with np.errstate(divide="ignore", invalid="ignore"):
            aic = nobs * np.log(residual_var) + 2 * p
        better = np.isfinite(coefficients).all(axis=1) & ~(aic >= best_aic) & ~np.isnan(aic)
        best_aic[better], best_p[better], sigma2[better] = aic[better], p, residual_var[better]
        phi[better] = 0.0
        phi[better, :p] = coefficients[better]
    mean, variance = integrated_ar_forecast(histories, phi, sigma2, horizon_steps)
    return mean, variance, best_p


def conditional_least_squares(diffs: np.ndarray, p: int, hold_back: int):
    """OLS AR(p) coefficients float64[M, p] (NaN rows: singular) and RSS / nobs float64[M]
    of every row of diffs float64[M, m], on targets diffs[:, hold_back:]."""
    targets = diffs[:, hold_back:]
    if p == 0:
        return np.zeros((len(diffs), 0)), np.mean(targets ** 2, axis=1)
    m = diffs.shape[1]
    # regressors[:, t, i] = diffs[:, hold_back + t - 1 - i]
    regressors = np.stack([diffs[:, hold_back - 1 - i:m - 1 - i] for i in range(p)], axis=2)
    gram = np.einsum("mti,mtj->mij", regressors, regressors)
    moment = np.einsum("mti,mt->mi", regressors, targets)
    scale = np.maximum(np.einsum("mii->m", gram), np.finfo(float).tiny)
    singular = np.abs(np.linalg.det(gram)) <= SINGULAR_TOLERANCE * scale ** p
    gram[singular] = np.eye(p)
    coefficients = np.linalg.solve(gram, moment[:, :, None])[:, :, 0]
    residuals = targets - np.einsum("mti,mi->mt", regressors, coefficients)
    coefficients[singular] = np.nan
    return coefficients, np.mean(residuals ** 2, axis=1)


def integrated_ar_forecast(histories: np.ndarray, phi: np.ndarray, sigma2: np.ndarray,
                           horizon_steps: int):
    """Mean and variance float64[M, horizon] of ARIMA(p, 1, 0) with AR coefficients phi
    float64[M, P] (zero-padded) and innovation variance sigma2 float64[M]."""
    # (1 - phi(B))(1 - B) = 1 - sum_i level[:, i] B^(i + 1): the level recursion's weights.
    padded = np.concatenate([phi, np.zeros((len(phi), 1))], axis=1)
    level = padded - np.concatenate([np.zeros((len(phi), 1)), phi], axis=1)
    level[:, 0] += 1.0
    order = level.shape[1]
    recent = histories[:, ::-1][:, :order].copy()  # recent[:, i] = y_{n-1-i}
    mean = np.empty((len(histories), horizon_steps))
    psi = np.zeros((len(histories), horizon_steps + order + 1))  # [:, order + j]: psi_j
    psi[:, order] = 1.0
    for step in range(horizon_steps):
        mean[:, step] = np.einsum("mi,mi->m", level, recent)
        recent = np.concatenate([mean[:, step:step + 1], recent[:, :-1]], axis=1)
        # psi_j = sum_i level[:, i] · psi_(j-1-i), psi_(<0) = 0 (the padding).
        psi[:, order + step + 1] = np.einsum("mi,mi->m", level,
                                             psi[:, step + 1:order + step + 1][:, ::-1])
    # An explosive fit's variance overflows to inf over a long horizon: the caller drops
    # non-finite paths (no forecast: the shaper allocates the request).
    with np.errstate(over="ignore", invalid="ignore"):
        variance = sigma2[:, None] * np.cumsum(psi[:, order:-1] ** 2, axis=1)
    return mean, variance
