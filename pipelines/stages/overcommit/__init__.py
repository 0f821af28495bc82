"""The overcommit stage: peak oracle and peak predictors per machine ([Bashir21] §3-5;
docs/stages/overcommit.md).

    usage ─ filter ─ metric ─ reset_and_shift ─ scheduler ──────────────────────┐
            (or a loaded filtered_usage)            (or a loaded scheduled_usage)
    ┌───────────────────────────────────────────────────────────────────────────┘
    └─ RunFortuneTellers: GroupByKey per shard of machines, one MachineSamples per machine,
       every teller
         ├─ overcommit_timeseries, overcommit_machine_metrics
         └─ CellMetrics (Combine per teller) ─ overcommit_cell_metrics ─ Summarize

The steps run in [Bashir21]'s order, on PCollections of Arrow tables, as one ParDo per run of
per-table steps (`RunSteps`), split only by a filtered_usage copy and the reset to time zero
(grouped by instance). Samples are grouped once by shard of machines, and every fortune
teller runs on the same MachineSamples of a machine (a predictor configured twice is computed
once); predictors are scored against the first oracle teller. Each step counts read = kept +
filtered + rejected in overcommit_counts, and rejected rows are dead letters with their
reason.

Modules: stage.py (the composite transform), steps.py (the per-table steps), tellers.py
(the fortune tellers per machine), summary.py (cell metrics and summary), validation.py (the
config's checks). This package imports none of them: the config's checks load without Beam.
"""
