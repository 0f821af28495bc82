"""Model lifetime sources of the placement replay: the lifetime stage's uptime model and LA
classifier end to end on a small hand-made trace, and HostExitCache / ModelLifetimes /
LifetimeCurves against brute force on random inputs."""


import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines import config as run_config
from pipelines import schemas
from pipelines.stages.lifetime.models import load_model
from pipelines.stages.placement import replays
from pipelines.stages.placement.pools import PoolInput
from policies.best_fit import BestFit
from policies.la import LifetimeAlignment
from policies.lava import Lava
from policies.nilas import Nilas
from policies.quantized_best_fit import QuantizedBestFit
from policies.replay.lifetime_source import (
    ClassifierLifetimes,
    HostExitCache,
    ModelLifetimes,
    NoisyOracleLifetimes,
    to_exit_us,
)
from policies.replay.metrics import InflationMix
from policies.replay.pool import PoolSpec, PoolState
from policies.replay.simulator import PlacementTrace, simulate
from predictors.lifetime.curves import LifetimeCurves
from predictors.lifetime.la_classifier import predict_classes
from predictors.lifetime.registry import LAVA_CLASS_MODEL_NAMES
from predictors.lifetime.uptime_model import (
    interval_uptimes_s,
    log10_uptime,
)
from tests.helpers import (
    JOB_LIFETIME_LA_THRESHOLD_S,
    JOB_LIFETIME_MACHINES,
    JOB_LIFETIME_STAGE_TEXT,
    job_lifetime_instances,
    run_on_loaded_tables,
)

S = 1_000_000
LA_THRESHOLD_S = JOB_LIFETIME_LA_THRESHOLD_S
POLICIES = ("best_fit", "la_binary", "nilas", "lava")
SOURCES = ("one_shot_model", "uptime_model")
PLACEMENT_TEXT = f"""
  policy: BEST_FIT policy: LA_BINARY policy: NILAS policy: LAVA
  lifetime_source {{ uptime_model: true }} lifetime_source {{ one_shot_model: true }}
  lifetime_source {{ uptime_model_lava_classes: true }}
  la_binary_threshold_s: {LA_THRESHOLD_S}
  warmup_s: 21600 sample_period_s: 1800 stranding_every: 4 refresh_interval_s: 900 seed: 5
"""



@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tables, _ = run_on_loaded_tables(
        tmp_path_factory.mktemp("model_sources"),
        {"instances": job_lifetime_instances(), "machines": JOB_LIFETIME_MACHINES},
        f"lifetime_model {{ {JOB_LIFETIME_STAGE_TEXT} }}\nplacement {{ {PLACEMENT_TEXT} }}",
        "model_sources_test")
    return tables


def pool_arrays():
    """(trace, instances frame in trace order, hosts) as the stage builds them."""
    frame = pa.Table.from_pylist(job_lifetime_instances(), schema=schemas.INSTANCES).sort_by(
        [("start_time", "ascending"), ("instance_id", "ascending")]).to_pandas()
    end = frame["end_time"].astype("float64").to_numpy()
    start = frame["start_time"].to_numpy()
    latest = int(max(start.max(), np.nanmax(end)))
    trace = PlacementTrace.from_arrays(
        start, end, frame[["cpu_request", "memory_request"]].to_numpy(), end_us=latest)
    return trace, frame, PoolSpec.from_shape((1.0, 1.0), len(JOB_LIFETIME_MACHINES))


class Recording:
    """Wraps a lifetime source and records every call: (vm_index, uptime_s, answer)."""

    def __init__(self, source):
        self._source = source
        self.repredicts = source.repredicts
        self.calls = []

    def predict_remaining_s(self, vm_index, uptime_s):
        remaining_s = self._source.predict_remaining_s(vm_index, uptime_s)
        self.calls.append((np.array(vm_index), np.array(uptime_s, dtype=np.float64),
                           np.array(remaining_s)))
        return remaining_s


def direct_replay(policy, source, trace, spec):
    """`simulate` with the stage's settings (PLACEMENT_TEXT) on the stage's arrays; `policy`
    is a policy or the name of one."""
    config = run_config.parse_config(f"placement {{ {PLACEMENT_TEXT} }}").placement
    if isinstance(policy, str):
        policy = {"best_fit": BestFit, "nilas": Nilas, "lava": Lava,
                  "la_binary": lambda: LifetimeAlignment((LA_THRESHOLD_S,))}[policy]()
    return simulate(trace, spec, policy, source, start_us=int(trace.arrival_us.min()),
                    end_us=int(trace.arrival_us.max()), warmup_s=config.warmup_s,
                    sample_period_s=config.sample_period_s,
                    refresh_interval_s=config.refresh_interval_s,
                    inflation_mix=InflationMix.from_demand(trace.demand),
                    stranding_every=config.stranding_every)


def summary_row(tables, policy, source):
    summary = tables["placement_summary"]
    (row,) = summary[(summary["policy"] == policy) & (summary["lifetime_source"] == source)
                     ].to_dict("records")
    return row


def model_path(tables, name):
    models = tables["lifetime_models"].set_index("name")
    return models.loc[name, "path"]


def test_every_policy_has_a_row_per_model_source_and_accounts_for_every_vm(run):
    summary = run["placement_summary"]
    # The LAVA-classes source is replayed by LAVA only; Best-Fit, which reads no lifetime,
    # stands for every source (the differences vs Best-Fit need its row).
    assert sorted(zip(summary["policy"], summary["lifetime_source"], summary["defrag"])) == \
        sorted([(p, s, "none") for p in POLICIES for s in SOURCES]
               + [(p, replays.LAVA_CLASSES, "none") for p in ("best_fit", "lava")])
    assert set(summary["vms"]) == {500}
    assert (summary["placed_vms"] + summary["failed_vms"] + summary["not_replayed_vms"]
            == summary["vms"]).all()
    assert (summary["placements"] > 0).all()
    # Only the repredicting source runs the host exit cache, for the policies that read
    # exit estimates (not the one-shot LA, not Best-Fit); the one-shot classifier predicts
    # once, at arrival.
    repredicting = summary["lifetime_source"].isin(["uptime_model", replays.LAVA_CLASSES]) & \
        ~summary["policy"].isin(["la_binary", "best_fit"])
    assert (summary.loc[repredicting, "predictions"] > summary.loc[repredicting, "vms"]).all()
    assert summary.loc[~repredicting, "predictions"].isna().all()


@pytest.mark.parametrize("policy", ["nilas", "lava"])
def test_uptime_model_repredictions_are_the_models_own_predictions(run, policy):
    trace, frame, spec = pool_arrays()
    model = load_model(model_path(run, replays.UPTIME_MODEL_NAME))
    features = model.encode(frame)
    source = Recording(LifetimeCurves(model, features))
    result = direct_replay(policy, source, trace, spec)
    row = summary_row(run, policy, "uptime_model")
    assert row["predictions"] == result.summary["predictions"]
    assert row["prediction_batches"] == result.summary["prediction_batches"]
    assert row["placed_vms"] == np.sum(result.host_of_vm >= 0)
    assert row["failed_vms"] == np.sum(result.host_of_vm == -1)
    np.testing.assert_allclose(row["empty_hosts_pct"], result.summary["empty_hosts_pct"])
    np.testing.assert_allclose(row["packing_density_pct"],
                               result.summary["packing_density_pct"])
    # Every arrival at uptime 0 (the replay starts empty: no warm-up), then one batch per
    # refresh before a decision.
    arrivals, arrival_uptimes_s, _ = source.calls[0]
    assert len(arrivals) == len(trace) and np.all(arrival_uptimes_s == 0)
    assert len(source.calls) == 1 + result.summary["prediction_batches"]
    implied_lifetimes_s = {}
    for vms, uptime_s, got in source.calls:
        np.testing.assert_array_equal(got, model.predict_remaining(features[vms], uptime_s))
        for vm, lifetime_s in zip(vms.tolist(), (got + uptime_s).tolist()):
            implied_lifetimes_s.setdefault(vm, set()).add(lifetime_s)
    for vms, uptime_s, _ in source.calls[1:]:
        # A refresh's uptimes are the VMs' own at one time: now - arrival.
        now_s = uptime_s + trace.arrival_us[vms] / S
        np.testing.assert_allclose(now_s, now_s[0], rtol=0, atol=1e-6)
    # Repredicting from the uptime changes what the model says about a VM's lifetime.
    assert sum(len(lifetimes) > 1 for lifetimes in implied_lifetimes_s.values()) > 50


@pytest.mark.slow
def test_lava_classes_come_from_the_class_classifiers_and_exits_from_the_uptime_model(run):
    trace, frame, spec = pool_arrays()
    # The training period (18 h) covers the 1 h and 10 h edges only: no VM could have been
    # seen to outlive 100 h, so that classifier is not trained and no VM is put above it.
    models = run["lifetime_models"].set_index("name")
    trained = [name for name in LAVA_CLASS_MODEL_NAMES if name in models.index]
    assert trained == ["lava_class_1h", "lava_class_10h"]
    assert list(models.loc[trained, "kind"]) == ["la_classifier"] * 2
    classifiers = [load_model(model_path(run, name)) for name in trained]
    assert [c.threshold_s for c in classifiers] == [3600.0, 36000.0]
    # Each is evaluated at its own threshold, its decision set at the default target recall.
    evaluated = run["lifetime_la_classifier"].groupby("model")["threshold_s"].first()
    assert [evaluated[name] for name in trained] == [3600.0, 36000.0]
    assert [c.target_recall for c in classifiers] == [0.85] * 2
    classes = predict_classes(classifiers, frame)
    assert len(set(classes.tolist())) >= 2
    # Not the classes of the uptime model's arrival predictions: the source changes them.
    curves = LifetimeCurves(load_model(model_path(run, replays.UPTIME_MODEL_NAME)),
                            load_model(model_path(run, replays.UPTIME_MODEL_NAME)).encode(frame))
    at_arrival_us = to_exit_us(0, curves.predict_remaining_s(np.arange(len(trace)),
                                                             np.zeros(len(trace))))
    assert (classes != [Lava.lifetime_class(r) for r in at_arrival_us.tolist()]).any()
    result = direct_replay(Lava(vm_classes=classes), curves, trace, spec)
    row = summary_row(run, "lava", replays.LAVA_CLASSES)
    assert row["predictions"] == result.summary["predictions"]
    assert row["placed_vms"] == np.sum(result.host_of_vm >= 0)
    np.testing.assert_allclose(row["empty_hosts_pct"], result.summary["empty_hosts_pct"])
    np.testing.assert_allclose(row["packing_density_pct"],
                               result.summary["packing_density_pct"])


def test_lava_classes_from_a_wrong_or_missing_model_name_the_problem(run):
    trace, frame, spec = pool_arrays()
    pool_input = PoolInput("cell", trace, spec, 0, int(trace.arrival_us.max()),
                           pa.Table.from_pandas(frame, preserve_index=False))
    uptime_path = model_path(run, replays.UPTIME_MODEL_NAME)
    wrong = pa.table({"name": ["lava_class_1h"], "path": [uptime_path]})
    with pytest.raises(ValueError, match=f"{uptime_path} holds a UptimeLifetimeModel, not an "
                                         "LaClassifier"):
        replays.lava_vm_classes(pool_input, [wrong])
    missing = pa.table({"name": ["uptime"], "path": [uptime_path]})
    with pytest.raises(ValueError, match="saved no 'lava_class_1h' model"):
        replays.lava_vm_classes(pool_input, [missing])


def test_one_shot_model_gives_each_vm_one_class_at_every_time(run):
    trace, frame, spec = pool_arrays()
    classifier = load_model(model_path(run, replays.LA_CLASSIFIER_NAME))
    long_lived = classifier.predict_long(frame)
    assert 0 < long_lived.sum() < len(long_lived)
    source = Recording(ClassifierLifetimes(long_lived, classifier.threshold_s))
    for policy in ("la_binary", "nilas"):
        result = direct_replay(policy, source, trace, spec)
        row = summary_row(run, policy, "one_shot_model")
        np.testing.assert_allclose(row["empty_hosts_pct"], result.summary["empty_hosts_pct"])
        assert row["placements"] == result.summary["placements"]
    # Whenever asked, a VM's implied lifetime (remaining + uptime while alive) is the one
    # its class says: twice the threshold if long-lived, half of it otherwise.
    seen = np.zeros(len(trace), dtype=bool)
    for vms, uptime_s, remaining_s in source.calls:
        lifetime_s = np.where(long_lived[vms], 2.0, 0.5) * classifier.threshold_s
        np.testing.assert_allclose(remaining_s, np.maximum(lifetime_s - uptime_s, 0.0))
        seen[vms] = True
    assert seen.all()
    later = np.linspace(0, 3 * classifier.threshold_s, 7)
    for uptime_s in later:
        remaining_s = source.predict_remaining_s(np.arange(len(trace)),
                                                 np.full(len(trace), uptime_s))
        alive = remaining_s > 0
        np.testing.assert_array_equal((remaining_s + uptime_s)[alive] > classifier.threshold_s,
                                      long_lived[alive])


def test_la_with_the_uptime_model_predicts_at_arrival_only(run):
    trace, frame, spec = pool_arrays()
    model = load_model(model_path(run, replays.UPTIME_MODEL_NAME))
    source = Recording(LifetimeCurves(model, model.encode(frame)))
    result = direct_replay("la_binary", source, trace, spec)
    assert all(np.all(uptime_s == 0) for _, uptime_s, _ in source.calls)
    np.testing.assert_allclose(summary_row(run, "la_binary", "uptime_model")["empty_hosts_pct"],
                               result.summary["empty_hosts_pct"])


class FakeModel:
    """Cheap deterministic model: remaining = feature · (1 + sin(uptime / 500)) + 30 s,
    rounded to whole seconds at some uptimes so that ties between VMs happen. Counts calls."""

    def __init__(self):
        self.calls = 0
        self.encoded = 0

    def encode(self, frame):
        self.encoded += 1
        return frame[["a", "b"]].to_numpy(np.float64)

    def predict_remaining(self, features, uptime_s):
        self.calls += 1
        features = np.asarray(features, dtype=np.float64)
        remaining_s = features[:, 0] * (1.0 + np.sin(np.asarray(uptime_s) / 500.0)) + 30.0
        return np.where(features[:, 1] > 0.5, np.round(remaining_s), remaining_s)


class BruteForceExits:
    """HostExitCache's rules, recomputed by scanning every host: a used host is repredicted
    if touched, if its estimate has passed, or if its last reprediction is at least the
    interval old (always for interval 0); its VMs' exits come from scratch."""

    def __init__(self, model, features, arrival_us, interval_us):
        self.model, self.features = model, features
        self.arrival_us, self.interval_us = arrival_us, interval_us
        self.last_us = {}
        self.touched = set()
        self.exits = {}  # vm -> predicted exit (us)

    def host_exit(self, vms):
        return max(self.exits[v] for v in vms) if vms else None

    def refresh(self, now_us, host_vms):
        changed = []
        for host, vms in enumerate(host_vms):
            if not vms:
                continue
            due = (self.interval_us == 0 or host in self.touched
                   or self.host_exit(vms) < now_us
                   or now_us >= self.last_us[host] + self.interval_us)
            if not due:
                continue
            before = self.host_exit(vms)
            for vm in vms:
                uptime_s = (now_us - self.arrival_us[vm]) / S
                remaining_s = self.model.predict_remaining(self.features[[vm]],
                                                           np.array([uptime_s]))
                self.exits[vm] = int(to_exit_us(now_us, np.maximum(remaining_s, 0.0))[0])
            self.last_us[host] = now_us
            if self.host_exit(vms) != before:
                changed.append(host)
        self.touched = set()
        return changed


def replay_cache_against_brute_force(source, reference, arrival_us, refresh_interval_s, rng,
                                     num_hosts=6):
    """Random exits, migrations (a VM moved with its exit, as LARS does) and placements
    through HostExitCache and the brute-force reference: the same exits after every
    refresh."""
    cache = HostExitCache(source, arrival_us, refresh_interval_s)
    pool = PoolState(PoolSpec.from_shape((1e9, 1e9), num_hosts))
    cache.bind(pool)
    live = []
    for vm, now_us in enumerate(arrival_us.tolist()):
        # A few exits and migrations, then the refresh before the decision, then the
        # placement.
        for gone in [v for v in live if rng.random() < 0.08]:
            live.remove(gone)
            host = pool.remove(gone, (1.0, 1.0))
            reference.exits.pop(gone)
            cache.touch(host)
            reference.touched.add(host)
        for moving in [v for v in live if rng.random() < 0.02]:
            exit_us = pool.vm_exit_us(moving)
            source_host = pool.remove(moving, (1.0, 1.0))
            target = int(rng.integers(0, num_hosts))
            pool.place(moving, target, (1.0, 1.0), exit_us)
            cache.touch(source_host)
            cache.touch(target)
            reference.touched.update((source_host, target))
        host_vms = [sorted(pool.host_vms[h]) for h in range(num_hosts)]
        # The pool's exits before the refresh are what the reference saw last.
        assert {v: pool.vm_exit_us(v) for v in live} == reference.exits
        expected = reference.refresh(now_us, host_vms)
        assert cache.refresh(now_us) == expected
        for host, vms in enumerate(host_vms):
            assert pool.host_exits_us(host) == {v: reference.exits[v] for v in vms}
            if vms:
                assert pool.host_exit_us[host] == reference.host_exit(vms)
        host = int(rng.integers(0, num_hosts))
        exit_us = int(to_exit_us(now_us, source.predict_remaining_s(
            np.array([vm]), np.zeros(1)))[0])
        pool.place(vm, host, (1.0, 1.0), exit_us)
        reference.exits[vm] = exit_us
        cache.touch(host)
        reference.touched.add(host)
        live.append(vm)


@pytest.mark.parametrize("seed, refresh_interval_s", [(0, 0), (1, 300), (2, 900), (3, 60)])
def test_host_exit_cache_equals_recomputing_every_due_host_from_scratch(seed,
                                                                        refresh_interval_s):
    rng = np.random.default_rng(seed)
    num_vms = 400
    frame = pd.DataFrame({"a": rng.uniform(10, 3000, num_vms),
                          "b": rng.uniform(0, 1, num_vms)})
    arrival_us = np.sort(rng.integers(0, 20_000, num_vms)) * S
    model = FakeModel()
    source = ModelLifetimes(model, frame)
    assert model.encoded == 1
    reference = BruteForceExits(FakeModel(), frame[["a", "b"]].to_numpy(), arrival_us,
                                refresh_interval_s * S)
    replay_cache_against_brute_force(source, reference, arrival_us, refresh_interval_s, rng)


@pytest.mark.parametrize("seed, refresh_interval_s", [(4, 0), (5, 900), (6, 60)])
def test_host_exit_cache_with_exact_curves_equals_recomputing_from_scratch(
        small_model, seed, refresh_interval_s):
    """The tracked path (heaps of interval ends, rebased exits) gives the model's exits."""
    model, features = small_model
    rng = np.random.default_rng(seed)
    num_vms = 500
    rows = features[rng.integers(0, len(features), num_vms)]
    # Seconds to days apart, so that VMs cross many of the model's uptime intervals.
    arrival_us = np.sort((10 ** rng.uniform(0, 5.3, num_vms) * S).astype(np.int64))
    source = LifetimeCurves(model, rows)
    assert source.exit_tracker(arrival_us) is not None
    reference = BruteForceExits(model, rows, arrival_us, refresh_interval_s * S)
    replay_cache_against_brute_force(source, reference, arrival_us, refresh_interval_s, rng)


def test_model_lifetimes_take_rows_of_the_encoded_table_once():
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"a": rng.uniform(10, 3000, 50), "b": rng.uniform(0, 1, 50)})
    model = FakeModel()
    source = ModelLifetimes(model, frame)
    vms = rng.integers(0, 50, 30)
    uptime_s = rng.uniform(0, 5000, 30)
    expected = FakeModel().predict_remaining(frame.to_numpy()[vms], uptime_s)
    for _ in range(3):
        np.testing.assert_array_equal(source.predict_remaining_s(vms, uptime_s), expected)
    assert model.encoded == 1 and model.calls == 3
    # Arrays are taken as they are.
    source = ModelLifetimes(model, frame.to_numpy())
    np.testing.assert_array_equal(source.predict_remaining_s(vms, uptime_s), expected)
    assert model.encoded == 1



def test_interval_uptimes_fall_in_their_intervals(small_model):
    model, _ = small_model
    thresholds = model.uptime_thresholds()
    assert len(thresholds) > 5
    uptime_s = interval_uptimes_s(thresholds)
    assert len(uptime_s) == len(thresholds) + 1 and uptime_s[0] == 0
    found = ~np.isnan(uptime_s)
    np.testing.assert_array_equal(
        np.searchsorted(thresholds, log10_uptime(uptime_s[found]), side="left"),
        np.flatnonzero(found))
    np.testing.assert_array_equal(interval_uptimes_s(np.empty(0)), [0.0])


@pytest.mark.parametrize("seed", [1, 8])
def test_curves_are_exact_in_small_batches(small_model, seed):
    model, features = small_model
    cache = LifetimeCurves(model, features)
    rng = np.random.default_rng(seed)
    thresholds = model.uptime_thresholds()
    # Uptimes on both sides of every threshold, at 0 and at random.
    edges = np.power(10.0, thresholds) - 1.0
    special = np.concatenate([[0.0], edges, np.nextafter(edges, np.inf),
                              np.nextafter(edges, -np.inf)])
    special = special[special >= 0]
    for _ in range(300):
        size = int(rng.integers(1, 12))
        rows = rng.integers(0, len(features), size)
        uptime_s = np.where(rng.random(size) < 0.5, rng.choice(special, size),
                            10 ** rng.uniform(0, 6, size))
        np.testing.assert_array_equal(cache.predict_remaining_s(rows, uptime_s),
                                      model.predict_remaining(features[rows], uptime_s))
    np.testing.assert_array_equal(cache.predict_remaining_s(np.arange(5), 100.0),
                                  model.predict_remaining(features[:5], 100.0))


@pytest.mark.parametrize("policy", [Nilas, Lava])
def test_replay_with_curves_decides_as_with_direct_model_calls(small_model, policy):
    model, features = small_model
    rng = np.random.default_rng(3)
    n = len(features)
    arrival_us = np.sort(rng.uniform(0, 2 * 86400, n) * S).astype(np.int64)
    lifetime_us = (10 ** rng.uniform(2, 5, n) * S).astype(np.int64)
    trace = PlacementTrace(arrival_us, arrival_us + lifetime_us,
                           rng.choice([[0.25, 0.25], [0.5, 0.25], [0.125, 0.5]], n))
    spec = PoolSpec.from_shape((1.0, 1.0), 40)
    results = []
    for source in (LifetimeCurves(model, features), ModelLifetimes(model, features)):
        results.append(simulate(trace, spec, policy(), source, warmup_s=0.0,
                                sample_period_s=3600.0, refresh_interval_s=900.0))
    curves, direct = results
    assert (curves.host_of_vm >= 0).sum() > 0.9 * n
    np.testing.assert_array_equal(curves.host_of_vm, direct.host_of_vm)
    assert curves.summary == direct.summary


@pytest.mark.parametrize("make_policy", [BestFit, QuantizedBestFit,
                                         lambda: QuantizedBestFit(long_lived_num_buckets=5)])
def test_policies_that_read_no_exit_estimate_are_not_repredicted_and_decide_the_same(
        make_policy):
    rng = np.random.default_rng(11)
    n = 3000
    arrival_us = np.sort(rng.uniform(0, 2 * 86400, n) * S).astype(np.int64)
    lifetime_s = 10 ** rng.uniform(2, 5, n)
    trace = PlacementTrace(arrival_us, arrival_us + (lifetime_s * S).astype(np.int64),
                           rng.choice([[0.25, 0.25], [0.5, 0.25], [0.125, 0.5]], n))
    spec = PoolSpec.from_shape((1.0, 1.0), 60)
    source = NoisyOracleLifetimes(lifetime_s, 0.5, seed=1)
    policy = make_policy()
    assert not policy.uses_exit_estimates
    # The same policy told that it reads them: repredicted through the cache.
    repredicted = type("Repredicted", (type(policy),), {"uses_exit_estimates": True})
    repredicted_policy = (repredicted(long_lived_num_buckets=5)
                          if policy.name == "dpbfr" else repredicted())
    common = dict(warmup_s=0.0, sample_period_s=3600.0, refresh_interval_s=900.0)
    fast = simulate(trace, spec, policy, source, **common)
    slow = simulate(trace, spec, repredicted_policy, source, **common)
    np.testing.assert_array_equal(fast.host_of_vm, slow.host_of_vm)
    assert "predictions" not in fast.summary and slow.summary["predictions"] > 0
    del slow.summary["predictions"], slow.summary["prediction_batches"]
    assert fast.summary == slow.summary
