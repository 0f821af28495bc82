"""The shaping stage: [Pace18]'s resource shaping (§III-B, Algorithm 1, §IV) on a
trace-driven cluster simulation (policies/shaping/; docs/stages/shaping.md).

    instances, usage, machines ─ KeyAll ─ CoGroupByKey ─ Prepare ─ workload, dead letters
    workload ─ forecast tasks (forecaster × shard of series) ─ Forecast ─ GroupByKey ─ Merge
             ─ forecasts (one element per forecaster)
    workload ─ FanOut (one RunSpec per (forecaster, k1, k2, policy, seed); the baseline per
               seed) ─ GroupByKey ─ Simulate [side inputs: workload, forecasts by forecaster]
             ─ runs, applications
    runs ─ one table, speedups vs the baseline ─ shaping_runs ─┐
    applications ─ per cell ─ distributions ──────────────────┴─ shaping_summary

The whole trace is one cluster, so the workload is one element (a file of the run, as are
the tables grouped into it and the forecasts: pipelines/io/spill.py). A component's forecasts
depend only on its own usage, so the forecasts (ARIMA / GP fits, the costly part) are made
once per forecaster, in shards of series, and shared by every run of that forecaster as a
side input (one copy, however many runs read it); each run is then an independent element
that carries only its RunSpec. Bad rows are dead letters (workload.py says which).

Modules: workload.py (workload, cluster and dead letters from the canonical tables), runs.py
(forecasts, runs and their rows, summary), validation.py (the config's checks).
"""

import apache_beam as beam

from pipelines.io import spill
from pipelines.io.dead_letters import DEAD_LETTERS, EXCLUSIONS, SplitByTag
from pipelines.stages.shaping import runs as shaping_runs
from pipelines.stages.shaping.runs import APPLICATIONS, RUNS, SUMMARY
from pipelines.stages.shaping.validation import validate_config
from pipelines.stages.shaping.workload import WORKLOAD, prepare

__all__ = ["ShapingStage", "validate_config"]


class ShapingStage(beam.PTransform):
    """{"instances", "usage", "machines": PCollection[pa.Table]} →
    {"shaping_runs", "shaping_applications", "shaping_summary", "dead_letters",
    "exclusions"}.

    Args:
      config: a ShapingConfig.
    """

    def __init__(self, config):
        super().__init__()
        self._config = config

    def expand(self, tables):
        config = self._config
        # One key: every table, the workload and the forecasts cross the runner as files of
        # the run (pipelines/io/spill.py), whatever their size.
        spill_to = spill.spill_to(min_bytes=0)
        keyed = {name: tables[name] | f"Key{name}" >> beam.Map(
            lambda table, to: ("cluster", spill.spilled(table, to)), spill_to)
            for name in ("instances", "usage", "machines")}
        prepared = (keyed
                    | "GroupCluster" >> beam.CoGroupByKey()
                    | "Prepare" >> beam.FlatMap(prepare, config, spill_to)
                    | "SplitPrepared" >> SplitByTag((WORKLOAD, DEAD_LETTERS, EXCLUSIONS)))
        workload = beam.pvalue.AsSingleton(prepared[WORKLOAD])
        forecasts = (prepared[WORKLOAD]
                     | "ForecastTasks" >> beam.FlatMap(shaping_runs.forecast_tasks, config)
                     # One element per (forecaster, shard), spread over workers.
                     | "GroupForecastTasks" >> beam.GroupByKey()
                     | "Forecast" >> beam.Map(shaping_runs.forecast_shard, config, spill_to)
                     | "GroupShards" >> beam.GroupByKey()
                     | "MergeShards" >> beam.Map(shaping_runs.merge_forecasts, spill_to))
        results = (prepared[WORKLOAD]
                   | "FanOut" >> beam.FlatMap(shaping_runs.fan_out, config)
                   # Spreads the runs over workers (a fan-out alone stays on one).
                   | "GroupRuns" >> beam.GroupByKey()
                   | "Simulate" >> beam.FlatMap(shaping_runs.run, config, workload,
                                                beam.pvalue.AsDict(forecasts))
                   | "SplitResults" >> SplitByTag((RUNS, APPLICATIONS)))
        runs = (results[RUNS]
                | "KeyRuns" >> beam.Map(lambda row: (None, row))
                | "GroupAllRuns" >> beam.GroupByKey()
                | "RunsTable" >> beam.Map(lambda kv: shaping_runs.runs_table(kv[1])))
        cells = (results[APPLICATIONS]
                 | "KeyCells" >> beam.Map(shaping_runs.application_cell)
                 | "GroupCells" >> beam.GroupByKey()
                 | "SummarizeApplications" >> beam.Map(shaping_runs.summary_of_applications))
        summary = ((cells, runs | "SummarizeRuns" >> beam.Map(shaping_runs.summary_of_runs))
                   | "Summary" >> beam.Flatten())
        return {RUNS: runs, APPLICATIONS: results[APPLICATIONS], SUMMARY: summary,
                DEAD_LETTERS: prepared[DEAD_LETTERS], EXCLUSIONS: prepared[EXCLUSIONS]}
