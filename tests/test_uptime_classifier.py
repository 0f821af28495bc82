"""P(lifetime > θ | features, uptime) (predictors/lifetime/uptime_classifier.py): which
(instance, age) pairs it learns from, the bimodal case of [Ling25ext] §3 (a VM that outlived the
short mode is long), exact probability curves, and its saved files."""

import numpy as np
import pandas as pd
import pytest

from configs.units import DAY_S, HOUR_S, US_PER_S
from predictors.lifetime.curves import LongLivedCurves
from predictors.lifetime.uptime_classifier import UptimeLongLivedClassifier
from tests.helpers import boundary_uptimes_s

SMALL = dict(num_trees=40, num_leaves=8, learning_rate=0.3, early_stopping_rounds=0,
             num_threads=1, min_data_in_leaf=5, min_category_count=1,
             features=["collection_logical_name"])


def frame(start_s, lifetime_s, jobs):
    """Instances table; lifetime NaN = still running (censored)."""
    start_s, lifetime_s = np.asarray(start_s, float), np.asarray(lifetime_s, float)
    end_us = np.rint((start_s + np.nan_to_num(lifetime_s)) * US_PER_S).astype(np.int64)
    end = pd.array(end_us, dtype="Int64")
    end[np.isnan(lifetime_s)] = pd.NA
    return pd.DataFrame({"instance_id": [f"i{k}" for k in range(len(start_s))],
                         "start_time": (start_s * US_PER_S).astype(np.int64),
                         "end_time": end, "collection_logical_name": list(jobs)})


def test_examples_sit_at_the_ages_an_instance_lived_with_known_class():
    # θ = 1 h; ages 0, 1 min, 5 min, 15 min, 30 min. Observation ends at 10 h.
    instances = frame(
        start_s=[0, 0, 0, 9.5 * HOUR_S, 8 * HOUR_S],
        # 2 min (short), 20 min (short), 3 h (long), running for 30 min (class unknown),
        # running for 2 h (long: observed past θ).
        lifetime_s=[120, 1200, 3 * HOUR_S, np.nan, np.nan], jobs="abcde")
    model = UptimeLongLivedClassifier(threshold_s=HOUR_S, **SMALL)
    model.fit(instances, observation_end_us=int(10 * HOUR_S * US_PER_S))
    assert model.uptime_ages_s_ == (0.0, 60.0, 300.0, 900.0, 1800.0)
    # Examples per instance: alive at 0 and 1 min; 0 to 15 min; every age; none (class
    # unknown); every age.
    assert model.num_examples_ == 2 + 4 + 5 + 0 + 5
    # Past the threshold the answer is 1 whatever the booster says.
    rows = model.encode(instances)
    np.testing.assert_array_equal(model.predict_proba_long(rows, HOUR_S), np.ones(5))
    assert np.all(model.predict_proba_long(rows, 0.0) < 1.0)


def bimodal(n: int, seed: int) -> pd.DataFrame:
    """Job "bimodal": half live ~1 h, half ~3 days; job "short": ~10 min; job "long":
    ~5 days. Two weeks of arrivals, all finished."""
    rng = np.random.default_rng(seed)
    job = rng.choice(["bimodal", "short", "long"], n)
    log10_s = np.where(job == "short", np.log10(600), np.log10(5 * DAY_S))
    mode_long = rng.random(n) < 0.5
    log10_s = np.where(job == "bimodal", np.where(mode_long, np.log10(3 * DAY_S),
                                                  np.log10(HOUR_S)), log10_s)
    lifetime_s = 10 ** (log10_s + rng.normal(0, 0.05, n))
    return frame(np.sort(rng.uniform(0, 14 * DAY_S, n)), lifetime_s, job)


@pytest.fixture(scope="module")
def bimodal_model():
    model = UptimeLongLivedClassifier(threshold_s=DAY_S, **SMALL)
    return model.fit(bimodal(6000, seed=1))


def test_a_bimodal_vm_that_outlived_its_short_mode_is_long(bimodal_model):
    model = bimodal_model
    rows = model.encode(frame([0, 0, 0], [1, 1, 1], ["bimodal", "short", "long"]))
    at_arrival = model.predict_proba_long(rows, 0.0)
    # At arrival: the bimodal job is a coin flip, the others are sure.
    assert 0.35 < at_arrival[0] < 0.65
    assert at_arrival[1] < 0.05 and at_arrival[2] > 0.95
    # After 4 h every bimodal VM still alive is of the long mode ([Ling25ext] §3's example).
    assert model.predict_proba_long(rows[:1], 4 * HOUR_S)[0] > 0.95


def test_long_lived_curves_equal_the_classifier_at_every_uptime(bimodal_model):
    model = bimodal_model
    rows = model.encode(bimodal(500, seed=2))
    curves = LongLivedCurves(model, rows)
    thresholds = model.uptime_thresholds()
    assert len(thresholds) >= 2 and len(curves.values) == 3  # three distinct feature rows
    rng = np.random.default_rng(3)
    special = np.r_[boundary_uptimes_s(thresholds), DAY_S, np.nextafter(DAY_S, 0), 2 * DAY_S]
    for _ in range(200):
        size = int(rng.integers(1, 20))
        vms = rng.integers(0, len(rows), size)
        uptime_s = np.where(rng.random(size) < 0.5, rng.choice(special, size),
                            10 ** rng.uniform(0, 6, size))
        np.testing.assert_array_equal(curves.predict_proba_long(vms, uptime_s),
                                      model.predict_proba_long(rows[vms], uptime_s))


def test_saved_classifier_predicts_the_same(bimodal_model, tmp_path):
    bimodal_model.save(str(tmp_path / "m"))
    loaded = UptimeLongLivedClassifier.load(str(tmp_path / "m"))
    rows = bimodal_model.encode(bimodal(100, seed=4))
    uptime_s = np.linspace(0, 2 * DAY_S, 100)
    np.testing.assert_array_equal(loaded.predict_proba_long(rows, uptime_s),
                                  bimodal_model.predict_proba_long(rows, uptime_s))
    assert loaded.uptime_ages_s_ == bimodal_model.uptime_ages_s_
    assert loaded.get_params() == bimodal_model.get_params()
