"""The placement stage: per-pool replays of the instances under placement policies
(papers 000/001 §4-5, App. F-I; 003 §3-5; DESIGN.md "Placement replay").

    instances ─ KeyByPool ─┐
    machines ── KeyByPool ─┴─ CoGroupByKey ─ PreparePools ─ pools, dead letters
    pools ─ FanOut (one element per replay) ─ GroupByKey ─ Replay [side input: lifetime_models]
          ─ timeseries, summaries ─ KeyByPool ─ GroupByKey ─ vs Best-Fit ─ placement_summary

A pool is one Beam element: its VMs become a `PlacementTrace` (sorted by start time, then
instance id) and its hosts a `PoolSpec`, from the pool's machines or, when the config gives a
host shape (Azure vmtable), from that shape and a count (configured, or derived from the peak
demand and a target utilisation). Every (policy, lifetime source, defragmentation) of a pool
is then its own element, so replays run in parallel; a replay is deterministic (seeds derive
from the config's seed and the pool name).

LARS is compared paired (001 §6.3: "LARS does not affect which hosts are picked for migration
at a given time, but orders the VMs"): the closed-loop lifetime-order replay (the
`lars_lifetime` row) records its drains, and the baseline order replays the migration queue of
exactly those drains, once per seed (`policies.lars.replay_drains`; `lars_baseline` rows, no
timeseries): same hosts, same times, same VMs scheduled; only the order differs.

Instances that cannot be replayed are dead letters (source "placement"): no CPU or memory
request, a zero request, an end before the start, a request larger than every host, a pool
without machines. Instances outside the replay window are kept and counted as not replayed.

The trained models come from the lifetime stage: its `lifetime_models` table (a side input,
so every replay waits for training) names the directories the models were saved to.
"""

import dataclasses
import math
import zlib
from typing import List, Optional, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from configs import fleetcast_pb2
from pipelines import schemas
from pipelines.io import sharding
from pipelines.io.dead_letters import DEAD_LETTERS, SplitByTag, rows_as_dead_letters
from policies.lars import Lars, replay_drains
from policies.registry import PLACEMENT_POLICIES, build_policy_plugin, check_policy_plugin
from policies.replay.lifetime_source import (
    ClassifierLifetimes,
    NoisyOracleLifetimes,
    OracleLifetimes,
)
from policies.replay.metrics import InflationMix, difference_vs_baseline
from policies.replay.pool import PoolSpec
from policies.replay.simulator import (
    FAILED,
    NOT_REPLAYED,
    POLICY_FROM_START,
    PlacementTrace,
    simulate,
)

SOURCE = "placement"
TIMESERIES = "placement_timeseries"
SUMMARY = "placement_summary"
POOLS = "pools"
Policy = fleetcast_pb2.PlacementConfig.Policy
LarsOrder = fleetcast_pb2.PlacementConfig.Lars.Order
WarmStart = fleetcast_pb2.PlacementConfig.WarmStart
BEST_FIT = "best_fit"  # the baseline every replay is compared with
NO_DEFRAG = "none"
LARS_LIFETIME, LARS_BASELINE = "lars_lifetime", "lars_baseline"
# Model names in the lifetime stage's `lifetime_models` table (pipelines/stages/lifetime.py).
UPTIME_MODEL_NAME, LA_CLASSIFIER_NAME = "uptime", "la_classifier"
# Dead-letter reasons.
REASON_NO_REQUEST = "no cpu_request or memory_request"
REASON_ZERO_REQUEST = "zero cpu_request and memory_request"
REASON_ENDS_BEFORE_START = "end_time before start_time"
REASON_TOO_LARGE = "request larger than every host of the pool"
REASON_NO_HOSTS = "pool has no machine with capacities"


@dataclasses.dataclass(frozen=True)
class LifetimeSpec:
    """One configured lifetime source: `kind` is oracle, noisy_oracle, uptime_model or
    one_shot_model; `accuracy` only for the noisy oracle."""
    kind: str
    accuracy: Optional[float] = None

    @property
    def label(self) -> str:
        return f"noisy_oracle_{self.accuracy:g}" if self.kind == "noisy_oracle" else self.kind

    @property
    def uses_model(self) -> bool:
        """True for the trained models' sources, which need the instance rows."""
        return self.kind in ("uptime_model", "one_shot_model")

    @classmethod
    def of(cls, message) -> "LifetimeSpec":
        which = message.WhichOneof("source")
        if which == "noisy_oracle_accuracy":
            return cls("noisy_oracle", message.noisy_oracle_accuracy)
        return cls(which)


@dataclasses.dataclass(frozen=True)
class ReplaySpec:
    """One replay of a pool: `policy` is a registered policy's name or a plug-in's configured
    name. `reported` is False for the Best-Fit baseline replay that the stage adds when the
    config does not ask for it (used for differences only), and for the LARS lifetime-order
    replay when the config asks for the baseline order alone (it records the drains).
    `baseline_seeds`: a LARS lifetime-order replay also gives this many paired baseline-order
    rows, one per seed, on its drains. `warm_start`: the simulator's name of the config's
    warm start (the same for every replay, the Best-Fit baseline included)."""
    policy: str
    lifetimes: LifetimeSpec
    defrag: str
    reported: bool = True
    baseline_seeds: int = 0
    warm_start: str = POLICY_FROM_START


@dataclasses.dataclass
class PoolInput:
    """A pool ready to replay: its trace, hosts, window and, for model lifetime sources
    only (every replay gets a copy), the instance rows in trace order for their features."""
    pool: str
    trace: PlacementTrace
    spec: PoolSpec
    start_us: int
    end_us: int
    instances: Optional[pa.Table] = None


def policy_name(policy: int) -> str:
    """The registry name of a PlacementConfig.Policy value (BEST_FIT → "best_fit")."""
    return Policy.Name(policy).lower()


def policy_names(config) -> List[str]:
    """Every configured policy by name: the built-ins in config order, then the plug-ins."""
    return [policy_name(p) for p in config.policy] + [p.name for p in config.policy_plugin]


def warm_start_name(config) -> str:
    """The simulator's name of the config's warm start (POLICY_FROM_START →
    "policy_from_start")."""
    return WarmStart.Name(config.warm_start).lower()


def replay_specs(config) -> List[ReplaySpec]:
    """Every configured replay, plus a Best-Fit baseline per lifetime source if needed."""
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
        specs += [ReplaySpec(name, source, *defrag, warm_start=warm_start)
                  for source in lifetimes for defrag in defrags]
    if BEST_FIT not in names:
        specs += [ReplaySpec(BEST_FIT, source, NO_DEFRAG, reported=False,
                             warm_start=warm_start) for source in lifetimes]
    return specs


def make_policy(name: str, config):
    """The placement policy object named `name`: a registered policy or a plug-in."""
    for plugin in config.policy_plugin:
        if plugin.name == name:
            return build_policy_plugin(plugin)
    return PLACEMENT_POLICIES[name].build(config)


def pool_seed(seed: int, pool: str) -> int:
    """A seed for `pool`'s random draws, stable across runs and processes."""
    return int(np.random.SeedSequence([seed, zlib.crc32(pool.encode())]).generate_state(1)[0])


def split_by_pool(table: pa.Table):
    """(pool, rows) for every pool of a table with a `pool` column (null pool: "")."""
    return sharding.split_by_key(table, pc.fill_null(table.column("pool"), ""))


def hosts_of_machines(machines: pa.Table) -> Optional[np.ndarray]:
    """Capacity float64[H, 2] (cpu, memory) of a pool's machines: each machine's latest event
    with both capacities; None without any. Machines that come and go during the trace count
    as present throughout (the replay's pool is fixed)."""
    machines = machines.filter(pc.and_(pc.is_valid(machines.column("cpu_capacity")),
                                       pc.is_valid(machines.column("memory_capacity"))))
    if not machines.num_rows:
        return None
    latest = machines.sort_by([("machine_id", "ascending"), ("time", "descending")])
    ids = latest.column("machine_id").to_numpy()
    first = np.concatenate([[True], ids[1:] != ids[:-1]])
    capacity = np.column_stack([latest.column("cpu_capacity").to_numpy()[first],
                                latest.column("memory_capacity").to_numpy()[first]])
    capacity = capacity[np.all(capacity > 0, axis=1)]
    return capacity if len(capacity) else None


def request_reasons(instances: pa.Table) -> np.ndarray:
    """Dead-letter reason per row ("" for a replayable row), object[n]: requests and times."""
    cpu = instances.column("cpu_request").to_numpy(zero_copy_only=False).astype(np.float64)
    memory = instances.column("memory_request").to_numpy(zero_copy_only=False).astype(
        np.float64)
    start = instances.column("start_time").to_numpy().astype(np.float64)
    end = instances.column("end_time").to_numpy(zero_copy_only=False).astype(np.float64)
    reasons = np.full(instances.num_rows, "", dtype=object)
    reasons[end < start] = REASON_ENDS_BEFORE_START
    reasons[(cpu == 0) & (memory == 0)] = REASON_ZERO_REQUEST
    missing = ~(np.isfinite(cpu) & np.isfinite(memory)) | (cpu < 0) | (memory < 0)
    reasons[missing] = REASON_NO_REQUEST
    return reasons


def fits_some_host(demand: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """bool[V]: demand float[V, D] fits at least one host of capacity float[H, D] when empty."""
    shapes = np.unique(capacity, axis=0)
    return np.any(np.all(demand[:, None, :] <= shapes[None, :, :], axis=2), axis=1)


def pool_spec(config, capacity: Optional[np.ndarray], trace: PlacementTrace) -> PoolSpec:
    """The pool's hosts: configured shape and count (or count from peak demand), else the
    machines' capacities."""
    if config.HasField("host_shape"):
        shape = (config.host_shape.cpu, config.host_shape.memory)
        if config.HasField("host_count"):
            return PoolSpec.from_shape(shape, config.host_count)
        return PoolSpec.from_peak_demand(shape, trace.arrival_us, trace.exit_us, trace.demand,
                                         config.target_utilization)
    return PoolSpec(capacity)


def prepare_pool(element, config, keep_instances: bool):
    """(pool, {instances, machines}) → (tag, value) pairs: one (POOLS, PoolInput) and the
    pool's dead letters; `keep_instances` keeps the rows for model features."""
    pool, grouped = element
    instances = sharding.concat(grouped["instances"], schemas.INSTANCES)
    if not instances.num_rows:
        return
    instances = instances.sort_by([("start_time", "ascending"), ("instance_id", "ascending")])
    capacity = None
    if not config.HasField("host_shape"):
        capacity = hosts_of_machines(sharding.concat(grouped["machines"], schemas.MACHINES))
        if capacity is None:
            yield DEAD_LETTERS, rows_as_dead_letters(SOURCE, "instances", instances,
                                                     REASON_NO_HOSTS)
            return
    reasons = request_reasons(instances)
    host_shapes = (capacity if capacity is not None
                   else np.array([[config.host_shape.cpu, config.host_shape.memory]]))
    demand = np.column_stack([
        instances.column(c).to_numpy(zero_copy_only=False).astype(np.float64)
        for c in ("cpu_request", "memory_request")])
    too_large = (reasons == "") & ~fits_some_host(np.nan_to_num(demand), host_shapes)
    reasons[too_large] = REASON_TOO_LARGE
    rejected = reasons != ""
    if rejected.any():
        yield DEAD_LETTERS, rows_as_dead_letters(SOURCE, "instances",
                                                 instances.filter(pa.array(rejected)),
                                            reasons[rejected])
    kept = instances.filter(pa.array(~rejected))
    if not kept.num_rows:
        return
    start = kept.column("start_time").to_numpy()
    end = kept.column("end_time").to_numpy(zero_copy_only=False).astype(np.float64)
    # Censored VMs run until the latest time the pool's rows show (they never exit within
    # the replay, which ends at the last arrival unless configured).
    latest_us = int(max(start.max(), np.nanmax(end) if np.isfinite(end).any() else start.max()))
    trace = PlacementTrace.from_arrays(
        start, end, np.column_stack([kept.column("cpu_request").to_numpy(),
                                     kept.column("memory_request").to_numpy()]),
        end_us=latest_us)
    start_us = config.start_time_us if config.HasField("start_time_us") else max(
        0, int(start.min()))
    end_us = config.end_time_us if config.HasField("end_time_us") else int(start.max())
    yield POOLS, PoolInput(pool, trace, pool_spec(config, capacity, trace), start_us, end_us,
                           kept if keep_instances else None)


def fan_out(pool_input: PoolInput, specs: Sequence[ReplaySpec]):
    """One ((pool, replay index), (PoolInput, ReplaySpec)) element per replay. Only model
    replays carry the instance rows: every element becomes its own copy downstream."""
    without_rows = dataclasses.replace(pool_input, instances=None)
    for i, spec in enumerate(specs):
        yield (pool_input.pool, i), (pool_input if spec.lifetimes.uses_model else without_rows,
                                     spec)


def model_path(model_tables: Sequence[pa.Table], name: str) -> str:
    """Directory of the lifetime stage's model `name` (from its `lifetime_models` rows)."""
    for table in model_tables:
        for row in table.to_pylist():
            if row["name"] == name:
                return row["path"]
    raise ValueError(f"placement: the lifetime stage saved no {name!r} model")


def lifetime_source(spec: LifetimeSpec, pool_input: PoolInput, config,
                    model_tables: Sequence[pa.Table]):
    """The replay's lifetime source for `spec` on `pool_input`'s VMs."""
    lifetime_s = pool_input.trace.lifetime_s()
    if spec.kind == "oracle":
        return OracleLifetimes(lifetime_s)
    if spec.kind == "noisy_oracle":
        return NoisyOracleLifetimes(lifetime_s, spec.accuracy,
                                    seed=pool_seed(config.seed, pool_input.pool))
    # The model classes need LightGBM: imported only when a model source is configured.
    from pipelines.stages.lifetime import load_model
    from predictors.lifetime.curves import curves_for_saved_model
    frame = pool_input.instances.to_pandas()
    if spec.kind == "uptime_model":
        # Exact lifetime curves: every VM's curve in one batched call, repredictions are
        # lookups; a model whose booster, age grid or features do not match says so.
        path = model_path(model_tables, UPTIME_MODEL_NAME)
        return curves_for_saved_model(load_model(path), frame, path)
    classifier = load_model(model_path(model_tables, LA_CLASSIFIER_NAME))
    return ClassifierLifetimes(classifier.predict_long(frame), classifier.threshold_s)


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


def _key_columns(pool_input: PoolInput, spec: ReplaySpec, n: int) -> dict:
    return {"pool": [pool_input.pool] * n, "policy": [spec.policy] * n,
            "lifetime_source": [spec.lifetimes.label] * n,
            "noisy_oracle_accuracy": [spec.lifetimes.accuracy] * n, "defrag": [spec.defrag] * n}


def replay(element, config, model_tables=()):
    """((pool, i), [(PoolInput, ReplaySpec)]) → (TIMESERIES, table) if reported and
    (SUMMARY, (pool, summary row, reported)), plus a LARS lifetime replay's paired
    baseline-order rows (SUMMARY only)."""
    _, (payload,) = element
    pool_input, spec = payload
    defragmenter = make_lars(spec.defrag, config, pool_input.pool)
    trace = pool_input.trace
    policy = make_policy(spec.policy, config)
    mix = (InflationMix.from_demand(trace.demand, config.inflation_max_shapes,
                                    config.inflation_copies_per_round)
           if config.stranding_every > 0 else None)
    weights = ((config.best_fit_weights.cpu, config.best_fit_weights.memory)
               if config.HasField("best_fit_weights") else None)
    result = simulate(
        trace, pool_input.spec, policy,
        lifetime_source(spec.lifetimes, pool_input, config, model_tables),
        start_us=pool_input.start_us, end_us=pool_input.end_us, warmup_s=config.warmup_s,
        sample_period_s=config.sample_period_s, refresh_interval_s=config.refresh_interval_s,
        inflation_mix=mix, stranding_every=max(config.stranding_every, 1),
        lars=defragmenter, weights=weights, warm_start=spec.warm_start)
    series = result.timeseries
    if spec.reported:
        columns = _key_columns(pool_input, spec, len(series["time_us"]))
        columns["time"] = series["time_us"]
        for field in schemas.PLACEMENT_TIMESERIES.names[len(columns):]:
            columns[field] = series[field]
        yield TIMESERIES, pa.table(columns, schema=schemas.PLACEMENT_TIMESERIES)
    row = summary_row(pool_input, result, spec)
    baseline_rows = paired_baseline_rows(row, defragmenter, pool_input, series, config,
                                         spec.baseline_seeds)
    yield SUMMARY, (pool_input.pool, row, spec.reported)
    for baseline_row in baseline_rows:
        yield SUMMARY, (pool_input.pool, baseline_row, True)


def summary_row(pool_input: PoolInput, result, spec: ReplaySpec) -> dict:
    """The PLACEMENT_SUMMARY row of one replay, without the differences vs Best-Fit."""
    summary, host_of_vm = result.summary, result.host_of_vm
    row = {name: values[0] for name, values in
           _key_columns(pool_input, spec, 1).items()}
    row.update(
        num_hosts=pool_input.spec.num_hosts, vms=len(host_of_vm),
        placed_vms=int(np.sum(host_of_vm >= 0)), failed_vms=int(np.sum(host_of_vm == FAILED)),
        not_replayed_vms=int(np.sum(host_of_vm == NOT_REPLAYED)), warm_start=spec.warm_start)
    for name in ("warmup_vms", "warmup_failed", "warm_start_vms", "placements",
                 "failed_placements", "migrations", "num_samples", *schemas.PLACEMENT_PCT_METRICS,
                 "lars_migrations", "lars_scheduled_migrations", "lars_saved_migrations",
                 "lars_failed_migrations", "lars_drained_hosts", "predictions",
                 "prediction_batches"):
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
    rows = sorted(rows, key=lambda r: (r[0]["policy"], r[0]["lifetime_source"],
                                       r[0]["defrag"], not r[1],
                                       -1 if r[0]["lars_seed"] is None else r[0]["lars_seed"]))
    baselines = {row["lifetime_source"]: row for row, _ in rows
                 if row["policy"] == BEST_FIT and row["defrag"] == NO_DEFRAG}
    out = []
    for row, reported in rows:
        if not reported:
            continue
        baseline = baselines[row["lifetime_source"]]
        differences = difference_vs_baseline(row, baseline)
        for name in schemas.PLACEMENT_BASELINE_METRICS:
            value = differences[f"{name}_vs_baseline_pp"]
            row[f"{name}_vs_best_fit_pp"] = None if math.isnan(value) else value
        out.append(row)
    return pa.Table.from_pylist(out, schema=schemas.PLACEMENT_SUMMARY)


class PlacementStage(beam.PTransform):
    """{"instances", "machines"[, "lifetime_models"]: PCollection[pa.Table]} →
    {"placement_timeseries", "placement_summary", "dead_letters"}.

    Args:
      config: a PlacementConfig. The trained models' directories come from the lifetime
        stage's `lifetime_models` table, so the stage needs no directory of its own.
    """

    def __init__(self, config):
        super().__init__()
        self._config = config

    def expand(self, tables):
        config = self._config
        specs = replay_specs(config)
        uses_model = any(s.lifetimes.uses_model for s in specs)
        if uses_model and "lifetime_models" not in tables:
            raise ValueError("placement: a model lifetime source needs the lifetime stage")
        by_pool = {name: tables[name] | f"KeyByPool{name}" >> beam.FlatMap(split_by_pool)
                   for name in ("instances", "machines")}
        prepared = (by_pool
                    | "GroupPools" >> beam.CoGroupByKey()
                    | "PreparePools" >> beam.FlatMap(prepare_pool, config, uses_model)
                    | "SplitPools" >> SplitByTag((POOLS, DEAD_LETTERS)))
        side = ((beam.pvalue.AsList(tables["lifetime_models"]),) if uses_model else ())
        replays = (prepared[POOLS]
                   | "FanOut" >> beam.FlatMap(fan_out, specs)
                   # Spreads the replays over workers (a fan-out alone stays on one).
                   | "GroupReplays" >> beam.GroupByKey()
                   | "Replay" >> beam.FlatMap(replay, config, *side)
                   | "SplitReplays" >> SplitByTag((TIMESERIES, SUMMARY)))
        summary = (replays[SUMMARY]
                   | "KeySummaries" >> beam.Map(lambda s: (s[0], (s[1], s[2])))
                   | "GroupSummaries" >> beam.GroupByKey()
                   | "VsBestFit" >> beam.Map(with_baseline_differences))
        return {TIMESERIES: replays[TIMESERIES], SUMMARY: summary,
                DEAD_LETTERS: prepared[DEAD_LETTERS]}


def validate_config(check, config, lifetime_model=None, has_hosts: bool = True,
                    field: str = "placement"):
    """Checks a PlacementConfig; `lifetime_model` is the run's LifetimeModelConfig (None
    without a lifetime stage), `has_hosts` whether the source gives hosts."""
    names = policy_names(config)
    check.require(len(names) > 0, f"{field}.policy", "names no policy")
    for i, policy in enumerate(config.policy):
        if policy == Policy.POLICY_UNSPECIFIED:
            check.fail(f"{field}.policy[{i}]", "is POLICY_UNSPECIFIED")
        else:
            PLACEMENT_POLICIES[policy_name(policy)].validate(check, config, field)
    for i, plugin in enumerate(config.policy_plugin):
        check_policy_plugin(check, plugin, f"{field}.policy_plugin[{i}]")
        check.require(names.count(plugin.name) == 1, f"{field}.policy_plugin[{i}].name",
                      f"{plugin.name!r} is used twice")
    _validate_lifetime_sources(check, config, lifetime_model, field)
    if not has_hosts or config.HasField("host_shape"):
        check.require(config.HasField("host_shape"), f"{field}.host_shape",
                      "is required: this trace has no hosts")
        if config.HasField("host_shape"):
            check.positive(config.host_shape, "cpu", f"{field}.host_shape")
            check.positive(config.host_shape, "memory", f"{field}.host_shape")
    if config.HasField("host_count"):
        check.positive(config, "host_count", field)
    check.require(0 < config.target_utilization <= 1, f"{field}.target_utilization",
                  f"must be in (0, 1], got {config.target_utilization}")
    check.positive(config, "warmup_s", field, allow_zero=True)
    check.require(config.warm_start != WarmStart.WARM_START_UNSPECIFIED, f"{field}.warm_start",
                  "is WARM_START_UNSPECIFIED")
    check.positive(config, "sample_period_s", field)
    check.positive(config, "refresh_interval_s", field, allow_zero=True)
    if config.HasField("best_fit_weights"):
        check.positive(config.best_fit_weights, "cpu", f"{field}.best_fit_weights")
        check.positive(config.best_fit_weights, "memory", f"{field}.best_fit_weights")
    for name in ("inflation_max_shapes", "inflation_copies_per_round"):
        check.positive(config, name, field)
    check.positive(config, "stranding_every", field, allow_zero=True)
    if config.HasField("start_time_us") and config.HasField("end_time_us"):
        check.require(config.start_time_us <= config.end_time_us, f"{field}.end_time_us",
                      f"is before start_time_us ({config.end_time_us} < "
                      f"{config.start_time_us})")
    if config.HasField("lars"):
        _validate_lars(check, config, f"{field}.lars")


def _validate_lifetime_sources(check, config, lifetime_model, field: str):
    check.require(len(config.lifetime_source) > 0, f"{field}.lifetime_source",
                  "names no lifetime source")
    for i, lifetime in enumerate(config.lifetime_source):
        which = lifetime.WhichOneof("source")
        check.require(which is not None, f"{field}.lifetime_source[{i}]", "names no source")
        if which == "noisy_oracle_accuracy":
            check.fraction(lifetime, "noisy_oracle_accuracy", f"{field}.lifetime_source[{i}]")
        if which in ("uptime_model", "one_shot_model"):
            check.require(lifetime_model is not None, f"{field}.lifetime_source[{i}]",
                          f"{which} needs a lifetime_model stage")
        if which == "one_shot_model" and lifetime_model is not None:
            check.require(lifetime_model.train_la_classifier, f"{field}.lifetime_source[{i}]",
                          "one_shot_model needs lifetime_model.train_la_classifier")


def _validate_lars(check, config, field: str):
    lars = config.lars
    check.require(len(lars.order) > 0, f"{field}.order", "names no order")
    for i, order in enumerate(lars.order):
        check.require(order != LarsOrder.ORDER_UNSPECIFIED, f"{field}.order[{i}]",
                      "is ORDER_UNSPECIFIED")
    check.require(lars.HasField("empty_hosts_threshold_pct"),
                  f"{field}.empty_hosts_threshold_pct", "is required")
    check.fraction(lars, "empty_hosts_threshold_pct", field, upper=100.0)
    for name in ("max_inflight", "migration_duration_s", "max_draining_hosts",
                 "check_period_s", "baseline_seeds"):
        check.positive(lars, name, field)
    for i, policy in enumerate(lars.policy):
        check.require(policy in config.policy, f"{field}.policy[{i}]",
                      "is not one of placement.policy")
