"""The lifetime stage's instances and examples: partition (dead letters, before-trace
instances), the trace span and time split, and the uptime-augmented examples per shard."""

from typing import Iterable, NamedTuple, Optional, Tuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipelines import schemas
from pipelines.io import sharding, spill
from pipelines.io.dead_letters import left_out
from pipelines.stages.lifetime import sampling
from predictors.lifetime.examples import (
    LIFETIME_FRACTIONS,
    REASON_ZERO_LIFETIME,
    TimeSplit,
    censoring_weighted,
    default_uptime_ages_s,
    label_known,
    make_examples,
    reject_invalid_lifetimes,
    split_time_of_span,
    started_before_trace,
    time_split,
)
from predictors.lifetime.features import REASON_NO_FEATURES, lacks_feature_values

SOURCE = "lifetime"
# Valid rows the models cannot learn from; a negative lifetime or no start is a dead letter.
EXCLUDED = frozenset((REASON_ZERO_LIFETIME, REASON_NO_FEATURES))
EXAMPLES = "lifetime_examples"


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


def labelled_mask(split: TimeSplit, config) -> np.ndarray:
    """Bool over split.train: the instances whose every label up to the cap the split shows
    (started at least lifetime_cap_s before it)."""
    return label_known(split.train, split.split_time_us, float(config.lifetime_cap_s))


def censoring_weights(config) -> bool:
    """Whether the regressors learn from every training instance, with censoring weights."""
    return config.censoring == config.INVERSE_PROBABILITY_WEIGHTS


def regression_mask(split: TimeSplit, config) -> np.ndarray:
    """Bool over split.train: the instances the regressors learn from: the labelled ones,
    or every one with censoring weights (`training_examples`)."""
    if censoring_weights(config):
        return np.ones(len(split.train), dtype=bool)
    return labelled_mask(split, config)


def regression_instances(split: TimeSplit, config) -> pd.DataFrame:
    return split.train[regression_mask(split, config)].reset_index(drop=True)


def training_examples(labeled: pd.DataFrame, split: TimeSplit, config,
                      augmentation: Optional[str] = None):
    """The regressors' examples of their training instances `labeled`, observed until the
    split, weighted for censoring when the config says so (`censoring_weighted`, over every
    arrival of the training period)."""
    examples = examples_of(labeled, split.split_time_us, config, augmentation)
    if not censoring_weights(config):
        return examples
    return censoring_weighted(examples, split.train["start_time"].to_numpy(np.int64),
                              split.split_time_us, config.min_observation_probability)


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


def left_out_rows(rejected: pd.DataFrame):
    """(tag, value) pairs of the instances the lifetime stage leaves out: a zero lifetime or
    no feature value as exclusions (EXCLUDED), the rest as dead letters, their raw rows as
    JSON in the INSTANCES types (through Arrow, so that integer columns pandas holds as
    float read as integers again)."""
    columns = rejected.drop(columns="reason")
    schema = pa.schema([(name, schemas.INSTANCES.field(name).type) for name in columns])
    return left_out(
        SOURCE, "instances", pa.Table.from_pandas(columns, schema=schema, preserve_index=False),
        rejected["reason"].tolist(), EXCLUDED)


def shard_examples(element, config, spill_to=None):
    """(shard, {instances, span, cut}) → (tag, value) pairs: the shard's examples and dead
    letters (tables), and its rows in the training sample (SAMPLED: a table, or a Spilled
    reference to one as `spill_to` says; `sampling.py`)."""
    _, grouped = element
    instances = sharding.concat(map(spill.load, grouped["instances"]), schemas.INSTANCES)
    if not instances.num_rows:
        return
    (cut,) = list(grouped["cut"])
    in_sample = sampling.sampled(instances, cut, config.seed)
    if in_sample.num_rows:
        yield sampling.SAMPLED, spill.spilled(in_sample, spill_to)
    parts = partition_instances(instances.to_pandas(), config.trace_start_us)
    if len(parts.rejected):
        yield from left_out_rows(parts.rejected)
    if not len(parts.used):
        return
    (span,) = list(grouped["span"])
    examples = examples_table(split_instances(parts.used, config, span), config)
    if examples.num_rows:
        yield EXAMPLES, examples
