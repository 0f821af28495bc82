"""The overcommit stage: filter, metric, reset/shift, scheduler, tellers per machine, metrics,
bad input, LoadOrWrite and the notebook ([Bashir21] §3-5)."""

import nbformat
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from nbclient import NotebookClient

from configs import fleetcast_pb2
from pipelines import schemas
from pipelines.config import parse_config
from pipelines.stages.overcommit import steps, tellers
from pipelines.stages.overcommit.summary import MACHINE_METRIC_NAMES
from predictors.peak.borg_default import BorgDefaultPredictor
from predictors.peak.machine_samples import MachineSamples
from predictors.peak.max_decorator import MaxDecorator
from predictors.peak.n_sigma import NSigmaPredictor
from predictors.peak.overcommit_metrics import cdf_quantiles, machine_metrics
from predictors.peak.peak_oracle import PeakOracle
from predictors.peak.rc_like import RcLikePredictor
from tests.helpers import REPO, assert_tables_equal, read_table, run_text_config

STEP_US = 300_000_000


def usage_table(rows) -> pa.Table:
    """A canonical usage table from dicts (missing columns null, end = start + 5 min)."""
    full = [{"end_time": r["start_time"] + STEP_US, "memory_limit": 1.0, "priority": 200,
             "scheduling_class": 1, "alloc_collection_id": 0, **r} for r in rows]
    return pa.Table.from_pylist(full, schema=schemas.USAGE)


def overcommit_config(text: str):
    """The OvercommitConfig of the text inside `overcommit { ... }`."""
    return parse_config(f"overcommit {{ {text} }}").overcommit


def teller(text: str):
    return overcommit_config(f"fortune_teller {{ {text} }}").fortune_teller[0]


# --- Filter and metric ------------------------------------------------------------------------

def test_filter_keeps_rows_in_every_configured_range():
    usage = usage_table([
        dict(machine_id=1, instance_id="kept", start_time=STEP_US, cpu_limit=1.0),
        dict(machine_id=1, instance_id="early", start_time=0, cpu_limit=1.0),
        dict(machine_id=1, instance_id="at_end", start_time=3 * STEP_US, cpu_limit=1.0),
        dict(machine_id=1, instance_id="low_priority", start_time=STEP_US, cpu_limit=1.0,
             priority=99),
        dict(machine_id=1, instance_id="no_priority", start_time=STEP_US, cpu_limit=1.0,
             priority=None),
        dict(machine_id=1, instance_id="class_3", start_time=STEP_US, cpu_limit=1.0,
             scheduling_class=3),
        dict(machine_id=1, instance_id="alloc_child", start_time=STEP_US, cpu_limit=1.0,
             alloc_collection_id=7),
        dict(machine_id=1, instance_id="no_alloc", start_time=STEP_US, cpu_limit=1.0,
             alloc_collection_id=None),
        dict(machine_id=2, instance_id="other_machine", start_time=STEP_US, cpu_limit=1.0),
    ])
    config = overcommit_config(f"""filter {{ start_time: {STEP_US} end_time: {3 * STEP_US}
        top_level_only: true priority_range {{ lower_bound: 100 }}
        scheduling_class_range {{ lower_bound: 0 upper_bound: 2 }} machine_id: 1 machine_id: 5 }}
        """).filter
    kept = usage.filter(pa.array(steps.filter_mask(usage, config)))
    assert kept.column("instance_id").to_pylist() == ["kept", "no_alloc"]
    everything = steps.filter_mask(usage, fleetcast_pb2.Filter())
    assert everything.all()


def distribution_usage():
    # Distribution entry i holds 10 * i, tail entry j holds 91 + j: a value names its slot.
    return usage_table([
        dict(machine_id=1, instance_id="a", start_time=STEP_US + 17, cpu_limit=2.0,
             memory_limit=4.0, avg_cpu=0.5, max_cpu=0.9, avg_memory=1.5, max_memory=2.5,
             cpu_usage_distribution=[10.0 * i for i in range(11)],
             tail_cpu_usage_distribution=[91.0 + j for j in range(9)]),
        dict(machine_id=1, instance_id="b", start_time=2 * STEP_US, cpu_limit=2.0,
             cpu_usage_distribution=[1.0, 2.0], tail_cpu_usage_distribution=None),
    ])


@pytest.mark.parametrize("metric, value, limit", [
    ("cpu_percentile: 0", 0.0, 2.0), ("cpu_percentile: 90", 90.0, 2.0),
    ("cpu_percentile: 100", 100.0, 2.0), ("cpu_percentile: 91", 91.0, 2.0),
    ("cpu_percentile: 95", 95.0, 2.0), ("cpu_percentile: 99", 99.0, 2.0),
    ("avg_cpu: true", 0.5, 2.0), ("max_cpu: true", 0.9, 2.0),
    ("avg_memory: true", 1.5, 4.0), ("max_memory: true", 2.5, 4.0),
])
def test_metric_picks_the_configured_value_and_its_limit(metric, value, limit):
    config = overcommit_config(f"metric {{ {metric} }}").metric
    tagged = dict(steps.metric_tagged(distribution_usage(), config, STEP_US))
    samples = tagged["rows"].to_pylist()
    assert samples[0] == {"machine_id": 1, "instance_id": "a", "time": STEP_US,
                          "usage": value, "limit": limit}
    # Row b has a 2-value distribution, no tail and no avg/max values: only p0 and p10 exist.
    has_b = metric in ("cpu_percentile: 0",)
    assert len(samples) == 1 + has_b
    dead = tagged.get("dead_letters")
    assert (dead is None) == has_b
    if dead is not None:
        name = steps.metric_name(config)
        assert dead.column("reason").to_pylist() == [f"usage window has no {name} value"]
        assert '"instance_id": "b"' in dead.column("raw")[0].as_py()
    step, counts = tagged["counts"]
    assert step == "metric" and counts.tolist() == [2, 1 + has_b, 0, 1 - has_b]


def test_times_floor_to_the_grid_before_the_trace_too():
    np.testing.assert_array_equal(
        steps.floor_to_grid(np.array([-1, 0, STEP_US - 1, STEP_US]), STEP_US),
        [-STEP_US, 0, 0, STEP_US])


# --- Reset and shift, scheduler: deterministic ------------------------------------------------

def random_samples(seed, n=400, instances=40) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "machine_id": pa.array(rng.integers(0, 3, n), pa.int64()),
        "instance_id": pa.array([f"vm-{i}" for i in rng.integers(0, instances, n)]),
        "time": pa.array(rng.integers(10, 1000, n) * STEP_US, pa.int64()),
        "usage": rng.random(n), "limit": np.ones(n)}, schema=steps.SAMPLES)


def in_pieces(function, table, pieces, *args):
    """`function` applied to shuffled pieces of `table`, rows back in the table's order."""
    order = np.random.default_rng(1).permutation(table.num_rows)
    parts = np.array_split(order, pieces)
    results = [function(table.take(pa.array(rows)), *args) for rows in parts]
    merged = pa.concat_tables(results)
    return merged.take(pa.array(np.argsort(np.concatenate(parts))))


def test_random_shift_is_per_instance_on_the_grid_and_independent_of_partitioning():
    config = overcommit_config("reset_and_shift { random_shift { lower_bound: 600000000 "
                          "upper_bound: 86400000000 } seed: 7 }").reset_and_shift
    samples = random_samples(0)
    shifted = steps.reset_and_shift(samples, config, STEP_US)
    assert in_pieces(steps.reset_and_shift, samples, 5, config, STEP_US).equals(shifted)
    shift = (shifted.column("time").to_numpy() - samples.column("time").to_numpy())
    frame = pd.DataFrame({"instance": samples.column("instance_id").to_pylist(), "shift": shift})
    per_instance = frame.groupby("instance")["shift"].agg(["min", "max"])
    assert (per_instance["min"] == per_instance["max"]).all()
    assert np.all(shift % STEP_US == 0)
    assert np.all((shift >= 600_000_000) & (shift <= 86_400_000_000))
    assert per_instance["min"].nunique() > 30  # 40 instances, 287 grid offsets
    other_seed = overcommit_config("reset_and_shift { random_shift { lower_bound: 600000000 "
                              "upper_bound: 86400000000 } seed: 8 }").reset_and_shift
    assert not steps.reset_and_shift(samples, other_seed, STEP_US).equals(shifted)


def test_reset_time_to_zero_starts_every_instance_at_its_shift():
    config = overcommit_config("reset_and_shift { reset_time_to_zero: true random_shift { "
                          "lower_bound: 0 upper_bound: 3000000000 } seed: 1 }").reset_and_shift
    samples = random_samples(2)
    moved = steps.reset_and_shift(samples, config, STEP_US).to_pandas()
    original = samples.to_pandas()
    shift = steps.random_shifts(samples.column("instance_id"), config, STEP_US)
    first = original.groupby("instance_id").time.transform("min")
    np.testing.assert_array_equal(moved.time, original.time - first + shift)
    shift_of_instance = pd.Series(shift, index=original.instance_id).groupby(level=0).first()
    pd.testing.assert_series_equal(moved.groupby("instance_id").time.min(), shift_of_instance,
                                   check_names=False)


def test_random_scheduler_places_whole_instances_deterministically():
    config = overcommit_config("scheduler { at_random { num_machines: 4 seed: 3 } }").scheduler
    samples = random_samples(3).set_column(0, "machine_id", pa.nulls(400, pa.int64()))

    def placed(table):
        return dict(steps.schedule_tagged(table, config))["rows"]

    whole = placed(samples)
    assert in_pieces(placed, samples, 7).equals(whole)
    frame = whole.to_pandas()
    assert frame.groupby("instance_id").machine_id.nunique().eq(1).all()
    assert set(frame.machine_id) == {0, 1, 2, 3}
    again = overcommit_config("scheduler { at_random { num_machines: 4 seed: 4 } }").scheduler
    moved = dict(steps.schedule_tagged(samples, again))["rows"]
    assert not moved.column("machine_id").equals(whole.column("machine_id"))


def test_trace_scheduler_rejects_samples_without_a_machine():
    samples = random_samples(4, n=5).set_column(
        0, "machine_id", pa.array([1, None, 2, 2, None], pa.int64()))
    tagged = list(steps.schedule_tagged(samples, fleetcast_pb2.Scheduler()))
    rows = dict(tagged)["rows"]
    assert rows.column("machine_id").to_pylist() == [1, 2, 2]
    assert dict(tagged)["dead_letters"].num_rows == 2
    assert dict(tagged)["counts"][1].tolist() == [5, 3, 0, 2]


# --- One machine --------------------------------------------------------------------------------

def test_machine_samples_merge_duplicates_and_reject_bad_values():
    samples = pa.table({
        "machine_id": np.ones(7, dtype=np.int64),
        "instance_id": ["a", "a", "a", "b", "b", "c", "d"],
        "time": np.array([0, 0, 1, 0, 1, 1, 1]) * STEP_US,
        "usage": [0.2, 0.7, 1.5, 0.1, -0.1, np.nan, 0.3],
        "limit": [1.0, 0.5, 1.0, 2.0, 2.0, 1.0, 0.0]}, schema=schemas.OVERCOMMIT_SCHEDULED_USAGE)
    machine, reasons, rows = tellers.build_machine_samples(samples)
    assert sorted(zip(rows.tolist(), reasons)) == [
        (1, tellers.DUPLICATE_SAMPLE), (4, tellers.INVALID_USAGE),
        (5, tellers.INVALID_USAGE), (6, tellers.INVALID_LIMIT)]
    # a@0 merges (0.2, 1.0) and (0.7, 0.5) into (0.7, 1.0); usage above its limit stays.
    np.testing.assert_array_equal(machine.times, [0, STEP_US])
    np.testing.assert_array_equal(machine.step, [0, 0, 1])
    np.testing.assert_array_equal(machine.usage, [0.7, 0.1, 1.5])
    np.testing.assert_array_equal(machine.limit, [1.0, 2.0, 1.0])


def test_a_machine_gives_the_same_bits_whatever_the_row_order():
    # Beam delivers a machine's rows in an order that depends on the pipeline's shape: the
    # per-step sums must not (floating-point addition is not associative).
    rng = np.random.default_rng(5)
    n = 400
    samples = pa.table({
        "machine_id": np.ones(n, dtype=np.int64),
        "instance_id": [f"task-{i}" for i in rng.integers(0, 40, n)],
        "time": rng.integers(0, 30, n) * STEP_US,
        "usage": rng.uniform(0, 1, n) * 10 ** rng.uniform(-3, 0, n),
        "limit": rng.uniform(0.1, 1, n) * 10 ** rng.uniform(-3, 0, n)},
        schema=schemas.OVERCOMMIT_SCHEDULED_USAGE)
    fortune_tellers = tellers.FortuneTellers([
        teller('name: "o" oracle { horizon_s: 3600 }'),
        teller('name: "r" predictor { rc_like { percentile: 90 min_num_samples: 2 } }')],
        step_s=300)
    results = []
    for permutation in (np.arange(n), rng.permutation(n), rng.permutation(n)):
        machine, _, _ = tellers.build_machine_samples(samples.take(permutation))
        result = tellers.evaluate_machine(1, machine, fortune_tellers)
        results.append((result.timeseries, result.machine_metrics))
    for got in results[1:]:
        for table, expected in zip(got, results[0]):
            # Exact, NaN equal to NaN (the oracle emits nothing in the last hour).
            pd.testing.assert_frame_equal(table.to_pandas(), expected.to_pandas(),
                                          check_exact=True)


def test_only_bad_samples_give_no_machine():
    samples = pa.table({"machine_id": [1], "instance_id": ["a"], "time": [0], "usage": [1.0],
                        "limit": [0.0]}, schema=schemas.OVERCOMMIT_SCHEDULED_USAGE)
    machine, reasons, rows = tellers.build_machine_samples(samples)
    assert machine is None and reasons == [tellers.INVALID_LIMIT] and rows.tolist() == [0]


class CountingPredictor:
    def __init__(self, predictor):
        self.predictor = predictor
        self.calls = 0

    def predict(self, samples):
        self.calls += 1
        return self.predictor.predict(samples)


def test_shared_predictors_are_computed_once_per_machine():
    fortune_tellers = tellers.FortuneTellers([
        teller('name: "n" predictor { n_sigma { n: 3 } }'),
        teller('name: "m" predictor { max_of { predictors { n_sigma { n: 3 } } '
               'predictors { borg_default {} } } }')], step_s=300)
    n_sigma = fortune_tellers.predictors[0]
    assert fortune_tellers.predictors[1].predictor.predictors[0] is n_sigma
    counting = CountingPredictor(n_sigma.predictor)
    n_sigma.predictor = counting
    machine = MachineSamples.from_arrays(np.arange(30) * STEP_US, np.zeros(30),
                                         np.full(30, 0.5), np.ones(30))
    predictions = fortune_tellers.predict(machine)
    assert counting.calls == 1
    np.testing.assert_array_equal(predictions["m"], np.maximum(predictions["n"], 0.9))
    assert fortune_tellers.scoring_oracle is None


def test_config_knobs_reach_the_predictors():
    fortune_tellers = tellers.FortuneTellers([
        teller('name: "o" oracle { horizon_s: 3600 percentile: 90 cap_to_limit: true }'),
        teller('name: "a" predictor { arima { order { p: 2 d: 1 q: 0 } order { p: 1 d: 1 } '
               'uncertainty: STD k1: 0.1 k2: 2 refit_every_steps: 6 min_fit_samples: 30 } }'),
        teller('name: "g" predictor { gaussian_process { pattern_length: 5 '
               'num_history_samples: 50 } }'),
        teller('name: "r" predictor { rc_like { percentile: 99 } }')], step_s=600)
    oracle, arima, gp, rc = (p.predictor for p in fortune_tellers.predictors)
    assert (oracle.horizon_s, oracle.percentile, oracle.cap_to_limit, oracle.step_s) == (
        3600, 90, True, 600)
    assert arima.lags == [1, 2] and arima.uncertainty == "std"
    assert (arima.k1, arima.k2, arima.refit_every_steps, arima.min_fit_samples) == (
        0.1, 2, 6, 30)
    assert (gp.pattern_length, gp.num_history_samples, gp.step_s, gp.uncertainty) == (
        5, 50, 600, "variance")
    # Unset knobs take the paper's defaults: 10 h history, 2 h warm-up.
    assert (rc.percentile, rc.num_history_samples, rc.min_num_samples) == (99, 120, 24)
    assert fortune_tellers.scoring_oracle == "o"


# --- The stage end to end on hand-made usage ---------------------------------------------------

def hand_made_usage():
    """Machine 1: tasks a, b, c on 40 steps with gaps and bad rows; machine 2: one task."""
    rng = np.random.default_rng(5)
    rows = []
    for step in range(40):
        start = step * STEP_US
        rows.append(dict(machine_id=1, instance_id="a", start_time=start, cpu_limit=1.0,
                         avg_cpu=1.5 if step % 9 == 0 else float(rng.uniform(0.2, 0.8))))
        if not 10 <= step <= 12:  # b is missing for three windows
            rows.append(dict(machine_id=1, instance_id="b", start_time=start + 7, cpu_limit=0.5,
                             avg_cpu=float(rng.uniform(0.1, 0.4))))
        if step >= 20:
            rows.append(dict(machine_id=1, instance_id="c", start_time=start, cpu_limit=2.0,
                             avg_cpu=float(rng.uniform(0.5, 1.5))))
        rows.append(dict(machine_id=2, instance_id="single", start_time=start, cpu_limit=4.0,
                         avg_cpu=float(rng.uniform(1, 3))))
    bad = [
        # A second window of b in step 5 (60 s later): merged with its twin by max.
        dict(machine_id=1, instance_id="b", start_time=5 * STEP_US + 60_000_000, cpu_limit=0.5,
             avg_cpu=0.45),
        dict(machine_id=1, instance_id="c", start_time=25 * STEP_US + 1, cpu_limit=0.0,
             avg_cpu=0.5),  # zero limit (and a duplicate time of c, rejected first)
        dict(machine_id=1, instance_id="d", start_time=3 * STEP_US, cpu_limit=1.0,
             avg_cpu=-0.5),  # negative usage
        dict(machine_id=1, instance_id="e", start_time=3 * STEP_US, cpu_limit=1.0,
             avg_cpu=None),  # no metric value
        dict(machine_id=None, instance_id="f", start_time=3 * STEP_US, cpu_limit=1.0,
             avg_cpu=0.5),  # no machine
        dict(machine_id=1, instance_id="g", start_time=3 * STEP_US, cpu_limit=1.0,
             avg_cpu=0.5, priority=10),  # filtered out
    ]
    return usage_table(rows + bad), rows


TELLERS = """
fortune_teller { name: "oracle" oracle { horizon_s: 3000 cap_to_limit: true } }
fortune_teller { name: "borg" predictor { borg_default { phi: 0.9 } } }
fortune_teller { name: "n_sigma" predictor { n_sigma { n: 3 num_history_samples: 10
  min_num_samples: 3 } } }
fortune_teller { name: "rc_like" predictor { rc_like { percentile: 90 num_history_samples: 10
  min_num_samples: 3 cap_to_limit: true } } }
fortune_teller { name: "max" predictor { max_of {
  predictors { n_sigma { n: 3 num_history_samples: 10 min_num_samples: 3 } }
  predictors { rc_like { percentile: 90 num_history_samples: 10 min_num_samples: 3
    cap_to_limit: true } } } } }
"""


def expected_predictors():
    n_sigma = NSigmaPredictor(3, 10, 3)
    rc_like = RcLikePredictor(90, 10, 3, cap_to_limit=True)
    return {"oracle": PeakOracle(3000, cap_to_limit=True), "borg": BorgDefaultPredictor(0.9),
            "n_sigma": n_sigma, "rc_like": rc_like, "max": MaxDecorator([n_sigma, rc_like])}


@pytest.fixture(scope="module")
def hand_made_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("hand_made")
    usage, good = hand_made_usage()
    (root / "usage").mkdir()
    pq.write_table(usage, root / "usage" / "part-0.parquet")
    config = f"""usage {{ input {{ parquet: "{root}/usage" }} }}
        overcommit {{
        filter {{ priority_range {{ lower_bound: 100 }} }}
        metric {{ avg_cpu: true }}
        {TELLERS} }}"""
    return run_text_config(config, root / "out"), good


def test_timeseries_equals_the_predictors_on_the_same_machine_samples(hand_made_run):
    tables, good = hand_made_run
    timeseries = tables["overcommit_timeseries"]
    frame = pd.DataFrame(good)
    # The duplicate of b at step 5 merged by max.
    duplicate = (frame.instance_id == "b") & (frame.start_time == 5 * STEP_US + 7)
    frame.loc[duplicate, "avg_cpu"] = max(frame.loc[duplicate, "avg_cpu"].item(), 0.45)
    predictors = expected_predictors()
    for machine_id, rows in frame.groupby("machine_id"):
        samples = MachineSamples.from_arrays(rows.start_time // STEP_US * STEP_US,
                                             rows.instance_id.to_numpy(),
                                             rows.avg_cpu.to_numpy(), rows.cpu_limit.to_numpy())
        oracle = predictors["oracle"].predict(samples)
        for name, predictor in predictors.items():
            got = timeseries[(timeseries.machine_id == machine_id)
                             & (timeseries.predictor == name)].sort_values("time")
            np.testing.assert_array_equal(got.time, samples.times)
            np.testing.assert_allclose(got.predicted_peak, predictor.predict(samples),
                                       rtol=1e-12, equal_nan=True)
            np.testing.assert_allclose(got.oracle, oracle, rtol=1e-12, equal_nan=True)
            np.testing.assert_allclose(
                got.total_usage, samples.per_step_sum(samples.capped_usage), rtol=1e-12)
            np.testing.assert_array_equal(got.num_tasks, np.diff(samples.step_offsets))
    single = timeseries[timeseries.machine_id == 2]
    assert single.num_tasks.eq(1).all() and single.total_limit.eq(4.0).all()
    # Task a's usage of 1.5 counts at its limit of 1 in the recorded total.
    first = timeseries[(timeseries.machine_id == 1) & (timeseries.time == 0)].iloc[0]
    assert first.total_usage == pytest.approx(1.0 + frame.avg_cpu[
        (frame.instance_id == "b") & (frame.start_time == 7)].item())


def test_machine_cell_and_summary_metrics_agree_with_the_timeseries(hand_made_run):
    tables, _ = hand_made_run
    timeseries = tables["overcommit_timeseries"]
    machines = tables["overcommit_machine_metrics"].set_index(["predictor", "machine_id"])
    assert len(machines) == 10 and machines.oracle.eq("oracle").all()
    for (name, machine_id), rows in timeseries.groupby(["predictor", "machine_id"]):
        rows = rows.sort_values("time")
        expected = machine_metrics(rows.total_limit.to_numpy(), rows.predicted_peak.to_numpy(),
                                   rows.oracle.to_numpy())
        got = machines.loc[(name, machine_id)]
        assert got.num_steps == len(rows) and got.scored_steps == expected.num_steps
        np.testing.assert_allclose(
            [got.violation_rate, got.violation_severity, got.savings_ratio],
            [expected.violation_rate, expected.mean_severity, expected.savings_ratio])
    oracle_rows = machines.loc["oracle"]
    assert oracle_rows.violation_rate.eq(0).all() and oracle_rows.violation_severity.eq(0).all()
    borg = machines.loc["borg"]
    np.testing.assert_allclose(borg.savings_ratio, 0.1)

    scored = timeseries[timeseries.predicted_peak.notna() & timeseries.oracle.notna()]
    sums = scored.groupby(["predictor", "time"]).agg(
        num_machines=("machine_id", "size"), total_limit=("total_limit", "sum"),
        predicted_peak=("predicted_peak", "sum"), oracle_peak=("oracle", "sum"))
    cell = tables["overcommit_cell_metrics"].set_index(["predictor", "time"]).sort_index()
    pd.testing.assert_frame_equal(cell[sums.columns], sums.sort_index(), check_dtype=False)
    np.testing.assert_allclose(cell.savings_ratio,
                               (cell.total_limit - cell.predicted_peak) / cell.total_limit)

    summary = tables["overcommit_summary"].set_index(["predictor", "metric"])
    assert len(summary) == 5 * 4
    for name in ("oracle", "borg", "n_sigma", "rc_like", "max"):
        for metric in MACHINE_METRIC_NAMES:
            values = machines.loc[name][metric].to_numpy()
            row = summary.loc[(name, metric)]
            assert row.n == 2 and row["mean"] == pytest.approx(values.mean())
            quantiles = cdf_quantiles(values)
            assert [row[f"p{round(q * 100)}"] for q in quantiles] == pytest.approx(
                list(quantiles.values()))
        cell_values = cell.loc[name].savings_ratio
        assert summary.loc[(name, "cell_savings_ratio")].n == len(cell_values)
        assert summary.loc[(name, "cell_savings_ratio"), "p50"] == pytest.approx(
            cell_values.median())


def test_bad_input_is_counted_and_explained(hand_made_run):
    tables, good = hand_made_run
    counts = tables["overcommit_counts"].set_index("step")
    assert (counts.read == counts.kept + counts.filtered + counts.rejected).all()
    total = len(good) + 6
    assert counts.loc["filter"].tolist() == [total, total - 1, 1, 0]
    assert counts.loc["metric"].tolist() == [total - 1, total - 2, 0, 1]
    assert counts.loc["scheduler"].tolist() == [total - 2, total - 3, 0, 1]
    assert counts.loc["samples"].tolist() == [total - 3, len(good), 1, 2]
    dead = tables["dead_letters"]
    assert sorted(zip(dead.table, dead.reason)) == sorted([
        ("usage", "usage window has no avg_cpu value"),
        ("overcommit_scheduled_usage",
         "sample has no machine_id to schedule it by (scheduler.by_machine_id)"),
        ("overcommit_scheduled_usage", tellers.INVALID_LIMIT),
        ("overcommit_scheduled_usage", tellers.INVALID_USAGE),
    ])
    assert dead.source.eq("overcommit").all()
    excluded = tables["exclusions"]
    assert excluded[["stage", "table", "reason", "rows"]].values.tolist() == [
        ["overcommit", "overcommit_scheduled_usage", tellers.DUPLICATE_SAMPLE, 1]]


# --- Synthetic trace: random placement, shift, LoadOrWrite, notebook ---------------------------

SYNTHETIC = """
synthetic {{ machines: 3 days: 0.5 seed: 4 }}
overcommit {{
filter {{ priority_range {{ lower_bound: 100 }} }}
filtered_usage {{ output {{ parquet: "{root}/filtered" }} }}
metric {{ cpu_percentile: 90 }}
reset_and_shift {{ reset_time_to_zero: true random_shift {{ lower_bound: 0
  upper_bound: 3600000000 }} seed: 5 num_shards: 3 }}
scheduler {{ at_random {{ num_machines: 4 seed: 2 }} }}
scheduled_usage {{ output {{ parquet: "{root}/scheduled" }} }}
fortune_teller {{ name: "oracle" oracle {{ horizon_s: 7200 cap_to_limit: true }} }}
fortune_teller {{ name: "borg_default" predictor {{ borg_default {{}} }} }}
fortune_teller {{ name: "max_n_sigma_rc_like" predictor {{ max_of {{
  predictors {{ n_sigma {{ num_history_samples: 24 min_num_samples: 6 }} }}
  predictors {{ rc_like {{ percentile: 99 num_history_samples: 24 min_num_samples: 6 }} }} }} }} }}
}}
"""
OUTPUTS = ("overcommit_timeseries", "overcommit_machine_metrics", "overcommit_cell_metrics",
           "overcommit_summary")


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic")
    return root, run_text_config(SYNTHETIC.format(root=root), root / "out")


@pytest.mark.slow
def test_random_placement_and_shift_on_a_synthetic_trace(synthetic_run):
    root, tables = synthetic_run
    scheduled = read_table(root / "scheduled")
    assert set(scheduled.machine_id) <= {0, 1, 2, 3}
    assert scheduled.groupby("instance_id").machine_id.nunique().eq(1).all()
    first = scheduled.groupby("instance_id").time.min()
    assert first.between(0, 3_600_000_000).all() and (first % STEP_US == 0).all()
    filtered = read_table(root / "filtered")
    assert filtered.priority.ge(100).all()
    assert len(filtered) == tables["overcommit_counts"].set_index("step").loc["filter", "kept"]
    timeseries = tables["overcommit_timeseries"]
    assert set(timeseries.machine_id) == set(scheduled.machine_id)
    assert len(timeseries) == 3 * len(scheduled.groupby(["machine_id", "time"]))


@pytest.mark.slow
def test_loading_the_scheduled_usage_gives_the_same_tables(synthetic_run, tmp_path):
    root, tables = synthetic_run
    start = SYNTHETIC.index("fortune_teller")
    loaded = run_text_config(
        f'overcommit {{ scheduled_usage {{ input {{ parquet: "{root}/scheduled" }} }}\n'
        + SYNTHETIC[start:].format(root=root), tmp_path)
    assert_tables_equal(loaded, tables, OUTPUTS)


@pytest.mark.slow
def test_two_worker_processes_give_the_same_tables(synthetic_run, tmp_path):
    # Placement and shifts hash instance ids: no dependence on element order or process.
    root, tables = synthetic_run
    parallel = run_text_config(SYNTHETIC.format(root=tmp_path), tmp_path / "out", [
        "--runner=DirectRunner", "--direct_running_mode=multi_processing",
        "--direct_num_workers=2"])
    assert_tables_equal(parallel, tables, OUTPUTS + ("overcommit_counts",))


@pytest.mark.slow
def test_notebook_draws_the_cdfs_of_a_run(synthetic_run, monkeypatch):
    root, _ = synthetic_run
    results = root / "out"
    monkeypatch.setenv("FLEETCAST_RESULTS", str(results))
    notebook = nbformat.read(REPO / "notebooks" / "overcommit.ipynb", as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO)}}).execute()
    png = results / "overcommit_fig10.png"  # one figure, the four CDFs of Fig. 10
    assert png.exists() and png.stat().st_size > 10_000, png


def test_a_shard_of_machines_gives_one_timeseries_table_equal_to_its_machines():
    samples = random_samples(3).cast(schemas.OVERCOMMIT_SCHEDULED_USAGE)
    fortune_tellers = tellers.FortuneTellers([
        teller('name: "oracle" oracle { horizon_s: 3000 }'),
        teller('name: "borg" predictor { borg_default { phi: 0.5 } }')], step_s=300)
    halves = [samples.slice(0, 200), samples.slice(200)]
    shard = list(tellers.shard_tagged((0, halves), fortune_tellers))
    tables = [value for tag, value in shard if tag == tellers.TIMESERIES]
    assert len(tables) == 1
    per_machine = [value for machine_id in (0, 1, 2) for tag, value in tellers.machine_tagged(
        (machine_id, [samples.filter(pa.compute.equal(samples["machine_id"], machine_id))]),
        fortune_tellers) if tag == tellers.TIMESERIES]
    # Exact, NaN equal to NaN.
    pd.testing.assert_frame_equal(tables[0].to_pandas(),
                                  pa.concat_tables(per_machine).to_pandas(), check_exact=True)
