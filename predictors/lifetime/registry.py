"""The registry of lifetime models: name → class, when the config trains it, how it is built
and fitted from the `LifetimeModelConfig`, and the checks of the config fields it reads.

The names are the lifetime stage's: the `name` column of its `lifetime_models` table and the
model directories under `model_dir`. The stage trains, in registry order, every entry whose
`enabled(config)` holds, and evaluates each by what it `predicts`; `load_model` picks the
class of saved files by the "kind" in their metadata (`model_classes`).

A builder is `build(config) -> LifetimeModel` (unfitted); a fitter is
`fit(model, data, config) -> FittedModel`, with `data` the stage's `TrainingData`. A check is
`(checker, config, field)` (configs/checks.py); a check several entries share runs once. The
models are named by class path and imported when first built or loaded, and the fitters
import the examples' helpers when they run, so that validating a config imports neither
LightGBM nor pandas.
"""

import dataclasses
from typing import TYPE_CHECKING, Callable, Dict, NamedTuple, Optional, Tuple

from configs import fleetcast_pb2
from configs.checks import Limit
from configs.registry import Registry, load_class

# LAVA's class edges, for the LAVA class classifiers (policies/ is plain Python).
from policies.lava import LAVA_CLASS_BOUNDS_S
from predictors.lifetime.base import LifetimeModel
from predictors.lifetime.feature_names import CATEGORICAL, FEATURES

if TYPE_CHECKING:  # the annotations' types: pandas loads only to train
    import pandas as pd

    from predictors.lifetime.examples import LifetimeExamples, TimeSplit

# The examples name their augmentation schemes as this enum does (LIFETIME_FRACTIONS, ...).
Augmentation = fleetcast_pb2.LifetimeModelConfig.Augmentation
UPTIME_MODEL = "predictors.lifetime.uptime_model:UptimeLifetimeModel"
KAPLAN_MEIER = "predictors.lifetime.kaplan_meier:KaplanMeierLifetimeModel"
LA_CLASSIFIER = "predictors.lifetime.la_classifier:LaClassifier"
UPTIME_CLASSIFIER = "predictors.lifetime.uptime_classifier:UptimeLongLivedClassifier"

# What a model predicts, which decides how the stage evaluates it.
REMAINING_LIFETIME = "remaining_lifetime"  # predict_remaining(features, uptime_s), seconds
LONG_LIVED = "long_lived"  # predict_proba_long(features): P(lifetime > threshold_s)
# predict_proba_long(features, uptime_s): P(lifetime > threshold_s | uptime)
LONG_LIVED_BY_AGE = "long_lived_by_age"


class TrainingData(NamedTuple):
    """What the models learn from: the training part of the lifetime stage's time split.

    Attributes:
      split: the split; its train instances are observed until split.split_time_us.
      labeled: the regressors' training instances (their labels are known at the split).
      examples: the uptime-augmented examples of `labeled`, observed until the split time,
        in the config's augmentation scheme.
      examples_for: (augmentation) -> the examples of `labeled` in that scheme (for a model
        that compares schemes); None = only `examples` exist.
    """

    split: "TimeSplit"
    labeled: "pd.DataFrame"
    examples: "LifetimeExamples"
    examples_for: Optional[Callable[[str], "LifetimeExamples"]] = None


class FittedModel(NamedTuple):
    """A fitted model and what it learned from (columns of `lifetime_models`)."""

    model: LifetimeModel
    train_instances: int  # instances it learned from
    rows_fit_on: int  # training rows: examples, or instances with a known label


@dataclasses.dataclass(frozen=True)
class LifetimeModelEntry:
    """One lifetime model of the stage (see the module docstring)."""

    class_path: str  # of the LifetimeModel subclass, whose KIND names its saved files
    predicts: str  # REMAINING_LIFETIME, LONG_LIVED or LONG_LIVED_BY_AGE
    enabled: Callable  # (config) -> bool: the config asks for it
    build: Callable  # (config) -> unfitted model
    fit: Callable  # (model, TrainingData, config) -> FittedModel, or None if it cannot learn
    checks: Tuple[Callable, ...] = ()  # (checker, config, field) -> None


LIFETIME_MODELS = Registry("lifetime model")


# Upper bounds of the LightGBM knobs, by field name ([Ling25ext] App. B trains 2,000 trees).
LIGHTGBM_LIMITS = {
    "num_trees": Limit(100_000, "trees", "50 x the paper's 2,000; every tree is in the "
                       "model file and in every prediction"),
    "num_leaves": Limit(131_072, "leaves", "LightGBM's own limit"),
    "min_data_in_leaf": Limit(2 ** 31 - 1, "rows", "LightGBM reads it as a 32-bit integer"),
    "num_threads": Limit(1_024, "threads", "more than any machine's cores"),
    "early_stopping_rounds": Limit(100_000, "rounds", "a longer patience than the most trees "
                                   "never stops"),
}
# The uptime feature's bins are the intervals of a VM's lifetime curve in placement replays.
MAX_UPTIME_BINS = Limit(1_024, "bins", "a VM's lifetime curve in a placement replay has "
                        "up to this many intervals")


def check_lightgbm(check, config, field: str):
    """The LightGBM knobs and the encoder's feature names (uptime models, LA classifier)."""
    for name in ("num_trees", "num_leaves", "min_data_in_leaf", "learning_rate",
                 "num_threads"):
        check.positive(config, name, field, maximum=LIGHTGBM_LIMITS.get(name))
    check.positive(config, "early_stopping_rounds", field, allow_zero=True,
                   maximum=LIGHTGBM_LIMITS["early_stopping_rounds"])
    check.require(0 <= config.validation_fraction < 1, f"{field}.validation_fraction",
                  f"must be in [0, 1), got {config.validation_fraction}")
    check.require(config.num_leaves >= 2, f"{field}.num_leaves",
                  f"must be >= 2 (a tree needs two leaves), got {config.num_leaves}")
    kinds = {name: kind for name, kind, _ in FEATURES}
    for i, name in enumerate(config.feature):
        check.require(name in kinds, f"{field}.feature[{i}]",
                      f"unknown feature {name!r}; known: {', '.join(kinds)}")


def lightgbm_kwargs(config) -> dict:
    """The `BoostedLifetimeModel` parameters a LifetimeModelConfig sets."""
    return dict(
        num_trees=config.num_trees, num_leaves=config.num_leaves,
        learning_rate=config.learning_rate, min_data_in_leaf=config.min_data_in_leaf,
        validation_fraction=config.validation_fraction,
        early_stopping_rounds=config.early_stopping_rounds, seed=config.seed,
        num_threads=config.num_threads, min_category_count=config.min_category_count,
        features=list(config.feature) or None, time_origin_s=config.time_origin_s)


def _check_uptime(check, config, field: str):
    check.require(config.uptime_max_bin >= 2, f"{field}.uptime_max_bin",
                  f"must be >= 2, got {config.uptime_max_bin}")
    check.at_most(config, "uptime_max_bin", field, MAX_UPTIME_BINS)


def _register_uptime(name: str, use_uptime: bool, enabled: Callable, rows_fit_on: Callable,
                     augmentation: Optional[str] = None):
    """An uptime model on the config's examples, or on those of `augmentation`."""
    def fit(model, data: TrainingData, config) -> FittedModel:
        examples = data.examples
        if augmentation is not None and examples.augmentation != augmentation:
            examples = data.examples_for(augmentation)
        return FittedModel(model.fit(examples), len(data.labeled), rows_fit_on(examples))

    LIFETIME_MODELS.register(name, LifetimeModelEntry(
        class_path=UPTIME_MODEL, predicts=REMAINING_LIFETIME, enabled=enabled,
        build=lambda config: load_class(UPTIME_MODEL)(
            uptime_max_bin=config.uptime_max_bin, use_uptime=use_uptime,
            **lightgbm_kwargs(config)),
        fit=fit, checks=(check_lightgbm, _check_uptime)))


_register_uptime("uptime", True, enabled=lambda config: True, rows_fit_on=len)
# The no-reprediction ablation learns from the uptime-0 examples only.
_register_uptime("no_uptime", False, enabled=lambda config: config.train_no_uptime_ablation,
                 rows_fit_on=lambda examples: int((examples.uptime_s == 0).sum()))
# The paper's augmentation next to the default one, which it is compared with: with uptimes at
# fractions of the lifetime the model cannot call a young VM long.
_register_uptime(
    "uptime_lifetime_fractions", True, rows_fit_on=len,
    augmentation=Augmentation.Name(Augmentation.LIFETIME_FRACTIONS),
    enabled=lambda config: (config.train_lifetime_fractions_model and config.augmentation
                            != config.LIFETIME_FRACTIONS))


def _check_kaplan_meier(check, config, field: str):
    kinds = {name: kind for name, kind, _ in FEATURES}
    for i, name in enumerate(config.kaplan_meier_stratum_feature):
        check.require(kinds.get(name) == CATEGORICAL,
                      f"{field}.kaplan_meier_stratum_feature[{i}]",
                      f"{name!r} is not a categorical feature; categorical: "
                      f"{', '.join(n for n, k in kinds.items() if k == CATEGORICAL)}")


def _fit_kaplan_meier(model, data: TrainingData, config) -> FittedModel:
    """Every training instance: Kaplan–Meier handles the censoring at the split itself."""
    train = data.split.train
    return FittedModel(model.fit(train, data.split.split_time_us), len(train), len(train))


def _build_kaplan_meier(config):
    from predictors.lifetime import kaplan_meier  # its default strata too
    return kaplan_meier.KaplanMeierLifetimeModel(
        stratum_features=(list(config.kaplan_meier_stratum_feature)
                          or kaplan_meier.DEFAULT_STRATUM_FEATURES),
        min_stratum_count=config.min_category_count, cap_s=float(config.lifetime_cap_s),
        min_remaining_s=config.min_remaining_s, time_origin_s=config.time_origin_s)


LIFETIME_MODELS.register("kaplan_meier", LifetimeModelEntry(
    class_path=KAPLAN_MEIER, predicts=REMAINING_LIFETIME,
    enabled=lambda config: config.train_kaplan_meier, build=_build_kaplan_meier,
    fit=_fit_kaplan_meier, checks=(_check_kaplan_meier,)))


def _check_la_classifier(check, config, field: str):
    check.duration(config, "la_threshold_s", field)
    check.fraction(config, "la_target_recall", field)
    check.fraction(config, "la_decision_probability", field)


def _fit_la_classifier(model, data: TrainingData, config) -> FittedModel:
    """The training instances that started at least the threshold before the split (their
    class is known there; `label_known`)."""
    from predictors.lifetime.examples import label_known, long_lived_labels, observed_lifetimes
    split_time_us, threshold_s = data.split.split_time_us, float(model.threshold_s)
    train = data.split.train[label_known(data.split.train, split_time_us, threshold_s)]
    _, known = long_lived_labels(*observed_lifetimes(train, split_time_us), threshold_s)
    return FittedModel(model.fit(train, split_time_us), len(train), int(known.sum()))


LIFETIME_MODELS.register("la_classifier", LifetimeModelEntry(
    class_path=LA_CLASSIFIER, predicts=LONG_LIVED,
    enabled=lambda config: config.train_la_classifier,
    build=lambda config: load_class(LA_CLASSIFIER)(
        threshold_s=float(config.la_threshold_s),
        target_recall=config.la_target_recall or None,
        decision_probability=config.la_decision_probability, **lightgbm_kwargs(config)),
    fit=_fit_la_classifier, checks=(check_lightgbm, _check_la_classifier)))


def _check_lava_class_classifiers(check, config, field: str):
    check.require(0 < config.lava_class_target_recall <= 1, f"{field}.lava_class_target_recall",
                  f"must be in (0, 1], got {config.lava_class_target_recall}")


def lava_class_model_name(edge_s: float) -> str:
    """The lifetime stage's name of the LAVA class classifier at `edge_s` ("lava_class_10h")."""
    return f"lava_class_{edge_s / 3600:g}h"


# P(lifetime > edge) at arrival for each edge between LAVA's classes (1 h, 10 h, 100 h): the
# placement source uptime_model_lava_classes takes LAVA's VM classes from them.
LAVA_CLASS_MODEL_NAMES = tuple(lava_class_model_name(edge_s)
                               for edge_s in LAVA_CLASS_BOUNDS_S[:-1])


def _fit_lava_class_classifier(model, data: TrainingData, config) -> Optional[FittedModel]:
    """As the LA classifier; None (no model) when no training instance started the edge
    before the split: none can be known to outlive it, so the class above is never
    predicted (the Azure sample's 2.1 training days and the 100 h edge)."""
    from predictors.lifetime.examples import label_known
    train = data.split.train
    if not label_known(train, data.split.split_time_us, float(model.threshold_s)).any():
        return None
    return _fit_la_classifier(model, data, config)


for _edge_s, _name in zip(LAVA_CLASS_BOUNDS_S[:-1], LAVA_CLASS_MODEL_NAMES):
    LIFETIME_MODELS.register(_name, LifetimeModelEntry(
        class_path=LA_CLASSIFIER, predicts=LONG_LIVED,
        enabled=lambda config: config.train_lava_class_classifiers,
        build=lambda config, edge_s=float(_edge_s): load_class(LA_CLASSIFIER)(
            threshold_s=edge_s, target_recall=config.lava_class_target_recall,
            **lightgbm_kwargs(config)),
        fit=_fit_lava_class_classifier,
        checks=(check_lightgbm, _check_lava_class_classifiers)))


def _fit_uptime_classifier(model, data: TrainingData, config) -> FittedModel:
    """The training instances that started at least the threshold before the split (their
    class is known there at every age; `label_known`), as for the LA classifier."""
    from predictors.lifetime.examples import label_known
    split_time_us = data.split.split_time_us
    train = data.split.train[label_known(data.split.train, split_time_us,
                                         float(model.threshold_s))]
    model.fit(train, split_time_us)
    return FittedModel(model, len(train), model.num_examples_)


LIFETIME_MODELS.register("uptime_long_lived", LifetimeModelEntry(
    class_path=UPTIME_CLASSIFIER, predicts=LONG_LIVED_BY_AGE,
    enabled=lambda config: config.train_uptime_long_lived_classifier,
    build=lambda config: load_class(UPTIME_CLASSIFIER)(
        threshold_s=float(config.long_lived_threshold_s),
        uptime_ages_s=list(config.uptime_age_s) or None,
        uptime_max_bin=config.uptime_max_bin, **lightgbm_kwargs(config)),
    fit=_fit_uptime_classifier, checks=(check_lightgbm, _check_uptime)))


def model_classes() -> Dict[str, type]:
    """{kind in metadata.json: class} of the registered models."""
    classes = [load_class(LIFETIME_MODELS[name].class_path) for name in LIFETIME_MODELS]
    return {cls.KIND: cls for cls in classes}


def validate_models(check, config, field: str):
    """Runs the checks of every registered model once each (trained or not: a field the
    config sets must be valid either way), reporting under `field`."""
    checks = [c for name in LIFETIME_MODELS for c in LIFETIME_MODELS[name].checks]
    for validate in dict.fromkeys(checks):
        validate(check, config, field)
