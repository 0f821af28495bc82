"""The placement stage: per-pool replays of the instances under placement policies
(papers 000/001 §4-5, App. F-I; 003 §3-5; DESIGN.md "Placement replay").

    instances ─ KeyByPool ─┐
    machines ── KeyByPool ─┴─ CoGroupByKey ─ PreparePools ─ pools, dead letters
    pools ─ FanOut (one element per replay) ─ GroupByKey ─ Replay
                                    [side inputs: pools by name, lifetime_models]
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

The modules: pools.py (pool preparation and dead letters), replays.py (one replay and its
rows), validation.py (the config's checks).
"""

import apache_beam as beam

from pipelines.io import publish
from pipelines.io.dead_letters import DEAD_LETTERS, SplitByTag
from pipelines.stages.placement.pools import POOLS, prepare_pool, split_by_pool
from pipelines.stages.placement.replays import (
    SUMMARY,
    TIMESERIES,
    ModelSources,
    fan_out,
    longest_first,
    replay,
    replay_specs,
    with_baseline_differences,
)
from pipelines.stages.placement.validation import validate_config

__all__ = ["PlacementStage", "validate_config"]


class ReplayFn(beam.DoFn):
    """One replay per element (`replays.replay`); the trained models' lifetime sources are
    built once per worker and pool (`ModelSources`), not once per replay."""

    def __init__(self, config, staged_dirs):
        self._config = config
        self._staged_dirs = staged_dirs

    def setup(self):
        self._model_sources = ModelSources()

    def process(self, element, pools, model_tables=()):
        yield from replay(element, self._config, pools, model_tables, self._staged_dirs,
                          self._model_sources)


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
        pools = beam.pvalue.AsDict(prepared[POOLS] | "KeyPools" >> beam.Map(
            lambda pool_input: (pool_input.pool, pool_input)))
        replays = (prepared[POOLS]
                   | "FanOut" >> beam.FlatMap(fan_out, longest_first(specs, config))
                   # Spreads the replays over workers (a fan-out alone stays on one).
                   | "GroupReplays" >> beam.GroupByKey()
                   # The models are staged until the run publishes (pipelines/io/publish.py).
                   | "Replay" >> beam.ParDo(ReplayFn(config, publish.staged_dirs()), pools,
                                            *side)
                   | "SplitReplays" >> SplitByTag((TIMESERIES, SUMMARY)))
        summary = (replays[SUMMARY]
                   | "KeySummaries" >> beam.Map(lambda s: (s[0], (s[1], s[2])))
                   | "GroupSummaries" >> beam.GroupByKey()
                   | "VsBestFit" >> beam.Map(with_baseline_differences))
        return {TIMESERIES: replays[TIMESERIES], SUMMARY: summary,
                DEAD_LETTERS: prepared[DEAD_LETTERS]}
