"""Validation of the shaping stage's config (ShapingConfig), by field path."""

from pipelines.stages.shaping.runs import (
    BASELINE,
    FAILURE_MODELS,
    Config,
    forecaster_names,
    policy_names,
)
from policies.shaping.registry import SHAPING_FORECASTERS, SHAPING_POLICIES


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
            check.require(value >= 0, f"{field}.{name}[{i}]", f"must be >= 0, got {value}")
    for name in ("shaping_interval_steps", "step_s", "max_time_after_last_submit_s",
                 "num_history_samples", "min_fit_samples", "forecast_shards"):
        check.positive(config, name, field)
    for name in ("sampled_applications", "unshaped_after_failures"):
        check.positive(config, name, field, allow_zero=True)
    check.fraction(config, "elastic_fraction", field)
    check.require(config.num_history_samples >= config.min_fit_samples,
                  f"{field}.num_history_samples",
                  f"must be >= min_fit_samples ({config.min_fit_samples}), got "
                  f"{config.num_history_samples}")
    for i, order in enumerate(config.arima_order):
        # policies/shaping/arima.py fits ARIMA(p, 1, 0) only.
        check.require((order.d, order.q) == (1, 0) and 0 <= order.p <= 4,
                      f"{field}.arima_order[{i}]",
                      f"must be (p in 0..4, 1, 0), got ({order.p}, {order.d}, {order.q})")
    if Config.GAUSSIAN_PROCESS in config.forecaster:
        check.require(1 <= config.gp_pattern_length <= config.min_fit_samples - 2,
                      f"{field}.gp_pattern_length",
                      f"must be in [1, min_fit_samples - 2 = {config.min_fit_samples - 2}], "
                      f"got {config.gp_pattern_length}")
    check.require(config.usage_statistic != Config.USAGE_STATISTIC_UNSPECIFIED,
                  f"{field}.usage_statistic", "is USAGE_STATISTIC_UNSPECIFIED")
    check.require(config.failure_model in FAILURE_MODELS, f"{field}.failure_model",
                  f"must be one of HOST_OVERLOAD, COMPONENT_LIMIT, got "
                  f"{Config.FailureModel.Name(config.failure_model)}")
    _validate_hosts(check, config, has_hosts, field)


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
        check.positive(config, "host_count", field)
