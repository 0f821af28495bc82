"""The shaping stage's composite transform (the package docstring describes it)."""

import apache_beam as beam

from pipelines.io import spill
from pipelines.io.dead_letters import DEAD_LETTERS, EXCLUSIONS, SplitByTag
from pipelines.stages.shaping import runs as shaping_runs
from pipelines.stages.shaping.runs import APPLICATIONS, RUNS, SUMMARY
from pipelines.stages.shaping.workload import WORKLOAD, prepare


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
