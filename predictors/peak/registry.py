"""The registry of peak predictors: config name → builder + config validation.

Each entry turns one `PeakPredictorConfig` choice (the oneof field of the same name) into a
`PeakPredictor` and checks its message field by field. The built-ins register here; `plugin`
builds a class outside fleetcast by import path (configs/registry.py: typing rule). A plug-in
predictor is any object with `predict(samples: MachineSamples) -> float64[T]`, scored like the
built-ins (subclass `PeakPredictor` or `WarmupPeakPredictor` for the shared conventions); its
output is checked (`CheckedPredictor`).

    fortune_teller { name: "mine" predictor { plugin {
      class_path: "my_pkg.peaks:HalfLimit" params { key: "fraction" value: "0.5" } } } }

A builder is `build(message, context)`; `context.step_s` is the simulation step (seconds) and
`context.predictor(config)` builds an inner PeakPredictorConfig (shared with equal configs).
The built-ins are named by class path, as a plug-in is, and imported when first built, so
that validating a config imports none of them (rc_like and gaussian_process load scipy).
"""

import dataclasses
from typing import Callable, Optional

import numpy as np

from configs.registry import (
    PluginFailed,
    Registry,
    build_plugin,
    check_plugin,
    load_class,
    raised_text,
)
from predictors.peak.arima import DEFAULT_LAGS
from predictors.peak.machine_samples import MachineSamples
from predictors.peak.peak_predictor import PeakPredictor

# The interface a plug-in predictor must have.
PREDICTOR_METHODS = ("predict",)


@dataclasses.dataclass(frozen=True)
class PredictorEntry:
    """How to build a peak predictor from its config message and how to check it."""

    build: Callable  # (message, context) -> PeakPredictor
    validate: Callable  # (checker, message, field) -> None


PEAK_PREDICTORS = Registry("peak predictor")


def message_kwargs(message) -> dict:
    """{field name: value} of every scalar field of `message` (defaults included): the
    constructor arguments of a predictor whose config fields are named after them."""
    return {f.name: getattr(message, f.name) for f in message.DESCRIPTOR.fields}


def check_common(check, message, field: str):
    """The knobs many predictors share: warm-up, history and percentile."""
    check.positive(message, "min_num_samples", field, allow_zero=True)
    for name in ("num_history_samples", "refit_every_steps"):
        if hasattr(message, name):
            check.positive(message, name, field)
    if hasattr(message, "percentile"):
        check.fraction(message, "percentile", field, 100)


def register_simple(name: str, class_path: str, extra_checks: Callable = None):
    """Registers the class at `class_path` built from its message's fields
    (`message_kwargs`)."""

    def validate(check, message, field):
        check_common(check, message, field)
        if extra_checks:
            extra_checks(check, message, field)

    PEAK_PREDICTORS.register(name, PredictorEntry(
        build=lambda message, context: load_class(class_path)(**message_kwargs(message)),
        validate=validate))


def _check_phi(check, message, field):
    check.positive(message, "phi", field, allow_zero=True)


def _check_n_sigma(check, message, field):
    check.positive(message, "n", field, allow_zero=True)
    check.require(message.num_history_samples >= 2, f"{field}.num_history_samples",
                  f"must be >= 2 (a standard deviation needs two), got "
                  f"{message.num_history_samples}")


register_simple("borg_default", "predictors.peak.borg_default:BorgDefaultPredictor",
                _check_phi)
register_simple("rc_like", "predictors.peak.rc_like:RcLikePredictor")
register_simple("per_machine_percentile",
                "predictors.peak.per_machine_percentile:PerMachinePercentilePredictor")
register_simple("n_sigma", "predictors.peak.n_sigma:NSigmaPredictor", _check_n_sigma)
register_simple("task_max", "predictors.peak.task_max:MaxPredictor")
register_simple("task_avg", "predictors.peak.task_avg:AvgPredictor")


def _register_combine(name: str, class_path: str):
    def validate(check, message, field):
        check.require(len(message.predictors) > 0, f"{field}.predictors", "is empty")
        for i, inner in enumerate(message.predictors):
            validate_predictor(check, inner, f"{field}.predictors[{i}]")

    PEAK_PREDICTORS.register(name, PredictorEntry(
        build=lambda message, context: load_class(class_path)(
            [context.predictor(inner) for inner in message.predictors]),
        validate=validate))


_register_combine("max_of", "predictors.peak.max_decorator:MaxDecorator")
_register_combine("avg_of", "predictors.peak.avg_decorator:AvgDecorator")


def forecaster_kwargs(message) -> dict:
    """The HistoryForecaster arguments of an Arima / GaussianProcess message."""
    kwargs = message_kwargs(message)
    kwargs["uncertainty"] = message.DESCRIPTOR.fields_by_name["uncertainty"].enum_type \
        .values_by_number[message.uncertainty].name.lower()
    return kwargs


def _check_forecaster(check, message, field):
    check_common(check, message, field)
    check.require(2 <= message.min_fit_samples <= message.num_history_samples,
                  f"{field}.min_fit_samples",
                  f"must be in [2, num_history_samples {message.num_history_samples}], got "
                  f"{message.min_fit_samples}")


def _build_arima(message, context):
    kwargs = forecaster_kwargs(message)
    kwargs["lags"] = [o.p for o in kwargs.pop("order")] or DEFAULT_LAGS
    return load_class("predictors.peak.arima_forecaster:ArimaForecaster")(**kwargs)


def check_arima_orders(check, orders, field: str):
    """Each ArimaOrder of `orders` is (p, 1, 0) with 0 <= p <= the `p` bound: the one ARIMA
    (predictors/peak/arima.py) fits ARIMA(p, 1, 0) only."""
    for i, order in enumerate(orders):
        check.require((order.d, order.q) == (1, 0), f"{field}[{i}]",
                      f"must be (p, 1, 0): the closed-form ARIMA (predictors/peak/arima.py) "
                      f"has one difference and no moving-average term, got ({order.p}, "
                      f"{order.d}, {order.q})")
        check.positive(order, "p", f"{field}[{i}]", allow_zero=True)


def _check_arima(check, message, field):
    _check_forecaster(check, message, field)
    check_arima_orders(check, message.order, f"{field}.order")


def _check_gaussian_process(check, message, field):
    _check_forecaster(check, message, field)
    check.require(1 <= message.pattern_length <= message.min_fit_samples - 2,
                  f"{field}.pattern_length",
                  f"must be in [1, min_fit_samples - 2 = {message.min_fit_samples - 2}] "
                  f"(two training patterns), got {message.pattern_length}")


PEAK_PREDICTORS.register("arima", PredictorEntry(build=_build_arima, validate=_check_arima))
PEAK_PREDICTORS.register("gaussian_process", PredictorEntry(
    build=lambda message, context: load_class(
        "predictors.peak.gp_forecaster:GaussianProcessForecaster")(
        step_s=context.step_s, **forecaster_kwargs(message)),
    validate=_check_gaussian_process))


class CheckedPredictor(PeakPredictor):
    """A plug-in predictor whose output is checked on every machine: a numpy array of one
    number per step (float64[T]; integers are taken as floats), each finite and >= 0, or NaN
    where nothing is advertised. A bad output, or a `predict` that raises, raises
    PluginFailed naming the class path and the first bad value.

    Args:
      predictor: the plug-in's predictor object.
      class_path: its class path, for messages.
    """

    def __init__(self, predictor, class_path: str):
        self.predictor = predictor
        self.label = f"peak predictor plug-in {class_path}"

    def predict(self, samples: MachineSamples) -> np.ndarray:
        try:
            output = self.predictor.predict(samples)
        except (Exception, SystemExit) as e:  # pylint: disable=broad-except
            raise PluginFailed(f"{self.label}: predict {raised_text(e)}") from e
        problem = peaks_problem(output, samples)
        if problem:
            raise PluginFailed(f"{self.label}: predict returned {problem}")
        return output.astype(np.float64, copy=False)


def peaks_problem(output, samples: MachineSamples) -> Optional[str]:
    """What is wrong with `output` as the advertised peaks of `samples`' steps, or None."""
    num_steps = samples.num_steps
    if not isinstance(output, np.ndarray):
        return (f"{output!r:.80} ({type(output).__name__}), not a numpy array of "
                f"{num_steps} peaks (one per step)")
    if output.shape != (num_steps,):
        got = f"{len(output)} values" if output.ndim == 1 else f"an array of shape {output.shape}"
        return f"{got} for a machine of {num_steps} steps (one peak per step)"
    if output.dtype.kind not in "iuf":
        return f"an array of dtype {output.dtype}, not of numbers (float64)"
    bad = np.isinf(output) | (output < 0)
    if not bad.any():
        return None
    step = int(np.argmax(bad))
    return (f"{float(output[step])!r} at step {step} of {num_steps} (time "
            f"{int(samples.times[step])} µs): a peak is finite and >= 0, or NaN where "
            "nothing is advertised")


PEAK_PREDICTORS.register("plugin", PredictorEntry(
    build=lambda message, context: CheckedPredictor(
        build_plugin(message.class_path, dict(message.params), PREDICTOR_METHODS),
        message.class_path),
    validate=lambda check, message, field: check_plugin(check, message, field,
                                                        PREDICTOR_METHODS)))


def build_predictor(config, context):
    """The PeakPredictor of a PeakPredictorConfig."""
    which = config.WhichOneof("predictor")
    return PEAK_PREDICTORS[which].build(getattr(config, which), context)


def validate_predictor(check, config, field: str):
    """Checks a PeakPredictorConfig through its registry entry, reporting under `field`."""
    which = config.WhichOneof("predictor")
    if which is None:
        check.fail(field, "names no predictor")
        return
    PEAK_PREDICTORS[which].validate(check, getattr(config, which), f"{field}.{which}")
