"""Validation of the placement stage's config (PlacementConfig), by field path."""



from pipelines.stages.placement.replays import (
    LAVA_CLASSES,
    LarsOrder,
    LifetimeSpec,
    Policy,
    WarmStart,
    make_policy,
    policy_name,
    policy_names,
)
from policies.registry import PLACEMENT_POLICIES, check_policy_plugin


def validate_config(check, config, lifetime_model=None, has_hosts: bool = True,
                    field: str = "placement"):
    """Checks a PlacementConfig; `lifetime_model` is the run's LifetimeModelConfig (None
    without a lifetime stage), `has_hosts` whether the source gives hosts."""
    names = policy_names(config)
    check.require(len(names) > 0, f"{field}.policy", "names no policy")
    for i, policy in enumerate(config.policy):
        if policy == Policy.POLICY_UNSPECIFIED:
            check.fail(f"{field}.policy[{i}]", "is POLICY_UNSPECIFIED")
        else:
            PLACEMENT_POLICIES[policy_name(policy)].validate(check, config, field)
    for i, plugin in enumerate(config.policy_plugin):
        check_policy_plugin(check, plugin, f"{field}.policy_plugin[{i}]")
        check.require(names.count(plugin.name) == 1, f"{field}.policy_plugin[{i}].name",
                      f"{plugin.name!r} is used twice")
    _validate_lifetime_sources(check, config, lifetime_model, field)
    if not has_hosts or config.HasField("host_shape"):
        check.require(config.HasField("host_shape"), f"{field}.host_shape",
                      "is required: this trace has no hosts")
        if config.HasField("host_shape"):
            check.positive(config.host_shape, "cpu", f"{field}.host_shape")
            check.positive(config.host_shape, "memory", f"{field}.host_shape")
    if config.HasField("host_count"):
        check.positive(config, "host_count", field)
    check.require(0 < config.target_utilization <= 1, f"{field}.target_utilization",
                  f"must be in (0, 1], got {config.target_utilization}")
    check.positive(config, "warmup_s", field, allow_zero=True)
    check.require(config.warm_start != WarmStart.WARM_START_UNSPECIFIED, f"{field}.warm_start",
                  "is WARM_START_UNSPECIFIED")
    check.positive(config, "sample_period_s", field)
    check.positive(config, "refresh_interval_s", field, allow_zero=True)
    if config.HasField("best_fit_weights"):
        check.positive(config.best_fit_weights, "cpu", f"{field}.best_fit_weights")
        check.positive(config.best_fit_weights, "memory", f"{field}.best_fit_weights")
    for name in ("inflation_max_shapes", "inflation_copies_per_round"):
        check.positive(config, name, field)
    check.positive(config, "stranding_every", field, allow_zero=True)
    if config.HasField("start_time_us") and config.HasField("end_time_us"):
        check.require(config.start_time_us <= config.end_time_us, f"{field}.end_time_us",
                      f"is before start_time_us ({config.end_time_us} < "
                      f"{config.start_time_us})")
    if config.HasField("lars"):
        _validate_lars(check, config, f"{field}.lars")


def _validate_lifetime_sources(check, config, lifetime_model, field: str):
    check.require(len(config.lifetime_source) > 0, f"{field}.lifetime_source",
                  "names no lifetime source")
    labels = {}
    for i, lifetime in enumerate(config.lifetime_source):
        which = lifetime.WhichOneof("source")
        check.require(which is not None, f"{field}.lifetime_source[{i}]", "names no source")
        if which == "noisy_oracle_accuracy":
            check.fraction(lifetime, "noisy_oracle_accuracy", f"{field}.lifetime_source[{i}]")
        if lifetime.HasField("noisy_oracle_seed"):
            check.require(which == "noisy_oracle_accuracy",
                          f"{field}.lifetime_source[{i}].noisy_oracle_seed",
                          "is only for a noisy_oracle_accuracy source")
            check.positive(lifetime, "noisy_oracle_seed", f"{field}.lifetime_source[{i}]",
                           allow_zero=True)
        if which is not None:
            # Replays are keyed by the source's label: two sources alike would collide.
            label = LifetimeSpec.of(lifetime).label
            check.require(label not in labels, f"{field}.lifetime_source[{i}]",
                          f"repeats lifetime_source[{labels.get(label)}] ({label})")
            labels.setdefault(label, i)
        if which in ("uptime_model", "one_shot_model", LAVA_CLASSES):
            check.require(lifetime_model is not None, f"{field}.lifetime_source[{i}]",
                          f"{which} needs a lifetime_model stage")
        if which == LAVA_CLASSES:
            if lifetime_model is not None:
                check.require(lifetime_model.train_lava_class_classifiers,
                              f"{field}.lifetime_source[{i}]",
                              f"{which} needs lifetime_model.train_lava_class_classifiers")
            check.require(any(_takes_vm_classes(name, config) for name in policy_names(config)),
                          f"{field}.lifetime_source[{i}]",
                          f"{which} gives LAVA its classes: configure policy LAVA or "
                          "LAVA_STRICT_RECYCLING")
        if which == "one_shot_model" and lifetime_model is not None:
            check.require(lifetime_model.train_la_classifier, f"{field}.lifetime_source[{i}]",
                          "one_shot_model needs lifetime_model.train_la_classifier")


def _takes_vm_classes(name: str, config) -> bool:
    """Whether policy `name` takes VM classes (LAVA); False if it does not build (its own
    checks say why)."""
    try:
        return hasattr(make_policy(name, config), "with_vm_classes")
    except ValueError:
        return False


def _validate_lars(check, config, field: str):
    lars = config.lars
    check.require(len(lars.order) > 0, f"{field}.order", "names no order")
    for i, order in enumerate(lars.order):
        check.require(order != LarsOrder.ORDER_UNSPECIFIED, f"{field}.order[{i}]",
                      "is ORDER_UNSPECIFIED")
    check.require(lars.HasField("empty_hosts_threshold_pct"),
                  f"{field}.empty_hosts_threshold_pct", "is required")
    check.fraction(lars, "empty_hosts_threshold_pct", field, upper=100.0)
    for name in ("max_inflight", "migration_duration_s", "max_draining_hosts",
                 "check_period_s", "baseline_seeds"):
        check.positive(lars, name, field)
    for i, policy in enumerate(lars.policy):
        check.require(policy in config.policy, f"{field}.policy[{i}]",
                      "is not one of placement.policy")
