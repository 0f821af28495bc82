"""One replay of a pool per (policy, lifetime source, defragmentation, admission): the specs,
the policy, lifetime source, LARS and admission of a replay, its summary row (and per-host
usage replay) and the paired LARS baseline rows, and the differences vs Best-Fit."""

import collections
import dataclasses
import math
from typing import Callable, Dict, Hashable, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from configs.registry import PluginFailed
from pipelines import progress, schemas
from pipelines.io import spill
from pipelines.io.failures import RunFailed
from pipelines.io.publish import staged_path
from pipelines.stages.placement.admission import admission_names, make_admission
from pipelines.stages.placement.pools import PoolInput, pool_seed
from pipelines.stages.placement.specs import (
    LAVA_CLASSES,
    REQUESTS,
    LarsOrder,
    LifetimeSpec,
    WarmStart,
    make_policy,
    policy_name,
    policy_names,
    policy_plugin,
)
from policies.lars import Lars, replay_drains
from policies.policy import CheckedPolicy
from policies.replay.lifetime_source import (
    ClassifierLifetimes,
    NoisyOracleLifetimes,
    OracleLifetimes,
)
from policies.replay.metrics import InflationMix, difference_vs_baseline
from policies.replay.simulator import (
    FAILED,
    NOT_REPLAYED,
    POLICY_FROM_START,
    ReplayProgress,
    simulate,
)

TIMESERIES = "placement_timeseries"
SUMMARY = "placement_summary"
HOSTS = "placement_hosts"
BEST_FIT = "best_fit"  # the baseline every replay is compared with
NO_DEFRAG = "none"
LARS_LIFETIME, LARS_BASELINE = "lars_lifetime", "lars_baseline"
# Model names in the lifetime stage's `lifetime_models` table (pipelines/stages/lifetime/).
UPTIME_MODEL_NAME, LA_CLASSIFIER_NAME = "uptime", "la_classifier"


@dataclasses.dataclass(frozen=True)
class ReplaySpec:
    """One replay of a pool: `policy` is a registered policy's name or a plug-in's configured
    name. `reported` is False for the Best-Fit baseline replay that the stage adds when the
    config does not ask for it (used for differences only), and for the LARS lifetime-order
    replay when the config asks for the baseline order alone (it records the drains).
    `baseline_seeds`: a LARS lifetime-order replay also gives this many paired baseline-order
    rows, one per seed, on its drains. `warm_start`: the simulator's name of the config's
    warm start (the same for every replay, the Best-Fit baseline included). `also_for`:
    further lifetime sources that the replay stands for, reported as if replayed with each:
    a policy that reads no lifetime (`uses_lifetimes` False) without LARS decides the same
    with every source, so it is replayed once, with the first. `admission`: "requests" or
    an overcommit teller's name (placement.admission), None without any."""
    policy: str
    lifetimes: LifetimeSpec
    defrag: str
    reported: bool = True
    baseline_seeds: int = 0
    warm_start: str = POLICY_FROM_START
    also_for: Tuple[LifetimeSpec, ...] = ()
    admission: Optional[str] = None


def warm_start_name(config) -> str:
    """The simulator's name of the config's warm start (POLICY_FROM_START →
    "policy_from_start")."""
    return WarmStart.Name(config.warm_start).lower()


def replay_specs(config) -> List[ReplaySpec]:
    """Every configured replay, plus a Best-Fit baseline per lifetime source and admission
    if needed; a policy that reads no lifetime is replayed once for all sources (`also_for`)
    unless LARS defragments it. Every admission replays the lot (`admission_names`)."""
    return [dataclasses.replace(spec, admission=admission)
            for admission in admission_names(config) for spec in _replay_specs(config)]


def _replay_specs(config) -> List[ReplaySpec]:
    lifetimes = [LifetimeSpec.of(m) for m in config.lifetime_source]
    warm_start = warm_start_name(config)
    lars = config.lars
    names = policy_names(config)
    defragmented = (set(map(policy_name, lars.policy)) or set(names)
                    if config.HasField("lars") else set())
    # (defrag, reported, baseline seeds): the lifetime order's replay gives the baseline rows.
    orders = set(lars.order)
    defrags_of_lars = [(LARS_LIFETIME, LarsOrder.LIFETIME in orders,
                        lars.baseline_seeds if LarsOrder.BASELINE in orders else 0)
                       ] if orders else []
    specs = []
    for name in names:
        defrags = [(NO_DEFRAG, True, 0)] + (defrags_of_lars if name in defragmented else [])
        policy = make_policy(name, config)
        shared = not getattr(policy, "uses_lifetimes", True)
        # The LAVA-classes source is the uptime model's for a policy without VM classes.
        sources = [(i, source) for i, source in enumerate(lifetimes)
                   if source.kind != LAVA_CLASSES or hasattr(policy, "with_vm_classes")]
        specs += [ReplaySpec(name, source, *defrag, warm_start=warm_start,
                             also_for=(tuple(lifetimes[1:]) if shared and defrag[0] == NO_DEFRAG
                                       else ()))
                  for i, source in sources for defrag in defrags
                  if not (shared and i and defrag[0] == NO_DEFRAG)]
    if BEST_FIT not in names and lifetimes:
        specs.append(ReplaySpec(BEST_FIT, lifetimes[0], NO_DEFRAG, reported=False,
                                warm_start=warm_start, also_for=tuple(lifetimes[1:])))
    return specs


def checked_if_plugin(policy, name: str, config, pool: str):
    """`policy` as replayed: a plug-in's `select` answers checked (`CheckedPolicy`), a
    registered policy as it is."""
    plugin = policy_plugin(name, config)
    if plugin is None:
        return policy
    return CheckedPolicy(policy, f"placement policy plug-in {plugin.name!r} "
                                 f"({plugin.class_path}) on pool {pool!r}")


# Cost ranks of replays (higher: longer), from the replay times of
# configs/azure_placement.textproto on 2 cores in the Python engine: a lifetime-aware policy
# repredicting the noisy oracle (numpy batches) 20-26 s, repredicting the uptime model's
# curves 14-17 s; a trained model's source (loaded, instance rows encoded) 8-16 s; the rest
# 4-9 s. The compiled engine (policies/replay/compiled/) runs the curves' NILAS and LAVA
# replays in 2-11 s, its source's build included, so rank 2 now overstates them; the noisy
# oracle's replays still run in Python and stay first.
_REPREDICTED_COST_RANK = {"noisy_oracle": 3, "uptime_model": 2, LAVA_CLASSES: 2}
_MODEL_COST_RANK = 1


def cost_rank(spec: ReplaySpec, config) -> int:
    """A rough rank of how long `spec`'s replay takes: 0 (short) to 3 (longest)."""
    policy = make_policy(spec.policy, config)
    repredicted = not getattr(policy, "one_shot", False) and (
        getattr(policy, "uses_exit_estimates", True) or spec.defrag != NO_DEFRAG)
    if repredicted and spec.lifetimes.kind in _REPREDICTED_COST_RANK:
        return _REPREDICTED_COST_RANK[spec.lifetimes.kind]
    return _MODEL_COST_RANK if spec.lifetimes.uses_model else 0


def longest_first(specs: Sequence[ReplaySpec], config) -> List[Tuple[int, ReplaySpec]]:
    """(replay index, spec) of every replay, by decreasing `cost_rank`, in config order
    within a rank.

    The multi-process DirectRunner deals the keys of a grouping to its workers in turn, in
    the order they arrive, and each worker runs its share in that order: in config order
    the long replays (NILAS and LAVA with repredicted lifetimes, listed last) would pile up
    at the end on one worker. Longest first, the workers get alike shares, and a runner that
    balances work itself starts the long ones first."""
    ranks = [cost_rank(spec, config) for spec in specs]
    order = sorted(range(len(specs)), key=lambda i: -ranks[i])
    return [(i, specs[i]) for i in order]


def fan_out(pool_input: PoolInput, replays: Sequence[Tuple[int, ReplaySpec]]):
    """One ((pool, replay index), ReplaySpec) element per (index, spec) of `replays`, in
    that order (`longest_first`). The pool's data reaches the replays as a side input: a
    copy per element would cross the runner's data plane, slow between DirectRunner
    processes, once per replay."""
    for i, spec in replays:
        yield (pool_input.pool, i), spec


def model_path(model_tables: Sequence[pa.Table], name: str,
               staged_dirs: Optional[Dict[str, str]] = None,
               variant: Optional[str] = None) -> str:
    """Directory of the lifetime stage's model `name` of feature `variant` (None: the only
    variant that has it), from its `lifetime_models` rows: where the run being run has
    staged it (`staged_dirs`, pipelines/io/publish.py), as the rows name the model's final
    place, which it reaches only when the run publishes."""
    rows = [row for table in model_tables for row in table.to_pylist()
            if row["name"] == name and variant in (None, row.get("variant"))]
    if len(rows) > 1:
        raise ValueError(f"placement: the lifetime stage saved {name!r} models of variants "
                         f"{sorted(row['variant'] for row in rows)}: give the lifetime "
                         "source's model_variant")
    if not rows:
        of_variant = "" if variant is None else f" of variant {variant!r}"
        raise ValueError(f"placement: the lifetime stage saved no {name!r} model{of_variant}")
    return staged_path(rows[0]["path"], staged_dirs or {})


class ModelSources:
    """The trained models' lifetime sources of a worker's recent pools, each built once (the
    model loaded, the pool's instance rows encoded and predicted: seconds of CPU on a real
    pool) and shared by the replays that use it.

    Sharing changes no decision: a replay only reads a source (`simulate` wraps it where a
    replay keeps state), and a curve cell evaluated on demand holds the model's answer
    whichever replay asks first.

    Args:
      max_sources: how many sources to keep; the least recently used goes first.
    """

    def __init__(self, max_sources: int = 4):
        self.max_sources = max_sources
        self._sources = collections.OrderedDict()

    def get(self, key: Hashable, build: Callable[[], object]):
        """The source under `key`, built by `build()` if not kept."""
        source = self._sources.pop(key, None)
        if source is None:
            source = build()
        self._sources[key] = source
        while len(self._sources) > self.max_sources:
            self._sources.popitem(last=False)
        return source


def lifetime_source(spec: LifetimeSpec, pool_input: PoolInput, config,
                    model_tables: Sequence[pa.Table],
                    staged_dirs: Optional[Dict[str, str]] = None,
                    model_sources: Optional[ModelSources] = None):
    """The replay's lifetime source for `spec` on `pool_input`'s VMs (a model source loads
    the model from `model_path`, or takes it from `model_sources` if kept there)."""
    if spec.kind == "oracle":
        return OracleLifetimes(pool_input.trace.lifetime_s())
    if spec.kind == "noisy_oracle":
        return NoisyOracleLifetimes(pool_input.trace.lifetime_s(), spec.accuracy, seed=pool_seed(
            spec.noisy_oracle_seed(config), pool_input.pool))
    # The LAVA-classes source repredicts with the uptime model: the same source, shared.
    kind = "uptime_model" if spec.kind == LAVA_CLASSES else spec.kind
    name = UPTIME_MODEL_NAME if kind == "uptime_model" else LA_CLASSIFIER_NAME
    path = model_path(model_tables, name, staged_dirs, spec.variant)
    return _kept(model_sources, (pool_input.pool, kind, path),
                 lambda: _model_source(kind, path, pool_input))


def _kept(model_sources: Optional[ModelSources], key: Hashable, build: Callable[[], object]):
    """`build()`, or the one `model_sources` keeps under `key` (if it keeps sources)."""
    return build() if model_sources is None else model_sources.get(key, build)


def lava_vm_classes(pool_input: PoolInput, model_tables: Sequence[pa.Table],
                    staged_dirs: Optional[Dict[str, str]] = None,
                    model_sources: Optional[ModelSources] = None,
                    variant: Optional[str] = None) -> np.ndarray:
    """LAVA's class of each VM of the pool, int64 (V,), from the lifetime stage's class
    classifiers (P(lifetime > 1 h, 10 h, 100 h) at arrival, `predict_classes`). The stage
    trains those of the edges its training period covers (the lowest ones): no VM is put
    above the highest of those."""
    from pipelines.stages.lifetime.models import load_model
    from predictors.lifetime.la_classifier import LaClassifier, predict_classes
    from predictors.lifetime.registry import LAVA_CLASS_MODEL_NAMES
    saved = {row["name"] for table in model_tables for row in table.to_pylist()
             if variant in (None, row.get("variant"))}
    if LAVA_CLASS_MODEL_NAMES[0] not in saved:
        raise ValueError(f"placement: the lifetime stage saved no {LAVA_CLASS_MODEL_NAMES[0]!r} "
                         "model (its training period is shorter than LAVA's first class edge)")
    paths = tuple(model_path(model_tables, name, staged_dirs, variant)
                  for name in LAVA_CLASS_MODEL_NAMES if name in saved)

    def load_classifier(path: str) -> LaClassifier:
        model = load_model(path)
        if not isinstance(model, LaClassifier):
            raise ValueError(f"{path} holds a {type(model).__name__}, not an LaClassifier")
        return model

    return _kept(model_sources, (pool_input.pool, LAVA_CLASSES, paths),
                 lambda: predict_classes([load_classifier(path) for path in paths],
                                         pool_input.instance_rows()))


def _model_source(kind: str, path: str, pool_input: PoolInput):
    """The `kind` source (uptime_model, one_shot_model) of the model saved at `path`."""
    # The model classes need LightGBM: imported only when a model source is configured.
    from pipelines.stages.lifetime.models import load_model
    from predictors.lifetime.curves import curves_for_saved_model
    # The Arrow rows as they are: each model converts only the columns it reads.
    rows = pool_input.instance_rows()
    if kind == "uptime_model":
        # Exact lifetime curves: every VM's curve in one batched call, repredictions are
        # lookups; a model whose booster, age grid or features do not match says so.
        return curves_for_saved_model(load_model(path), rows, path)
    classifier = load_model(path)
    return ClassifierLifetimes(classifier.predict_long(rows), classifier.threshold_s)


def make_lars(defrag: str, config, pool: str) -> Optional[Lars]:
    """The replay's defragmenter: none, or LARS in the lifetime order (closed loop)."""
    if defrag == NO_DEFRAG:
        return None
    lars = config.lars
    return Lars(lars.empty_hosts_threshold_pct, lifetime_order=True,
                max_inflight=lars.max_inflight, migration_duration_s=lars.migration_duration_s,
                max_draining_hosts=lars.max_draining_hosts, check_period_s=lars.check_period_s,
                seed=pool_seed(config.seed, pool))


def baseline_seed(config, pool: str, lars_seed: int) -> int:
    """The random generator's seed of the baseline order with seed index `lars_seed`."""
    return pool_seed(config.seed, pool) + lars_seed


def paired_baseline_rows(row: dict, lars: Lars, pool_input: PoolInput, series, config,
                         num_seeds: int) -> List[dict]:
    """The `lars_baseline` summary rows, seeds 0 .. num_seeds - 1: the lifetime replay's
    `row` with the LARS counts of the baseline order on the same drains (`replay_drains`) and
    `migrations` over the same metric window; the pool columns stay the lifetime replay's."""
    times = series["time_us"]
    window = (int(times[0]), int(times[-1])) if len(times) else (1, 0)
    rows = []
    for k in range(num_seeds):
        counts = replay_drains(
            lars.drains, pool_input.trace.exit_us, pool_input.end_us, lifetime_order=False,
            max_inflight=config.lars.max_inflight,
            migration_duration_s=config.lars.migration_duration_s,
            seed=baseline_seed(config, pool_input.pool, k), failed=lars.failed,
            window_us=window)
        rows.append(dict(row, defrag=LARS_BASELINE, lars_seed=k,
                         migrations=counts.window_migrations,
                         lars_migrations=counts.migrations,
                         lars_scheduled_migrations=counts.scheduled_migrations,
                         lars_saved_migrations=counts.saved_migrations,
                         lars_failed_migrations=counts.failed_migrations,
                         lars_drained_hosts=counts.drained_hosts))
    return rows


def _key_columns(pool_input: PoolInput, spec: ReplaySpec, n: int, config) -> dict:
    lifetimes = spec.lifetimes
    return {"pool": [pool_input.pool] * n, "policy": [spec.policy] * n,
            "lifetime_source": [lifetimes.label] * n,
            "noisy_oracle_accuracy": [lifetimes.accuracy] * n,
            "noisy_oracle_seed": [lifetimes.noisy_oracle_seed(config)] * n,
            "defrag": [spec.defrag] * n, "admission": [spec.admission or REQUESTS] * n}


def describe_progress(state: ReplayProgress, start_us: int, end_us: int) -> str:
    """A progress line of a running replay."""
    if state.loading_engine:
        return ("loading the compiled placement engine (compiled once per machine, about a "
                "minute the first time)")
    now_us = start_us if state.now_us is None else state.now_us
    done = min(max((now_us - start_us) / max(end_us - start_us, 1), 0.0), 1.0)
    return f"{100 * done:.0f} % of the replay window, {state.arrivals:,} arrivals handled"


def replay(element, config, pools: Dict[str, object], model_tables=(), staged_dirs=None,
           model_sources: Optional[ModelSources] = None, overcommit=None):
    """((pool, i), [ReplaySpec]) → (TIMESERIES, table) if reported and
    (SUMMARY, (pool, summary row, reported)), plus a LARS lifetime replay's paired
    baseline-order rows (SUMMARY only) and an admission's (HOSTS, table) if reported.
    `pools`: the PoolInput (or a SpilledObject of it) of each pool by name; `staged_dirs`:
    the run's (`model_path`); `model_sources`: the worker's, if it keeps them (the
    admissions' tellers too); `overcommit`: the run's OvercommitConfig, for an admission."""
    (pool, _), (spec,) = element
    pool_input = spill.load_object(pools[pool])
    what = (f"placement replay {spec.policy} / {spec.lifetimes.label} / {spec.defrag}"
            f"{'' if spec.admission is None else ' / admission ' + spec.admission} on pool "
            f"{pool_input.pool}")
    state = ReplayProgress()
    with progress.Heartbeat(what, lambda: describe_progress(state, pool_input.start_us,
                                                            pool_input.end_us)):
        yield from _replay(pool_input, spec, state, config, model_tables, staged_dirs,
                           model_sources, overcommit)
    progress.count("placement.replays_done")


def simulate_options(pool_input: PoolInput, config) -> dict:
    """The keyword arguments of `simulate` that the config sets for every replay of the
    pool (window, warm-up, samples, refresh, stranding, Best-Fit weights, warm start)."""
    trace = pool_input.trace
    mix = (InflationMix.from_demand(trace.demand, config.inflation_max_shapes,
                                    config.inflation_copies_per_round)
           if config.stranding_every > 0 else None)
    weights = ((config.best_fit_weights.cpu, config.best_fit_weights.memory)
               if config.HasField("best_fit_weights") else None)
    return dict(start_us=pool_input.start_us, end_us=pool_input.end_us,
                warmup_s=config.warmup_s, sample_period_s=config.sample_period_s,
                refresh_interval_s=config.refresh_interval_s, inflation_mix=mix,
                stranding_every=max(config.stranding_every, 1), weights=weights,
                warm_start=warm_start_name(config))


def _replay(pool_input: PoolInput, spec: ReplaySpec, state: ReplayProgress, config,
            model_tables, staged_dirs, model_sources, overcommit=None):
    defragmenter = make_lars(spec.defrag, config, pool_input.pool)
    policy = make_policy(spec.policy, config)
    if spec.lifetimes.kind == LAVA_CLASSES:
        policy = policy.with_vm_classes(lava_vm_classes(pool_input, model_tables, staged_dirs,
                                                        model_sources, spec.lifetimes.variant))
    policy = checked_if_plugin(policy, spec.policy, config, pool_input.pool)
    admission = None
    if spec.admission is not None:
        # The pool's usage (memory-mapped) and its tellers' per-pool work, kept together.
        usage, tellers = _kept(model_sources, (pool_input.pool, "admission"),
                               lambda: (pool_input.vm_usage(), {}))
        admission = make_admission(spec.admission, usage,
                                   pool_input.trace.demand[:, 0], overcommit, tellers)
    try:
        result = simulate(
            pool_input.trace, pool_input.spec, policy,
            lifetime_source(spec.lifetimes, pool_input, config, model_tables, staged_dirs,
                            model_sources),
            lars=defragmenter, progress=state, admission=admission,
            **simulate_options(pool_input, config))
    except PluginFailed as e:
        raise RunFailed(str(e)) from None
    for lifetimes in (spec.lifetimes, *spec.also_for):
        yield from _outputs(pool_input, dataclasses.replace(spec, lifetimes=lifetimes),
                            result, defragmenter, config)


def _outputs(pool_input: PoolInput, spec: ReplaySpec, result, defragmenter, config):
    """The timeseries table (if reported) and summary rows of `result` under `spec`'s
    lifetime source."""
    series = result.timeseries
    if spec.reported:
        columns = _key_columns(pool_input, spec, len(series["time_us"]), config)
        columns["time"] = series["time_us"]
        for field in schemas.PLACEMENT_TIMESERIES.names[len(columns):]:
            columns[field] = series[field]
        yield TIMESERIES, pa.table(columns, schema=schemas.PLACEMENT_TIMESERIES)
    if spec.reported and result.usage_totals is not None:
        yield HOSTS, hosts_table(pool_input, spec, result.usage_totals, config)
    row = summary_row(pool_input, result, spec, config)
    progress.count("placement.placements", row["placements"] or 0)
    progress.count("placement.failed_placements", row["failed_placements"] or 0)
    baseline_rows = paired_baseline_rows(row, defragmenter, pool_input, series, config,
                                         spec.baseline_seeds)
    yield SUMMARY, (pool_input.pool, row, spec.reported)
    for baseline_row in baseline_rows:
        yield SUMMARY, (pool_input.pool, baseline_row, True)


def summary_row(pool_input: PoolInput, result, spec: ReplaySpec, config) -> dict:
    """The PLACEMENT_SUMMARY row of one replay, without the differences vs Best-Fit."""
    summary, host_of_vm = result.summary, result.host_of_vm
    row = {name: values[0] for name, values in
           _key_columns(pool_input, spec, 1, config).items()}
    row.update(
        num_hosts=pool_input.spec.num_hosts, hosts_from=pool_input.hosts_from,
        peak_demand_time_us=pool_input.peak_demand_time_us, vms=len(host_of_vm),
        placed_vms=int(np.sum(host_of_vm >= 0)), failed_vms=int(np.sum(host_of_vm == FAILED)),
        not_replayed_vms=int(np.sum(host_of_vm == NOT_REPLAYED)), warm_start=spec.warm_start)
    for name in ("warmup_vms", "warmup_failed", "warm_start_vms", "placements",
                 "failed_placements", "migrations", "num_samples", *schemas.PLACEMENT_PCT_METRICS,
                 "lars_migrations", "lars_scheduled_migrations", "lars_saved_migrations",
                 "lars_failed_migrations", "lars_drained_hosts", "predictions",
                 "prediction_batches", *(c.name for c in schemas.USAGE_REPLAY_FIELDS)):
        row[name] = summary.get(name)
    row["lars_seed"] = None
    row["gap_to_upper_bound_pp"] = (summary["upper_bound_empty_hosts_pct"]
                                    - summary["empty_hosts_pct"])
    return row


def with_baseline_differences(element) -> pa.Table:
    """(pool, [(summary row, reported)]) → the pool's PLACEMENT_SUMMARY table: every
    reported row with its differences vs the Best-Fit replay of the same lifetime source
    without defragmentation."""
    _, rows = element
    rows = sorted(rows, key=lambda r: (r[0]["admission"], r[0]["policy"],
                                       r[0]["lifetime_source"], r[0]["defrag"], not r[1],
                                       -1 if r[0]["lars_seed"] is None else r[0]["lars_seed"]))
    baselines = {(row["lifetime_source"], row["admission"]): row for row, _ in rows
                 if row["policy"] == BEST_FIT and row["defrag"] == NO_DEFRAG}
    out = []
    for row, reported in rows:
        if not reported:
            continue
        baseline = baselines[row["lifetime_source"], row["admission"]]
        differences = difference_vs_baseline(row, baseline)
        for name in schemas.PLACEMENT_BASELINE_METRICS:
            value = differences[f"{name}_vs_baseline_pp"]
            row[f"{name}_vs_best_fit_pp"] = None if math.isnan(value) else value
        out.append(row)
    return pa.Table.from_pylist(out, schema=schemas.PLACEMENT_SUMMARY)


def hosts_table(pool_input: PoolInput, spec: ReplaySpec, totals, config) -> pa.Table:
    """The PLACEMENT_HOSTS rows of an admission replay: its usage replay per host."""
    n = len(totals.windows)
    columns = _key_columns(pool_input, spec, n, config)
    scored = totals.scored.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = {name: np.where(totals.scored > 0, values / scored, np.nan)
                 for name, values in (("violation_rate", totals.violations),
                                      ("mean_severity", totals.severity),
                                      ("savings_ratio", totals.savings))}
    columns.update(host=np.arange(n), cpu_capacity=pool_input.spec.capacity[:, 0],
                   windows=totals.windows, scored_windows=totals.scored,
                   **{name: pa.array(values, pa.float64(), from_pandas=True)
                      for name, values in rates.items()},
                   overflow_windows=totals.overflows)
    return pa.table(columns, schema=schemas.PLACEMENT_HOSTS)
