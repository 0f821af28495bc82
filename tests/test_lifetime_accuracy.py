"""scripts/lifetime_accuracy.py: its statistics on hand-made predictions (no model, no Beam)."""

import importlib.util

import numpy as np
import pytest

from configs.units import US_PER_S
from policies.nilas import temporal_cost
from tests.helpers import REPO

_SPEC = importlib.util.spec_from_file_location(
    "lifetime_accuracy", REPO / "scripts" / "lifetime_accuracy.py")
lifetime_accuracy = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(lifetime_accuracy)


def test_abs_log10_error_floors_both_sides_at_one_second():
    error = lifetime_accuracy.abs_log10_error(np.array([10.0, 100.0, 1000.0, 0.0, 0.2]),
                                              np.array([10.0, 10.0, 10.0, 0.5, 100.0]))
    np.testing.assert_allclose(error, [0.0, 1.0, 2.0, 0.0, 2.0])


def test_cost_bucket_is_nilas_temporal_cost():
    remaining_s = np.array([-5.0, 0.0, 1.0, 1799.0, 1800.0, 3600.0, 5399.0, 7200.0, 43200.0,
                            86399.0, 86400.0, 604800.0, 1e7])
    expected = [temporal_cost(int(s * US_PER_S)) for s in remaining_s]
    np.testing.assert_array_equal(lifetime_accuracy.cost_bucket(remaining_s), expected)
    assert expected == [0, 0, 0, 0, 1, 2, 2, 4, 8, 8, 9, 10, 10]


def test_error_stats_of_known_predictions():
    # Truth 1,000 s (bucket 0) for all; errors 0, 0.2, 0.5, 2 decades.
    true_s = np.full(4, 1000.0)
    predicted_s = true_s * 10.0 ** np.array([0.0, 0.2, 0.5, 2.0])
    stats = lifetime_accuracy.error_stats(predicted_s, true_s)
    assert stats["n"] == 4
    assert stats["<=0.1"] == 0.25 and stats["<=0.3"] == 0.5 and stats["<=1"] == 0.75
    assert stats["p50"] == pytest.approx(0.35)
    # Buckets of 1,000 / 1,585 / 3,162 / 100,000 s: 0, 0, 1, 9 vs 0.
    assert stats["bucket="] == 0.5 and stats["bucket+-1"] == 0.75


def test_equivalent_accuracy_interpolates_a_monotone_sweep():
    accuracies = [1.0, 0.2, 0.6, 0.0]  # any order
    values = [0.9, 0.3, 0.5, 0.1]
    equivalent = lifetime_accuracy.equivalent_accuracy
    assert equivalent(0.4, accuracies, values) == pytest.approx(0.4)
    assert equivalent(0.7, accuracies, values) == pytest.approx(0.8)
    assert equivalent(0.5, accuracies, values) == pytest.approx(0.6)
    assert equivalent(0.05, accuracies, values) == -np.inf
    assert equivalent(0.95, accuracies, values) == np.inf
    assert lifetime_accuracy.format_accuracy(-np.inf, accuracies) == "<0"
    assert lifetime_accuracy.format_accuracy(np.inf, accuracies) == ">1"


def test_window_rows_keep_predictions_made_in_the_window_and_set_censored_apart():
    # Four VMs at uptime 0: made at 0, 10, 20, 30 s; the third is censored (NaN truth).
    predictions = [{
        "uptime_s": 0.0, "now_us": np.array([0, 10, 20, 30]) * US_PER_S,
        "true_s": np.array([100.0, 100.0, np.nan, 100.0]),
        "bound_s": np.array([100.0, 100.0, 5000.0, 100.0]),
        "predicted": {"model": np.array([1.0, 100.0, 4000.0, 1000.0]),
                      "noisy 1": np.array([100.0, 100.0, 5000.0, 100.0])}}]
    rows = lifetime_accuracy.window_rows(predictions, (5 * US_PER_S, 30 * US_PER_S))
    model, oracle = rows
    assert (model["source"], model["n"], model["censored"]) == ("model", 1, 1)
    assert model["<=0.1"] == 1.0 and model["model<bound"] == 1.0
    assert oracle["n"] == 1 and oracle["bucket="] == 1.0
    equivalent = lifetime_accuracy.equivalent_rows(rows, [1.0])
    assert equivalent == [{"uptime_s": 0.0, "<=0.3": 1.0, "<=1": 1.0, "bucket=": 1.0}]
    # A window before every prediction (a replay that starts at the split) has no rows.
    assert lifetime_accuracy.window_rows(predictions, (-10 * US_PER_S, 0)) == []


def test_uptime_model_of_a_variant_is_found_below_the_results_models_folder():
    rows = [{"name": "uptime", "variant": v, "split_time_us": t,
             "path": f"/elsewhere/run/models/{v}/uptime"} for v, t in (("a", 1), ("b", 2))]
    rows.append({"name": "la_classifier", "variant": "a", "split_time_us": 1,
                 "path": "/elsewhere/run/models/a/la_classifier"})
    assert lifetime_accuracy.uptime_model("/r", rows, "b") == ("/r/models/b/uptime", 2)
    with pytest.raises(ValueError, match=r"variants \['a', 'b'\]: give --variant"):
        lifetime_accuracy.uptime_model("/r", rows)
    with pytest.raises(ValueError, match="no uptime model of variant 'c'"):
        lifetime_accuracy.uptime_model("/r", rows, "c")
    only = [{"name": "uptime", "variant": "default", "split_time_us": 5,
             "path": "results/demo/models/uptime"}]
    assert lifetime_accuracy.uptime_model("/r", only) == ("/r/models/uptime", 5)
