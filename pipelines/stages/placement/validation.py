"""Validation of the placement stage's config (PlacementConfig), by field path."""

from configs.checks import MAX_DURATION, Limit
from pipelines.stages.placement.specs import (
    LAVA_CLASSES,
    REQUESTS,
    LarsOrder,
    LifetimeSpec,
    Policy,
    WarmStart,
    make_policy,
    policy_name,
    policy_names,
    unsupported_admission,
)
from policies.registry import PLACEMENT_POLICIES, check_policy_plugin

# 8 x a Google 2019 cell (~12,000 machines): every host is a row of each replay's host
# table, which the policies scan.
MAX_HOSTS = Limit(100_000, "hosts", "8 x a Google 2019 cell; each is a row of every replay's "
                  "host table")
# Metric samples per replay: each is a pass over the hosts and a placement_timeseries row
# (a million is a month sampled every 2.6 s).
MAX_SAMPLES = 1_000_000
# The overcommit metrics an admission can judge CPU room by.
CPU_METRICS = ("avg_cpu", "max_cpu", "cpu_percentile")
# The policies' time knobs (their registry entries check that they are positive).
POLICY_DURATIONS = ("dpbfr_long_lived_threshold_s", "la_binary_threshold_s",
                    "class_first_fit_time_unit_s")
# Past 1,000 buckets (0.1 % of a host each) PBFR is Best-Fit.
MAX_BUCKETS = Limit(1_000, "buckets", "0.1 % of a host each; more is Best-Fit")
# Inflation places up to inflation_max_shapes shapes per round on every host, at every
# stranding sample.
MAX_INFLATION_SHAPES = Limit(1_000, "shapes", "each is a pass over the hosts per round of "
                             "every stranding sample")
MAX_INFLATION_COPIES = Limit(10_000, "copies", "more copies per round than fit any host")
# A stride longer than any replay's samples never strands.
MAX_STRANDING_EVERY = Limit(MAX_SAMPLES, "samples", "more than any replay samples")
# Each LARS baseline seed replays the pool's migration queue once more.
MAX_BASELINE_SEEDS = Limit(1_000, "seeds", "each replays the pool's migrations once more")


def validate_config(check, config, lifetime_model=None, has_hosts: bool = True,
                    field: str = "placement", overcommit=None, has_usage: bool = True):
    """Checks a PlacementConfig; `lifetime_model` is the run's LifetimeModelConfig (None
    without a lifetime stage), `has_hosts` whether the source gives hosts, `overcommit` the
    run's OvercommitConfig (None without that stage) and `has_usage` whether the source
    gives usage windows (for an admission)."""
    _check_admissions(check, config, overcommit, has_usage, field)
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
        check.positive(config, "host_count", field, maximum=MAX_HOSTS)
    check.require(0 < config.target_utilization <= 1, f"{field}.target_utilization",
                  f"must be in (0, 1], got {config.target_utilization}")
    check.require(config.warm_start != WarmStart.WARM_START_UNSPECIFIED, f"{field}.warm_start",
                  "is WARM_START_UNSPECIFIED")
    if config.HasField("best_fit_weights"):
        check.positive(config.best_fit_weights, "cpu", f"{field}.best_fit_weights")
        check.positive(config.best_fit_weights, "memory", f"{field}.best_fit_weights")
    _validate_sizes_and_times(check, config, field)
    if config.HasField("start_time_us") and config.HasField("end_time_us"):
        check.require(config.start_time_us <= config.end_time_us, f"{field}.end_time_us",
                      f"is before start_time_us ({config.end_time_us} < "
                      f"{config.start_time_us})")
    if config.HasField("lars"):
        _validate_lars(check, config, f"{field}.lars")


def _check_admissions(check, config, overcommit, has_usage: bool, field: str) -> None:
    """The admissions of PlacementConfig `config` against the run's OvercommitConfig
    `overcommit` (None without the stage); `has_usage`: whether the source gives usage."""
    if not config.admission:
        return
    where = f"{field}.admission"
    if overcommit is None:
        check.fail(where, "needs the overcommit stage (its metric, grid and scoring oracle)")
        return
    check.require(has_usage, where, "needs usage windows, which this trace source has not")
    check.require(overcommit.metric.WhichOneof("metric") in CPU_METRICS,
                  "overcommit.metric", "must be a CPU metric for a placement admission (the "
                  "admission judges CPU room)")
    tellers = {t.name: t for t in overcommit.fortune_teller}
    check.require(any(t.WhichOneof("teller") == "oracle" for t in tellers.values()), where,
                  "needs an oracle fortune teller in overcommit to score the usage replay")
    check.require(not config.HasField("lars"), where, "does not run with lars (a "
                  "migration's reservation is by request)")
    seen = set()
    for i, admission in enumerate(config.admission):
        at = f"{where}[{i}]"
        rule = admission.WhichOneof("rule")
        name = REQUESTS if rule == "requests" else admission.fortune_teller
        check.require(rule is not None and (rule != "requests" or admission.requests), at,
                      "names no rule: set requests: true or fortune_teller")
        check.require(name not in seen, at, f"{name!r} is listed twice")
        seen.add(name)
        if rule == "fortune_teller":
            check.require(name != REQUESTS, f"{at}.fortune_teller", f"{REQUESTS!r} names "
                          "the admission by requests (requests: true); rename the teller")
            teller = tellers.get(name)
            if teller is None:
                check.fail(f"{at}.fortune_teller", f"{name!r} is no overcommit.fortune_teller "
                           f"(there are {sorted(tellers)})")
            elif teller.WhichOneof("teller") == "predictor":
                problem = unsupported_admission(teller.predictor)
                check.require(problem is None, f"{at}.fortune_teller", f"{name!r}: {problem}")


def _validate_sizes_and_times(check, config, field: str):
    """The counts, durations and times of a PlacementConfig, each within its bound."""
    check.positive(config, "seed", field, allow_zero=True)
    check.duration(config, "warmup_s", field, allow_zero=True)
    check.duration(config, "sample_period_s", field)
    check.duration(config, "refresh_interval_s", field, allow_zero=True)
    for name in POLICY_DURATIONS:
        check.at_most(config, name, field, MAX_DURATION)
    for i, threshold_s in enumerate(config.la_class_threshold_s):
        check.require(threshold_s <= MAX_DURATION.maximum, f"{field}.la_class_threshold_s[{i}]",
                      MAX_DURATION.problem(threshold_s))
    for name in ("pbfr_num_buckets", "dpbfr_long_lived_num_buckets"):
        check.at_most(config, name, field, MAX_BUCKETS)
    check.positive(config, "inflation_max_shapes", field, maximum=MAX_INFLATION_SHAPES)
    check.positive(config, "inflation_copies_per_round", field, maximum=MAX_INFLATION_COPIES)
    check.positive(config, "stranding_every", field, allow_zero=True,
                   maximum=MAX_STRANDING_EVERY)
    for name in ("start_time_us", "end_time_us"):
        check.trace_time(config, name, field)


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
        _validate_model_variant(check, lifetime, which, lifetime_model,
                                f"{field}.lifetime_source[{i}]")
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


def _validate_model_variant(check, lifetime, which, lifetime_model, field: str):
    """A model source names one of the lifetime stage's variants when it has several."""
    variants = [v.name for v in lifetime_model.variant] if lifetime_model is not None else []
    if lifetime.HasField("model_variant"):
        check.require(which in ("uptime_model", "one_shot_model", LAVA_CLASSES),
                      f"{field}.model_variant", "is only for a model source")
        check.require(lifetime_model is None or lifetime.model_variant in variants,
                      f"{field}.model_variant",
                      f"names no lifetime_model.variant ({', '.join(variants) or 'none'}), "
                      f"got {lifetime.model_variant!r}")
    elif which in ("uptime_model", "one_shot_model", LAVA_CLASSES):
        check.require(len(variants) <= 1, f"{field}.model_variant",
                      f"is required: the lifetime stage trains variants {', '.join(variants)}")


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
    for name in ("max_inflight", "max_draining_hosts"):
        check.positive(lars, name, field, maximum=MAX_HOSTS)
    for name in ("migration_duration_s", "check_period_s"):
        check.duration(lars, name, field)
    check.positive(lars, "baseline_seeds", field, maximum=MAX_BASELINE_SEEDS)
    for i, policy in enumerate(lars.policy):
        check.require(policy in config.policy, f"{field}.policy[{i}]",
                      "is not one of placement.policy")
