"""The placement stage end to end on small hand-made tables, and the placement notebook."""

import json
import os
import pathlib

import numpy as np
import pyarrow as pa
import pytest

from configs import fleetcast_pb2
from pipelines import config as run_config
from pipelines import schemas
from pipelines.stages.placement import pools, replays
from policies.best_fit import BestFit
from policies.lava import Lava
from policies.nilas import Nilas
from policies.quantized_best_fit import QuantizedBestFit
from policies.replay.lifetime_source import NoisyOracleLifetimes, OracleLifetimes
from policies.replay.metrics import InflationMix
from policies.replay.pool import PoolSpec
from policies.replay.simulator import PlacementTrace, simulate
from tests.helpers import run_on_loaded_tables

S = 1_000_000
HOUR = 3600 * S
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARMUP_S, SAMPLE_PERIOD_S, STRANDING_EVERY = 3600, 900, 2
# Pool "a": machine 1 was resized, its latest event counts; machine 3 has no capacity.
MACHINES = [
    {"machine_id": 1, "time": 0, "cpu_capacity": 0.5, "memory_capacity": 0.5, "pool": "a"},
    {"machine_id": 1, "time": 10 * S, "cpu_capacity": 1.0, "memory_capacity": 1.0,
     "pool": "a"},
    {"machine_id": 2, "time": 0, "cpu_capacity": 1.0, "memory_capacity": 0.5, "pool": "a"},
    {"machine_id": 3, "time": 0, "cpu_capacity": None, "memory_capacity": None, "pool": "a"},
    {"machine_id": 4, "time": 0, "cpu_capacity": 1.0, "memory_capacity": 1.0, "pool": "a"},
] + [{"machine_id": 10 + m, "time": 0, "cpu_capacity": 1.0, "memory_capacity": 1.0,
      "pool": "b"} for m in range(4)]
# (instance_id, pool, start, end, cpu, memory, why it is left out)
BAD_ROWS = [
    ("bad-no-cpu", "a", 5 * S, 50 * S, None, 0.1, pools.REASON_NO_REQUEST),
    ("bad-zero", "a", 5 * S, 50 * S, 0.0, 0.0, pools.REASON_ZERO_REQUEST),
    ("bad-ends-first", "a", 50 * S, 5 * S, 0.1, 0.1, pools.REASON_ENDS_BEFORE_START),
    # Fits no host of pool "a" in memory (largest 1.0), though its CPU would fit.
    ("bad-too-large", "a", 5 * S, 50 * S, 0.5, 1.5, pools.REASON_TOO_LARGE),
    ("bad-no-machines", "c", 5 * S, 50 * S, 0.1, 0.1, pools.REASON_NO_HOSTS),
]


def random_rows(pool, seed, num_vms):
    """VMs over 6 hours, some alive before time 0 (warm-up), some censored (no end)."""
    rng = np.random.default_rng(seed)
    start = np.sort(rng.integers(-HOUR, 6 * HOUR, num_vms))
    end = start + (10 ** rng.uniform(2, 4.5, num_vms) * S).astype(np.int64)
    censored = end > 6 * HOUR
    rows = []
    for i in range(num_vms):
        rows.append({"instance_id": f"{pool}-{i:03d}", "pool": pool, "start_time": int(start[i]),
                     "end_time": None if censored[i] else int(end[i]),
                     "cpu_request": float(rng.choice([0.05, 0.1, 0.2, 0.3])),
                     "memory_request": float(rng.choice([0.05, 0.1, 0.25]))})
    return rows


def instance_rows():
    rows = random_rows("a", 0, 120) + random_rows("b", 1, 80)
    rows += [{"instance_id": i, "pool": p, "start_time": s, "end_time": e, "cpu_request": c,
              "memory_request": m} for i, p, s, e, c, m, _ in BAD_ROWS]
    return rows


PLACEMENT_TEXT = f"""
  policy: BEST_FIT policy: NILAS policy: LAVA
  lifetime_source {{ oracle: true }} lifetime_source {{ noisy_oracle_accuracy: 0.7 }}
  warmup_s: {WARMUP_S} sample_period_s: {SAMPLE_PERIOD_S} stranding_every: {STRANDING_EVERY}
  seed: 3
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tables, output_dir = run_on_loaded_tables(
        tmp_path_factory.mktemp("placement"),
        {"instances": instance_rows(), "machines": MACHINES},
        f"placement {{ {PLACEMENT_TEXT} }}", "placement_test")
    return tables, pathlib.Path(output_dir)


def direct_replays(pool, noisy_seed=3):
    """The replays of `pool` computed with `simulate` on the arrays the stage should build;
    the noisy oracle's draws use `noisy_seed` (PLACEMENT_TEXT's placement.seed)."""
    rows = [r for r in instance_rows() if r["pool"] == pool and
            not r["instance_id"].startswith("bad")]
    rows.sort(key=lambda r: (r["start_time"], r["instance_id"]))
    start = np.array([r["start_time"] for r in rows])
    end = np.array([np.nan if r["end_time"] is None else r["end_time"] for r in rows])
    latest = int(max(start.max(), np.nanmax(end)))
    trace = PlacementTrace.from_arrays(
        start, end, [[r["cpu_request"], r["memory_request"]] for r in rows], end_us=latest)
    capacity = ([[1.0, 1.0], [1.0, 0.5], [1.0, 1.0]] if pool == "a" else [[1.0, 1.0]] * 4)
    spec = PoolSpec(np.array(capacity))
    config = run_config.parse_config(f"placement {{ {PLACEMENT_TEXT} }}").placement
    sources = {"oracle": OracleLifetimes(trace.lifetime_s()),
               "noisy_oracle_0.7": NoisyOracleLifetimes(
                   trace.lifetime_s(), 0.7, seed=pools.pool_seed(noisy_seed, pool))}
    results = {}
    for label, source in sources.items():
        for policy in (BestFit(), Nilas(), Lava()):
            results[policy.name, label] = simulate(
                trace, spec, policy, source, start_us=0, end_us=int(start.max()),
                warmup_s=WARMUP_S, sample_period_s=SAMPLE_PERIOD_S,
                refresh_interval_s=config.refresh_interval_s,
                inflation_mix=InflationMix.from_demand(trace.demand),
                stranding_every=STRANDING_EVERY)
    return trace, results


def test_every_pool_policy_and_source_has_one_summary_row(run):
    tables, _ = run
    summary = tables["placement_summary"]
    keys = sorted(zip(summary["pool"], summary["policy"], summary["lifetime_source"],
                      summary["defrag"]))
    assert keys == sorted((pool, policy, source, "none") for pool in ("a", "b")
                          for policy in ("best_fit", "lava", "nilas")
                          for source in ("noisy_oracle_0.7", "oracle"))
    assert set(summary.loc[summary["pool"] == "a", "num_hosts"]) == {3}
    assert set(summary.loc[summary["pool"] == "b", "num_hosts"]) == {4}
    # Every kept VM was placed, failed or outside the window; bad rows are not VMs.
    assert set(summary.loc[summary["pool"] == "a", "vms"]) == {120}
    assert set(summary.loc[summary["pool"] == "b", "vms"]) == {80}
    assert (summary["placed_vms"] + summary["failed_vms"] + summary["not_replayed_vms"]
            == summary["vms"]).all()


def test_malformed_rows_are_dead_letters_and_the_rest_is_counted_as_exclusions(run):
    tables, _ = run
    dead = tables["dead_letters"]
    dead = dead[dead["source"] == "placement"]
    got = sorted((json.loads(raw)["instance_id"], reason)
                 for raw, reason in zip(dead["raw"], dead["reason"]))
    assert got == [("bad-ends-first", pools.REASON_ENDS_BEFORE_START)]
    assert set(dead["table"]) == {"instances"}
    excluded = tables["exclusions"]
    excluded = excluded[excluded["stage"] == "placement"]
    assert sorted(zip(excluded["reason"], excluded["rows"])) == sorted(
        (reason, 1) for *_, reason in BAD_ROWS if reason in pools.EXCLUDED)
    assert set(excluded["table"]) == {"instances"}


@pytest.mark.parametrize("pool", ["a", "b"])
def test_outputs_equal_simulate_on_the_same_arrays(run, pool):
    tables, _ = run
    trace, results = direct_replays(pool)
    series, summary = tables["placement_timeseries"], tables["placement_summary"]
    for (policy, source), result in results.items():
        rows = series[(series["pool"] == pool) & (series["policy"] == policy)
                      & (series["lifetime_source"] == source)].sort_values("time")
        expected = result.timeseries
        np.testing.assert_array_equal(rows["time"], expected["time_us"])
        for name in ("empty_hosts", "live_vms", "placements", "failed_placements"):
            np.testing.assert_array_equal(rows[name], expected[name])
        for name in schemas.PLACEMENT_PCT_METRICS:
            np.testing.assert_allclose(rows[name], expected[name], equal_nan=True)
        (row,) = summary[(summary["pool"] == pool) & (summary["policy"] == policy)
                         & (summary["lifetime_source"] == source)].to_dict("records")
        host_of_vm = result.host_of_vm
        assert row["placed_vms"] == np.sum(host_of_vm >= 0)
        assert row["failed_vms"] == np.sum(host_of_vm == -1)
        assert row["warmup_vms"] == result.summary["warmup_vms"] > 0
        assert row["placements"] == result.summary["placements"]
        for name in schemas.PLACEMENT_PCT_METRICS:
            np.testing.assert_allclose(row[name], result.summary[name])
        baseline = results["best_fit", source].summary
        np.testing.assert_allclose(row["empty_hosts_pct_vs_best_fit_pp"],
                                   result.summary["empty_hosts_pct"]
                                   - baseline["empty_hosts_pct"])
        np.testing.assert_allclose(row["gap_to_upper_bound_pp"],
                                   result.summary["upper_bound_empty_hosts_pct"]
                                   - result.summary["empty_hosts_pct"])


def test_a_noisy_oracle_with_a_seed_of_its_own_replays_with_those_draws(tmp_path):
    text = (f"placement {{ policy: BEST_FIT policy: NILAS "
            f"lifetime_source {{ noisy_oracle_accuracy: 0.7 }} "
            f"lifetime_source {{ noisy_oracle_accuracy: 0.7 noisy_oracle_seed: 5 }} "
            f"warmup_s: {WARMUP_S} sample_period_s: {SAMPLE_PERIOD_S} "
            f"stranding_every: {STRANDING_EVERY} seed: 3 }}")
    tables, _ = run_on_loaded_tables(tmp_path, {"instances": instance_rows(),
                                                "machines": MACHINES}, text, "noisy_seeds")
    summary = tables["placement_summary"]
    seeds = dict(zip(summary["lifetime_source"], summary["noisy_oracle_seed"]))
    assert seeds == {"noisy_oracle_0.7": 3, "noisy_oracle_0.7_seed5": 5}
    assert set(tables["placement_timeseries"]["noisy_oracle_seed"]) == {3, 5}
    for label, seed in seeds.items():
        _, results = direct_replays("b", noisy_seed=seed)
        expected = results["nilas", "noisy_oracle_0.7"]
        (row,) = summary[(summary["pool"] == "b") & (summary["policy"] == "nilas")
                         & (summary["lifetime_source"] == label)].to_dict("records")
        assert row["placements"] == expected.summary["placements"]
        for name in schemas.PLACEMENT_PCT_METRICS:
            np.testing.assert_allclose(row[name], expected.summary[name])
    # The two draws place differently (or the test would not tell the seeds apart).
    series = tables["placement_timeseries"]
    nilas_b = series[(series["pool"] == "b") & (series["policy"] == "nilas")]
    by_seed = [rows.sort_values("time")["empty_hosts"].to_numpy()
               for _, rows in nilas_b.groupby("noisy_oracle_seed")]
    assert not np.array_equal(*by_seed)


@pytest.mark.parametrize("text, problem", [
    ("lifetime_source { oracle: true noisy_oracle_seed: 1 }",
     "placement.lifetime_source[0].noisy_oracle_seed: is only for a noisy_oracle_accuracy "
     "source"),
    ("lifetime_source { noisy_oracle_accuracy: 0.5 noisy_oracle_seed: -1 }",
     "placement.lifetime_source[0].noisy_oracle_seed: must be >= 0, got -1"),
    ("lifetime_source { noisy_oracle_accuracy: 0.5 noisy_oracle_seed: 2 } "
     "lifetime_source { noisy_oracle_accuracy: 0.5 noisy_oracle_seed: 2 }",
     "placement.lifetime_source[1]: repeats lifetime_source[0] (noisy_oracle_0.5_seed2)"),
    ("lifetime_source { oracle: true } lifetime_source { oracle: true }",
     "placement.lifetime_source[1]: repeats lifetime_source[0] (oracle)"),
])
def test_lifetime_sources_that_cannot_run_name_the_field(text, problem):
    config = run_config.parse_config(f"synthetic {{}} placement {{ policy: NILAS {text} }}")
    assert problem in [str(p) for p in run_config.validate(config)]


@pytest.mark.parametrize("lifetime_model, policy, problem", [
    ("", "LAVA", "placement.lifetime_source[0]: uptime_model_lava_classes needs "
     "lifetime_model.train_lava_class_classifiers"),
    ("train_lava_class_classifiers: true", "NILAS",
     "placement.lifetime_source[0]: uptime_model_lava_classes gives LAVA its classes: "
     "configure policy LAVA or LAVA_STRICT_RECYCLING"),
    ("train_lava_class_classifiers: true lava_class_target_recall: 1.5", "LAVA",
     "lifetime_model.lava_class_target_recall: must be in (0, 1], got 1.5"),
])
def test_the_lava_classes_source_names_what_it_lacks(lifetime_model, policy, problem):
    config = run_config.parse_config(
        f"synthetic {{}} lifetime_model {{ {lifetime_model} }} placement {{ policy: {policy} "
        "lifetime_source { uptime_model_lava_classes: true } }")
    assert problem in [str(p) for p in run_config.validate(config)]


def test_hosts_from_a_shape_and_a_count_or_the_peak_demand():
    # Four VMs of 4 cores: at most 3 alive at once (12 cores) -> 12 / (8 * 0.5) = 3 hosts.
    trace = PlacementTrace(np.array([0, 1, 2, 10]) * S, np.array([5, 6, 7, 20]) * S,
                           np.array([[4.0, 1.0]] * 4))
    config = fleetcast_pb2.PlacementConfig(target_utilization=0.5)
    config.host_shape.cpu, config.host_shape.memory = 8, 64
    spec = pools.pool_spec(config, None, trace)
    assert spec.num_hosts == 3 and spec.capacity.tolist() == [[8.0, 64.0]] * 3
    config.host_count = 7
    assert pools.pool_spec(config, None, trace).num_hosts == 7


def test_machines_give_their_latest_capacities():
    table = pa.Table.from_pylist(MACHINES[:5], schema=schemas.MACHINES)
    assert pools.hosts_of_machines(table).tolist() == [[1.0, 1.0], [1.0, 0.5], [1.0, 1.0]]


def test_best_fit_baseline_is_added_only_when_not_configured():
    config = run_config.parse_config(
        "placement { policy: NILAS policy: LAVA lifetime_source { oracle: true } "
        "lars { policy: NILAS order: LIFETIME order: BASELINE "
        "empty_hosts_threshold_pct: 5 } }").placement
    specs = replays.replay_specs(config)
    got = sorted((s.policy, s.defrag, s.reported, s.baseline_seeds) for s in specs)
    # The LARS baseline order is no replay of its own: the lifetime order's replay gives its
    # paired rows (one seed by default).
    assert got == sorted([
        ("nilas", "none", True, 0), ("nilas", "lars_lifetime", True, 1),
        ("lava", "none", True, 0), ("best_fit", "none", False, 0)])


def test_policies_that_read_no_lifetime_are_replayed_once_for_every_source():
    config = run_config.parse_config(
        "placement { policy: BEST_FIT policy: PBFR policy: DPBFR policy: NILAS "
        "lifetime_source { oracle: true } lifetime_source { noisy_oracle_accuracy: 0.7 } "
        "lars { policy: PBFR order: LIFETIME empty_hosts_threshold_pct: 5 } }").placement
    got = sorted((s.policy, s.lifetimes.label, s.defrag, tuple(x.label for x in s.also_for))
                 for s in replays.replay_specs(config))
    noisy = "noisy_oracle_0.7"
    # LARS orders by lifetime, DPBFR reads the arriving VM's: one replay per source.
    assert got == sorted([
        ("best_fit", "oracle", "none", (noisy,)), ("pbfr", "oracle", "none", (noisy,)),
        ("pbfr", "oracle", "lars_lifetime", ()), ("pbfr", noisy, "lars_lifetime", ()),
        ("dpbfr", "oracle", "none", ()), ("dpbfr", noisy, "none", ()),
        ("nilas", "oracle", "none", ()), ("nilas", noisy, "none", ())])
    # What makes that exact: with any lifetimes they decide the same (DPBFR does not).
    trace, _ = direct_replays("b")
    spec = PoolSpec(np.array([[1.0, 1.0]] * 4))
    sources = [OracleLifetimes(trace.lifetime_s()),
               NoisyOracleLifetimes(trace.lifetime_s(), 0.0, seed=1)]
    for make_policy, same in ((BestFit, True), (QuantizedBestFit, True),
                              (lambda: QuantizedBestFit(long_lived_num_buckets=1), False)):
        first, second = (simulate(trace, spec, make_policy(), source, warmup_s=WARMUP_S)
                         for source in sources)
        assert np.array_equal(first.host_of_vm, second.host_of_vm) == same
        assert (first.summary == second.summary) == same


def test_replays_are_fanned_out_longest_first_with_their_config_indexes():
    config = run_config.parse_config(
        "placement { policy: BEST_FIT policy: LA policy: NILAS "
        "lifetime_source { oracle: true } lifetime_source { noisy_oracle_accuracy: 0.7 } "
        "lifetime_source { uptime_model: true } "
        "lars { policy: NILAS order: LIFETIME empty_hosts_threshold_pct: 5 } }").placement
    specs = replays.replay_specs(config)
    ordered = replays.longest_first(specs, config)
    got = [(s.policy, s.lifetimes.label, s.defrag) for _, s in ordered]
    noisy = "noisy_oracle_0.7"
    # NILAS repredicts the noisy oracle (numpy batches), then the uptime model's curves; LA
    # asks a model once; Best-Fit reads no lifetime and LA's noisy oracle is asked once.
    assert got == [("nilas", noisy, "none"), ("nilas", noisy, "lars_lifetime"),
                   ("nilas", "uptime_model", "none"), ("nilas", "uptime_model", "lars_lifetime"),
                   ("la", "uptime_model", "none"),
                   ("best_fit", "oracle", "none"), ("la", "oracle", "none"),
                   ("la", noisy, "none"), ("nilas", "oracle", "none"),
                   ("nilas", "oracle", "lars_lifetime")]
    # Every replay once, under its index in the config's order.
    assert sorted(i for i, _ in ordered) == list(range(len(specs)))
    assert all(specs[i] is spec for i, spec in ordered)


def test_model_sources_are_built_once_per_key_and_the_least_recently_used_goes_first():
    built = []
    sources = replays.ModelSources(max_sources=2)

    def get(key):
        return sources.get(key, lambda: built.append(key) or f"source {key}")

    assert [get("a"), get("b"), get("a")] == ["source a", "source b", "source a"]
    assert built == ["a", "b"]
    get("c")  # drops "b", used least recently
    get("a")
    get("b")
    assert built == ["a", "b", "c", "b"]


def test_lars_baseline_alone_still_replays_the_lifetime_order_unreported():
    config = run_config.parse_config(
        "placement { policy: BEST_FIT lifetime_source { oracle: true } "
        "lars { order: BASELINE baseline_seeds: 4 empty_hosts_threshold_pct: 5 } }").placement
    got = [(s.defrag, s.reported, s.baseline_seeds) for s in replays.replay_specs(config)]
    assert got == [("none", True, 0), ("lars_lifetime", False, 4)]
    problems = run_config.validate(run_config.parse_config(
        "synthetic {} placement { policy: NILAS lifetime_source { oracle: true } "
        "lars { empty_hosts_threshold_pct: 5 order: BASELINE baseline_seeds: 0 } }"))
    assert [str(p) for p in problems] == ["placement.lars.baseline_seeds: must be > 0, got 0"]


def test_lars_rows_pair_the_baseline_order_with_the_lifetime_order():
    # Pool "a" with NILAS and a threshold that keeps LARS draining.
    rows = [r for r in instance_rows() if r["pool"] == "a" and
            not r["instance_id"].startswith("bad")]
    rows.sort(key=lambda r: (r["start_time"], r["instance_id"]))
    start = np.array([r["start_time"] for r in rows])
    end = np.array([np.nan if r["end_time"] is None else r["end_time"] for r in rows])
    trace = PlacementTrace.from_arrays(
        start, end, [[r["cpu_request"], r["memory_request"]] for r in rows],
        end_us=int(max(start.max(), np.nanmax(end))))
    pool_input = pools.PoolInput("a", trace, PoolSpec(np.array([[1.0, 1.0]] * 6)), 0,
                                     int(start.max()))
    config = run_config.parse_config(
        f"placement {{ {PLACEMENT_TEXT} lars {{ policy: NILAS order: LIFETIME order: BASELINE "
        "empty_hosts_threshold_pct: 60 max_inflight: 1 baseline_seeds: 3 } }").placement
    (spec,) = [s for s in replays.replay_specs(config)
               if s.defrag == "lars_lifetime" and s.lifetimes.kind == "oracle"]
    out = list(replays.replay((("a", 0), [spec]), config, {"a": pool_input}))
    assert [tag for tag, _ in out] == ["placement_timeseries"] + ["placement_summary"] * 4
    (series,) = [value for tag, value in out if tag == "placement_timeseries"]
    assert set(series.column("defrag").to_pylist()) == {"lars_lifetime"}
    summaries = [value[1] for tag, value in out if tag == "placement_summary"]
    lifetime, *baselines = summaries
    assert (lifetime["defrag"], lifetime["lars_seed"]) == ("lars_lifetime", None)
    assert [(b["defrag"], b["lars_seed"]) for b in baselines] == [("lars_baseline", k)
                                                                   for k in range(3)]
    assert lifetime["lars_drained_hosts"] >= 2 and lifetime["lars_migrations"] > 0
    # The same drains and VMs; the pool columns are the lifetime replay's.
    for baseline in baselines:
        for name in ("lars_drained_hosts", "empty_hosts_pct", "placements", "num_samples"):
            assert baseline[name] == lifetime[name]
        assert baseline["lars_migrations"] + baseline["lars_saved_migrations"] + baseline[
            "lars_failed_migrations"] <= baseline["lars_scheduled_migrations"]
        assert 0 <= baseline["migrations"] <= baseline["lars_migrations"]
    assert lifetime["lars_scheduled_migrations"] >= max(
        b["lars_scheduled_migrations"] for b in baselines)
    # The rows fit the summary schema, differences vs Best-Fit included.
    best_fit = dict(lifetime, policy="best_fit", defrag="none", lars_seed=None)
    table = replays.with_baseline_differences(
        ("a", [(row, True) for row in summaries] + [(best_fit, False)]))
    assert table.schema == schemas.PLACEMENT_SUMMARY and table.num_rows == 4
    assert table.column("lars_seed").to_pylist() == [0, 1, 2, None]   # baseline first


def test_summary_says_which_warm_start_was_used(run):
    tables, _ = run
    summary = tables["placement_summary"]
    assert set(summary["warm_start"]) == {"policy_from_start"}
    assert (summary["warm_start_vms"] == 0).all()


def test_best_fit_until_metrics_warm_start_reaches_simulate_and_the_summary():
    trace, results = direct_replays("a")
    config = run_config.parse_config(
        f"placement {{ {PLACEMENT_TEXT} warm_start: BEST_FIT_UNTIL_METRICS }}").placement
    specs = replays.replay_specs(config)
    assert {s.warm_start for s in specs} == {"best_fit_until_metrics"}
    (spec,) = [s for s in specs if s.policy == "nilas" and s.lifetimes.kind == "oracle"]
    pool_input = pools.PoolInput("a", trace, PoolSpec(np.array(
        [[1.0, 1.0], [1.0, 0.5], [1.0, 1.0]])), 0, int(trace.arrival_us.max()))
    out = dict(replays.replay((("a", 0), [spec]), config, {"a": pool_input}))
    row = out["placement_summary"][1]
    expected = simulate(trace, pool_input.spec, Nilas(), OracleLifetimes(trace.lifetime_s()),
                        start_us=0, end_us=pool_input.end_us, warmup_s=WARMUP_S,
                        sample_period_s=SAMPLE_PERIOD_S,
                        inflation_mix=InflationMix.from_demand(trace.demand),
                        stranding_every=STRANDING_EVERY, warm_start="best_fit_until_metrics")
    warm_start_vms = np.sum((trace.arrival_us >= 0) & (trace.arrival_us < WARMUP_S * S))
    assert row["warm_start"] == "best_fit_until_metrics"
    assert row["warm_start_vms"] == expected.summary["warm_start_vms"] == warm_start_vms > 0
    assert row["empty_hosts_pct"] == expected.summary["empty_hosts_pct"]
    assert row["placed_vms"] == np.sum(expected.host_of_vm >= 0)
    # Not the default's replay: Best-Fit placed the first hour.
    assert not np.array_equal(expected.host_of_vm, results["nilas", "oracle"].host_of_vm)
    problems = run_config.validate(run_config.parse_config(
        "synthetic {} placement { policy: NILAS lifetime_source { oracle: true } "
        "warm_start: WARM_START_UNSPECIFIED }"))
    assert [str(p) for p in problems] == ["placement.warm_start: is WARM_START_UNSPECIFIED"]


@pytest.mark.slow
def test_placement_notebook_draws_its_figures(run):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    _, out_dir = run
    notebook = nbformat.read(os.path.join(REPO, "notebooks", "placement.ipynb"), as_version=4)
    os.environ["FLEETCAST_RESULTS"] = str(out_dir)
    try:
        nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                                resources={"metadata": {"path": REPO}}).execute()
    finally:
        del os.environ["FLEETCAST_RESULTS"]
    for name in ("placement_empty_hosts.png", "placement_summary.png",
                 "placement_accuracy_sweep.png"):
        assert os.path.getsize(out_dir / name) > 1000
