"""Noisy-oracle lifetimes ([Ling25ext] App. G.1)."""

import numpy as np
import pytest

from policies.replay.lifetime_source import NoisyOracleLifetimes
from predictors.lifetime.noisy_oracle import CAP_S, NoisyOracle

LIFETIMES_S = np.geomspace(60.0, 7 * 86400.0, 20_000)


def test_accuracy_one_stays_in_the_narrow_band():
    predicted = NoisyOracle(accuracy=1.0, seed=3).predict(LIFETIMES_S)
    error = np.log10(predicted) - np.log10(LIFETIMES_S)
    # sigma = 0.001: no draw out of 20,000 goes beyond 6 sigma.
    assert np.max(np.abs(error)) < 0.006
    assert 0.0009 < np.std(error) < 0.0011


def test_same_seed_same_predictions_other_seed_differs():
    first = NoisyOracle(0.8, seed=7).predict(LIFETIMES_S)
    np.testing.assert_array_equal(first, NoisyOracle(0.8, seed=7).predict(LIFETIMES_S))
    assert not np.array_equal(first, NoisyOracle(0.8, seed=8).predict(LIFETIMES_S))


def test_accuracy_sets_the_share_of_mispredicted_vms():
    oracle = NoisyOracle(accuracy=0.7, seed=1)
    error = oracle.log10_errors(50_000)
    correct = np.abs(error) < 0.01
    # 70 % within the narrow band, plus the few sigma-3 draws that land in it (~0.3 %).
    assert abs(correct.mean() - 0.7 * 1.0 - 0.3 * 0.00266) < 0.01
    assert 2.9 < np.std(error[~correct]) < 3.1


def test_predictions_are_capped_to_zero_and_fourteen_days():
    oracle = NoisyOracle(accuracy=0.0, seed=2)
    predicted = oracle.predict(np.concatenate([LIFETIMES_S, [0.0, 0.5]]))
    assert np.all(np.isfinite(predicted))
    assert predicted.min() >= 0.0 and predicted.max() <= CAP_S
    assert np.any(predicted == CAP_S)


def test_apply_uses_the_given_errors():
    oracle = NoisyOracle(accuracy=1.0)
    np.testing.assert_allclose(oracle.apply(np.array([100.0, 1000.0]), np.array([1.0, -1.0])),
                               [1000.0, 100.0])


@pytest.mark.parametrize("accuracy", [-0.1, 1.5])
def test_accuracy_outside_unit_interval_is_rejected(accuracy):
    with pytest.raises(ValueError, match="accuracy"):
        NoisyOracle(accuracy)


def test_the_error_is_added_in_the_log10_domain_and_the_source_repredicts_with_it():
    oracle = NoisyOracle(accuracy=0.5, seed=4)
    error = oracle.log10_errors(len(LIFETIMES_S))
    log_domain = np.minimum(10.0 ** (np.log10(LIFETIMES_S) + error), CAP_S)
    np.testing.assert_allclose(oracle.apply(LIFETIMES_S, error), log_domain, rtol=1e-12)
    # The replay's source: the same error on the true remaining lifetime at every uptime,
    # floored at a second (log10 of 0 is -inf).
    source = NoisyOracleLifetimes(LIFETIMES_S, accuracy=0.5, seed=4)
    vms = np.arange(len(LIFETIMES_S))
    uptime_s = LIFETIMES_S * np.linspace(0.0, 1.5, len(LIFETIMES_S))
    remaining_s = np.maximum(LIFETIMES_S - uptime_s, 1.0)
    np.testing.assert_allclose(source.predict_remaining_s(vms, uptime_s),
                               np.minimum(10.0 ** (np.log10(remaining_s) + error), CAP_S),
                               rtol=1e-12)
