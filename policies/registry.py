"""The registry of placement policies: config name → builder + config validation.

A name is the lower-case name of a `PlacementConfig.Policy` value (`BEST_FIT` → "best_fit")
and the policy's name in the outputs. A builder is `build(config)` with the whole
`PlacementConfig` (a policy reads its own knobs, e.g. `pbfr_num_buckets`); a validator
checks those knobs only when the policy is configured.

Policies from outside fleetcast come from `placement { policy_plugin { name class_path
params } }` (configs/registry.py: typing rule) and replay like the built-ins: a
`policies.policy.PlacementPolicy` with bind / select / update.
"""

import dataclasses
from typing import Callable

from configs.registry import PluginError, Registry, build_plugin, check_plugin, load_class
from policies.best_fit import BestFit
from policies.class_first_fit import ClassFirstFit
from policies.la import LA_MULTI_CLASS_THRESHOLDS_S, LifetimeAlignment
from policies.lava import Lava
from policies.nilas import Nilas
from policies.policy import PlacementPolicy
from policies.quantized_best_fit import QuantizedBestFit

# The interface a plug-in policy must have: a policies.policy.PlacementPolicy subclass has
# them all.
POLICY_METHODS = ("bind", "select", "update", "placed", "removed", "on_timer")


@dataclasses.dataclass(frozen=True)
class PolicyEntry:
    """How to build a placement policy from the PlacementConfig and how to check its knobs."""

    build: Callable  # (PlacementConfig) -> PlacementPolicy
    validate: Callable = lambda check, config, field: None  # (checker, config, field)


PLACEMENT_POLICIES = Registry("placement policy")


def _positive(*names):
    def validate(check, config, field):
        for name in names:
            check.positive(config, name, field)
    return validate


def _check_la_thresholds(check, config, field):
    thresholds = list(config.la_class_threshold_s)
    check.require(all(t > 0 for t in thresholds) and thresholds == sorted(set(thresholds)),
                  f"{field}.la_class_threshold_s",
                  f"must be positive and strictly increasing, got {thresholds}")


def _check_lava(check, config, field):
    check.require(0 < config.lava_recycle_fraction <= 1, f"{field}.lava_recycle_fraction",
                  f"must be in (0, 1], got {config.lava_recycle_fraction}")


# A removed policy name (docs/changelog.md), kept in the schema so that a config naming it
# gets this message rather than a parse error.
LAVA_SCORING_REMOVED = ("LAVA_SCORING was removed: LAVA is now [Ling25ext] Algorithm 3 as a "
                        "score (what LAVA_SCORING was), so use policy: LAVA; the former hard "
                        "recycling rule is policy: LAVA_STRICT_RECYCLING")


def _reject_lava_scoring(check, config, field):
    check.fail(f"{field}.policy", LAVA_SCORING_REMOVED)


def _removed_lava_scoring(config):
    raise ValueError(LAVA_SCORING_REMOVED)


PLACEMENT_POLICIES.register("best_fit", PolicyEntry(build=lambda config: BestFit()))
PLACEMENT_POLICIES.register("pbfr", PolicyEntry(
    build=lambda config: QuantizedBestFit(config.pbfr_num_buckets),
    validate=_positive("pbfr_num_buckets")))
PLACEMENT_POLICIES.register("dpbfr", PolicyEntry(
    build=lambda config: QuantizedBestFit(config.pbfr_num_buckets,
                                          config.dpbfr_long_lived_num_buckets,
                                          config.dpbfr_long_lived_threshold_s),
    validate=_positive("pbfr_num_buckets", "dpbfr_long_lived_num_buckets",
                       "dpbfr_long_lived_threshold_s")))
PLACEMENT_POLICIES.register("la", PolicyEntry(
    build=lambda config: LifetimeAlignment(tuple(config.la_class_threshold_s)
                                           or LA_MULTI_CLASS_THRESHOLDS_S),
    validate=_check_la_thresholds))
PLACEMENT_POLICIES.register("la_binary", PolicyEntry(
    build=lambda config: LifetimeAlignment((config.la_binary_threshold_s,)),
    validate=_positive("la_binary_threshold_s")))
PLACEMENT_POLICIES.register("nilas", PolicyEntry(build=lambda config: Nilas()))
PLACEMENT_POLICIES.register("lava", PolicyEntry(
    build=lambda config: Lava(config.lava_recycle_fraction), validate=_check_lava))
PLACEMENT_POLICIES.register("lava_scoring", PolicyEntry(
    build=_removed_lava_scoring, validate=_reject_lava_scoring))
PLACEMENT_POLICIES.register("lava_strict_recycling", PolicyEntry(
    build=lambda config: Lava(config.lava_recycle_fraction, strict_recycling=True),
    validate=_check_lava))
PLACEMENT_POLICIES.register("class_first_fit", PolicyEntry(
    build=lambda config: ClassFirstFit(config.class_first_fit_time_unit_s),
    validate=_positive("class_first_fit_time_unit_s")))


def build_policy_plugin(plugin):
    """The policy of a PlacementConfig.PolicyPlugin message; raises PluginError, also for a
    class that is not a PlacementPolicy (the replay reads its attributes and defaults)."""
    cls = load_class(plugin.class_path)
    if not issubclass(cls, PlacementPolicy):
        raise PluginError("class_path", f"{plugin.class_path} is not a subclass of "
                                        "policies.policy.PlacementPolicy")
    return build_plugin(plugin.class_path, dict(plugin.params), POLICY_METHODS)


def check_policy_plugin(check, plugin, field: str):
    """Checks a PolicyPlugin message: its name and that the class builds."""
    check.require(bool(plugin.name), f"{field}.name", "is required")
    check.require(plugin.name not in PLACEMENT_POLICIES, f"{field}.name",
                  f"{plugin.name!r} is a built-in policy's name")
    check_plugin(check, plugin, field, build=lambda *_: build_policy_plugin(plugin))
