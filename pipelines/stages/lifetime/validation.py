"""Validation of the lifetime stage's config (LifetimeModelConfig), by field path."""



from predictors.lifetime.registry import (
    validate_models,
)


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
