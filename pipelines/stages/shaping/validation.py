"""Validation of the shaping stage's config (ShapingConfig), by field path."""

import math

from configs import fleetcast_pb2
from configs.checks import UPPER_BOUNDS, Limit
from configs.units import DAY_S
from pipelines.stages.shaping.specs import (
    BASELINE,
    FAILURE_MODELS,
    GROWTH_MODELS,
    Config,
    forecaster_names,
    policy_names,
    run_specs,
)
from policies.shaping.registry import SHAPING_FORECASTERS, SHAPING_POLICIES
from predictors.peak.registry import check_arima_orders

# The step is a usage window's length (300 s in the Google and Azure traces): a longer one
# keeps one window per step.
MAX_STEP = Limit(DAY_S, "s (a day)", "a step is one usage window, 300 s in the Google and "
                 "Azure traces")
# Every usage series keeps a forecast path of 2 x interval - 1 steps per fit (32 bytes a
# step: mean and uncertainty of CPU and memory), and a run's interval peaks cost interval^2
# per path; a day of 1-minute steps, [Pace18] §V shapes every minute.
MAX_INTERVAL_STEPS = Limit(1_440, "steps (a day of 1-minute steps)",
                           "each usage series keeps a forecast path of 2 x interval - 1 "
                           "steps (32 bytes each) for every interval of its life")
# A sampled application costs ~160 bytes per component in each simulation (~800 with the
# synthetic trace's ~5 components; measured with 400,000 applications); 6.7 x [Pace18]'s 150,000.
MAX_SAMPLED_APPLICATIONS = Limit(1_000_000, "applications",
                                 "each costs ~800 bytes in every simulation", bytes_each=800)
# 400 x [Pace18]'s 250 hosts: the scheduler scans the hosts at every placement.
MAX_HOSTS = Limit(100_000, "hosts", "400 x [Pace18]'s 250; the scheduler scans them at every "
                  "placement")
# Every fit reads a history of this many samples: ARIMA fits all of a series' windows at
# once, a GP costs its cube.
MAX_HISTORY_SAMPLES = Limit(1_440, "samples (a day of 1-minute samples)",
                            "every fit reads this many samples (ARIMA fits all of a series' "
                            "windows at once, a GP costs their cube)")
# Every step of the workload is simulated and its usage held in memory this many times.
MAX_RUNTIME_SCALE = Limit(1_000, "", "every component-step is simulated and kept this many "
                          "times; [Pace18]'s simulator uses 30")
# An arrival-rate scale or offered load beyond this queues nearly every application for the
# whole run: the simulation then grows with the queue, not the workload.
MAX_LOAD_FACTOR = Limit(1_000, "", "a thousand times the trace's arrival rate or the "
                        "cluster's capacity queues nearly every application for the whole run")
MIN_LOAD_FACTOR = 1 / MAX_LOAD_FACTOR.maximum
MIN_LOAD_WHY = ("a thousandth of the trace's arrival rate or of the cluster's capacity spreads "
                "the submissions over a thousand times their span")
# Each is one simulation of the whole workload (the synthetic sweep runs 435).
MAX_RUNS = 10_000


def validate_config(check, config, has_hosts: bool = True, field: str = "shaping"):
    """Checks a ShapingConfig; `has_hosts` whether the source gives machines."""
    check.require(len(config.policy) > 0, f"{field}.policy", "names no policy")
    for i, name in enumerate(policy_names(config)):
        check.require(name in SHAPING_POLICIES, f"{field}.policy[{i}]",
                      f"unknown shaping policy {name!r}; known: {', '.join(SHAPING_POLICIES)}")
    shapes = any(name != BASELINE for name in policy_names(config))
    if shapes:
        check.require(len(config.forecaster) > 0, f"{field}.forecaster",
                      "names no forecaster (a shaping policy needs one)")
        check.require(len(config.k1) > 0, f"{field}.k1", "names no value")
        check.require(len(config.k2) > 0, f"{field}.k2", "names no value")
    for i, name in enumerate(forecaster_names(config)):
        check.require(name in SHAPING_FORECASTERS, f"{field}.forecaster[{i}]",
                      f"unknown forecaster {name!r}; known: {', '.join(SHAPING_FORECASTERS)}")
    for name in ("k1", "k2"):
        for i, value in enumerate(getattr(config, name)):
            check.require(0 <= value < math.inf, f"{field}.{name}[{i}]",
                          f"must be finite and >= 0, got {value}")
    _validate_sizes(check, config, field)
    check.fraction(config, "elastic_fraction", field)
    check.require(config.num_history_samples >= config.min_fit_samples,
                  f"{field}.num_history_samples",
                  f"must be >= min_fit_samples ({config.min_fit_samples}), got "
                  f"{config.num_history_samples}")
    check_arima_orders(check, config.arima_order, f"{field}.arima_order")
    if Config.GAUSSIAN_PROCESS in config.forecaster:
        check.require(1 <= config.gp_pattern_length <= config.min_fit_samples - 2,
                      f"{field}.gp_pattern_length",
                      f"must be in [1, min_fit_samples - 2 = {config.min_fit_samples - 2}], "
                      f"got {config.gp_pattern_length}")
    check.require(config.usage_statistic != Config.USAGE_STATISTIC_UNSPECIFIED,
                  f"{field}.usage_statistic", "is USAGE_STATISTIC_UNSPECIFIED")
    check.require(config.sub_window_usage != Config.SUB_WINDOW_USAGE_UNSPECIFIED,
                  f"{field}.sub_window_usage", "is SUB_WINDOW_USAGE_UNSPECIFIED")
    check.require(config.usage_model != Config.USAGE_MODEL_UNSPECIFIED,
                  f"{field}.usage_model", "is USAGE_MODEL_UNSPECIFIED")
    check.require(config.failure_model in FAILURE_MODELS, f"{field}.failure_model",
                  f"must be one of HOST_OVERLOAD, COMPONENT_LIMIT, MEMORY_LIMIT, got "
                  f"{Config.FailureModel.Name(config.failure_model)}")
    check.require(config.growth in GROWTH_MODELS, f"{field}.growth",
                  f"must be ALWAYS or IF_FREE, got {Config.Growth.Name(config.growth)}")
    _validate_hosts(check, config, has_hosts, field)


def _validate_sizes(check, config, field: str):
    """The counts, steps and durations of a ShapingConfig, each within its bound."""
    check.positive(config, "step_s", field, maximum=MAX_STEP)
    check.positive(config, "shaping_interval_steps", field, maximum=MAX_INTERVAL_STEPS)
    check.positive(config, "sampled_applications", field, allow_zero=True,
                   maximum=MAX_SAMPLED_APPLICATIONS)
    check.duration(config, "max_time_after_last_submit_s", field)
    for name in ("num_history_samples", "min_fit_samples"):
        check.positive(config, name, field, maximum=MAX_HISTORY_SAMPLES)
    check.positive(config, "runtime_scale", field, maximum=MAX_RUNTIME_SCALE)
    # A fit costs the same whatever its history (predictors/peak/ima.py): bounded by steps.
    check.require(config.arima_011_history_samples >= 2,
                  f"{field}.arima_011_history_samples",
                  f"must be >= 2 (one difference), got {config.arima_011_history_samples}")
    check.positive(config, "forecast_shards", field, maximum=UPPER_BOUNDS["num_shards"])
    check.positive(config, "arrival_rate_scale", field, maximum=MAX_LOAD_FACTOR)
    check.require(not config.arrival_rate_scale > 0
                  or config.arrival_rate_scale >= MIN_LOAD_FACTOR,
                  f"{field}.arrival_rate_scale", f"must be at least {MIN_LOAD_FACTOR:g}: "
                  f"{MIN_LOAD_WHY}; got {config.arrival_rate_scale:g}")
    for i, load in enumerate(config.target_offered_load):
        check.require(MIN_LOAD_FACTOR <= load <= MAX_LOAD_FACTOR.maximum,
                      f"{field}.target_offered_load[{i}]",
                      f"must be at least {MIN_LOAD_FACTOR:g} ({MIN_LOAD_WHY}) and at most "
                      f"{MAX_LOAD_FACTOR.maximum:,g} ({MAX_LOAD_FACTOR.why}); got {load:g}")
    check.require(not (config.target_offered_load and config.HasField("arrival_rate_scale")),
                  f"{field}.arrival_rate_scale",
                  "cannot be set with target_offered_load (set one of the two)")
    check.positive(config, "unshaped_after_failures", field, allow_zero=True)
    for i, seed in enumerate(config.seed):
        check.require(seed >= 0, f"{field}.seed[{i}]", f"must be >= 0, got {seed}")
    runs = len(run_specs(config))
    check.require(runs <= MAX_RUNS, field,
                  f"forecaster x k1 x k2 x policy x seed x target_offered_load gives {runs:,} "
                  f"simulations, at most "
                  f"{MAX_RUNS:,} (each simulates the whole workload)")


def _validate_hosts(check, config, has_hosts: bool, field: str):
    if not has_hosts or config.HasField("host_shape"):
        check.require(config.HasField("host_shape"), f"{field}.host_shape",
                      "is required: this trace has no hosts")
        check.require(config.HasField("host_count"), f"{field}.host_count",
                      "is required with host_shape")
    if config.HasField("host_shape"):
        check.positive(config.host_shape, "cpu", f"{field}.host_shape")
        if not config.cpu_only:
            check.positive(config.host_shape, "memory", f"{field}.host_shape")
    if config.HasField("host_count"):
        check.positive(config, "host_count", field, maximum=MAX_HOSTS)


def warnings(config) -> list:
    """One line per ShapingConfig combination that is valid but cannot do what it names."""
    found = []
    if config.cpu_only and config.failure_model == fleetcast_pb2.ShapingConfig.MEMORY_LIMIT:
        found.append("shaping: failure_model MEMORY_LIMIT with cpu_only: memory is left out, "
                     "so no component can ever fail (use HOST_OVERLOAD or COMPONENT_LIMIT)")
    return found
