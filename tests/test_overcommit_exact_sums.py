"""The overcommit stage's sums over machines give the same bits in any order and grouping:
the cell sums (MergeCellSums, a CombineFn that runners feed in their own order) and the
summary's means (over a GroupByKey)."""

import math

import numpy as np
import pyarrow as pa

from pipelines.stages.overcommit.summary import (
    MACHINES,
    ExactSums,
    MergeCellSums,
    summary_table,
)
from pipelines.stages.overcommit.tellers import CELL
from predictors.peak.overcommit_metrics import CellSums, merge_cell_sums

NUM_MACHINES, NUM_TIMES = 40, 30


def _machines(seed=0):
    """Per-machine CellSums on overlapping time grids, with values over many magnitudes (so
    that a float sum's rounding depends on the order of its terms)."""
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(NUM_MACHINES):
        time = np.sort(rng.choice(NUM_TIMES, size=rng.integers(5, NUM_TIMES), replace=False))
        values = [rng.lognormal(size=len(time)) * 10.0 ** rng.integers(-8, 9, size=len(time))
                  for _ in range(3)]
        parts.append(CellSums(time.astype(np.int64) * 300_000_000,
                              np.ones(len(time), np.int64), *values))
    return parts


def _combine(parts, rng, num_accumulators):
    """MergeCellSums as a runner may run it: the parts spread over accumulators in a random
    order, each filled by add_input, then merged in a random order."""
    combine = MergeCellSums()
    order = rng.permutation(len(parts))
    accumulators = [combine.create_accumulator() for _ in range(num_accumulators)]
    for i, k in enumerate(order):
        slot = i % num_accumulators
        accumulators[slot] = combine.add_input(accumulators[slot], parts[k])
    merged = combine.merge_accumulators([accumulators[i]
                                         for i in rng.permutation(num_accumulators)])
    return combine.extract_output(merged)


def _fsum_per_time(parts, field):
    """{time: math.fsum of the machines' values at that time}: the correctly rounded sum."""
    values = {}
    for part in parts:
        for t, v in zip(part.time, getattr(part, field)):
            values.setdefault(int(t), []).append(float(v))
    return {t: math.fsum(v) for t, v in values.items()}


def test_a_float_sum_in_machine_order_differs_between_orders():
    # What the exact sums fix: without them, the same machines in another order round
    # differently (the test data must show it, or the tests below would prove nothing).
    parts = _machines()
    forward, backward = merge_cell_sums(parts), merge_cell_sums(parts[::-1])
    assert not np.array_equal(forward.predicted_peak, backward.predicted_peak)


def test_merge_cell_sums_gives_the_same_bits_in_any_order_and_grouping():
    parts = _machines()
    rng = np.random.default_rng(1)
    results = [_combine(parts, rng, num_accumulators) for num_accumulators in (1, 1, 2, 3, 7)]
    # More than BATCH parts in one accumulator: merged in batches on the way.
    assert NUM_MACHINES > MergeCellSums.BATCH // 2
    results.append(_combine(parts * 2, rng, 1))
    first = results[0]
    for result in results[1:4]:
        for field in CellSums._fields:
            assert getattr(result, field).tobytes() == getattr(first, field).tobytes(), field
    expected_machines = {int(t): n for t, n in zip(*np.unique(
        np.concatenate([p.time for p in parts]), return_counts=True))}
    assert dict(zip(first.time.tolist(), first.num_machines.tolist())) == expected_machines
    for field in ("total_limit", "predicted_peak", "oracle"):
        assert dict(zip(first.time.tolist(), getattr(first, field).tolist())) == \
            _fsum_per_time(parts, field), field
    doubled = results[-1]
    assert doubled.num_machines.tolist() == (2 * first.num_machines).tolist()
    assert doubled.oracle.tolist() == [math.fsum([v, v]) for v in first.oracle]


def test_exact_sums_are_the_correctly_rounded_sum_at_the_edges_of_float64():
    tiny, huge = 5e-324, 1.7976931348623157e308
    fsum_cases = [[0.1] * 10, [1e16, 1.0, -1e16], [tiny, tiny, -tiny],
                  [2.2250738585072014e-308, -tiny], [-0.0, 0.0]]
    # math.fsum overflows on these; the exact sums are those of the values in this order.
    cases = [(v, math.fsum(v)) for v in fsum_cases] + [
        ([huge, huge, -huge], huge), ([1e308, 1e308], math.inf), ([-1e308, -1e308], -math.inf)]
    for values, expected in cases:
        sums = ExactSums.of(np.array(values))
        total = ExactSums.scattered([sums], np.zeros(len(values), np.intp), 1).rounded()[0]
        assert total == expected, values


def test_non_finite_values_give_the_float_sum_of_their_kind():
    values = np.array([1.0, math.inf, 2.0, math.inf, 3.0, -math.inf, 4.0, math.nan, 5.0])
    index = np.array([0, 1, 1, 2, 2, 2, 3, 3, 4])
    sums = ExactSums.scattered([ExactSums.of(values)], index, 5).rounded()
    assert sums[0] == 1.0 and sums[1] == math.inf and sums[4] == 5.0
    assert math.isnan(sums[2]) and math.isnan(sums[3])


def test_summary_means_are_the_same_for_the_machines_in_any_order():
    rng = np.random.default_rng(2)
    machine_values = [(MACHINES, tuple(rng.lognormal(size=3) * 10.0 ** rng.integers(-8, 9)))
                      for _ in range(200)]
    cell = pa.table({"savings_ratio": rng.random(10)})
    tables = [summary_table(("p", [*(machine_values[i] for i in rng.permutation(200)),
                                   (CELL, cell)]), "oracle") for _ in range(4)]
    for table in tables[1:]:
        assert table.equals(tables[0])
    means = tables[0].column("mean").to_pylist()
    assert means[0] == math.fsum(v[0] for _, v in machine_values) / 200
    ordered_means = {np.mean([machine_values[i][1][0] for i in rng.permutation(200)])
                     for _ in range(20)}
    assert len(ordered_means) > 1  # a float mean in GroupByKey order would differ
