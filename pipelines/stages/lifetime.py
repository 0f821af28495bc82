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
give examples only where their label is known (predictors/lifetime_examples.py).

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
from pipelines.io.dead_letters import DEAD_LETTERS, SplitByTag, dead_letter_table
from pipelines.io.sinks import WriteTable
from predictors.lifetime.kaplan_meier import DEFAULT_STRATUM_FEATURES, KaplanMeierLifetimeModel
from predictors.lifetime.la_classifier import LaClassifier
from predictors.lifetime.evaluation import DEFAULT_RECALLS, concordance_table, \
    error_histogram, f1_by_uptime, la_classifier_metrics, long_lived_metrics, \
    predict_at_uptime_quantiles
from predictors.lifetime.examples import TimeSplit, label_known, long_lived_labels, \
    make_uptime_examples, observed_lifetimes, reject_invalid_lifetimes, split_time_of_span, \
    started_before_trace, time_split
from predictors.lifetime.features import REASON_NO_FEATURES, lacks_feature_values
from predictors.lifetime.model_files import FORMAT_VERSION, METADATA_FILE, ModelFiles
from predictors.lifetime.uptime_model import UptimeLifetimeModel

SOURCE = "lifetime"
EXAMPLES = "lifetime_examples"
UPTIME, NO_UPTIME, KAPLAN_MEIER, LA_CLASSIFIER = (
    "uptime", "no_uptime", "kaplan_meier", "la_classifier")
TRAINING_TABLES = ("lifetime_split", "lifetime_models", "lifetime_long_lived",
                   "lifetime_la_classifier", "lifetime_f1_by_uptime",
                   "lifetime_error_histogram", "lifetime_concordance")
MODEL_CLASSES = {cls.KIND: cls
                 for cls in (UptimeLifetimeModel, LaClassifier, KaplanMeierLifetimeModel)}

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


def examples_of(instances: pd.DataFrame, observation_end_us: int, config):
    """Uptime-augmented examples of valid instances observed until `observation_end_us`."""
    examples, _ = make_uptime_examples(
        instances, cap_s=float(config.lifetime_cap_s),
        uptime_fractions=uptime_fractions(config), min_remaining_s=config.min_remaining_s,
        observation_end_us=observation_end_us)
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
    rows = pa.Table.from_pandas(columns, schema=schema, preserve_index=False).to_pylist()
    return dead_letter_table(SOURCE, "instances", rejected["reason"].tolist(),
                             [json.dumps(row) for row in rows])


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


def uptime_model(config, use_uptime: bool) -> UptimeLifetimeModel:
    return UptimeLifetimeModel(
        num_trees=config.num_trees, num_leaves=config.num_leaves,
        learning_rate=config.learning_rate, min_data_in_leaf=config.min_data_in_leaf,
        validation_fraction=config.validation_fraction,
        early_stopping_rounds=config.early_stopping_rounds,
        uptime_max_bin=config.uptime_max_bin, seed=config.seed,
        num_threads=config.num_threads, use_uptime=use_uptime,
        min_category_count=config.min_category_count,
        features=list(config.feature) or None, time_origin_s=config.time_origin_s)


def la_classifier(config) -> LaClassifier:
    return LaClassifier(
        threshold_s=float(config.la_threshold_s), num_trees=config.num_trees,
        num_leaves=config.num_leaves, learning_rate=config.learning_rate,
        min_data_in_leaf=config.min_data_in_leaf,
        validation_fraction=config.validation_fraction,
        early_stopping_rounds=config.early_stopping_rounds,
        target_recall=config.la_target_recall or None,
        decision_probability=config.la_decision_probability, seed=config.seed,
        num_threads=config.num_threads, min_category_count=config.min_category_count,
        features=list(config.feature) or None, time_origin_s=config.time_origin_s)


def kaplan_meier(config) -> KaplanMeierLifetimeModel:
    return KaplanMeierLifetimeModel(
        stratum_features=list(config.kaplan_meier_stratum_feature) or DEFAULT_STRATUM_FEATURES,
        min_stratum_count=config.min_category_count, cap_s=float(config.lifetime_cap_s),
        min_remaining_s=config.min_remaining_s, time_origin_s=config.time_origin_s)


def fit_models(split: TimeSplit, config) -> Dict[str, Tuple[object, int, int]]:
    """The configured models fitted on the training part:
    {name: (model, training instances, rows fit on)}."""
    split_time_us = split.split_time_us
    labeled = regression_instances(split, config)
    examples = examples_of(labeled, split_time_us, config)
    models = {UPTIME: (uptime_model(config, True).fit(examples), len(labeled), len(examples))}
    if config.train_no_uptime_ablation:
        models[NO_UPTIME] = (uptime_model(config, False).fit(examples), len(labeled),
                             int(np.count_nonzero(examples.uptime_s == 0)))
    if config.train_kaplan_meier:
        models[KAPLAN_MEIER] = (kaplan_meier(config).fit(split.train, split_time_us),
                                len(split.train), len(split.train))
    if config.train_la_classifier:
        threshold_s = float(config.la_threshold_s)
        la_train = split.train[label_known(split.train, split_time_us, threshold_s)]
        _, known = long_lived_labels(*observed_lifetimes(la_train, split_time_us), threshold_s)
        models[LA_CLASSIFIER] = (la_classifier(config).fit(la_train, split_time_us),
                                 len(la_train), int(known.sum()))
    return models


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
    if kind not in MODEL_CLASSES:
        raise ValueError(f"{path} holds a model of unknown kind {kind!r}; known: "
                         f"{sorted(MODEL_CLASSES)}")
    return MODEL_CLASSES[kind].from_files(files)


def _model_row(name: str, model, path: str, train_instances: int, rows_fit_on: int,
               split_time_us: int) -> dict:
    booster = getattr(model, "booster", None)
    return {"name": name, "kind": model.KIND, "path": path,
            "features": list(model.feature_names), "train_instances": train_instances,
            "train_examples": rows_fit_on,
            "num_trees": None if booster is None else booster.num_trees(),
            "split_time_us": split_time_us, "format_version": FORMAT_VERSION}


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


def evaluate(models: Mapping[str, object], split: TimeSplit, config
             ) -> Dict[str, pd.DataFrame]:
    """The evaluation tables of the fitted models on the test part, by table name."""
    test, observation_end_us = split.test, split.observation_end_us
    regressors = {name: m for name, m in models.items() if name != LA_CLASSIFIER}
    threshold_s = float(config.long_lived_threshold_s)
    decision_s = float(config.long_lived_decision_s)
    long_lived, f1, histogram = [], [], []
    for name, model in regressors.items():
        long_lived.append(long_lived_metrics(
            model, test, observation_end_us=observation_end_us, threshold_s=threshold_s,
            decision_threshold_s=decision_s, recalls=DEFAULT_RECALLS).assign(model=name))
        predictions = predict_at_uptime_quantiles(
            model, test, n_quantiles=config.num_uptime_quantiles,
            observation_end_us=observation_end_us)
        f1.append(f1_by_uptime(*predictions, threshold_s=threshold_s,
                               decision_threshold_s=decision_s).assign(model=name))
        histogram.append(error_histogram(
            *predictions, cap_s=float(config.lifetime_cap_s),
            min_remaining_s=config.min_remaining_s).assign(model=name))
    tables = {
        "lifetime_long_lived": pd.concat(long_lived, ignore_index=True),
        "lifetime_f1_by_uptime": pd.concat(f1, ignore_index=True),
        "lifetime_error_histogram": pd.concat(histogram, ignore_index=True),
        "lifetime_concordance": concordance_table(
            models, test, observation_end_us=observation_end_us,
            cap_s=float(config.lifetime_cap_s)),
    }
    if LA_CLASSIFIER in models:
        tables["lifetime_la_classifier"] = la_classifier_metrics(
            models[LA_CLASSIFIER], test, observation_end_us=observation_end_us,
            recalls=DEFAULT_RECALLS).assign(model=LA_CLASSIFIER)
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
    model_rows = []
    for name, (model, train_instances, rows_fit_on) in fitted.items():
        path = FileSystems.join(model_dir, name)
        write_model_files(path, model.to_files())
        model_rows.append(_model_row(name, model, path, train_instances, rows_fit_on,
                                     split.split_time_us))
    frames = evaluate({name: model for name, (model, _, _) in fitted.items()}, split, config)
    frames["lifetime_models"] = pd.DataFrame(model_rows)
    frames["lifetime_split"] = split_counts(split, parts.before_trace, config)
    for name, frame in frames.items():
        yield name, pa.Table.from_pandas(frame, schema=schemas.TABLES[name],
                                         preserve_index=False)


def _shard_by_instance(table: pa.Table, num_shards: int):
    return sharding.split_table(
        table, sharding.shard_of_strings(table.column("instance_id"), num_shards))


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
                 | "ShardByInstance" >> beam.FlatMap(_shard_by_instance, num_shards),
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
