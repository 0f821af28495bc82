"""The lifetime stage: uptime-augmented examples, the lifetime models, their files and their
evaluation (paper 000/001 §3, App. A–C; paper 003 §3.2; DESIGN.md "Lifetime model").

    instances ─┬─ TraceSpan (Combine) ──────┐
               ├─ ShardByInstance ──────────┴─ CoGroupByKey ─ examples, dead letters
               └─ GatherInstances (one element) ─ split, train, save, evaluate

Every branch sorts instances the same way (`partition_instances`): zero or negative
lifetimes and instances without any feature value are dead letters; instances that started
before the trace (start_time ≤ trace_start_us) have unknown lifetimes and are left out of
labels and evaluation on purpose (counted in `lifetime_split`); the others are split by time
(`time_split`): training instances are observed only until the split time, so the models
never see an end that lies in the test period. The regressors train on the training
instances that started at least `lifetime_cap_s` before the split, the LA classifier on those
that started at least `la_threshold_s` before it (`label_known`): their labels are
known at the split, while among more recent instances only the short ones would have one.
Kaplan–Meier handles censoring itself and uses every training instance. Censored instances
give examples only where their label is known (predictors/lifetime/examples.py). Examples sit
at the absolute ages of `uptime_age_s` (default) or at fractions of each lifetime (the
paper's scheme; `augmentation`).

Evaluation on the test period: long-lived classification at arrival (`lifetime_long_lived`)
and repredicted at each absolute age for the VMs alive then (`lifetime_f1_by_age`), with the
decision of each regressor chosen per age on a validation slice of the training period (the
latest-starting `validation_fraction` of the regressors' training instances) to reach
`long_lived_target_recall` there, unless `long_lived_decision_s` is set; the paper's
uptime-quantile views (`lifetime_f1_by_uptime`, `lifetime_error_histogram`), whose uptimes
are fractions of the true lifetime and so leak it into the input; the C-index.

The models are those of `predictors.lifetime.registry.LIFETIME_MODELS`: the stage trains, in
registry order, each one the config asks for, saves it under its name and evaluates it by
what it predicts (a remaining lifetime, or whether the instance is long-lived).

Examples are generated per shard of instances, in parallel, from the trace's span (a
Combine broadcast to the shards by a CoGroupByKey, so no side input is needed). Training is
a single-machine step over all instances; it writes each model's files through Beam's
FileSystems under `model_dir`, where `load_model` (or the model class's `load` for a local
directory) reads them without the pipeline. Like the tables, a Parquet run stages them and
publishes them (listed in its manifest) only when it succeeds, so a failed run leaves the
previous run's models as they were; `lifetime_models` names their final paths, and a later
stage of the same run finds them staged (`publish.staged_path`). A `model_dir` on another
file system than the output root is written in place (pipelines/io/publish.py).

The modules: examples.py (instances, split, examples), models.py (fitting, model files),
training.py (the training and evaluation step), validation.py (the config's checks).
"""

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipelines import schemas
from pipelines.io import publish, sharding
from pipelines.io.dead_letters import DEAD_LETTERS, SplitByTag
from pipelines.io.sinks import WriteTable
from pipelines.stages.lifetime.examples import EXAMPLES, merge_spans, shard_examples, trace_span
from pipelines.stages.lifetime.models import ModelDir, load_model
from pipelines.stages.lifetime.training import TRAINING_TABLES, train_and_evaluate
from pipelines.stages.lifetime.validation import validate_config

__all__ = ["LifetimeStage", "load_model", "validate_config"]


class LifetimeStage(beam.PTransform):
    """{"instances": PCollection[pa.Table], ...} → {lifetime tables, "dead_letters"}.

    Args:
      config: a LifetimeModelConfig.
      work_dir: the run's output directory; models go to <work_dir>/models unless
        config.model_dir says otherwise (staged while a run's staging area is active, so
        build the stage while the pipeline is built).
    """

    def __init__(self, config, work_dir: str):
        super().__init__()
        self._config = config
        final = (config.model_dir or FileSystems.join(work_dir, "models")).rstrip("/")
        self._model_dir = ModelDir(final, publish.staged_dir(final))

    def expand(self, tables):
        config = self._config
        instances = tables["instances"]
        num_shards = config.num_shards
        span = (instances
                | "Span" >> beam.Map(trace_span, config.trace_start_us)
                # Without defaults: the default of an empty input is a side input, which
                # the DaskRunner cannot run; with no instances there is no shard to feed.
                | "TraceSpan" >> beam.CombineGlobally(merge_spans).without_defaults())
        per_shard = (
            {"instances": instances
                 | "ShardByInstance" >> beam.FlatMap(sharding.split_by_key, "instance_id",
                                                      num_shards),
             "span": span
                 | "SpanToShards" >> beam.FlatMap(
                     lambda s: ((shard, s) for shard in range(num_shards)))}
            | "GroupShards" >> beam.CoGroupByKey()
            | "Examples" >> beam.FlatMap(shard_examples, config)
            | "SplitExamples" >> SplitByTag((EXAMPLES, DEAD_LETTERS)))
        trained = (
            instances
            | "KeyAll" >> beam.Map(lambda table: (None, table))
            | "GatherInstances" >> beam.GroupByKey()
            | "TrainAndEvaluate" >> beam.FlatMap(train_and_evaluate, config, self._model_dir)
            | "SplitTables" >> SplitByTag(TRAINING_TABLES))
        if config.examples.HasField("output"):
            _ = per_shard[EXAMPLES] | "CopyExamples" >> WriteTable.to_location(
                config.examples.output, schemas.LIFETIME_EXAMPLES)
        return {EXAMPLES: per_shard[EXAMPLES], DEAD_LETTERS: per_shard[DEAD_LETTERS],
                **trained}
