"""Customer-history statistics (predictors/lifetime/history.py): exact values on hand-made
cases, for the sweep and the brute-force reference alike, and the reference's answers
(fleetcast_testing/reference/history.py) on random inputs."""

import math

import numpy as np
import pytest

from configs.units import US_PER_S as S
from fleetcast_testing.reference import history as reference
from predictors.lifetime import history
from predictors.lifetime.history import HISTORY_STATISTICS, history_statistics

# The end_us of an instance that has not ended, never used (the largest int64: any sum with it
# would overflow).
NEVER = np.iinfo(np.int64).max
COUNTS = HISTORY_STATISTICS[:3]
PERCENTILES = HISTORY_STATISTICS[3:6]


@pytest.fixture(params=["sweep", "reference"])
def implementation(request):
    return {"sweep": history_statistics, "reference": reference.history_statistics}[
        request.param]


def statistics(implementation, instances, threshold_s=10.0, lookback_s=0.0):
    """The statistics of instances (key, start_us, end_us or None while running[, lifetime
    known]), as {name: float64[n]}."""
    rows = [tuple(row) + (True,) * (4 - len(row)) for row in instances]
    key, start_us, end_us, known = zip(*rows)
    ended = np.array([end is not None for end in end_us])
    end_us = np.array([NEVER if end is None else end for end in end_us], np.int64)
    return implementation(np.array(key), np.array(start_us), end_us, ended, np.array(known),
                          long_lived_threshold_s=threshold_s, lookback_s=lookback_s)


def assert_rows(got, expected_counts, lifetimes_s=None):
    """Counts per row as (instances, long, ended); lifetimes_s per row: the lifetimes whose
    statistics the row must have (None or []: NaN)."""
    np.testing.assert_array_equal(np.stack([got[name] for name in COUNTS], axis=1),
                                  np.array(expected_counts, float))
    for row, lifetimes in enumerate(lifetimes_s or [None] * len(expected_counts)):
        values = [got[name][row] for name in HISTORY_STATISTICS[3:]]
        if not lifetimes:
            assert np.isnan(values).all(), (row, values)
            continue
        logs = np.log10(lifetimes)
        expected = list(np.percentile(lifetimes, [50, 75, 90], method="inverted_cdf"))
        np.testing.assert_allclose(values, expected + [logs.mean(), logs.std()],
                                   rtol=1e-12, atol=1e-15)


def test_the_first_instance_of_a_key_sees_nothing(implementation):
    got = statistics(implementation, [(0, 0, 5 * S), (1, 3 * S, None), (0, 0, 20 * S)])
    assert_rows(got, [(0, 0, 0)] * 3)


def test_instances_starting_together_do_not_see_each_other(implementation):
    got = statistics(implementation, [(0, 5 * S, 6 * S), (0, 5 * S, 6 * S), (0, 7 * S, None)])
    assert_rows(got, [(0, 0, 0), (0, 0, 0), (2, 0, 2)], [[], [], [1.0, 1.0]])


def test_an_end_at_the_arrival_is_not_seen_one_a_microsecond_earlier_is(implementation):
    got = statistics(implementation, [(0, 0, 4 * S), (0, 4 * S, None), (0, 4 * S + 1, None)])
    assert_rows(got, [(0, 0, 0), (1, 0, 0), (2, 0, 1)], [[], [], [4.0]])
    assert got["log10_lifetime_std"][2] == 0.0


def test_a_censored_instance_is_long_once_past_the_threshold_and_has_no_lifetime(
        implementation):
    got = statistics(implementation, [(0, 0, None), (0, 10 * S, None), (0, 10 * S + 1, None)],
                     threshold_s=10.0)
    assert_rows(got, [(0, 0, 0), (1, 0, 0), (2, 1, 0)])


def test_a_lifetime_of_exactly_the_threshold_is_not_long(implementation):
    got = statistics(implementation, [(0, 0, 10 * S), (0, 0, 10 * S + 1), (0, 100 * S, None)],
                     threshold_s=10.0)
    assert_rows(got, [(0, 0, 0), (0, 0, 0), (2, 1, 2)], [[], [], [10.0, 10.000001]])


def test_the_lookback_keeps_t_minus_w_and_drops_one_microsecond_before(implementation):
    # Keys 0-3: an instance A starting at 0 that ends at 1 s, then one arrival at time t.
    # W = 10 s: A's start is seen at t = 10 s, not at 10 s + 1 µs; its end is seen until
    # t = 11 s. Keys 4-5: a censored instance crosses θ = 10 s at 10 s; it is seen as long at
    # t = 20 s, not at 20 s + 1 µs.
    arrivals_us = [10 * S, 10 * S + 1, 11 * S, 11 * S + 1]
    instances = [row for k, t in enumerate(arrivals_us) for row in ((k, 0, S), (k, t, None))]
    instances += [(4, 0, None), (4, 20 * S, None), (5, 0, None), (5, 20 * S + 1, None)]
    got = statistics(implementation, instances, threshold_s=10.0, lookback_s=10.0)
    arrived = [(1, 0, 1), (0, 0, 1), (0, 0, 1), (0, 0, 0), (0, 1, 0), (0, 0, 0)]
    assert_rows(got, [row for counts in arrived for row in ((0, 0, 0), counts)],
                [lifetimes for seen in (1, 1, 1, 0, 0, 0) for lifetimes in ([], [1.0] * seen)])


def test_an_unknown_lifetime_counts_as_an_arrival_and_long_but_enters_no_statistic(
        implementation):
    got = statistics(implementation, [(0, 0, 100 * S, False), (0, 200 * S, 201 * S)],
                     threshold_s=10.0)
    assert_rows(got, [(0, 0, 0), (1, 1, 0)])


def test_rows_without_a_key_are_nan_and_in_no_history(implementation):
    got = statistics(implementation, [(-1, 0, 5 * S), (0, S, 2 * S), (-1, 3 * S, None),
                                      (0, 4 * S, 5 * S)])
    for name in HISTORY_STATISTICS:
        assert np.isnan(got[name][[0, 2]]).all(), name
    assert_rows({name: values[[1, 3]] for name, values in got.items()},
                [(0, 0, 0), (1, 0, 1)], [[], [1.0]])


def test_percentiles_are_nearest_rank(implementation):
    instances = [(0, 0, k * S) for k in range(1, 11)] + [(0, 100 * S, None)]
    got = statistics(implementation, instances, threshold_s=1000.0)
    assert [got[name][10] for name in PERCENTILES] == [5.0, 8.0, 9.0]
    logs = np.log10(np.arange(1, 11))
    assert got["log10_lifetime_mean"][10] == pytest.approx(logs.mean(), rel=1e-12)
    assert got["log10_lifetime_std"][10] == pytest.approx(logs.std(), rel=1e-12)


def test_outputs_are_float64_in_input_order():
    key, start_us, end_us, ended, known = random_instances(np.random.default_rng(0), 200, 5)
    got = history_statistics(key, start_us, end_us, ended, known, long_lived_threshold_s=2.0,
                             lookback_s=3.0)
    assert tuple(got) == HISTORY_STATISTICS == reference.STATISTICS
    assert all(values.dtype == np.float64 and values.shape == (200,) for values in got.values())
    order = np.random.default_rng(1).permutation(200)
    shuffled = history_statistics(key[order], start_us[order], end_us[order], ended[order],
                                  known[order], long_lived_threshold_s=2.0, lookback_s=3.0)
    for name in HISTORY_STATISTICS:
        np.testing.assert_array_equal(shuffled[name], got[name][order])


def test_the_kernel_is_compiled_for_one_signature():
    """Inputs of other integer kinds, and lists, reach the kernel as the same types."""
    integers = ([0, 1, 1], [0, 2, 5], [1, 9, 9])
    flags = ([True, True, False], [True, True, True])
    for dtype in (None, np.int32, np.uint32):
        arrays = [values if dtype is None else np.array(values, dtype) for values in integers]
        history_statistics(*arrays, *flags, long_lived_threshold_s=1.0, lookback_s=0.0)
    assert len(history._sweep.signatures) == 1


@pytest.mark.parametrize("change, message", [
    (dict(key=np.zeros(2, np.int64)), "different lengths"),
    (dict(key=np.zeros(3)), "key must be a 1-D integer array"),
    (dict(ended=np.ones(3, np.int64)), "ended must be a 1-D bool array"),
    (dict(key=np.array([0, -2, 0])), "key must be >= 0, or -1"),
    (dict(long_lived_threshold_s=-1.0), "long_lived_threshold_s must be >= 0"),
    (dict(lookback_s=math.nan), "lookback_s must be > 0, or 0"),
    (dict(ended=np.ones(3, bool)), "1 ended instances with a known lifetime end at or"),
    (dict(start_us=np.array([0, 0, -2 ** 61])), "start_us must lie within"),
])
def test_bad_inputs_raise(change, message):
    arguments = dict(key=np.zeros(3, np.int64), start_us=np.array([0, 5, 6]),
                     end_us=np.array([5, 5, 9]), ended=np.array([True, False, True]),
                     lifetime_known=np.ones(3, bool), long_lived_threshold_s=1.0,
                     lookback_s=0.0)
    with pytest.raises(ValueError, match=message):
        history_statistics(**{**arguments, **change})


def random_instances(rng, n, num_keys, ties=False):
    """(key, start_us, end_us, ended, lifetime_known) of n random instances: keys -1 (none)
    to num_keys - 1; with `ties`, starts, ends and lifetimes on a few whole seconds."""
    key = rng.integers(-1, num_keys, n)
    if ties:
        start_us, lifetime_us = rng.integers(0, 8, n) * S, rng.integers(1, 5, n) * S
    else:  # lifetimes log-uniform from 1 µs to 1,000 s
        start_us = rng.integers(0, 1000 * S, n)
        lifetime_us = (10 ** rng.uniform(0, 9, n)).astype(np.int64)
    ended = rng.random(n) < 0.8
    end_us = np.where(ended, start_us + lifetime_us, NEVER)
    return key, start_us, end_us, ended, rng.random(n) < 0.9


def assert_same_statistics(got, expected):
    """Counts and percentiles exactly, the log10 mean and std within 1e-9 (values ~1)."""
    for name in HISTORY_STATISTICS:
        if name in COUNTS + PERCENTILES:
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
        else:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-9, atol=1e-12,
                                       err_msg=name)


@pytest.mark.parametrize("limited", [False, True], ids=["unlimited", "lookback"])
@pytest.mark.parametrize("ties", [False, True], ids=["spread", "ties"])
@pytest.mark.parametrize("num_keys", [1, 4, 60])
@pytest.mark.parametrize("seed", range(5))
def test_random_instances_match_the_reference(seed, num_keys, ties, limited):
    rng = np.random.default_rng([seed, num_keys, int(ties), int(limited)])
    instances = random_instances(rng, int(rng.integers(1, 250)), num_keys, ties)
    if ties:  # θ may be 0: every instance with a lifetime is long
        threshold_s, lookback_s = float(rng.integers(0, 4)), float(rng.integers(1, 5))
    else:
        threshold_s, lookback_s = rng.uniform(0, 500), rng.uniform(1, 800)
    windows = dict(long_lived_threshold_s=threshold_s, lookback_s=lookback_s if limited else 0)
    assert_same_statistics(history_statistics(*instances, **windows),
                           reference.history_statistics(*instances, **windows))


@pytest.mark.parametrize("threshold_s, lookback_s", [(3e10, 2e11), (1e6, 1e15), (1e20, 0.0)])
def test_extreme_times_keys_and_windows_match_the_reference(threshold_s, lookback_s):
    """Times near ±2^60 µs and keys up to 2^62 (the sort falls back to lexsort); windows past
    the whole span (clipped without changing an answer) or far inside it."""
    rng = np.random.default_rng(7)
    n = 200
    key = rng.choice([-1, 0, 2 ** 40, 2 ** 62], n)
    start_us = rng.integers(-2 ** 60, 2 ** 60 - 2 ** 58, n)
    ended = rng.random(n) < 0.8
    end_us = np.where(ended, start_us + rng.integers(1, 2 ** 58, n), NEVER)
    instances = (key, start_us, end_us, ended, rng.random(n) < 0.9)
    windows = dict(long_lived_threshold_s=threshold_s, lookback_s=lookback_s)
    assert_same_statistics(history_statistics(*instances, **windows),
                           reference.history_statistics(*instances, **windows))


def test_the_std_stays_exact_after_many_expiries():
    """Double-double sums: 10,000 varied lifetimes pass through a 50-second window, then the
    last arrival sees only five lifetimes of 7 s: their std is 0 to the last bits, with no
    rounding left behind by the others."""
    n = 10_000
    lifetime_us = np.concatenate([np.random.default_rng(3).integers(1, 5 * S, n),
                                  np.full(5, 7 * S), [S]])
    start_us = np.arange(n + 6) * 10 * S
    got = history_statistics(np.zeros(n + 6, np.int64), start_us, start_us + lifetime_us,
                             np.ones(n + 6, bool), np.ones(n + 6, bool),
                             long_lived_threshold_s=1.0, lookback_s=50.0)
    assert got["prior_ended"][-1] == 5
    assert got["log10_lifetime_std"][-1] < 1e-15
    assert got["log10_lifetime_mean"][-1] == pytest.approx(math.log10(7.0), rel=1e-15)
