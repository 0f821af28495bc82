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
directory) reads them without the pipeline.
"""

import json
from typing import Dict, Iterable, Mapping, NamedTuple, Optional, Tuple

import apache_beam as beam
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines import schemas
from pipelines.io import sharding
from pipelines.io.dead_letters import DEAD_LETTERS, SplitByTag, rows_as_dead_letters
from pipelines.io.sinks import WriteTable
from predictors.lifetime.base import METADATA_FILE, ModelFiles
from predictors.lifetime.boosting import time_validation_mask
from predictors.lifetime.evaluation import (
    DEFAULT_RECALLS,
    concordance_table,
    decision_thresholds_at_recall,
    error_histogram,
    f1_by_uptime,
    la_classifier_metrics,
    long_lived_by_age,
    long_lived_metrics,
    predict_at_uptime_quantiles,
)
from predictors.lifetime.examples import (
    LIFETIME_FRACTIONS,
    TimeSplit,
    default_uptime_ages_s,
    label_known,
    make_examples,
    reject_invalid_lifetimes,
    split_time_of_span,
    started_before_trace,
    time_split,
)
from predictors.lifetime.features import REASON_NO_FEATURES, lacks_feature_values
from predictors.lifetime.registry import (
    LIFETIME_MODELS,
    LONG_LIVED,
    REMAINING_LIFETIME,
    FittedModel,
    TrainingData,
    model_classes,
    validate_models,
)

SOURCE = "lifetime"
EXAMPLES = "lifetime_examples"
TRAINING_TABLES = ("lifetime_split", "lifetime_models", "lifetime_long_lived",
                   "lifetime_la_classifier", "lifetime_f1_by_age", "lifetime_f1_by_uptime",
                   "lifetime_error_histogram", "lifetime_concordance")

# (first start after the trace start, latest start or end time) in µs; None without rows.
Span = Tuple[Optional[int], Optional[int]]


class PartitionedInstances(NamedTuple):
    """Instances sorted for the lifetime stage.

    used: valid instances that started in the trace (index 0..n-1).
    before_trace: valid instances already running when the trace began.
    rejected: the other rows, with a `reason` column (dead letters).
    """

    used: pd.DataFrame
    before_trace: pd.DataFrame
    rejected: pd.DataFrame


def partition_instances(instances: pd.DataFrame, trace_start_us: int) -> PartitionedInstances:
    """Sorts rows of the `instances` table (see the module docstring)."""
    valid, rejected = reject_invalid_lifetimes(instances)
    lacking = lacks_feature_values(valid)
    rejected = pd.concat([rejected, valid[lacking].assign(reason=REASON_NO_FEATURES)],
                         ignore_index=True)
    valid = valid[~lacking]
    before = started_before_trace(valid, trace_start_us)
    return PartitionedInstances(used=valid[~before].reset_index(drop=True),
                                before_trace=valid[before].reset_index(drop=True),
                                rejected=rejected)


def trace_span(instances: pa.Table, trace_start_us: int) -> Span:
    """The span of the rows of `instances` (see `Span`): every time in the table is one the
    trace saw, so the latest is a safe lower bound of the trace end for censoring."""
    start = instances.column("start_time")
    after_start = pc.filter(start, pc.greater(start, trace_start_us))
    first = pc.min(after_start).as_py() if len(after_start) else None
    latest = [pc.max(instances.column(c)).as_py() for c in ("start_time", "end_time")]
    latest = [t for t in latest if t is not None]
    return first, (max(latest) if latest else None)


def merge_spans(spans: Iterable[Span]) -> Span:
    spans = list(spans)
    firsts = [first for first, _ in spans if first is not None]
    ends = [end for _, end in spans if end is not None]
    return (min(firsts) if firsts else None), (max(ends) if ends else None)


def split_of_span(config, span: Span) -> Tuple[int, int]:
    """(split time, observation end) in µs of a trace with `span`."""
    first_start_us, observation_end_us = span
    if config.HasField("split_time_us"):
        return config.split_time_us, observation_end_us
    return split_time_of_span(first_start_us, observation_end_us,
                              config.train_fraction), observation_end_us


def split_instances(used: pd.DataFrame, config, span: Span) -> TimeSplit:
    split_time_us, observation_end_us = split_of_span(config, span)
    return time_split(used, split_time_us, observation_end_us)


def uptime_fractions(config) -> Tuple[float, ...]:
    n = config.uptime_examples_per_instance
    return tuple(i / n for i in range(n))


def augmentation_of(config) -> str:
    """The config's augmentation scheme by name (ABSOLUTE_AGES, LIFETIME_FRACTIONS)."""
    return config.Augmentation.Name(config.augmentation)


def uptime_ages_s(config) -> Tuple[float, ...]:
    """The absolute ages (s) of the examples and of the F1-by-age evaluation, 0 first."""
    ages = (list(config.uptime_age_s)
            or list(default_uptime_ages_s(float(config.lifetime_cap_s))))
    return tuple(float(a) for a in np.unique(np.r_[0.0, ages]))


def examples_of(instances: pd.DataFrame, observation_end_us: int, config,
                augmentation: Optional[str] = None):
    """Uptime-augmented examples of valid instances observed until `observation_end_us`,
    in `augmentation` (default: the config's)."""
    augmentation = augmentation or augmentation_of(config)
    scheme = ({"uptime_fractions": uptime_fractions(config)}
              if augmentation == LIFETIME_FRACTIONS else {"uptime_ages_s": uptime_ages_s(config)})
    examples, _ = make_examples(
        instances, augmentation, cap_s=float(config.lifetime_cap_s),
        min_remaining_s=config.min_remaining_s, observation_end_us=observation_end_us,
        **scheme)
    return examples


def regression_mask(split: TimeSplit, config) -> np.ndarray:
    """Bool over split.train: the instances the regressors learn from (module docstring)."""
    return label_known(split.train, split.split_time_us, float(config.lifetime_cap_s))


def regression_instances(split: TimeSplit, config) -> pd.DataFrame:
    return split.train[regression_mask(split, config)].reset_index(drop=True)


def examples_table(split: TimeSplit, config) -> pa.Table:
    """The LIFETIME_EXAMPLES rows of a split, each observed as the models see it: the
    regressors' training instances until the split time, test instances until the trace
    end."""
    frames = []
    for name, instances, observation_end_us in (
            ("train", regression_instances(split, config), split.split_time_us),
            ("test", split.test, split.observation_end_us)):
        frame = examples_of(instances, observation_end_us, config).to_frame()
        frames.append(frame.assign(split=name))
    return pa.Table.from_pandas(pd.concat(frames, ignore_index=True),
                                schema=schemas.LIFETIME_EXAMPLES, preserve_index=False)


def dead_letters_of(rejected: pd.DataFrame) -> pa.Table:
    """DEAD_LETTERS rows of rejected instances, the raw row as JSON in the INSTANCES types
    (through Arrow, so that integer columns pandas holds as float read as integers again)."""
    columns = rejected.drop(columns="reason")
    schema = pa.schema([(name, schemas.INSTANCES.field(name).type) for name in columns])
    return rows_as_dead_letters(
        SOURCE, "instances", pa.Table.from_pandas(columns, schema=schema, preserve_index=False),
        rejected["reason"].tolist())


def shard_examples(element, config):
    """(shard, {instances, span}) → (tag, table) pairs: the shard's examples and dead
    letters."""
    _, grouped = element
    instances = sharding.concat(grouped["instances"], schemas.INSTANCES)
    if not instances.num_rows:
        return
    parts = partition_instances(instances.to_pandas(), config.trace_start_us)
    if len(parts.rejected):
        yield DEAD_LETTERS, dead_letters_of(parts.rejected)
    if not len(parts.used):
        return
    (span,) = list(grouped["span"])
    examples = examples_table(split_instances(parts.used, config, span), config)
    if examples.num_rows:
        yield EXAMPLES, examples


def fit_models(split: TimeSplit, config) -> Dict[str, FittedModel]:
    """The models the config asks for (registry order), fitted on the training part."""
    labeled = regression_instances(split, config)
    data = TrainingData(split, labeled, examples_of(labeled, split.split_time_us, config),
                        lambda augmentation: examples_of(labeled, split.split_time_us, config,
                                                         augmentation))
    fitted = {}
    for name in LIFETIME_MODELS:
        entry = LIFETIME_MODELS[name]
        if entry.enabled(config):
            fitted[name] = entry.fit(entry.build(config), data, config)
    return fitted


def write_model_files(path: str, files: Mapping[str, bytes]) -> None:
    """Writes a model's files into the directory `path` (any file system Beam knows)."""
    for name, content in files.items():
        with FileSystems.create(FileSystems.join(path, name),
                                compression_type=CompressionTypes.UNCOMPRESSED) as f:
            f.write(content)


def read_model_files(path: str) -> ModelFiles:
    """Every file of the model directory `path`, by name."""
    matches = FileSystems.match([FileSystems.join(path, "*")])[0].metadata_list
    files = {}
    for match in matches:
        with FileSystems.open(match.path,
                              compression_type=CompressionTypes.UNCOMPRESSED) as f:
            files[FileSystems.split(match.path)[1]] = f.read()
    return files


def load_model(path: str):
    """The lifetime model saved in the directory `path` (a `path` of `lifetime_models`),
    of the class its metadata names; local or on any file system Beam knows."""
    files = read_model_files(path)
    if METADATA_FILE not in files:
        raise ValueError(f"no lifetime model at {path}: {METADATA_FILE} is missing")
    kind = json.loads(files[METADATA_FILE].decode("utf-8")).get("kind")
    classes = model_classes()
    if kind not in classes:
        raise ValueError(f"{path} holds a model of unknown kind {kind!r}; known: "
                         f"{sorted(classes)}")
    return classes[kind].from_files(files)


def save_model(name: str, fitted: FittedModel, model_dir: str, split_time_us: int) -> dict:
    """Writes a fitted model's files into <model_dir>/<name>; returns its LIFETIME_MODELS
    row."""
    path = FileSystems.join(model_dir, name)
    model = fitted.model
    write_model_files(path, model.to_files())
    metadata = model.metadata()
    return {"name": name, "kind": metadata["kind"], "path": path,
            "augmentation": metadata.get("augmentation"),
            "features": list(model.feature_names), "train_instances": fitted.train_instances,
            "train_examples": fitted.rows_fit_on,
            "num_trees": metadata.get("num_trees_trained"),
            "split_time_us": split_time_us, "format_version": metadata["format_version"]}


def split_counts(split: TimeSplit, before_trace: pd.DataFrame, config) -> pd.DataFrame:
    """The LIFETIME_SPLIT rows: "train" (the regressors' training instances), "train_recent"
    (the other training-period instances: no examples), "test", "started_before_trace"."""
    labeled = regression_mask(split, config)
    rows = []
    for name, instances, observation_end_us, examples in (
            ("train", split.train[labeled], split.split_time_us, True),
            ("train_recent", split.train[~labeled], split.split_time_us, False),
            ("test", split.test, split.observation_end_us, True),
            ("started_before_trace", before_trace, None, False)):
        finished = int(instances["end_time"].notna().sum())
        rows.append({
            "split": name, "instances": len(instances), "finished": finished,
            "censored": len(instances) - finished,
            "examples": len(examples_of(instances, observation_end_us, config)) if examples
            else 0,
            "split_time_us": split.split_time_us, "observation_end_us": observation_end_us})
    return pd.DataFrame(rows)


def validation_instances(split: TimeSplit, config) -> pd.DataFrame:
    """The slice of the training period that sets the regressors' long-lived decisions: the
    latest-starting `validation_fraction` of their training instances (all of them when that
    slice is empty), observed until the split time. Early stopping holds out about the same
    VMs (the examples of the latest-starting validation_fraction of the examples); with early
    stopping off the decisions are set on VMs the model trained on."""
    labeled = regression_instances(split, config)
    held_out = time_validation_mask(labeled["start_time"].to_numpy(np.float64),
                                    config.validation_fraction)
    return labeled[held_out] if held_out.any() else labeled


def long_lived_decisions(model, validation: pd.DataFrame, split: TimeSplit, config,
                         ages_s) -> Tuple[np.ndarray, float]:
    """(decision at each age as a predicted lifetime in s, target recall): the explicit
    `long_lived_decision_s` (target NaN), else chosen on the validation slice."""
    if config.HasField("long_lived_decision_s"):
        return np.full(len(ages_s), float(config.long_lived_decision_s)), float("nan")
    target = config.long_lived_target_recall
    return decision_thresholds_at_recall(
        model, validation, ages_s, target_recall=target,
        observation_end_us=split.split_time_us,
        threshold_s=float(config.long_lived_threshold_s)), float(target)


def evaluate_remaining_lifetime(model, split: TimeSplit, config, validation: pd.DataFrame
                                ) -> Dict[str, pd.DataFrame]:
    """The tables of a remaining-lifetime model on the test part: long-lived classification
    at arrival and by absolute age (decisions from the validation slice), F1 by uptime
    quantile and the |log10 error| histogram (uptime quantiles of the true lifetime)."""
    test, observation_end_us = split.test, split.observation_end_us
    threshold_s = float(config.long_lived_threshold_s)
    ages_s = uptime_ages_s(config)
    decisions_s, target_recall = long_lived_decisions(model, validation, split, config, ages_s)
    # The quantile view has no decision of its own: the explicit one, else the threshold.
    quantile_decision_s = (float(config.long_lived_decision_s)
                           if config.HasField("long_lived_decision_s") else threshold_s)
    predictions = predict_at_uptime_quantiles(
        model, test, n_quantiles=config.num_uptime_quantiles,
        observation_end_us=observation_end_us)
    scheme = {"augmentation": getattr(model, "augmentation_", None)}
    return {
        "lifetime_long_lived": long_lived_metrics(
            model, test, observation_end_us=observation_end_us, threshold_s=threshold_s,
            decision_threshold_s=decisions_s[0], recalls=DEFAULT_RECALLS).assign(
                target_recall=target_recall, **scheme),
        "lifetime_f1_by_age": long_lived_by_age(
            model, test, ages_s, decisions_s, observation_end_us=observation_end_us,
            threshold_s=threshold_s, recalls=(0.70,)).assign(
                target_recall=target_recall, **scheme),
        "lifetime_f1_by_uptime": f1_by_uptime(
            *predictions, threshold_s=threshold_s,
            decision_threshold_s=quantile_decision_s).assign(**scheme),
        "lifetime_error_histogram": error_histogram(
            *predictions, cap_s=float(config.lifetime_cap_s),
            min_remaining_s=config.min_remaining_s).assign(**scheme),
    }


def evaluate_long_lived(model, split: TimeSplit, config, validation: pd.DataFrame
                        ) -> Dict[str, pd.DataFrame]:
    """The table of a long-lived classifier on the test part (003 Tables 1, 3); its
    decision probability was set at fit time (`LaClassifier.target_recall`)."""
    target = model.target_recall
    return {"lifetime_la_classifier": la_classifier_metrics(
        model, split.test, observation_end_us=split.observation_end_us,
        recalls=DEFAULT_RECALLS).assign(
            target_recall=float("nan") if target is None else float(target))}


# What each kind of model is evaluated with (by the registry entry's `predicts`).
EVALUATIONS = {REMAINING_LIFETIME: evaluate_remaining_lifetime,
               LONG_LIVED: evaluate_long_lived}


def evaluate(models: Mapping[str, object], split: TimeSplit, config
             ) -> Dict[str, pd.DataFrame]:
    """The evaluation tables of the fitted models {registry name: model} on the test part,
    by table name; each row names its model."""
    validation = validation_instances(split, config)
    parts: Dict[str, list] = {}
    for name, model in models.items():
        evaluation = EVALUATIONS[LIFETIME_MODELS[name].predicts]
        for table, frame in evaluation(model, split, config, validation).items():
            parts.setdefault(table, []).append(frame.assign(model=name))
    tables = {table: pd.concat(frames, ignore_index=True) for table, frames in parts.items()}
    tables["lifetime_concordance"] = concordance_table(
        models, split.test, observation_end_us=split.observation_end_us,
        cap_s=float(config.lifetime_cap_s))
    return tables


def train_and_evaluate(element, config, model_dir: str):
    """(key, all instance tables) → (table name, Arrow table) pairs of TRAINING_TABLES.

    Raises:
      ValueError: no instance to train on or to test on, with the split that caused it.
    """
    _, tables = element
    # In a fixed order: runners deliver the tables in any order, and LightGBM's histogram
    # bins come from a sample of rows that depends on it.
    instances = sharding.concat(tables, schemas.INSTANCES).sort_by(
        [("start_time", "ascending"), ("instance_id", "ascending")])
    parts = partition_instances(instances.to_pandas(), config.trace_start_us)
    if not len(parts.used):
        raise ValueError(f"lifetime stage: no usable instance ({instances.num_rows} read, "
                         f"{len(parts.rejected)} rejected, {len(parts.before_trace)} started "
                         "before the trace)")
    split = split_instances(parts.used, config, trace_span(instances, config.trace_start_us))
    for name, part in (("training", split.train), ("test", split.test)):
        if not len(part):
            raise ValueError(f"lifetime stage: no {name} instance with the split at "
                             f"{split.split_time_us} µs (instances start from "
                             f"{parts.used['start_time'].min()} µs to "
                             f"{parts.used['start_time'].max()} µs); change train_fraction "
                             "or split_time_us")
    if not len(regression_instances(split, config)):
        raise ValueError(f"lifetime stage: no training instance started lifetime_cap_s "
                         f"({config.lifetime_cap_s} s) before the split at "
                         f"{split.split_time_us} µs, so no label is known; lower "
                         "lifetime_cap_s or raise train_fraction")
    fitted = fit_models(split, config)
    model_rows = [save_model(name, f, model_dir, split.split_time_us)
                  for name, f in fitted.items()]
    frames = evaluate({name: f.model for name, f in fitted.items()}, split, config)
    frames["lifetime_models"] = pd.DataFrame(model_rows)
    frames["lifetime_split"] = split_counts(split, parts.before_trace, config)
    for name, frame in frames.items():
        yield name, pa.Table.from_pandas(frame, schema=schemas.TABLES[name],
                                         preserve_index=False)


def validate_config(check, config, field: str = "lifetime_model"):
    """Checks a LifetimeModelConfig, reporting through `check` (configs/checks.py) under
    `field`: the stage's own fields (examples, split, evaluation) here, each model's fields
    through its registry entry (`validate_models`)."""
    for name in ("lifetime_cap_s", "min_category_count", "uptime_examples_per_instance",
                 "min_remaining_s", "long_lived_threshold_s", "long_lived_decision_s",
                 "num_uptime_quantiles", "num_shards"):
        check.positive(config, name, field)
    check.require(0 < config.train_fraction < 1, f"{field}.train_fraction",
                  f"must be in (0, 1), got {config.train_fraction}")
    check.require(config.min_remaining_s <= config.lifetime_cap_s, f"{field}.min_remaining_s",
                  f"must not exceed lifetime_cap_s {config.lifetime_cap_s}, got "
                  f"{config.min_remaining_s}")
    check.require(config.augmentation != config.AUGMENTATION_UNSPECIFIED,
                  f"{field}.augmentation", "must be ABSOLUTE_AGES or LIFETIME_FRACTIONS")
    for i, age_s in enumerate(config.uptime_age_s):
        check.require(0 <= age_s < float("inf"), f"{field}.uptime_age_s[{i}]",
                      f"must be finite and >= 0, got {age_s}")
    check.require(0 < config.long_lived_target_recall <= 1,
                  f"{field}.long_lived_target_recall",
                  f"must be in (0, 1], got {config.long_lived_target_recall}")
    validate_models(check, config, field)
    if config.HasField("examples"):
        which = config.examples.WhichOneof("load_or_write")
        if which == "output":
            check.location(config.examples.output, f"{field}.examples.output")
        else:
            check.fail(f"{field}.examples", "only output is supported: examples are derived "
                       "from the instances (load the instances table instead)")


class LifetimeStage(beam.PTransform):
    """{"instances": PCollection[pa.Table], ...} → {lifetime tables, "dead_letters"}.

    Args:
      config: a LifetimeModelConfig.
      work_dir: the run's output directory; models go to <work_dir>/models unless
        config.model_dir says otherwise.
    """

    def __init__(self, config, work_dir: str):
        super().__init__()
        self._config = config
        self._model_dir = config.model_dir or FileSystems.join(work_dir, "models")

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
