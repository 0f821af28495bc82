"""The placement stage: per-pool replays of the instances under placement policies ([Ling25]
§4-5, [Ling25ext] App. F-I, [Barbalho23] §3-5; docs/stages/placement.md).

    instances ─ KeyByPool ─┐
    machines ── KeyByPool ─┤
    [usage ── usage.py: runs by pool ───────┘  with placement.admission]
                           └─ CoGroupByKey ─ PreparePools ─ pools, dead letters
    pools ─ FanOut (one element per replay) ─ GroupByKey ─ Replay
                                    [side inputs: pools by name, lifetime_models]
          ─ timeseries, hosts, summaries ─ KeyByPool ─ GroupByKey ─ vs Best-Fit
                                                                    ─ placement_summary

A pool is one element: its VMs a `PlacementTrace` (by start time, then instance id), its hosts
a `PoolSpec` (its machines, or the config's host shape and count). Every (policy, lifetime
source, defragmentation) of a pool is its own element, deterministic (seeds from the
config's seed and the pool name). The groupings carry the instance rows as files of the
run (pipelines/io/spill.py), and so does a pool's side input: it holds the trace and hosts,
and a reference to the rows the model sources read their features from. LARS is compared
paired ([Ling25ext] §6.3): the closed-loop `lars_lifetime` replay records its drains, and
the `lars_baseline` rows replay the migration queue of exactly those drains in a seeded
order (`policies.lars.replay_drains`). Instances
that cannot be replayed are dead letters (source "placement", pools.py says why); those
outside the replay window are counted as not replayed. The trained models come from the
lifetime stage's `lifetime_models` table, a side input, so every replay waits for training.
Modules: stage.py (the composite transform), pools.py (pools, dead letters), replays.py (a
replay), admission.py (admission by predicted peak), usage.py (its usage samples per pool),
specs.py (what the config names: policies, lifetime sources, admissions), validation.py (the
checks), known_bad.py (the warnings). This package imports none of them: the config's checks
and warnings load without Beam.
"""
