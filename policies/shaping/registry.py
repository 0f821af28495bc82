"""The registries of the shaping plug-ins: policies and forecasters.

A policy entry builds a `ShapingPolicy` from (k1, k2); a forecaster entry builds a
`UsageForecaster` from the ShapingConfig (its shaping interval and model knobs). Names are
the lower-case names of the config's enum values (`PESSIMISTIC` → "pessimistic"). The
built-ins are named by class path and imported when first built, so that validating a config
imports none of them (the forecasters load scipy).
"""

from configs.registry import Registry, load_class
from predictors.peak.arima import DEFAULT_LAGS

SHAPING_POLICIES = Registry("shaping policy")
SHAPING_POLICIES.register("baseline", lambda k1, k2: load_class(
    "policies.shaping.shapers.baseline:Baseline")())
SHAPING_POLICIES.register("optimistic", lambda k1, k2: load_class(
    "policies.shaping.shapers.optimistic:Optimistic")(k1, k2))
SHAPING_POLICIES.register("pessimistic", lambda k1, k2: load_class(
    "policies.shaping.shapers.pessimistic:Pessimistic")(k1, k2))


def _common(config) -> dict:
    return {"interval_steps": config.shaping_interval_steps,
            "num_history_samples": config.num_history_samples,
            "min_fit_samples": config.min_fit_samples,
            "uncertainty": "std" if config.uncertainty_std else "variance",
            "cyclic": config.elastic_progress}


SHAPING_FORECASTERS = Registry("shaping forecaster")
SHAPING_FORECASTERS.register("oracle", lambda config: load_class(
    "policies.shaping.forecasters:OracleForecaster")(**_common(config)))
SHAPING_FORECASTERS.register("arima", lambda config: load_class(
    "policies.shaping.forecasters:ArimaUsageForecaster")(
    lags=[o.p for o in config.arima_order] or DEFAULT_LAGS, **_common(config)))
SHAPING_FORECASTERS.register("arima_011", lambda config: load_class(
    "policies.shaping.forecasters:Arima011UsageForecaster")(
    max_history=config.arima_011_history_samples, **_common(config)))
SHAPING_FORECASTERS.register("gaussian_process", lambda config: load_class(
    "policies.shaping.forecasters:GaussianProcessUsageForecaster")(
    pattern_length=config.gp_pattern_length, **_common(config)))
