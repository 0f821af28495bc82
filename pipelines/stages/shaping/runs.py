"""The shaping runs: forecasts per (forecaster, shard of series), one simulation per
(forecaster, k1, k2, policy, seed), their rows, and the summary."""

from typing import Iterable, List, Optional

import numpy as np
import pyarrow as pa

from configs.checks import size
from pipelines import schemas
from pipelines.io import spill
from pipelines.io.failures import RunFailed
from pipelines.stages.shaping.specs import (
    BASELINE,
    FAILURE_MODELS,
    GROWTH_MODELS,
    Config,
    forecaster_names,
    run_specs,
)
from policies.shaping.cluster.simulator import simulate
from policies.shaping.forecasters import forecast_workload, series_representatives
from policies.shaping.metrics import (
    application_metrics,
    distribution,
    offered_load,
    run_metrics,
)
from policies.shaping.registry import SHAPING_FORECASTERS, SHAPING_POLICIES

RUNS, APPLICATIONS, SUMMARY = "shaping_runs", "shaping_applications", "shaping_summary"
# Application columns summarized as distributions (pooled over a cell's seeds).
APPLICATION_METRICS = ("turnaround_s", "wait_s", "cpu_slack_pct", "memory_slack_pct",
                       "work_lost_s")
# A forecast step holds the mean and uncertainty of CPU and memory (float64).
FORECAST_STEP_BYTES = 32
# One forecaster's forecasts are one Beam element (merged from its shards) that every run of
# it reads: a sixth of the 24 GB machine the design targets.
MAX_FORECAST_BYTES = 4 * 10 ** 9
# A load's submissions span at most this many steps: a simulation's times (µs, int64) and
# its step loop stay in range.
MAX_SUBMIT_SPAN_STEPS = 10 ** 9
# A summary cell: the runs of every seed of one (forecaster, k1, k2, policy, target load).
CELL_KEY = ("forecaster", "k1", "k2", "policy", "target_offered_load")
# Run columns summarized over a cell's seeds.
RUN_METRICS = ("turnaround_speedup_vs_baseline", "failed_applications_pct",
               "preempted_applications_pct", "mean_cpu_slack_pct", "mean_memory_slack_pct",
               "mean_turnaround_s")


def unshaped_after_failures(config) -> int:
    """The simulator's retry rule: the config's, else 1 under COMPONENT_LIMIT and
    MEMORY_LIMIT ([Pace18]'s simulator; without it a retry replays its failure forever) and 0
    under HOST_OVERLOAD (where a retry can succeed; keeps that model's earlier answers)."""
    if config.HasField("unshaped_after_failures"):
        return config.unshaped_after_failures
    return int(config.failure_model in (Config.COMPONENT_LIMIT, Config.MEMORY_LIMIT))


def check_forecast_size(workload, config):
    """Raises RunFailed naming shaping.shaping_interval_steps when one forecaster's forecasts
    of `workload` would exceed MAX_FORECAST_BYTES (at most one fit per interval of each
    distinct usage series, each a path of 2 S - 1 steps)."""
    if not config.forecaster:
        return
    interval = config.shaping_interval_steps
    lengths = workload.length[series_representatives(workload)]
    fits = int(np.sum(-(-lengths // interval)))
    needed = fits * (2 * interval - 1) * FORECAST_STEP_BYTES
    if needed > MAX_FORECAST_BYTES:
        raise RunFailed(
            f"shaping.shaping_interval_steps: {interval:,}-step intervals make the forecasts "
            f"of the {len(lengths):,} usage series ~{size(needed)} per forecaster ({fits:,} "
            f"fits, each a path of 2 x {interval:,} - 1 steps of {FORECAST_STEP_BYTES} bytes), "
            f"more than {size(MAX_FORECAST_BYTES)}: shorten the interval")


# The workload (ShapingInput) and Forecasts below may be SpilledObject references to them
# (pipelines/io/spill.py): each step reads what it is given with spill.load_object.


def forecast_tasks(shaping_input, config):
    """((forecaster, shard), (shards, the ShapingInput as given)) per forecaster and shard
    of the usage series."""
    workload = spill.load_object(shaping_input).workload
    check_forecast_size(workload, config)
    shards = min(config.forecast_shards, len(series_representatives(workload)))
    for name in forecaster_names(config):
        for shard in range(shards):
            yield (name, shard), (shards, shaping_input)


def forecast_shard(element, config, spill_to: Optional[spill.SpillTo] = None):
    """((forecaster, shard), [(shards, ShapingInput)]) → (forecaster, Forecasts of the
    shard's series, NaN elsewhere; spilled as `spill_to` says)."""
    (name, shard), ((shards, shaping_input),) = element
    workload = spill.load_object(shaping_input).workload
    representatives = series_representatives(workload)[shard::shards]
    forecaster = SHAPING_FORECASTERS[name](config)
    return name, spill.spilled_object(forecast_workload(workload, forecaster, representatives),
                                      spill_to)


def merge_forecasts(element, spill_to: Optional[spill.SpillTo] = None):
    """(forecaster, [Forecasts of shards]) → (forecaster, Forecasts, spilled as `spill_to`
    says)."""
    name, parts = element
    parts = [spill.load_object(part) for part in parts]
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merged(part)
    return name, spill.spilled_object(merged, spill_to)


def fan_out(shaping_input, config):
    """((index, None), RunSpec) per configured run (the workload element only triggers the
    runs: they read it as a side input)."""
    for i, spec in enumerate(run_specs(config)):
        yield (i, None), spec


def with_load(workload, config, cluster, target: Optional[float]):
    """`workload` at a load: submissions as frequent as makes its offered load `target` (to
    within the rounding of submit steps), or, with None, `arrival_rate_scale` times as
    frequent."""
    field, scale = "shaping.arrival_rate_scale", config.arrival_rate_scale
    if target is not None:
        load = offered_load(workload, cluster.capacity)
        if not np.isfinite(load):
            raise RunFailed("shaping.target_offered_load: the workload's submissions span no "
                            "time, so no arrival rate gives it a load")
        field, scale = "shaping.target_offered_load", target / load
    span = (workload.submit_step[-1] - workload.submit_step[0]) / scale if workload.num_apps \
        else 0
    if span > MAX_SUBMIT_SPAN_STEPS:
        raise RunFailed(f"{field}: spreads the workload's submissions over {span:,.0f} steps, "
                        f"more than {MAX_SUBMIT_SPAN_STEPS:,} (a simulation's times would leave "
                        "its range)")
    return workload.with_arrival_rate(scale)


def run(element, config, shaping_input, forecasts_by_name: dict):
    """((i, None), [RunSpec]) → (RUNS, row) and (APPLICATIONS, table); the forecasts of the
    run's forecaster come from `forecasts_by_name` (none for the baseline)."""
    _, (spec,) = element
    shaping_input = spill.load_object(shaping_input)
    forecasts = spill.load_object(forecasts_by_name.get(spec.forecaster))
    rng = np.random.default_rng(spec.seed)
    workload = shaping_input.workload
    if config.sampled_applications:
        workload = workload.sampled(config.sampled_applications, rng)
    workload = with_load(workload, config, shaping_input.cluster, spec.load)
    workload = workload.with_elastic(config.elastic_fraction, rng)
    policy = SHAPING_POLICIES[spec.policy](spec.k1, spec.k2).fit(
        workload, forecasts, config.shaping_interval_steps)
    max_steps = int(workload.submit_step.max()
                    + config.max_time_after_last_submit_s // config.step_s)
    result = simulate(workload, shaping_input.cluster, policy, config.shaping_interval_steps,
                      seed=spec.seed, max_steps=max_steps,
                      failure_model=FAILURE_MODELS[config.failure_model],
                      unshaped_after_failures=unshaped_after_failures(config),
                      growth=GROWTH_MODELS[config.growth],
                      elastic_progress=config.elastic_progress)
    apps = application_metrics(workload, result)
    row = {"forecaster": spec.forecaster, "k1": spec.k1, "k2": spec.k2, "policy": spec.policy,
           "seed": spec.seed, "hosts": shaping_input.cluster.num_hosts,
           "components": workload.num_components, "steps": result.steps,
           "component_steps": result.component_steps, "shaping_steps": result.shaping_steps,
           "preempting_shaping_steps": result.algorithm_runs,
           "forecast_fits": forecasts.fits if forecasts is not None else 0,
           "offered_load": offered_load(workload, shaping_input.cluster.capacity),
           "target_offered_load": spec.load,
           "mean_queue_length": result.queued_app_steps / max(result.steps, 1),
           **run_metrics(apps)}
    yield RUNS, row
    columns = {"forecaster": [spec.forecaster] * workload.num_apps,
               "k1": [spec.k1] * workload.num_apps, "k2": [spec.k2] * workload.num_apps,
               "policy": [spec.policy] * workload.num_apps,
               "seed": np.full(workload.num_apps, spec.seed), "app_id": workload.app_id,
               **apps, "target_offered_load": [spec.load] * workload.num_apps}
    yield APPLICATIONS, pa.table(columns, schema=schemas.SHAPING_APPLICATIONS)


def runs_table(rows: Iterable[dict]) -> pa.Table:
    """Every run's row with its turnaround speedup over the baseline of the same seed and
    target load, and that baseline's mean queue length."""
    rows = sorted(rows, key=lambda r: (r["target_offered_load"] or 0, r["forecaster"],
                                       r["policy"], r["k1"] or 0, r["k2"] or 0, r["seed"]))
    baseline = {(r["seed"], r["target_offered_load"]): r for r in rows
                if r["policy"] == BASELINE}
    for row in rows:
        reference = baseline[row["seed"], row["target_offered_load"]]
        row["turnaround_speedup_vs_baseline"] = reference["mean_turnaround_s"] / row[
            "mean_turnaround_s"] if row["mean_turnaround_s"] else None
        row["baseline_mean_queue_length"] = reference["mean_queue_length"]
    return pa.Table.from_pylist(rows, schema=schemas.SHAPING_RUNS)


def summary_rows(key: tuple, values: dict) -> List[dict]:
    """SHAPING_SUMMARY rows of one cell, key (forecaster, k1, k2, policy, target load):
    {metric: float64[n]}."""
    forecaster, k1, k2, policy, load = key
    return [{"forecaster": forecaster, "k1": k1, "k2": k2, "policy": policy, "metric": name,
             **distribution(np.asarray(v, dtype=np.float64)), "target_offered_load": load}
            for name, v in values.items()]


def summary_of_applications(element) -> pa.Table:
    """(cell key, [application tables of its seeds]) → SHAPING_SUMMARY rows."""
    key, tables = element
    apps = pa.concat_tables(list(tables))
    return pa.Table.from_pylist(summary_rows(key, {
        name: apps.column(name).to_numpy(zero_copy_only=False) for name in APPLICATION_METRICS}),
        schema=schemas.SHAPING_SUMMARY)


def summary_of_runs(runs: pa.Table) -> pa.Table:
    """SHAPING_SUMMARY rows of the run metrics, per cell over its seeds."""
    frame = runs.to_pandas()
    rows = []
    for key, cell in frame.groupby(list(CELL_KEY), dropna=False):
        key = tuple(None if isinstance(v, float) and np.isnan(v) else v for v in key)
        rows += summary_rows(key, {name: cell[name].to_numpy(dtype=np.float64)
                                   for name in RUN_METRICS})
    return pa.Table.from_pylist(rows, schema=schemas.SHAPING_SUMMARY)


def application_cell(table: pa.Table):
    """(cell key, table) of a shaping_applications table (one run's)."""
    first = table.slice(0, 1).to_pylist()[0]
    return tuple(first[name] for name in CELL_KEY), table

