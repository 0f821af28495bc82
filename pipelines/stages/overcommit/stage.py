"""The overcommit stage's composite transform (the package docstring describes it)."""

import functools
from typing import List

import apache_beam as beam

from configs.units import US_PER_S
from pipelines import schemas
from pipelines.io.dead_letters import COUNTS, DEAD_LETTERS, EXCLUSIONS, ROWS
from pipelines.io.sinks import ReadTable, WriteTable
from pipelines.stages.overcommit.steps import (
    ResetToZeroAndShift,
    RunSteps,
    counts_table,
    filter_columns,
    filter_tagged,
    metric_columns,
    metric_tagged,
    schedule_tagged,
    shift_tagged,
    sum_counts,
)
from pipelines.stages.overcommit.summary import (
    MergeCellSums,
    cell_metrics_table,
    keyed_cell_table,
    machine_metric_values,
    summary_table,
)
from pipelines.stages.overcommit.tellers import (
    CELL,
    MACHINE_METRICS,
    TIMESERIES,
    FortuneTellers,
    RunFortuneTellers,
)

CELL_METRICS = "overcommit_cell_metrics"
SUMMARY = "overcommit_summary"
OVERCOMMIT_COUNTS = "overcommit_counts"


# --- The stage --------------------------------------------------------------------------------

class OvercommitStage(beam.PTransform):
    """{"usage": PCollection[pa.Table], ...} → the overcommit tables, "dead_letters".

    Args:
      config: an OvercommitConfig (filter, metric, reset_and_shift, scheduler,
        fortune_teller and the filtered_usage / scheduled_usage LoadOrWrite fields).
    """

    def __init__(self, config):
        super().__init__()
        self._config = config

    @staticmethod
    def usage_columns(config) -> List[str]:
        """The columns of `usage` the stage reads, in USAGE order: the window's identity and
        what the filter and the metric use (all of them when filtered_usage is written, a
        copy of whole rows)."""
        if config.filtered_usage.HasField("output"):
            return schemas.USAGE.names
        used = {"machine_id", "instance_id", "start_time", *filter_columns(config.filter),
                *metric_columns(config.metric)}
        return [name for name in schemas.USAGE.names if name in used]

    def _scheduled_samples(self, tables, dead_letters: list, counts: list):
        """The OVERCOMMIT_SCHEDULED_USAGE tables: filter, metric, reset_and_shift and
        scheduler in [Bashir21]'s order, as few Beam steps as the LoadOrWrite copies and a
        reset to time zero (which groups by instance) allow."""
        config = self._config
        pipeline = tables["usage"].pipeline
        if config.scheduled_usage.HasField("input"):
            return pipeline | "LoadScheduledUsage" >> ReadTable(
                config.scheduled_usage.input, schemas.OVERCOMMIT_SCHEDULED_USAGE)
        step_us = config.metric.step_s * US_PER_S

        def run_steps(label, rows, steps):
            results = rows | label >> RunSteps(steps)
            dead_letters.append(results[DEAD_LETTERS])
            counts.append(results[COUNTS])
            return results[ROWS]

        if config.filtered_usage.HasField("input"):
            rows = pipeline | "LoadFilteredUsage" >> ReadTable(config.filtered_usage.input,
                                                                schemas.USAGE)
            steps = []
        else:
            rows, steps = tables["usage"], [functools.partial(filter_tagged,
                                                               config=config.filter)]
            if config.filtered_usage.HasField("output"):
                rows = run_steps("FilterUsage", rows, steps)
                _ = rows | "CopyFilteredUsage" >> WriteTable.to_location(
                    config.filtered_usage.output, schemas.USAGE)
                steps = []
        steps.append(functools.partial(metric_tagged, config=config.metric, step_us=step_us))
        reset = config.reset_and_shift
        if config.HasField("reset_and_shift") and reset.reset_time_to_zero:
            rows = (run_steps("SelectMetric", rows, steps)
                    | "ResetAndShift" >> ResetToZeroAndShift(reset, step_us))
            steps = []
        elif config.HasField("reset_and_shift"):
            steps.append(functools.partial(shift_tagged, config=reset, step_us=step_us))
        steps.append(functools.partial(schedule_tagged, config=config.scheduler))
        scheduled = run_steps("PrepareSamples", rows, steps)
        if config.scheduled_usage.HasField("output"):
            _ = scheduled | "CopyScheduledUsage" >> WriteTable.to_location(
                config.scheduled_usage.output, schemas.OVERCOMMIT_SCHEDULED_USAGE)
        return scheduled

    def expand(self, tables):
        config = self._config
        dead_letters, counts = [], []
        samples = self._scheduled_samples(tables, dead_letters, counts)
        tellers = FortuneTellers(config.fortune_teller, config.metric.step_s)
        oracle_name = tellers.scoring_oracle or ""
        results = samples | "RunFortuneTellers" >> RunFortuneTellers(tellers)
        dead_letters.append(results[DEAD_LETTERS])
        counts.append(results[COUNTS])
        cell = (results[CELL]
                | "CellSums" >> beam.CombinePerKey(MergeCellSums())
                | "CellMetrics" >> beam.Map(cell_metrics_table, oracle_name))
        summary = (
            (results[MACHINE_METRICS] | "MetricValues" >> beam.FlatMap(machine_metric_values),
             cell | "KeyCellByPredictor" >> beam.FlatMap(keyed_cell_table))
            | "FlattenSummaryInputs" >> beam.Flatten()
            | "GroupByPredictor" >> beam.GroupByKey()
            | "Summarize" >> beam.Map(summary_table, oracle_name))
        return {
            TIMESERIES: results[TIMESERIES],
            MACHINE_METRICS: results[MACHINE_METRICS],
            CELL_METRICS: cell,
            SUMMARY: summary,
            OVERCOMMIT_COUNTS: (tuple(counts)
                                | "FlattenCounts" >> beam.Flatten()
                                | "SumCounts" >> beam.CombinePerKey(sum_counts)
                                | "CountsTable" >> beam.Map(counts_table)),
            DEAD_LETTERS: tuple(dead_letters) | "FlattenDeadLetters" >> beam.Flatten(),
            EXCLUSIONS: results[EXCLUSIONS],
        }
