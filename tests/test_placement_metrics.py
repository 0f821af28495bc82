"""Placement metrics: inflation stranding, empty-host upper bound, samples and summary."""

import math

import numpy as np
import pytest

from policies.replay.metrics import (
    InflationMix,
    PlacementMetrics,
    difference_vs_baseline,
    empty_hosts_upper_bound,
    inflate,
)
from policies.replay.pool import PoolSpec, PoolState


def test_inflation_fills_round_robin_until_nothing_fits():
    mix = InflationMix(shapes=[[4.0, 2.0], [1.0, 4.0]], weights=[1, 1])
    # (10, 10): A -> (6, 8), B -> (5, 4), A -> (1, 2), B no longer fits; A neither.
    np.testing.assert_allclose(inflate(np.array([[10.0, 10.0]]), mix), [[1.0, 2.0]])
    # Weights are copies per round: two B per round strands less memory here.
    heavy_b = InflationMix(shapes=[[4.0, 2.0], [1.0, 4.0]], weights=[1, 2])
    np.testing.assert_allclose(inflate(np.array([[10.0, 10.0]]), heavy_b), [[4.0, 0.0]])
    # Hosts are independent; an exact fit leaves nothing.
    np.testing.assert_allclose(inflate(np.array([[8.0, 4.0], [0.5, 50.0]]), mix),
                               [[0.0, 0.0], [0.5, 50.0]])


def test_inflation_mix_from_demand_keeps_the_most_frequent_shapes():
    demand = np.array([[1.0, 2.0]] * 6 + [[2.0, 4.0]] * 3 + [[8.0, 8.0]] + [[0.0, 0.0]])
    mix = InflationMix.from_demand(demand, max_shapes=2, copies_per_round=9)
    np.testing.assert_array_equal(mix.shapes, [[1.0, 2.0], [2.0, 4.0]])
    np.testing.assert_array_equal(mix.weights, [6, 3])


def test_empty_hosts_upper_bound_keeps_the_fewest_largest_hosts_that_hold_the_demand():
    def bound(capacity, used):
        capacity = np.asarray(capacity, float)
        return empty_hosts_upper_bound(np.cumsum(-np.sort(-capacity, axis=0), axis=0),
                                       np.asarray(used, float))
    same = [[10.0, 10.0]] * 3
    assert bound(same, [0.0, 0.0]) == 3
    assert bound(same, [15.0, 5.0]) == 1         # CPU needs two hosts
    assert bound(same, [5.0, 25.0]) == 0         # memory needs three
    assert bound(same, [10.0, 10.0]) == 2        # exactly one host
    assert bound([[20.0, 10.0], [10.0, 10.0], [10.0, 10.0]], [15.0, 5.0]) == 2


def make_pool():
    pool = PoolState(PoolSpec.from_shape((10.0, 20.0), 4))
    pool.place(0, 0, (8.0, 4.0), 10)
    pool.place(1, 1, (2.0, 4.0), 10)
    pool.place(2, 1, (2.0, 4.0), 10)
    return pool


def test_sample_values_on_a_hand_made_pool():
    pool = make_pool()
    metrics = PlacementMetrics(pool, InflationMix([[3.0, 6.0]], [1]), stranding_every=2)
    metrics.sample(100, placements=3, failed_placements=1, migrations=0)
    metrics.sample(200, placements=3, failed_placements=1, migrations=0)
    series = metrics.timeseries()
    assert series["empty_hosts"].tolist() == [2, 2]
    assert series["empty_hosts_pct"][0] == 50.0
    assert series["packing_density_pct"][0] == pytest.approx(100.0 * 12 / 20)
    assert series["empty_to_free_ratio_pct"][0] == pytest.approx(100.0 * 20 / 28)
    assert series["cpu_allocated_pct"][0] == pytest.approx(30.0)
    assert series["memory_allocated_pct"][0] == pytest.approx(15.0)
    # 12 CPU and 12 memory used of (10, 20) hosts: two hosts must stay used.
    assert series["upper_bound_empty_hosts_pct"][0] == 50.0
    # Inflation with (3, 6): host 0 keeps 2 CPU and 16 memory; host 1 fills 2 copies
    # (0 CPU, 0 memory left); empty hosts take 3 copies each (1 CPU, 2 memory left).
    assert series["stranded_cpu_pct"][0] == pytest.approx(100.0 * 4 / 40)
    assert series["stranded_memory_pct"][0] == pytest.approx(100.0 * 20 / 80)
    assert math.isnan(series["stranded_cpu_pct"][1])            # every 2nd sample only
    summary = metrics.summary()
    assert summary["num_samples"] == 2 and summary["failed_placements"] == 1
    assert summary["stranded_cpu_pct"] == pytest.approx(10.0)
    assert summary["empty_hosts_pct"] == 50.0


def test_difference_vs_baseline_in_percentage_points():
    summary = {"empty_hosts_pct": 31.5, "packing_density_pct": 90.0, "placements": 10}
    baseline = {"empty_hosts_pct": 30.0, "packing_density_pct": 91.0, "placements": 12}
    assert difference_vs_baseline(summary, baseline) == {
        "empty_hosts_pct_vs_baseline_pp": 1.5, "packing_density_pct_vs_baseline_pp": -1.0}


def test_bad_inflation_mix_is_rejected():
    with pytest.raises(ValueError):
        InflationMix([[1.0, 1.0]], [0])
    with pytest.raises(ValueError):
        InflationMix([[0.0, 0.0]], [1])
