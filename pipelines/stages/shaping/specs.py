"""The simulations a ShapingConfig asks for (`run_specs`) and its names: policies,
forecasters, the simulator's failure and growth models. Plain protobuf (no Beam): the checks
and the runs share them."""

import dataclasses
from typing import List, Optional

from configs import fleetcast_pb2

Config = fleetcast_pb2.ShapingConfig
BASELINE, NO_FORECASTER = "baseline", "none"
# ShapingConfig.failure_model → the simulator's failure_model.
FAILURE_MODELS = {Config.HOST_OVERLOAD: "host", Config.COMPONENT_LIMIT: "component",
                  Config.MEMORY_LIMIT: "memory"}
# ShapingConfig.growth → the simulator's growth.
GROWTH_MODELS = {Config.ALWAYS: "always", Config.IF_FREE: "if_free"}


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One simulation; the baseline's forecaster is "none" and its k1, k2 None; `load` the
    target offered load (None: the config's arrival_rate_scale)."""
    forecaster: str
    k1: Optional[float]
    k2: Optional[float]
    policy: str
    seed: int
    load: Optional[float] = None


def policy_names(config) -> List[str]:
    return [Config.Policy.Name(p).lower() for p in config.policy]


def forecaster_names(config) -> List[str]:
    return [Config.Forecaster.Name(f).lower() for f in config.forecaster]


def seeds(config) -> List[int]:
    return list(config.seed) or [0]


def run_specs(config) -> List[RunSpec]:
    """Every configured simulation, at every target offered load: the baseline (always run:
    the speedups need it) once per seed, the shaping policies for every forecaster, k1 and
    k2."""
    shaping = [p for p in policy_names(config) if p != BASELINE]
    specs = []
    for load in list(config.target_offered_load) or [None]:
        specs += [RunSpec(NO_FORECASTER, None, None, BASELINE, s, load) for s in seeds(config)]
        for forecaster in forecaster_names(config):
            specs += [RunSpec(forecaster, k1, k2, policy, seed, load) for k1 in config.k1
                      for k2 in config.k2 for policy in shaping for seed in seeds(config)]
    return specs
