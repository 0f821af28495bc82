"""The lifetime stage's composite transform (the package docstring describes it)."""

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from pipelines import schemas
from pipelines.io import publish, sharding, spill
from pipelines.io.dead_letters import DEAD_LETTERS, EXCLUSIONS, SplitByTag
from pipelines.io.sinks import WriteTable
from pipelines.stages.lifetime import sampling
from pipelines.stages.lifetime.examples import EXAMPLES, merge_spans, shard_examples, trace_span
from pipelines.stages.lifetime.models import ModelDir
from pipelines.stages.lifetime.training import TRAINING_TABLES, train_and_evaluate


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
        spill_to = spill.spill_to()
        span = (instances
                | "Span" >> beam.Map(trace_span, config.trace_start_us)
                # Without defaults: the default of an empty input is a side input, which
                # the DaskRunner cannot run; with no instances there is no shard to feed.
                | "TraceSpan" >> beam.CombineGlobally(merge_spans).without_defaults())
        cut = (instances
               | "SampleKeys" >> beam.Map(sampling.sample_keys, config.seed)
               | "SampleCut" >> beam.CombineGlobally(
                   sampling.SampleCut(config.max_training_instances)).without_defaults())
        per_shard = (
            {"instances": instances
                 | "ShardByInstance" >> beam.FlatMap(shard_by_instance, num_shards, spill_to),
             "span": span | "SpanToShards" >> beam.FlatMap(to_shards, num_shards),
             "cut": cut | "CutToShards" >> beam.FlatMap(to_shards, num_shards)}
            | "GroupShards" >> beam.CoGroupByKey()
            | "Examples" >> beam.FlatMap(shard_examples, config, spill_to)
            | "SplitExamples" >> SplitByTag((EXAMPLES, DEAD_LETTERS, EXCLUSIONS,
                                             sampling.SAMPLED)))
        trained = (
            {"instances": per_shard[sampling.SAMPLED] | "KeySample" >> beam.Map(to_one_key),
             "span": span | "KeySpan" >> beam.Map(to_one_key),
             "cut": cut | "KeyCut" >> beam.Map(to_one_key)}
            | "GatherSample" >> beam.CoGroupByKey()
            | "TrainAndEvaluate" >> beam.FlatMap(train_and_evaluate, config, self._model_dir)
            | "SplitTables" >> SplitByTag(TRAINING_TABLES))
        if config.examples.HasField("output"):
            _ = per_shard[EXAMPLES] | "CopyExamples" >> WriteTable.to_location(
                config.examples.output, schemas.LIFETIME_EXAMPLES)
        return {EXAMPLES: per_shard[EXAMPLES], DEAD_LETTERS: per_shard[DEAD_LETTERS],
                EXCLUSIONS: per_shard[EXCLUSIONS], **trained}


def shard_by_instance(table, num_shards: int, spill_to):
    """(instance shard, the table's rows of that shard, or a Spilled reference to them as
    `spill_to` says) pairs."""
    keys = table.column("instance_id")
    return spill.split_spilled(table, sharding.shard_of_strings(keys, num_shards), spill_to)


def to_shards(value, num_shards: int):
    """(shard, value) for every shard: a value every shard's grouping receives."""
    return ((shard, value) for shard in range(num_shards))


def to_one_key(value):
    return None, value
