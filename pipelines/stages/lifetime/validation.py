"""Validation of the lifetime stage's config (LifetimeModelConfig), by field path."""

import math
import re
from typing import Optional, Tuple

from configs.checks import MAX_DURATION, Limit
from predictors.lifetime.feature_names import FEATURES
from predictors.lifetime.registry import (
    validate_models,
)

# A variant's name is a folder of its model files and a value in the tables.
VARIANT_NAME = re.compile(r"^[a-z0-9_]+$")

# Each instance gives this many training examples (a row of every feature) per age or
# fraction: 100 makes the examples 100 times the instances.
MAX_EXAMPLES_PER_INSTANCE = Limit(100, "examples per instance",
                                  "the training examples are this many times the instances")
# The training step holds its sample of instances in one worker (~3 kB each, measured on
# the cell-day: rows, frames, examples, LightGBM's data and the evaluation).
MAX_TRAINING_INSTANCES = Limit(20_000_000, "instances",
                               "twice a Google 2019 cell-month's; one worker trains on them",
                               bytes_each=3_000)
# Each quantile repredicts every finished test instance once.
MAX_UPTIME_QUANTILES = Limit(1_000, "quantiles",
                             "each repredicts every finished test instance once")


def validate_config(check, config, field: str = "lifetime_model",
                    trace_end: Optional[Tuple[int, str]] = None):
    """Checks a LifetimeModelConfig, reporting through `check` (configs/checks.py) under
    `field`: the stage's own fields (examples, split, evaluation) here, each model's fields
    through its registry entry (`validate_models`); `trace_end` is (µs, what it is) after
    which the trace holds no arrival, when that is known before the run
    (pipelines/config.py `trace_end`)."""
    for name in ("lifetime_cap_s", "min_remaining_s", "long_lived_threshold_s",
                 "long_lived_decision_s"):
        check.duration(config, name, field)
    check.positive(config, "min_category_count", field)
    check.positive(config, "uptime_examples_per_instance", field,
                   maximum=MAX_EXAMPLES_PER_INSTANCE)
    check.positive(config, "num_uptime_quantiles", field, maximum=MAX_UPTIME_QUANTILES)
    check.positive(config, "num_shards", field)
    check.positive(config, "max_training_instances", field, maximum=MAX_TRAINING_INSTANCES)
    for name in ("split_time_us", "trace_start_us"):
        check.trace_time(config, name, field)
    check.require(math.isfinite(config.time_origin_s), f"{field}.time_origin_s",
                  f"must be finite, got {config.time_origin_s}")
    check.require(0 < config.train_fraction < 1, f"{field}.train_fraction",
                  f"must be in (0, 1), got {config.train_fraction}")
    if config.HasField("split_time_us"):
        _validate_split_time(check, config, f"{field}.split_time_us", trace_end)
    check.require(config.min_remaining_s <= config.lifetime_cap_s, f"{field}.min_remaining_s",
                  f"must not exceed lifetime_cap_s {config.lifetime_cap_s}, got "
                  f"{config.min_remaining_s}")
    check.require(config.augmentation != config.AUGMENTATION_UNSPECIFIED,
                  f"{field}.augmentation", "must be ABSOLUTE_AGES or LIFETIME_FRACTIONS")
    check.require(len(config.uptime_age_s) <= MAX_EXAMPLES_PER_INSTANCE.maximum,
                  f"{field}.uptime_age_s", f"must hold at most "
                  f"{MAX_EXAMPLES_PER_INSTANCE.maximum:,} ages (each gives an example of every "
                  f"instance alive then), got {len(config.uptime_age_s):,}")
    for i, age_s in enumerate(config.uptime_age_s):
        check.require(0 <= age_s <= MAX_DURATION.maximum, f"{field}.uptime_age_s[{i}]",
                      f"must be in [0, {MAX_DURATION.maximum:,.0f}] s (10 years), got {age_s}")
    check.require(0 < config.long_lived_target_recall <= 1,
                  f"{field}.long_lived_target_recall",
                  f"must be in (0, 1], got {config.long_lived_target_recall}")
    check.duration(config, "evaluation_period_s", field)
    check.require(config.censoring != config.CENSORING_UNSPECIFIED, f"{field}.censoring",
                  "must be LABELLED_ONLY or INVERSE_PROBABILITY_WEIGHTS")
    check.require(0 < config.min_observation_probability <= 1,
                  f"{field}.min_observation_probability",
                  f"must be in (0, 1], got {config.min_observation_probability}")
    _validate_variants(check, config, field)
    _check_named_once(check, config.feature, field)
    validate_models(check, config, field)
    if config.HasField("examples"):
        which = config.examples.WhichOneof("load_or_write")
        if which == "output":
            check.location(config.examples.output, f"{field}.examples.output")
        else:
            check.fail(f"{field}.examples", "only output is supported: examples are derived "
                       "from the instances (load the instances table instead)")


def _validate_split_time(check, config, field: str, trace_end: Optional[Tuple[int, str]]):
    """A split that leaves instances on both sides, where the config alone can tell: the
    training instances start after trace_start_us and before the split, the test ones from
    the split to the trace's end."""
    split_us = config.split_time_us
    check.require(split_us > config.trace_start_us, field,
                  f"must be after trace_start_us {config.trace_start_us} (the instances "
                  f"starting at or before it have no known lifetime), or no instance is left "
                  f"to train on; got {split_us}")
    if trace_end is not None:
        end_us, what = trace_end
        check.require(split_us < end_us, field, f"must be before {what} at {end_us} µs, or "
                      f"no instance is left to test on; got {split_us}")


def _validate_variants(check, config, field: str):
    known = [name for name, _, _ in FEATURES]
    check.require(not (config.variant and config.feature), f"{field}.feature",
                  "is the features without variants: with `variant`, give each variant's "
                  "features in it")
    names = [variant.name for variant in config.variant]
    for i, variant in enumerate(config.variant):
        where = f"{field}.variant[{i}]"
        check.require(VARIANT_NAME.match(variant.name) is not None, f"{where}.name",
                      f"must be a plain name of a-z, 0-9 and '_', got {variant.name!r}")
        check.require(names.count(variant.name) == 1, f"{where}.name",
                      f"names another variant too: {variant.name!r}")
        for j, name in enumerate(variant.feature):
            check.require(name in known, f"{where}.feature[{j}]",
                          f"unknown feature {name!r}; known: {', '.join(known)}")
        _check_named_once(check, variant.feature, where)


def _check_named_once(check, features, field: str):
    """Each feature of `features` (the `feature` list under `field`) named once: a model
    takes each feature as one column."""
    features = list(features)
    for j, name in enumerate(features):
        first = features.index(name)
        check.require(first == j, f"{field}.feature[{j}]",
                      f"names {name!r} a second time (first at feature[{first}]): a model "
                      "takes each feature once")
