"""Admission by predicted peak in the placement replay and its usage replay
(policies/replay/admission.py, policies/replay/usage.py)."""

import numpy as np
import pyarrow as pa
import pytest

from fleetcast_testing.reference.admission import BruteForceAdmission
from fleetcast_testing.reference.placement_simulator import simulate_reference
from pipelines import schemas
from policies.best_fit import BestFit
from policies.lava import Lava
from policies.nilas import Nilas
from policies.replay import admission as admission_module
from policies.replay import compiled
from policies.replay.admission import (
    Admission,
    CombinedPeaks,
    HistoryPeaks,
    OraclePeaks,
    Residents,
    TaskSharePeaks,
)
from policies.replay.lifetime_source import OracleLifetimes
from policies.replay.metrics import InflationMix
from policies.replay.pool import PoolSpec, PoolState
from policies.replay.simulator import (
    BEST_FIT_UNTIL_METRICS,
    POLICY_FROM_START,
    PlacementTrace,
    simulate,
)
from policies.replay.usage import NO_SAMPLE, VmUsage
from predictors.lifetime.curves import LifetimeCurves
from predictors.peak.borg_default import BorgDefaultPredictor
from predictors.peak.machine_samples import MachineSamples
from predictors.peak.max_decorator import MaxDecorator
from predictors.peak.n_sigma import NSigmaPredictor
from predictors.peak.overcommit_metrics import step_metrics
from predictors.peak.peak_oracle import PeakOracle
from predictors.peak.per_machine_percentile import PerMachinePercentilePredictor
from predictors.peak.rc_like import RcLikePredictor
from predictors.peak.task_avg import AvgPredictor
from predictors.peak.task_max import MaxPredictor
from tests.helpers import assert_same_replays as assert_same
from tests.helpers import random_pool

S = 1_000_000
STEP_US = 300 * S


# Each admitting predictor as the stage builds it (pipelines/stages/placement/admission.py).
PREDICTORS = {
    "borg_default": (BorgDefaultPredictor(0.8, 3), TaskSharePeaks),
    "rc_like": (RcLikePredictor(90, 6, 2, cap_to_limit=True), TaskSharePeaks),
    "task_max": (MaxPredictor(3), TaskSharePeaks),
    "task_avg": (AvgPredictor(2, cap_to_limit=True), TaskSharePeaks),
    "n_sigma": (NSigmaPredictor(3, 5, 3), HistoryPeaks),
    "n_sigma_capped": (NSigmaPredictor(3, 5, 3, cap_to_limit=True), HistoryPeaks),
    "per_machine_percentile": (PerMachinePercentilePredictor(95, 4, 6), HistoryPeaks),
}


def host_peaks(name, usage):
    if name == "max_n_sigma_rc_like":
        return CombinedPeaks(np.max, [host_peaks("n_sigma", usage), host_peaks("rc_like", usage)])
    predictor, kind = PREDICTORS[name]
    return kind(predictor, usage)


def predictor_of(name):
    if name == "max_n_sigma_rc_like":
        return MaxDecorator([PREDICTORS["n_sigma"][0], PREDICTORS["rc_like"][0]])
    return PREDICTORS[name][0]


def random_usage(trace, seed, end_us, gap_fraction=0.05, duplicates=5):
    """Samples on a 5-minute grid over each VM's life up to a day past `end_us`: CPU usage
    10-130 % of the request, some windows missing, some duplicated."""
    rng = np.random.default_rng(seed)
    vm, time, usage, limit = [], [], [], []
    for v in range(len(trace)):
        first = trace.arrival_us[v] // STEP_US
        last = min(trace.exit_us[v] - 1, end_us + 86_400_000_000) // STEP_US
        steps = np.arange(first, last + 1)
        steps = steps[(rng.random(len(steps)) >= gap_fraction) | (steps == first)]
        request = trace.demand[v, 0]
        vm += [v] * len(steps)
        time += (steps * STEP_US).tolist()
        usage += (request * rng.uniform(0.1, 1.3, len(steps))).tolist()
        limit += [request] * len(steps)
    pick = rng.integers(0, len(vm), duplicates)
    vm, time = vm + [vm[i] for i in pick], time + [time[i] for i in pick]
    usage, limit = usage + [usage[i] * 1.1 for i in pick], limit + [limit[i] for i in pick]
    return VmUsage.from_samples(vm, time, usage, limit, len(trace), STEP_US)


# --- VmUsage ----------------------------------------------------------------------------------

def test_vm_usage_fills_gaps_merges_duplicates_and_drops_bad_samples():
    usage = VmUsage.from_samples(
        vm=[1, 1, 1, 1, 0, 1, 2],
        time_us=np.array([2, 5, 3, 3, 1, 6, 4]) * STEP_US,
        usage=[1.0, 4.0, 2.0, 2.5, 7.0, -1.0, 3.0],
        limit=[5.0, 6.0, 5.0, 5.5, 8.0, 6.0, 0.0],
        num_vms=4, step_us=STEP_US)
    assert usage.first_step.tolist() == [1, 2, NO_SAMPLE, NO_SAMPLE]
    assert usage.offsets.tolist() == [0, 1, 5, 5, 5]
    # VM 1: steps 2, 3 (merged: max usage and limit), 4 (missing: step 3 again), 5; the
    # negative usage at 6 is dropped, as is VM 2's zero limit.
    assert usage.usage.tolist() == [7.0, 1.0, 2.5, 2.5, 4.0]
    assert usage.limit.tolist() == [8.0, 5.0, 5.5, 5.5, 6.0]
    assert usage.last_step == 5
    present, number = usage.at_step(np.array([0, 1, 2, 3]), 3)
    assert present.tolist() == [False, True, False, False]
    assert number[1] == 2


# --- Host peaks against a machine of the residents alone --------------------------------------

def residents_at(usage, step, vms, hosts, num_hosts):
    present, number = usage.at_step(vms, step)
    return Residents(step, num_hosts, vms, hosts, present, number)


def machine_of(usage, vms, last_step):
    """The overcommit stage's machine holding only `vms`, samples up to `last_step`."""
    times, tasks, values, limits = [], [], [], []
    for vm in vms.tolist():
        first = usage.first_step[vm]
        count = min(usage.num_samples[vm], last_step - first + 1)
        at = usage.offsets[vm] + np.arange(count)
        times += ((first + np.arange(count)) * STEP_US).tolist()
        tasks += [vm] * count
        values += usage.usage[at].tolist()
        limits += usage.limit[at].tolist()
    return MachineSamples.from_arrays(times, tasks, values, limits)


@pytest.mark.parametrize("name", [*PREDICTORS, "max_n_sigma_rc_like"])
@pytest.mark.parametrize("seed", range(3))
def test_host_peaks_equal_the_teller_on_a_machine_of_the_residents(name, seed):
    trace, _ = random_pool(seed, num_vms=120)
    usage = random_usage(trace, seed, int(trace.arrival_us.max()))
    peaks = host_peaks(name, usage)
    predictor = predictor_of(name)
    rng = np.random.default_rng(seed)
    for step in rng.integers(0, usage.last_step, 6).tolist():
        vms = np.flatnonzero(rng.random(len(trace)) < 0.5)
        hosts = rng.integers(0, 5, len(vms))
        residents = residents_at(usage, step, vms, hosts, 5)
        got = peaks.peaks(residents)
        for host in range(5):
            present = vms[(hosts == host) & residents.present]
            if not len(present):
                assert got[host] == 0
                continue
            expected = predictor.predict(machine_of(usage, present, step))[-1]
            assert got[host] == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("name", ["n_sigma", "n_sigma_capped", "per_machine_percentile",
                                  "max_n_sigma_rc_like", "oracle", "oracle_capped_p90",
                                  "oracle_partial"])
@pytest.mark.parametrize("seed", range(3))
def test_sums_kept_from_window_to_window_equal_sums_from_scratch(name, seed):
    """A bound teller asked at consecutive windows, residents coming and going a few at a
    time (and a skipped window), gives each window exactly the peaks of an unbound one."""
    trace, _ = random_pool(seed, num_vms=120)
    usage = random_usage(trace, seed, int(trace.arrival_us.max()))
    if name.startswith("oracle"):
        unbound = OraclePeaks(usage, 12, 90 if name == "oracle_capped_p90" else 100,
                              cap_to_limit=name != "oracle", partial=name == "oracle_partial")
    else:
        unbound = host_peaks(name, usage)
    bound = unbound.bind(6)
    rng = np.random.default_rng(seed)
    host_of = np.full(len(trace), -1)
    steps = [*range(0, usage.last_step + 2), *range(10, 40)]  # the second pass starts anew
    for step in steps:
        for vm in rng.integers(0, len(trace), 3).tolist():  # a few arrive, move or leave
            host_of[vm] = rng.integers(-1, 6)
        vms = np.flatnonzero(host_of >= 0)
        residents = residents_at(usage, step, vms, host_of[vms], 6)
        expected = unbound.peaks(residents)
        np.testing.assert_array_equal(bound.peaks(residents), expected)


def test_task_shares_computed_in_chunks_of_vms_equal_one_machine(monkeypatch):
    trace, _ = random_pool(2, num_vms=120)
    usage = random_usage(trace, 2, int(trace.arrival_us.max()))
    predictor = RcLikePredictor(90, 6, 2)
    whole = TaskSharePeaks(predictor, usage).share
    monkeypatch.setattr(admission_module, "_SHARE_CHUNK_SAMPLES", 500)
    chunked = TaskSharePeaks(predictor, usage).share
    assert usage.offsets[-1] > 10 * 500
    np.testing.assert_array_equal(chunked, whole)


@pytest.mark.parametrize("percentile, cap_to_limit", [(100, False), (100, True), (90, True)])
def test_oracle_peaks_equal_the_peak_oracle_on_a_machine_of_the_residents(percentile,
                                                                          cap_to_limit):
    trace, _ = random_pool(4, num_vms=120)
    usage = random_usage(trace, 4, int(trace.arrival_us.max()))
    horizon = 12
    peaks = OraclePeaks(usage, horizon, percentile, cap_to_limit)
    oracle = PeakOracle(horizon * 300, percentile, cap_to_limit, step_s=300)
    rng = np.random.default_rng(4)
    compared = 0
    for step in rng.integers(0, usage.last_step, 20).tolist():
        vms = np.flatnonzero(rng.random(len(trace)) < 0.5)
        hosts = rng.integers(0, 4, len(vms))
        got = peaks.peaks(residents_at(usage, step, vms, hosts, 4))
        present_all = residents_at(usage, step, vms, hosts, 4).present
        for host in range(4):
            present = vms[(hosts == host) & present_all]
            if not len(present):
                assert np.isnan(got[host])
                continue
            machine = machine_of(usage, present, usage.last_step)
            at = int(np.searchsorted(machine.times, step * STEP_US))
            expected = oracle.predict(machine)[at]
            if step + horizon > usage.last_step:
                assert np.isnan(got[host])
            elif np.isfinite(expected):
                assert got[host] == pytest.approx(expected, rel=1e-12)
                compared += 1
    assert compared > 20


# --- The replay -------------------------------------------------------------------------------

def two_vm_case():
    """One host of 10 CPUs; VM 0 (request 6, using 2) from t = 0, VM 1 (request 6, using 5)
    arriving at 400 s: by requests it does not fit."""
    trace = PlacementTrace(np.array([0, 400_000_000]), np.array([10 * STEP_US] * 2),
                           np.array([[6.0, 1.0], [6.0, 1.0]]))
    vm = np.r_[np.zeros(10, int), np.ones(9, int)]
    time = np.r_[np.arange(10), np.arange(1, 10)] * STEP_US
    usage = VmUsage.from_samples(vm, time, np.r_[np.full(10, 2.0), np.full(9, 5.0)],
                                 np.full(19, 6.0), 2, STEP_US)
    return trace, PoolSpec.from_shape((10.0, 100.0), 1), usage


def replay_two_vms(peaks_of, **options):
    trace, pool, usage = two_vm_case()
    admission = Admission(usage, trace.demand[:, 0], OraclePeaks(usage, 2),
                          None if peaks_of is None else peaks_of(usage), "test")
    result = simulate(trace, pool, BestFit(), OracleLifetimes(trace.lifetime_s()), start_us=0,
                      end_us=9 * STEP_US, warmup_s=0, sample_period_s=300,
                      admission=admission, **options)
    return result, admission


def test_hand_computed_case_by_requests_and_by_a_predicted_peak():
    result, admission = replay_two_vms(None)
    assert result.host_of_vm.tolist() == [0, -1]
    # Windows 0..8 end at 300 s .. 2700 s; the oracle (2 windows ahead) scores 0..7. VM 0's
    # total limit 6 covers its usage of 2: no violation, no savings.
    assert result.summary["admission_windows"] == 9
    assert result.summary["admission_scored_windows"] == 8
    assert result.summary["violation_rate_pct"] == 0
    assert result.summary["savings_pct"] == 0
    # Borg-default phi = 0.5: at 300 s the host's peak is 3, room 7, so VM 1 fits at 400 s.
    # From window 1 on, both VMs: predicted 0.5 * 12 = 6 < oracle 2 + 5 = 7, a violation of
    # severity 1/7 in 7 of 8 scored windows; savings 0.5 in each.
    result, admission = replay_two_vms(lambda u: TaskSharePeaks(BorgDefaultPredictor(0.5, 0),
                                                                u))
    assert result.host_of_vm.tolist() == [0, 0]
    totals = admission.totals
    assert (totals.windows[0], totals.scored[0], totals.violations[0]) == (9, 8, 7)
    assert totals.severity[0] == pytest.approx(1.0)
    assert totals.savings[0] == pytest.approx(4.0)
    assert result.summary["violation_rate_pct"] == pytest.approx(87.5)
    assert result.summary["overflow_pct"] == 0
    # Packing density stays by request: 12 of 10 CPUs placed.
    assert result.timeseries["packing_density_pct"][-1] == pytest.approx(120.0)


def test_rates_without_a_scored_window_are_null_in_the_summary_table():
    # The scoring oracle looks 20 windows ahead of a 9-window replay: none is scored.
    trace, pool, usage = two_vm_case()
    admission = Admission(usage, trace.demand[:, 0], OraclePeaks(usage, 20), None, "requests")
    result = simulate(trace, pool, BestFit(), OracleLifetimes(trace.lifetime_s()), start_us=0,
                      end_us=9 * STEP_US, warmup_s=0, sample_period_s=300, admission=admission)
    assert result.summary["admission_windows"] == 9
    assert result.summary["admission_scored_windows"] == 0
    assert result.summary["overflow_pct"] == 0
    rates = ("violation_rate_pct", "mean_severity_pct", "savings_pct")
    assert [result.summary[name] for name in rates] == [None] * 3
    fields = [schemas.PLACEMENT_SUMMARY.field(name) for name in rates]
    row = pa.Table.from_pylist([{name: result.summary[name] for name in rates}],
                               schema=pa.schema(fields))
    assert [row.column(name).null_count for name in rates] == [1] * 3


def test_the_admitting_oracle_sees_the_future_peak_and_an_unwarmed_predictor_the_limit():
    # The oracle of 2 windows: VM 0's future peak is 2, room 8: VM 1 fits.
    result, _ = replay_two_vms(lambda u: OraclePeaks(u, 2, partial=True))
    assert result.host_of_vm.tolist() == [0, 0]
    # N-sigma with a 2-sample warm-up: at 300 s VM 0 is cold and counts at its limit 6.
    result, _ = replay_two_vms(lambda u: HistoryPeaks(NSigmaPredictor(5, 4, 2), u))
    assert result.host_of_vm.tolist() == [0, -1]


def test_a_counted_vm_leaving_keeps_its_share_until_the_next_window_end():
    # Host of 10: VM 0 (request 8, using 1) until 700 s; VM 1 (request 8) at 650 s; VM 2
    # (request 8) at 800 s. At 600 s the predicted peak of VM 0 is 1 (phi 0.125): VM 1
    # fits (room 9). VM 0 leaves at 700 s, its share (1) stays taken: room 1. At 900 s
    # VM 1 alone predicts 1: room 9, and VM 2 arriving at 800 s had found room 1.
    trace = PlacementTrace(np.array([0, 650, 800]) * 1_000_000,
                           np.array([700, 3000, 3000]) * 1_000_000, np.full((3, 2), [8.0, 1.0]))
    usage = VmUsage.from_samples([0, 0, 0, 1, 1, 1], np.array([0, 1, 2, 2, 3, 4]) * STEP_US,
                                 [1.0] * 6, [8.0] * 6, 3, STEP_US)
    admission = Admission(usage, trace.demand[:, 0], OraclePeaks(usage, 1),
                          TaskSharePeaks(BorgDefaultPredictor(0.125, 0), usage), "borg")
    result = simulate(trace, PoolSpec.from_shape((10.0, 100.0), 1), BestFit(),
                      OracleLifetimes(trace.lifetime_s()), start_us=0, end_us=2_000_000_000,
                      warmup_s=0, admission=admission)
    assert result.host_of_vm.tolist() == [0, 0, -1]


def test_admission_by_requests_decides_exactly_as_without_admission():
    trace, pool = random_pool(7)
    usage = random_usage(trace, 7, int(trace.arrival_us.max()))
    options = dict(start_us=0, warmup_s=3600, sample_period_s=600)
    lifetimes = OracleLifetimes(trace.lifetime_s())
    plain = simulate(trace, pool, Nilas(), lifetimes, **options)
    admission = Admission(usage, trace.demand[:, 0], OraclePeaks(usage, 12), None, "requests")
    admitted = simulate(trace, pool, Nilas(), lifetimes, admission=admission, **options)
    np.testing.assert_array_equal(admitted.host_of_vm, plain.host_of_vm)
    for name, values in plain.timeseries.items():
        np.testing.assert_array_equal(admitted.timeseries[name], values)
    assert admitted.summary["admission_scored_windows"] > 0


@pytest.mark.parametrize("name", ["borg_default", "rc_like", "n_sigma", "max_n_sigma_rc_like",
                                  "oracle"])
@pytest.mark.parametrize("policy, make_policy", [("best_fit", BestFit), ("nilas", Nilas),
                                                 ("lava", Lava)])
@pytest.mark.parametrize("engine", ["python", "auto"])
def test_fast_replay_admits_as_the_scan_every_host_reference(name, policy, make_policy, engine):
    trace, pool = random_pool(11, num_vms=150, num_hosts=6)
    end_us = int(trace.arrival_us.max())
    usage = random_usage(trace, 11, end_us)
    if name == "oracle":
        peaks = OraclePeaks(usage, 24, cap_to_limit=True, partial=True)
        reference = BruteForceAdmission(usage, trace.demand[:, 0], oracle_horizon_steps=24,
                                        cap_to_limit=True)
    else:
        peaks = host_peaks(name, usage)
        reference = BruteForceAdmission(usage, trace.demand[:, 0], predictor_of(name))
    admission = Admission(usage, trace.demand[:, 0], OraclePeaks(usage, 12), peaks, name)
    lifetimes = OracleLifetimes(trace.lifetime_s())
    fast = simulate(trace, pool, make_policy(), lifetimes, start_us=0, refresh_interval_s=0,
                    admission=admission, engine=engine)
    expected = simulate_reference(trace, pool, policy, lifetimes, start_us=0,
                                  admission=reference)
    np.testing.assert_array_equal(fast.host_of_vm, expected)
    plain = simulate(trace, pool, make_policy(), lifetimes, start_us=0)
    assert not np.array_equal(fast.host_of_vm, plain.host_of_vm)


ADMISSIONS = ["requests", "borg_default", "rc_like", "task_max", "n_sigma",
              "per_machine_percentile", "max_n_sigma_rc_like", "oracle"]


def admission_of(name, usage, request):
    peaks = {"requests": None, "oracle": OraclePeaks(usage, 36, partial=True)}.get(name)
    if name not in ("requests", "oracle"):
        peaks = host_peaks(name, usage)
    return Admission(usage, request, OraclePeaks(usage, 12, cap_to_limit=True), peaks, name)


@pytest.mark.parametrize("make_policy", [BestFit, Nilas, Lava])
@pytest.mark.parametrize("warm_start", [POLICY_FROM_START, BEST_FIT_UNTIL_METRICS])
def test_compiled_engine_admits_and_scores_as_python(small_model, make_policy, warm_start):
    """Every admission, oracle and exact-curve lifetimes, warm-up VMs, both warm starts (the
    take-over on a window end), VMs exiting as they arrive: the same decisions, samples,
    summaries and per-host usage replay."""
    for seed in range(2):
        trace, pool = random_pool(seed, num_vms=300, num_hosts=8,
                                  zero_lifetime_fraction=0.05 * seed)
        end_us = int(trace.arrival_us.max()) + 3600 * S
        usage = random_usage(trace, seed, end_us)
        model, features = small_model
        rows = np.random.default_rng(seed).integers(0, len(features), len(trace))
        for lifetimes in (OracleLifetimes(trace.lifetime_s()),
                          LifetimeCurves(model, features[rows])):
            policy = make_policy()
            assert compiled.supports(policy, lifetimes, None, PoolState(pool),
                                     lifetimes.repredicts and policy.uses_exit_estimates)
            for name in ADMISSIONS:
                results = [simulate(
                    trace, pool, make_policy(), lifetimes, start_us=2 * 3600 * S,
                    end_us=end_us, warmup_s=3 * 3600.0, sample_period_s=1800.0,
                    inflation_mix=InflationMix.from_demand(trace.demand), stranding_every=3,
                    warm_start=warm_start, engine=engine,
                    admission=admission_of(name, usage, trace.demand[:, 0]))
                    for engine in ("python", "auto")]
                python, fast = results
                assert python.summary["warmup_vms"] > 0
                assert python.summary["admission_scored_windows"] > 0
                assert_same(python, fast)
                for field, values in python.usage_totals._asdict().items():
                    np.testing.assert_array_equal(values, getattr(fast.usage_totals, field),
                                                  err_msg=f"{name}: {field}")


class TraceMachines:
    """A policy that puts every VM on its trace machine (`machine_of_vm`), room or not."""
    name = "trace_machines"
    one_shot = False
    uses_exit_estimates = False
    uses_lifetimes = False

    def __init__(self, machine_of_vm):
        self.machine_of_vm = machine_of_vm

    def bind(self, pool, schedule_timer, now_us):
        pass

    def select(self, vm, demand, exit_us, now_us):
        return int(self.machine_of_vm[vm])

    def update(self, host, now_us):
        pass

    def exits_changed(self, hosts, now_us):
        pass

    def placed(self, vm, host, now_us):
        pass

    def removed(self, vm, host, now_us):
        pass


@pytest.mark.parametrize("name", ["requests", "borg_default", "rc_like", "n_sigma"])
def test_replaying_the_trace_placement_scores_as_the_overcommit_stage(name):
    """VMs on 5-minute boundaries, each machine busy throughout: a replay that puts every
    VM on its trace machine scores each host as the overcommit stage scores that machine."""
    rng = np.random.default_rng(3)
    machines, steps = 4, 60
    arrival = np.r_[np.zeros(machines, int), rng.integers(1, steps - 5, 40)]
    life = np.r_[np.full(machines, steps), rng.integers(1, 30, 40)]
    exit_ = np.minimum(arrival + life, steps)
    machine = np.r_[np.arange(machines), rng.integers(0, machines, 40)]
    request = rng.choice([1.0, 2.0, 4.0], len(arrival))
    trace = PlacementTrace(arrival * STEP_US, exit_ * STEP_US,
                           np.column_stack([request, np.ones(len(arrival))]))
    vm = np.repeat(np.arange(len(arrival)), exit_ - arrival)
    step = np.concatenate([np.arange(a, e) for a, e in zip(arrival, exit_)])
    values = request[vm] * rng.uniform(0.1, 1.2, len(vm))
    usage = VmUsage.from_samples(vm, step * STEP_US, values, request[vm], len(arrival), STEP_US)
    horizon = 6
    peaks = None if name == "requests" else host_peaks(name, usage)
    admission = Admission(usage, request, OraclePeaks(usage, horizon), peaks, name)
    simulate(trace, PoolSpec.from_shape((1000.0, 1000.0), machines),
             TraceMachines(machine), OracleLifetimes(trace.lifetime_s()), start_us=0,
             end_us=steps * STEP_US, warmup_s=0, admission=admission)
    predictor = (BorgDefaultPredictor(1.0, 0) if name == "requests" else predictor_of(name))
    oracle = PeakOracle(horizon * 300, step_s=300)
    for host in range(machines):
        samples = machine_of(usage, np.flatnonzero(machine == host), steps)
        limit = np.bincount(samples.step, samples.limit)
        metrics = step_metrics(limit, predictor.predict(samples), oracle.predict(samples))
        totals = admission.totals
        assert totals.scored[host] == metrics.scored.sum() > 0
        assert totals.violations[host] == metrics.violation.sum()
        assert totals.severity[host] == pytest.approx(metrics.severity.sum())
        assert totals.savings[host] == pytest.approx(metrics.savings.sum())
