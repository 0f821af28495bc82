"""Lifetime curves (predictors/lifetime/curves.py): exact step curves against direct model
calls on random VMs and uptimes (at, just before and just after every split threshold), the
replay's exit tracker against `to_exit_us`, grid curves exact at the grid ages and bounded
between, and saved models that do not match their curves' checks."""

import json
import tracemalloc

import numpy as np
import pandas as pd
import pytest

from configs.units import US_PER_S
from policies.replay.compiled import CompiledReplay
from policies.replay.lifetime_source import to_exit_us
from predictors.lifetime import features as feature_encoding
from predictors.lifetime.curves import (
    LifetimeCurves,
    curves_for_saved_model,
    distinct_rows,
    uptime_us_bounds,
)
from predictors.lifetime.examples import make_age_examples, make_uptime_examples
from predictors.lifetime.uptime_model import UptimeLifetimeModel, log10_uptime
from tests.helpers import boundary_uptimes_s

DAY_S = 86400.0
MODEL = dict(num_trees=30, num_leaves=16, learning_rate=0.3, early_stopping_rounds=0,
             num_threads=1, features=["collection_logical_name", "cpu_request"])


def instances(n: int, seed: int) -> pd.DataFrame:
    """Job j (0..7) lives ~10^(2 + 0.4 j) s, with noise, over five days of arrivals."""
    rng = np.random.default_rng(seed)
    job = rng.integers(0, 8, n)
    start = np.sort(rng.uniform(0, 5 * DAY_S, n))
    return pd.DataFrame({
        "instance_id": [f"i{k}" for k in range(n)],
        "start_time": (start * US_PER_S).astype(np.int64),
        "end_time": ((start + 10 ** (2 + 0.4 * job + rng.normal(0, 0.3, n))) * US_PER_S
                     ).astype(np.int64),
        "collection_logical_name": [f"job{j}" for j in job],
        "cpu_request": rng.choice([0.5, 1.0, 2.0], n)})


@pytest.fixture(scope="module", params=["ages", "fractions"])
def fitted(request):
    """(model, encoded test rows) for both augmentations: the age grid gives at most one
    threshold per grid gap, the fractions up to uptime_max_bin - 1."""
    train = instances(1500, seed=1)
    if request.param == "ages":
        examples, _ = make_age_examples(train)
    else:
        examples, _ = make_uptime_examples(train)
    model = UptimeLifetimeModel(uptime_max_bin=32, **MODEL).fit(examples)
    return model, model.encode(instances(300, seed=2))



def test_exact_curves_equal_direct_calls_at_random_and_boundary_uptimes(fitted):
    model, features = fitted
    curves = LifetimeCurves(model, features)
    assert curves.values.shape[1] == len(model.uptime_thresholds()) + 1
    assert not np.isnan(curves.values).any()
    rng = np.random.default_rng(0)
    special = boundary_uptimes_s(curves.thresholds)
    for uptime_s in (10 ** rng.uniform(0, 6.5, 3000), rng.choice(special, 3000)):
        rows = rng.integers(0, len(features), len(uptime_s))
        np.testing.assert_array_equal(curves.predict_remaining_s(rows, uptime_s),
                                      model.predict_remaining(features[rows], uptime_s))


def test_uptime_bounds_are_the_last_integer_uptime_of_each_interval(fitted):
    model, _ = fitted
    thresholds = model.uptime_thresholds()
    bounds = uptime_us_bounds(thresholds)
    assert np.all(bounds >= 0)
    assert np.all(log10_uptime(bounds / US_PER_S) <= thresholds)
    assert np.all(log10_uptime((bounds + 1) / US_PER_S) > thresholds)
    np.testing.assert_array_equal(uptime_us_bounds(np.array([-0.5, 0.0])), [-1, 0])


def test_exit_tracker_gives_the_exits_of_direct_calls(fitted):
    model, features = fitted
    curves = LifetimeCurves(model, features)
    rng = np.random.default_rng(1)
    arrival_us = np.sort(rng.integers(0, int(2 * DAY_S * US_PER_S), len(features)))
    tracker = curves.exit_tracker(arrival_us)
    bounds = uptime_us_bounds(curves.thresholds)
    now_us = 0
    for _ in range(400):
        # Mostly small steps, some landing exactly on a VM's interval end or one past it.
        now_us += int(rng.exponential(600 * US_PER_S))
        vms = np.flatnonzero(arrival_us <= now_us)
        vms = rng.choice(vms, min(len(vms), 15), replace=False) if len(vms) else vms
        if rng.random() < 0.3 and len(vms):
            edge = arrival_us[vms[0]] + bounds[rng.integers(len(bounds))] + rng.integers(2)
            now_us = max(now_us, int(edge))
        uptime_s = (now_us - arrival_us[vms]) / US_PER_S
        expected = to_exit_us(now_us, model.predict_remaining(features[vms], uptime_s))
        assert tracker.exits_us(vms.tolist(), now_us) == expected.tolist()


def test_curves_and_exit_tracker_keep_at_most_150_bytes_per_vm(fitted):
    model, _ = fitted
    n = 20_000
    features = model.encode(instances(n, seed=5))
    arrival_us = np.arange(n, dtype=np.int64) * 10**6
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        curves = LifetimeCurves(model, features)
        kept = (curves, curves.exit_tracker(arrival_us), CompiledReplay._curves(curves, n))
        bytes_per_vm = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    assert kept[1] is not None
    assert bytes_per_vm <= 150


def test_grid_curves_are_exact_at_grid_ages_and_bounded_between():
    train = instances(1500, seed=3)
    examples, _ = make_age_examples(train)
    model = UptimeLifetimeModel(**MODEL).fit(examples)
    features = model.encode(instances(200, seed=4))
    grid_s = np.asarray(model.uptime_ages_s_)
    curves = LifetimeCurves(model, features, grid_uptime_s=grid_s)
    assert curves.exit_tracker(np.zeros(len(features), np.int64)) is None
    rows = np.repeat(np.arange(len(features)), len(grid_s))
    at_grid_s = np.tile(grid_s, len(features))
    np.testing.assert_allclose(curves.predict_remaining_s(rows, at_grid_s),
                               model.predict_remaining(features[rows], at_grid_s), rtol=1e-12)
    # Between grid ages the model steps at its thresholds; the log-linear interpolation is
    # off by at most the largest step between neighbouring grid ages.
    x = log10_uptime(grid_s)
    between_s = np.power(10.0, np.random.default_rng(5).uniform(x[0], x[-1], 4000)) - 1.0
    rows = np.random.default_rng(6).integers(0, len(features), len(between_s))
    error = np.abs(np.log10(curves.predict_remaining_s(rows, between_s))
                   - np.log10(model.predict_remaining(features[rows], between_s)))
    step = np.abs(np.diff(curves.values, axis=1)).max(axis=1)
    assert np.all(error <= step[curves.row_of_vm[rows]] + 1e-9)


def test_no_uptime_model_curves_subtract_the_uptime():
    examples, _ = make_uptime_examples(instances(800, seed=7))
    model = UptimeLifetimeModel(use_uptime=False, **MODEL).fit(examples)
    features = model.encode(instances(100, seed=8))
    curves = LifetimeCurves(model, features)
    assert not curves.repredicts and curves.exit_tracker(np.zeros(100, np.int64)) is None
    uptime_s = np.linspace(0, 3 * DAY_S, 100)
    np.testing.assert_array_equal(curves.predict_remaining_s(np.arange(100), uptime_s),
                                  model.predict_remaining(features, uptime_s))


def test_a_saved_model_that_does_not_match_names_its_path(tmp_path):
    examples, _ = make_age_examples(instances(800, seed=9))
    model = UptimeLifetimeModel(**MODEL).fit(examples)
    frame = instances(50, seed=10)
    path = str(tmp_path / "uptime")
    model.save(path)
    curves = curves_for_saved_model(UptimeLifetimeModel.load(path), frame, path)
    assert curves.predict_remaining_s(np.arange(50), 0.0).shape == (50,)
    # Missing feature column in the pool's instances.
    with pytest.raises(ValueError, match=f"lifetime model at {path}: .*collection_logical"):
        curves_for_saved_model(UptimeLifetimeModel.load(path),
                               frame.drop(columns=["collection_logical_name"]), path)
    # Metadata recording another age grid than the booster was trained on.
    metadata_path = tmp_path / "uptime" / "metadata.json"
    metadata = json.loads(metadata_path.read_text())
    metadata["uptime_ages_s"] = [0.0, 7200.0]
    metadata_path.write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match=f"lifetime model at {path}: .*age grid"):
        curves_for_saved_model(UptimeLifetimeModel.load(path), frame, path)
    # Not an uptime model at all.
    with pytest.raises(ValueError, match=f"lifetime model at {path}: it is a str"):
        curves_for_saved_model("not a model", frame, path)


@pytest.mark.parametrize("chunk_rows", [1, 7, 64, 1000])
def test_distinct_rows_by_chunks_equal_np_unique_of_all_rows(chunk_rows):
    rng = np.random.default_rng(chunk_rows)
    matrix = rng.integers(0, 4, (500, 3)).astype(np.float64)
    matrix[rng.random(500) < 0.1, 1] = np.nan  # missing features are rows too
    expected, inverse = np.unique(matrix.view(np.dtype((np.void, 24))).reshape(-1),
                                  return_inverse=True)
    chunks = [matrix[start:start + chunk_rows] for start in range(0, 500, chunk_rows)]
    distinct, row_of = distinct_rows(chunks, 500)
    assert distinct.view(np.dtype((np.void, 24))).reshape(-1).tolist() == expected.tolist()
    np.testing.assert_array_equal(row_of, inverse.reshape(-1))
    np.testing.assert_array_equal(distinct[row_of], matrix)


def test_curves_of_instances_encoded_by_chunks_equal_those_of_their_features(
        fitted, monkeypatch):
    model, _ = fitted
    frame = instances(300, seed=2)
    whole = LifetimeCurves(model, model.encode(frame))
    monkeypatch.setattr(feature_encoding, "TRANSFORM_CHUNK_ROWS", 7)
    chunked = LifetimeCurves(model, frame)
    np.testing.assert_array_equal(chunked.row_of_vm, whole.row_of_vm)
    np.testing.assert_array_equal(chunked.values, whole.values)
