"""What a PlacementConfig names: its policies, lifetime sources and admissions. Plain protobuf
and the policy registry (no Beam): the checks, the warnings and the replays share them."""

import dataclasses
from typing import List, Optional

import numpy as np

from configs import fleetcast_pb2
from policies.registry import PLACEMENT_POLICIES, build_policy_plugin

Policy = fleetcast_pb2.PlacementConfig.Policy
LarsOrder = fleetcast_pb2.PlacementConfig.Lars.Order
WarmStart = fleetcast_pb2.PlacementConfig.WarmStart
# The source that gives LAVA its VM classes from the lifetime stage's class classifiers.
LAVA_CLASSES = "uptime_model_lava_classes"
# The admission by requests (placement.admission { requests: true }).
REQUESTS = "requests"
# The predictors an admission can use: a sum of per-task shares, or a bounded history.
SHARED_KINDS = ("borg_default", "rc_like", "task_max", "task_avg")
WINDOW_KINDS = ("n_sigma", "per_machine_percentile")
COMBINED_KINDS = {"max_of": np.max, "avg_of": np.mean}


@dataclasses.dataclass(frozen=True)
class LifetimeSpec:
    """One configured lifetime source: `kind` is oracle, noisy_oracle, uptime_model,
    one_shot_model or uptime_model_lava_classes; `accuracy` and `seed` only for the noisy
    oracle (`seed` None: the placement config's seed); `variant` only for a model source
    (the lifetime stage's feature variant; None: its only one)."""
    kind: str
    accuracy: Optional[float] = None
    seed: Optional[int] = None
    variant: Optional[str] = None

    @property
    def label(self) -> str:
        if self.kind == "noisy_oracle":
            seed = "" if self.seed is None else f"_seed{self.seed}"
            return f"noisy_oracle_{self.accuracy:g}{seed}"
        return self.kind if self.variant is None else f"{self.kind}@{self.variant}"

    @property
    def uses_model(self) -> bool:
        """True for the trained models' sources, which need the instance rows."""
        return self.kind in ("uptime_model", "one_shot_model", LAVA_CLASSES)

    def noisy_oracle_seed(self, config) -> Optional[int]:
        """The seed of a noisy oracle's draws under `config` (PlacementConfig); None for
        other sources."""
        if self.kind != "noisy_oracle":
            return None
        return config.seed if self.seed is None else self.seed

    @classmethod
    def of(cls, message) -> "LifetimeSpec":
        which = message.WhichOneof("source")
        if which == "noisy_oracle_accuracy":
            seed = (message.noisy_oracle_seed if message.HasField("noisy_oracle_seed")
                    else None)
            return cls("noisy_oracle", message.noisy_oracle_accuracy, seed)
        return cls(which, variant=message.model_variant or None)


def policy_name(policy: int) -> str:
    """The registry name of a PlacementConfig.Policy value (BEST_FIT → "best_fit")."""
    return Policy.Name(policy).lower()


def policy_names(config) -> List[str]:
    """Every configured policy by name: the built-ins in config order, then the plug-ins."""
    return [policy_name(p) for p in config.policy] + [p.name for p in config.policy_plugin]


def policy_plugin(name: str, config):
    """The PolicyPlugin message named `name` in `config`, or None for a registered policy."""
    return next((plugin for plugin in config.policy_plugin if plugin.name == name), None)


def make_policy(name: str, config):
    """The placement policy object named `name`: a registered policy or a plug-in."""
    plugin = policy_plugin(name, config)
    if plugin is not None:
        return build_policy_plugin(plugin)
    return PLACEMENT_POLICIES[name].build(config)


def unsupported_admission(predictor) -> Optional[str]:
    """Why the PeakPredictorConfig `predictor` cannot admit, or None when it can."""
    which = predictor.WhichOneof("predictor")
    if which in COMBINED_KINDS:
        return next(filter(None, map(unsupported_admission,
                                     getattr(predictor, which).predictors)), None)
    if which in SHARED_KINDS + WINDOW_KINDS:
        return None
    return (f"a {which} predictor cannot admit (its peak depends on all of a machine's "
            f"history); use {', '.join(SHARED_KINDS + WINDOW_KINDS)} or their max_of / avg_of")
