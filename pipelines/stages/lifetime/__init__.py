"""The lifetime stage: uptime-augmented examples, the lifetime models, their files and their
evaluation ([Ling25] §3, [Ling25ext] App. A–C, [Barbalho23] §3.2; docs/stages/lifetime.md).

    instances ─┬─ TraceSpan (Combine) ───┐
               ├─ SampleCut (Combine) ───┤
               └─ ShardByInstance ───────┴─ CoGroupByKey ─ examples, dead letters,
                                                           the shard's sampled rows
    sampled rows, span, cut ─ CoGroupByKey (one element) ─ split, train, save, evaluate

Every branch sorts instances alike (`partition_instances`): zero or negative lifetimes and
instances without a feature value are dead letters; instances started before the trace have
unknown lifetimes and are left out (counted in `lifetime_split`); the rest are split by time,
training instances observed only until the split. Examples are built per shard in parallel,
from the trace's span broadcast by the CoGroupByKey (no side input). Training is one step over
the training sample (every instance row up to `max_training_instances`, else a seeded uniform
sample of that many, sampling.py), split at the whole trace's span: it fits, in registry
order, every model of `LIFETIME_MODELS` the config asks for, evaluates it on the sample's test
period, and writes its files through Beam's FileSystems under `model_dir`, staged and
published with the run's tables (a later stage of the run finds them with
`publish.staged_path`; `load_model` reads them without the pipeline). The groupings carry
large tables as files of the run (pipelines/io/spill.py), not through the runner.

Modules: stage.py (the composite transform), examples.py (instances, split, examples),
sampling.py (the training sample), models.py (fitting, model files, `load_model`),
training.py (training and evaluation), validation.py (the config's checks). This package
imports none of them: the config's checks load without Beam or LightGBM.
"""
