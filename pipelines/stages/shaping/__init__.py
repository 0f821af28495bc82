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

Modules: stage.py (the composite transform), workload.py (workload, cluster and dead letters
from the canonical tables), specs.py (the configured runs), runs.py (forecasts, runs and their
rows, summary), validation.py (the config's checks). This package imports none of them: the
config's checks load without Beam.
"""
