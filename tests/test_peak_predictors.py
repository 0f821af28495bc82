"""Peak oracle and predictors ([Bashir21] §3-4, [Pace18] §III) against per-step references."""


import numpy as np
import pandas as pd
import pytest

from fleetcast_testing.reference import peak as ref
from predictors.peak.arima_forecaster import ArimaForecaster
from predictors.peak.avg_decorator import AvgDecorator
from predictors.peak.borg_default import BorgDefaultPredictor
from predictors.peak.gp_forecaster import GaussianProcessForecaster
from predictors.peak.machine_samples import MachineSamples
from predictors.peak.max_decorator import MaxDecorator
from predictors.peak.n_sigma import NSigmaPredictor
from predictors.peak.overcommit_metrics import total_limit
from predictors.peak.peak_oracle import PeakOracle
from predictors.peak.per_machine_percentile import PerMachinePercentilePredictor
from predictors.peak.rc_like import RcLikePredictor
from predictors.peak.task_avg import AvgPredictor
from predictors.peak.task_max import MaxPredictor

STEP_US = 300_000_000
LIMITS = (0.25, 0.5, 1.0, 2.0)


def random_machine(seed, num_steps=60, num_tasks=8, dyadic=False, limit_change=0.05,
                   gap_after=None):
    """A machine with arrivals, departures, missing steps, tasks absent for a while, limit
    changes and usage up to 1.2x the limit. `dyadic` rounds usage to 1/64 so that every sum is
    exact in floating point; `gap_after` inserts a 2-day gap after that step."""
    rng = np.random.default_rng(seed)
    times = np.arange(num_steps, dtype=np.int64) * STEP_US
    if gap_after is not None:
        times[gap_after + 1:] += 2 * 86_400_000_000
    step_kept = rng.random(num_steps) < 0.9
    rows = []
    for task in range(num_tasks):
        arrival = rng.integers(0, num_steps)
        departure = rng.integers(arrival, num_steps)
        limit = float(rng.choice(LIMITS))
        for step in range(arrival, departure + 1):
            if rng.random() < limit_change:
                limit = float(rng.choice(LIMITS))
            if step_kept[step] and rng.random() < 0.9:
                usage = rng.random() * 1.2 * limit
                if dyadic:
                    usage = np.round(usage * 64) / 64
                rows.append((times[step], f"task-{task}", usage, limit))
    time_us, task_ids, usage, limit = map(np.array, zip(*rows))
    return MachineSamples.from_arrays(time_us, task_ids, usage, limit)


def tiny_machine():
    """Task A: usage 1..5, limit 10, steps 0-4. Task B: usage 5, 6, 1, limit 4, steps 0-2."""
    time_us = np.array([0, 0, 1, 1, 2, 2, 3, 4]) * STEP_US
    task = np.array(["A", "B", "A", "B", "A", "B", "A", "A"])
    usage = np.array([1.0, 5.0, 2.0, 6.0, 3.0, 1.0, 4.0, 5.0])
    limit = np.array([10.0, 4.0, 10.0, 4.0, 10.0, 4.0, 10.0, 10.0])
    return MachineSamples.from_arrays(time_us, task, usage, limit)


def assert_same(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=1e-12, equal_nan=True)


MACHINES = [random_machine(seed, gap_after=30 if seed % 3 == 0 else None) for seed in range(9)]


# --- MachineSamples ------------------------------------------------------------------------

def test_from_arrays_sorts_and_densifies():
    samples = MachineSamples.from_arrays(
        time_us=[900, 300, 300, 900], task_ids=["b", "z", "b", "a"],
        usage=[4.0, 2.0, 1.0, 3.0], limit=[1.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(samples.times, [300, 900])
    np.testing.assert_array_equal(samples.step, [0, 0, 1, 1])
    np.testing.assert_array_equal(samples.task, [1, 2, 0, 1])  # a=0, b=1, z=2
    np.testing.assert_array_equal(samples.usage, [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(samples.step_offsets, [0, 2, 4])


@pytest.mark.parametrize("time_us, usage, limit", [
    ([0, 0], [1.0, 1.0], [1.0, 1.0]),      # the same task twice at one time
    ([0, 300], [-1.0, 1.0], [1.0, 1.0]),   # negative usage
    ([0, 300], [1.0, 1.0], [0.0, 1.0]),    # zero limit
    ([0, 300], [np.nan, 1.0], [1.0, 1.0]),
])
def test_from_arrays_rejects_duplicates_and_bad_values(time_us, usage, limit):
    with pytest.raises(ValueError):
        MachineSamples.from_arrays(time_us, ["a", "a"], usage, limit)


def test_runs_restart_after_an_absence():
    # Task 0 at steps 0, 1, 3, 4 (absent at 2); task 1 at steps 1-4.
    samples = MachineSamples.from_arrays(
        time_us=[0, 1, 1, 2, 3, 3, 4, 4], task_ids=[0, 0, 1, 1, 0, 1, 0, 1],
        usage=[1.0] * 8, limit=[1.0] * 8)
    np.testing.assert_array_equal(samples.run_position, [1, 2, 1, 2, 1, 3, 2, 4])
    np.testing.assert_array_equal(samples.run_start_step, [0, 0, 1, 1, 3, 1, 3, 1])
    np.testing.assert_array_equal(samples.run_end_step, [1, 1, 4, 4, 4, 4, 4, 4])


@pytest.mark.parametrize("ufunc", [np.add, np.maximum])
def test_run_scan_matches_a_loop_over_runs(ufunc):
    samples = MACHINES[1]
    values = np.random.default_rng(0).random(samples.num_samples)
    scanned = samples.run_scan(values, ufunc)
    order = samples.task_order
    expected = np.empty(samples.num_samples)
    for j, sample in enumerate(order):
        previous = order[j - 1] if j else None
        continues = previous is not None and samples.run_position[sample] > 1
        expected[sample] = (ufunc(values[sample], expected[previous]) if continues
                            else values[sample])
    np.testing.assert_allclose(scanned, expected, rtol=1e-12)


# --- Peak oracle ---------------------------------------------------------------------------

@pytest.mark.parametrize("percentile, cap_to_limit, expected", [
    (100, False, [8.0, 4.0, 5.0, np.nan, np.nan]),
    (100, True, [6.0, 4.0, 5.0, np.nan, np.nan]),
    (50, False, [6.0, 4.0, 4.5, np.nan, np.nan]),
])
def test_oracle_tiny_machine_by_hand(percentile, cap_to_limit, expected):
    # Horizon 2 steps: PO(t) over steps t+1, t+2 of the tasks present at t; the last two
    # steps have no full horizon and no value. PO(0): step 1 = 2 + 6, step 2 = 3 + 1.
    oracle = PeakOracle(horizon_s=600, percentile=percentile, cap_to_limit=cap_to_limit)
    assert_same(oracle.predict(tiny_machine()), expected)


@pytest.mark.parametrize("horizon_s, percentile, cap_to_limit", [
    (3000, 100, False), (3000, 100, True), (2900, 90, True), (1800, 50, False),
    (86400, 100, False), (0, 100, False)])
def test_oracle_matches_reference(horizon_s, percentile, cap_to_limit):
    for samples in MACHINES:
        fast = PeakOracle(horizon_s, percentile, cap_to_limit).predict(samples)
        slow = ref.ReferenceOracle(horizon_s, percentile, cap_to_limit).predict(samples)
        assert_same(fast, slow)


def test_oracle_after_a_gap_with_more_samples_than_pending_steps():
    # Steps 0-1, then a gap longer than the horizon and one step with 5 tasks: the reference
    # emits step 0 (window: step 1) and step 1 (empty window: total limit), then would pop
    # from an empty cache; step 2 is emitted at the end of the data.
    time_us = [0, STEP_US] + [10 * 86_400_000_000] * 5
    samples = MachineSamples.from_arrays(time_us, [0, 0, 1, 2, 3, 4, 5], [1.0, 2.0] + [0.5] * 5,
                                         [3.0] * 7)
    oracle = PeakOracle(horizon_s=600)
    np.testing.assert_array_equal(oracle.window_ends(samples), [1, 1, 2])
    assert_same(oracle.predict(samples), [2.0, 3.0, 15.0])
    assert_same(ref.ReferenceOracle(horizon_s=600).predict(samples), [2.0, 3.0, 15.0])


def test_oracle_on_a_regular_grid_has_full_windows_and_no_value_for_the_last_horizon():
    samples = MachineSamples.from_arrays(np.arange(50) * STEP_US, np.zeros(50), np.ones(50),
                                         np.ones(50))
    oracle = PeakOracle(horizon_s=12 * 300)
    ends = oracle.window_ends(samples)
    np.testing.assert_array_equal(ends[:38], np.arange(38) + 12)
    np.testing.assert_array_equal(ends[38:], -1)
    assert np.isnan(oracle.predict(samples)[38:]).all()


def test_oracle_invariants():
    for samples in MACHINES:
        peak = PeakOracle(3000).predict(samples)
        emitted = np.isfinite(peak)
        p90 = PeakOracle(3000, percentile=90).predict(samples)
        assert np.all(peak[emitted] >= p90[emitted] - 1e-12)
        capped = PeakOracle(3000, cap_to_limit=True).predict(samples)
        assert np.all(capped[emitted] <= peak[emitted] + 1e-12)
        # Capped at the current limits, only current tasks: never above the current limit.
        assert np.all(capped[emitted] <= total_limit(samples)[emitted] + 1e-12)


def test_oracle_of_steady_tasks_is_their_current_total():
    # Tasks that never leave and never change usage: the future peak is today's total.
    steps = np.repeat(np.arange(40), 3)
    task = np.tile([0, 1, 2], 40)
    samples = MachineSamples.from_arrays(steps * STEP_US, task, np.tile([0.5, 1.5, 2.0], 40),
                                         np.full(120, 2.0))
    peak = PeakOracle(3000).predict(samples)
    assert_same(peak[np.isfinite(peak)], 4.0)


# --- Predictors: hand-computed values ------------------------------------------------------

def test_borg_default_by_hand():
    assert_same(BorgDefaultPredictor(0.9).predict(tiny_machine()), [12.6, 12.6, 12.6, 9.0, 9.0])
    # min_num_samples=2: a run's first sample counts at its full limit.
    assert_same(BorgDefaultPredictor(0.9, 2).predict(tiny_machine()), [14.0, 12.6, 12.6, 9.0, 9.0])


def test_borg_default_saves_exactly_one_minus_phi():
    for samples in MACHINES:
        limit = total_limit(samples)
        savings = (limit - BorgDefaultPredictor(0.9).predict(samples)) / limit
        np.testing.assert_allclose(savings, 0.1, rtol=1e-12)


@pytest.mark.parametrize("percentile, history, expected", [
    # Step 0: both tasks cold (a run's first sample), total limit 14. Step 1, max over two
    # samples of usage/limit times the limit: A 0.2 * 10 + B 1.5 * 4.
    (100, 2, [14.0, 8.0, 9.0, 4.0, 5.0]),
    # Medians over three: step 2 A median(.1, .2, .3) * 10 + B median(1.25, 1.5, .25) * 4.
    (50, 3, [14.0, 7.0, 7.0, 3.0, 4.0]),
])
def test_rc_like_by_hand(percentile, history, expected):
    predictor = RcLikePredictor(percentile, history, min_num_samples=0)
    assert_same(predictor.predict(tiny_machine()), expected)


def test_n_sigma_by_hand():
    # Step 1: ratios (2+6)/14 and (1+5)/14, mean 1/2, stdev (2/14)/sqrt(2):
    # (1/2 + 1/(7 sqrt 2)) * 14 = 7 + sqrt(2). Step 2: ratios 4/14, 8/14, 6/14: (6 + 2)/14 * 14.
    # Step 3: only A, ratios .4, .3, .2: (.3 + .1) * 10.
    predictor = NSigmaPredictor(n=1, num_history_samples=3, min_num_samples=0)
    assert_same(predictor.predict(tiny_machine()), [14.0, 7 + np.sqrt(2), 8.0, 4.0, 5.0])


def test_n_sigma_is_capped_at_the_warm_limit():
    predictor = NSigmaPredictor(n=100, num_history_samples=3, min_num_samples=0)
    assert_same(predictor.predict(tiny_machine()), [14.0, 14.0, 14.0, 10.0, 10.0])


# --- Predictors against the per-step references --------------------------------------------

WARMUP_CASES = [(3, 10, False), (0, 5, True), (24, 120, False), (1, 2, True)]


@pytest.mark.parametrize("min_num_samples, history, cap_to_limit", WARMUP_CASES)
def test_n_sigma_matches_reference(min_num_samples, history, cap_to_limit):
    for samples in MACHINES:
        fast = NSigmaPredictor(2.5, history, min_num_samples, cap_to_limit)
        slow = ref.ReferenceNSigma(2.5, history, min_num_samples, cap_to_limit)
        assert_same(fast.predict(samples), slow.predict(samples))


@pytest.mark.parametrize("min_num_samples, history, cap_to_limit", WARMUP_CASES)
@pytest.mark.parametrize("percentile", [100, 90, 37.5])
def test_per_machine_percentile_matches_reference(min_num_samples, history, cap_to_limit,
                                                  percentile):
    for samples in MACHINES:
        fast = PerMachinePercentilePredictor(percentile, history, min_num_samples, cap_to_limit)
        slow = ref.ReferencePerMachinePercentile(percentile, history, min_num_samples, cap_to_limit)
        assert_same(fast.predict(samples), slow.predict(samples))


@pytest.mark.parametrize("min_num_samples, history, cap_to_limit", WARMUP_CASES)
@pytest.mark.parametrize("percentile", [100, 99, 50, 0])
def test_rc_like_matches_reference(min_num_samples, history, cap_to_limit, percentile):
    for samples in MACHINES:
        fast = RcLikePredictor(percentile, history, min_num_samples, cap_to_limit)
        slow = ref.ReferenceRcLike(percentile, history, min_num_samples, cap_to_limit)
        assert_same(fast.predict(samples), slow.predict(samples))


@pytest.mark.parametrize("min_num_samples, cap_to_limit", [(0, False), (3, True), (24, False)])
def test_task_max_and_avg_match_reference(min_num_samples, cap_to_limit):
    for samples in MACHINES:
        assert_same(MaxPredictor(min_num_samples, cap_to_limit).predict(samples),
                    ref.ReferenceMax(min_num_samples, cap_to_limit).predict(samples))
        assert_same(AvgPredictor(min_num_samples, cap_to_limit).predict(samples),
                    ref.ReferenceAvg(min_num_samples, cap_to_limit).predict(samples))


@pytest.mark.parametrize("phi, min_num_samples", [(0.9, 0), (1.0, 0), (0.8, 3)])
def test_borg_default_matches_reference(phi, min_num_samples):
    for samples in MACHINES:
        assert_same(BorgDefaultPredictor(phi, min_num_samples).predict(samples),
                    ref.ReferenceBorgDefault(phi, min_num_samples).predict(samples))


def test_decorators_match_reference():
    for samples in MACHINES:
        parts = [NSigmaPredictor(3, 10, 3), RcLikePredictor(80, 10, 3)]
        references = [ref.ReferenceNSigma(3, 10, 3), ref.ReferenceRcLike(80, 10, 3)]
        maximum = MaxDecorator(parts).predict(samples)
        assert_same(maximum, ref.ReferenceMaxDecorator(references).predict(samples))
        assert_same(AvgDecorator(parts).predict(samples),
                    ref.ReferenceAvgDecorator(references).predict(samples))
        for part in parts:
            assert np.all(maximum >= part.predict(samples))


@pytest.mark.real_data
def test_real_azure_vms_on_one_machine_match_reference(azure_readings):
    # Eight real Azure VMs (2 days of 5-minute max-CPU readings, limit = 1 VM) on one machine.
    # The file is sorted by time: 50 VMs x 576 readings cover the first two days.
    readings = pd.read_csv(azure_readings, header=None, usecols=[0, 1, 3], nrows=50 * 576,
                           names=["time_s", "vm", "max_cpu"])
    readings = readings[readings.vm.isin(readings.vm.unique()[:8]) & (readings.time_s < 2 * 86400)]
    samples = MachineSamples.from_arrays(readings.time_s.to_numpy() * 1_000_000,
                                         readings.vm.to_numpy(), readings.max_cpu.to_numpy() / 100,
                                         np.ones(len(readings)))
    assert samples.num_steps == 576 and samples.num_tasks == 8
    pairs = [(PeakOracle(6 * 3600, cap_to_limit=True),
              ref.ReferenceOracle(6 * 3600, cap_to_limit=True)),
             (NSigmaPredictor(5, 120, 24, True), ref.ReferenceNSigma(5, 120, 24, True)),
             (RcLikePredictor(99, 120, 24, True), ref.ReferenceRcLike(99, 120, 24, True))]
    for fast, slow in pairs:
        assert_same(fast.predict(samples), slow.predict(samples))


# --- Forecasters ([Pace18]) -----------------------------------------------------------------

def small_arima(**overrides):
    knobs = dict(lags=(0, 1, 2), num_history_samples=20, refit_every_steps=15,
                 min_fit_samples=10, min_num_samples=3, uncertainty="std", k1=0.0, k2=1.0)
    return ArimaForecaster(**{**knobs, **overrides})


def small_gp(**overrides):
    knobs = dict(pattern_length=3, num_history_samples=20, refit_every_steps=10, min_fit_samples=10,
                 min_num_samples=3, k1=0.0, k2=1.0, uncertainty="std")
    return GaussianProcessForecaster(**{**knobs, **overrides})


def forecast_machine(seed):
    """40 steps: task 0 throughout, task 1 until step 25 (absent at 12), task 2 from step 15.
    Usage is a multiple of 1/64 so every ratio sum is exact in floating point."""
    rng = np.random.default_rng(seed)
    presence = {0: range(40), 1: [s for s in range(26) if s != 12], 2: range(15, 40)}
    rows = [(step * STEP_US, task, np.round(rng.uniform(0.2, 0.8) * 64) / 64, 1.0)
            for task, steps in presence.items() for step in steps]
    return MachineSamples.from_arrays(*map(np.array, zip(*rows)))


@pytest.mark.parametrize("make", [small_arima, small_gp])
def test_forecasters_match_reference_exactly(make):
    # Dyadic usage makes every ratio bit-identical between the two, so the model fits are too.
    samples = forecast_machine(0)
    forecaster = make()
    predicted = forecaster.predict(samples)
    np.testing.assert_array_equal(predicted, ref.ReferenceForecaster(forecaster).predict(samples))
    assert np.sum(predicted < total_limit(samples)) >= 20  # the forecasts are used


def steady_machine(num_steps=40, ratio=0.25):
    steps = np.arange(num_steps)
    return MachineSamples.from_arrays(steps * STEP_US, np.zeros(num_steps),
                                      np.full(num_steps, ratio * 2.0), np.full(num_steps, 2.0))


def test_gp_forecast_of_a_constant_ratio_is_the_constant():
    # Before the task is warm (3 samples) and before 10 ratios exist it counts at its limit.
    predicted = small_gp(k2=0.0).predict(steady_machine())
    assert_same(predicted[:9], 2.0)
    assert_same(predicted[9:], 0.5)


def test_forecaster_buffer_k1_one_advertises_the_limit():
    samples = forecast_machine(1)
    for forecaster in (small_arima(k1=1.0, lags=(1,), refit_every_steps=40),
                       small_gp(k1=1.0)):
        assert_same(forecaster.predict(samples), total_limit(samples))


def test_gp_posterior_matches_dense_formulas():
    # Eq. 7-8 with explicit inverses on a short series.
    gp = small_gp()
    rng = np.random.default_rng(3)
    series = rng.random(14)
    times = np.arange(14, dtype=np.int64) * STEP_US
    log_params = np.log([0.3, 2.0, 0.5, 0.05])
    inputs, targets, query = gp.patterns(times, series)
    np.testing.assert_allclose(inputs[0], [(3 - 13) * 300 / 3600, *series[:3]])
    np.testing.assert_allclose(query, [300 / 3600, *series[-3:]])
    scale = np.array([2.0, 0.5, 0.5, 0.5])

    def kernel(a, b):
        scaled = (a[:, None, :] - b[None, :, :]) / scale
        return 0.3 ** 2 * np.exp(-0.5 * (scaled ** 2).sum(axis=2))

    inverse = np.linalg.inv(kernel(inputs, inputs) + (0.05 ** 2 + 1e-10) * np.eye(len(targets)))
    cross = kernel(query[None, :], inputs)[0]
    offset = targets.mean()
    mean, variance = gp.posterior(log_params, times, series)
    np.testing.assert_allclose(mean, offset + cross @ inverse @ (targets - offset), rtol=1e-9)
    np.testing.assert_allclose(variance, 0.3 ** 2 - cross @ inverse @ cross, rtol=1e-7)


@pytest.mark.parametrize("seed", range(6))
def test_gp_evidence_equals_the_dense_reference(seed):
    """The compiled evidence and gradient against dense inverses, on random histories and
    parameters across LOG_BOUNDS."""
    rng = np.random.default_rng(seed)
    gp = small_gp(pattern_length=int(rng.integers(1, 6)))
    n = int(rng.integers(gp.pattern_length + 2, 40))
    inputs, targets, _ = gp.patterns(np.arange(n, dtype=np.int64) * STEP_US, rng.random(n))
    time_sq, history_sq = gp._squared_distances(inputs, inputs)
    centred = targets - targets.mean()
    low, high = np.log([1e-2, 0.1, 0.05, 1e-2]), np.log([3.0, 50.0, 5.0, 0.5])
    for log_params in rng.uniform(low, high, (5, 4)):
        value, gradient = gp.negative_log_evidence(log_params, time_sq, history_sq, centred)
        expected = ref.gp_negative_log_evidence(log_params, time_sq, history_sq, centred)
        np.testing.assert_allclose(value, expected[0], rtol=1e-9)
        np.testing.assert_allclose(gradient, expected[1], rtol=1e-7, atol=1e-9)


def test_gp_evidence_of_a_covariance_that_is_not_positive_definite_is_infinite():
    time_sq = np.array([[0.0, -100.0], [-100.0, 0.0]])  # off-diagonal above the diagonal
    for evidence in (GaussianProcessForecaster.negative_log_evidence,
                     ref.gp_negative_log_evidence):
        value, gradient = evidence(np.log([1.0, 1.0, 1.0, 0.1]), time_sq, np.zeros((2, 2)),
                                   np.array([0.1, -0.1]))
        assert value == np.inf and not gradient.any()


def test_gp_evidence_gradient_matches_finite_differences():
    gp = small_gp()
    series = np.random.default_rng(5).random(20)
    inputs, targets, _ = gp.patterns(np.arange(20, dtype=np.int64) * STEP_US, series)
    time_sq, history_sq = gp._squared_distances(inputs, inputs)
    centred = targets - targets.mean()
    point = np.log([0.2, 1.5, 0.4, 0.1])
    _, gradient = gp.negative_log_evidence(point, time_sq, history_sq, centred)
    eps = 1e-6

    def evidence(log_params):
        return gp.negative_log_evidence(log_params, time_sq, history_sq, centred)[0]

    numeric = [(evidence(point + eps * e) - evidence(point - eps * e)) / (2 * eps)
               for e in np.eye(4)]
    np.testing.assert_allclose(gradient, numeric, rtol=1e-5, atol=1e-7)
