"""The placement stage's composite transform (the package docstring describes it)."""

import apache_beam as beam

from pipelines.io import publish, spill
from pipelines.io.dead_letters import DEAD_LETTERS, EXCLUSIONS, SplitByTag
from pipelines.stages.placement.pools import POOLS, prepare_pool, split_by_pool
from pipelines.stages.placement.replays import (
    HOSTS,
    SUMMARY,
    TIMESERIES,
    ModelSources,
    fan_out,
    longest_first,
    replay,
    replay_specs,
    with_baseline_differences,
)
from pipelines.stages.placement.usage import instance_runs, runs_by_pool, usage_samples


class ReplayFn(beam.DoFn):
    """One replay per element (`replays.replay`); the trained models' lifetime sources are
    built once per worker and pool (`ModelSources`), not once per replay."""

    def __init__(self, config, staged_dirs, overcommit=None):
        self._config = config
        self._staged_dirs = staged_dirs
        self._overcommit = overcommit

    def setup(self):
        self._model_sources = ModelSources()

    def process(self, element, pools, model_tables=()):
        yield from replay(element, self._config, pools, model_tables, self._staged_dirs,
                          self._model_sources, self._overcommit)


class PlacementStage(beam.PTransform):
    """{"instances", "machines"[, "lifetime_models", "usage"]: PCollection[pa.Table]} →
    {"placement_timeseries", "placement_summary", "placement_hosts", "dead_letters",
    "exclusions"}.

    Args:
      config: a PlacementConfig. The trained models' directories come from the lifetime
        stage's `lifetime_models` table, so the stage needs no directory of its own.
      overcommit: the run's OvercommitConfig (None without the stage), whose metric, grid
        and tellers an admission uses.
    """

    def __init__(self, config, overcommit=None):
        super().__init__()
        self._config = config
        self._overcommit = overcommit

    def expand(self, tables):
        config = self._config
        specs = replay_specs(config)
        uses_model = any(s.lifetimes.uses_model for s in specs)
        if uses_model and "lifetime_models" not in tables:
            raise ValueError("placement: a model lifetime source needs the lifetime stage")
        spill_to = spill.spill_to()
        by_pool = {name: tables[name] | f"KeyByPool{name}" >> beam.FlatMap(split_by_pool,
                                                                           spill_to)
                   for name in ("instances", "machines")}
        step_s = None
        if config.admission:
            step_s = self._overcommit.metric.step_s
            by_pool["samples"] = self._runs_by_pool(tables, step_s, spill_to)
        prepared = (by_pool
                    | "GroupPools" >> beam.CoGroupByKey()
                    | "PreparePools" >> beam.FlatMap(prepare_pool, config, uses_model, spill_to,
                                                     step_s=step_s)
                    | "SplitPools" >> SplitByTag((POOLS, DEAD_LETTERS, EXCLUSIONS)))
        side = ((beam.pvalue.AsList(tables["lifetime_models"]),) if uses_model else ())
        # A pool's trace (32 bytes a VM) reaches the replays as a file of the run: a runner
        # holds a side input whole (Spark's in its driver, the job server).
        pools = beam.pvalue.AsDict(prepared[POOLS] | "KeyPools" >> beam.Map(
            lambda pool_input, to: (pool_input.pool, spill.spilled_object(pool_input, to)),
            spill_to))
        replays = (prepared[POOLS]
                   | "FanOut" >> beam.FlatMap(fan_out, longest_first(specs, config))
                   # Spreads the replays over workers (a fan-out alone stays on one).
                   | "GroupReplays" >> beam.GroupByKey()
                   # The models are staged until the run publishes (pipelines/io/publish.py).
                   | "Replay" >> beam.ParDo(ReplayFn(config, publish.staged_dirs(),
                                                     self._overcommit), pools, *side)
                   | "SplitReplays" >> SplitByTag((TIMESERIES, SUMMARY, HOSTS)))
        summary = (replays[SUMMARY]
                   | "KeySummaries" >> beam.Map(lambda s: (s[0], (s[1], s[2])))
                   | "GroupSummaries" >> beam.GroupByKey()
                   | "VsBestFit" >> beam.Map(with_baseline_differences))
        return {TIMESERIES: replays[TIMESERIES], SUMMARY: summary, HOSTS: replays[HOSTS],
                DEAD_LETTERS: prepared[DEAD_LETTERS], EXCLUSIONS: prepared[EXCLUSIONS]}

    def _runs_by_pool(self, tables, step_s, spill_to):
        """(pool, UsagePiece) of the usage windows, for an admission (usage.py)."""
        metric = self._overcommit.metric
        return ({"samples": tables["usage"] | "UsageSamples" >> beam.FlatMap(
                    usage_samples, metric, spill_to),
                 "runs": tables["instances"] | "InstanceRuns" >> beam.FlatMap(
                     instance_runs, spill_to)}
                | "GroupSamples" >> beam.CoGroupByKey()
                | "RunsByPool" >> beam.FlatMap(runs_by_pool, step_s, spill_to))
