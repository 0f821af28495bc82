"""The lifetime stage's single-machine step: split, train, save and evaluate every model on
the test period (the `lifetime_*` tables)."""

from typing import Dict, List, Mapping, Tuple

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines import progress, schemas
from pipelines.io import sharding, spill
from pipelines.io.failures import RunFailed
from pipelines.stages.lifetime.examples import (
    examples_of,
    labelled_mask,
    partition_instances,
    regression_mask,
    split_instances,
    uptime_ages_s,
)
from pipelines.stages.lifetime.models import ModelDir, fit_models, save_model
from predictors.lifetime.boosting import time_validation_mask
from predictors.lifetime.evaluation import (
    DEFAULT_RECALLS,
    arrival_scores,
    concordance_table,
    decision_thresholds_at_recall,
    error_histogram,
    f1_by_uptime,
    la_classifier_metrics,
    long_lived_by_age,
    long_lived_metrics,
    long_lived_rate,
    metrics_by_period,
    predict_at_uptime_quantiles,
    trivial_f1s,
)
from predictors.lifetime.examples import TimeSplit, observed_lifetimes
from predictors.lifetime.registry import (
    LIFETIME_MODELS,
    LONG_LIVED,
    LONG_LIVED_BY_AGE,
    REMAINING_LIFETIME,
)

TRAINING_TABLES = ("lifetime_split", "lifetime_models", "lifetime_long_lived",
                   "lifetime_la_classifier", "lifetime_f1_by_age", "lifetime_f1_by_uptime",
                   "lifetime_error_histogram", "lifetime_concordance", "lifetime_by_period",
                   "lifetime_feature_importance")
# The variant of a config without `variant`: its own `feature` list.
DEFAULT_VARIANT = "default"


def variants(config) -> List[Tuple[str, object]]:
    """(name, the LifetimeModelConfig its models are trained with) of each feature variant:
    the config itself as DEFAULT_VARIANT when it has none."""
    if not config.variant:
        return [(DEFAULT_VARIANT, config)]
    configs = []
    for variant in config.variant:
        variant_config = type(config)()
        variant_config.CopyFrom(config)
        variant_config.ClearField("variant")
        variant_config.ClearField("feature")
        variant_config.feature.extend(variant.feature)
        configs.append((variant.name, variant_config))
    return configs


def split_counts(split: TimeSplit, before_trace: pd.DataFrame, config) -> pd.DataFrame:
    """The LIFETIME_SPLIT rows: "train" (the regressors' training instances), "train_recent"
    (the other training-period instances: no examples), "test", "started_before_trace"."""
    labeled = regression_mask(split, config)
    rows = []
    for name, instances, observation_end_us, examples in (
            ("train", split.train[labeled], split.split_time_us, True),
            ("train_recent", split.train[~labeled], split.split_time_us, False),
            ("test", split.test, split.observation_end_us, True),
            ("started_before_trace", before_trace, None, False)):
        finished = int(instances["end_time"].notna().sum())
        rows.append({
            "split": name, "instances": len(instances), "finished": finished,
            "censored": len(instances) - finished,
            "examples": len(examples_of(instances, observation_end_us, config)) if examples
            else 0,
            "split_time_us": split.split_time_us, "observation_end_us": observation_end_us})
    return pd.DataFrame(rows)


def validation_instances(split: TimeSplit, config) -> pd.DataFrame:
    """The slice of the training period that sets the regressors' long-lived decisions: the
    latest-starting `validation_fraction` of the training instances whose labels are
    complete (all of them when that slice is empty), observed until the split time. Early
    stopping holds out about the same VMs (the examples of the latest-starting
    validation_fraction of the examples); with early stopping off the decisions are set on
    VMs the model trained on."""
    labeled = split.train[labelled_mask(split, config)]
    held_out = time_validation_mask(labeled["start_time"].to_numpy(np.float64),
                                    config.validation_fraction)
    return labeled[held_out] if held_out.any() else labeled


def long_lived_decisions(model, validation: pd.DataFrame, split: TimeSplit, config,
                         ages_s) -> Tuple[np.ndarray, float]:
    """(decision at each age as a predicted lifetime in s, target recall): the explicit
    `long_lived_decision_s` (target NaN), else chosen on the validation slice."""
    if config.HasField("long_lived_decision_s"):
        return np.full(len(ages_s), float(config.long_lived_decision_s)), float("nan")
    target = config.long_lived_target_recall
    return decision_thresholds_at_recall(
        model, validation, ages_s, target_recall=target,
        observation_end_us=split.split_time_us,
        threshold_s=float(config.long_lived_threshold_s)), float(target)


def evaluate_remaining_lifetime(model, split: TimeSplit, config, validation: pd.DataFrame
                                ) -> Dict[str, pd.DataFrame]:
    """The tables of a remaining-lifetime model on the test part: long-lived classification
    at arrival and by absolute age (decisions from the validation slice), F1 by uptime
    quantile and the |log10 error| histogram (uptime quantiles of the true lifetime)."""
    test, observation_end_us = split.test, split.observation_end_us
    threshold_s = float(config.long_lived_threshold_s)
    decisions_s, target_recall = long_lived_decisions(model, validation, split, config,
                                                      uptime_ages_s(config))
    # The quantile view has no decision of its own: the explicit one, else the threshold.
    quantile_decision_s = (float(config.long_lived_decision_s)
                           if config.HasField("long_lived_decision_s") else threshold_s)
    predictions = predict_at_uptime_quantiles(
        model, test, n_quantiles=config.num_uptime_quantiles,
        observation_end_us=observation_end_us)
    scheme = {"augmentation": getattr(model, "augmentation_", None)}
    return {
        **long_lived_tables(model, split, config, decisions_s, target_recall),
        "lifetime_f1_by_uptime": f1_by_uptime(
            *predictions, threshold_s=threshold_s,
            decision_threshold_s=quantile_decision_s).assign(**scheme),
        "lifetime_error_histogram": error_histogram(
            *predictions, cap_s=float(config.lifetime_cap_s),
            min_remaining_s=config.min_remaining_s).assign(**scheme),
    }


def evaluate_long_lived(model, split: TimeSplit, config, validation: pd.DataFrame
                        ) -> Dict[str, pd.DataFrame]:
    """The table of a long-lived classifier on the test part ([Barbalho23] Tables 1, 3); its
    decision probability was set at fit time (`LaClassifier.target_recall`)."""
    target = model.target_recall
    return {"lifetime_la_classifier": with_trivial_baselines(la_classifier_metrics(
        model, split.test, observation_end_us=split.observation_end_us,
        recalls=DEFAULT_RECALLS), split).assign(
            target_recall=float("nan") if target is None else float(target))}


def with_trivial_baselines(table: pd.DataFrame, split: TimeSplit) -> pd.DataFrame:
    """`table` (rows of n, n_positive, threshold_s) with what a model must beat: the
    training period's long-lived rate at each row's threshold (observed until the split)
    and the F1 of calling every test instance long-lived and of calling them long-lived at
    that rate (`trivial_f1s`)."""
    rates = [long_lived_rate(split.train, observation_end_us=split.split_time_us,
                             threshold_s=float(threshold_s))
             for threshold_s in table["threshold_s"]]
    f1s = [trivial_f1s(int(n), int(positive), rate)
           for n, positive, rate in zip(table["n"], table["n_positive"], rates)]
    return table.assign(train_positive_rate=rates,
                        f1_every_long_lived=[every for every, _ in f1s],
                        f1_at_train_rate=[at_rate for _, at_rate in f1s])


def long_lived_tables(model, split: TimeSplit, config, decisions: np.ndarray,
                      target_recall: float) -> Dict[str, pd.DataFrame]:
    """"Lives beyond long_lived_threshold_s" on the test part at arrival and at each age of
    the grid, with the model's `decisions` per age."""
    test, observation_end_us = split.test, split.observation_end_us
    threshold_s = float(config.long_lived_threshold_s)
    labels = {"target_recall": target_recall,
              "augmentation": getattr(model, "augmentation_", None)}
    return {
        "lifetime_long_lived": with_trivial_baselines(long_lived_metrics(
            model, test, observation_end_us=observation_end_us, threshold_s=threshold_s,
            decision_threshold_s=decisions[0], recalls=DEFAULT_RECALLS), split
        ).assign(**labels),
        "lifetime_f1_by_age": long_lived_by_age(
            model, test, uptime_ages_s(config), decisions,
            observation_end_us=observation_end_us, threshold_s=threshold_s,
            recalls=(0.70,)).assign(**labels),
    }


def evaluate_long_lived_by_age(model, split: TimeSplit, config, validation: pd.DataFrame
                               ) -> Dict[str, pd.DataFrame]:
    """The uptime classifier's rows of the regressors' long-lived tables, its decision
    probabilities chosen per age on the validation slice (long_lived_decision_s, a
    lifetime, does not apply to it)."""
    target = float(config.long_lived_target_recall)
    decisions = decision_thresholds_at_recall(
        model, validation, uptime_ages_s(config), target_recall=target,
        observation_end_us=split.split_time_us,
        threshold_s=float(config.long_lived_threshold_s))
    return long_lived_tables(model, split, config, decisions, target)


# What each kind of model is evaluated with (by the registry entry's `predicts`).
EVALUATIONS = {REMAINING_LIFETIME: evaluate_remaining_lifetime,
               LONG_LIVED: evaluate_long_lived,
               LONG_LIVED_BY_AGE: evaluate_long_lived_by_age}


def arrival_decision(name: str, model, split: TimeSplit, config,
                     validation: pd.DataFrame) -> Tuple[float, float]:
    """(threshold_s, decision) of the model's "long-lived" answer at arrival, as its other
    tables decide it: a classifier's class threshold and decision probability; for the
    others long_lived_threshold_s and their decision at age 0."""
    predicts = LIFETIME_MODELS[name].predicts
    if predicts == LONG_LIVED:
        return float(model.threshold_s), float(model.decision_probability_)
    threshold_s = float(config.long_lived_threshold_s)
    if predicts == REMAINING_LIFETIME:
        decisions, _ = long_lived_decisions(model, validation, split, config, (0.0,))
    else:
        decisions = decision_thresholds_at_recall(
            model, validation, (0.0,), target_recall=float(config.long_lived_target_recall),
            observation_end_us=split.split_time_us, threshold_s=threshold_s)
    return threshold_s, float(decisions[0])


def by_period(models: Mapping[str, object], split: TimeSplit, config,
              validation: pd.DataFrame) -> pd.DataFrame:
    """The LIFETIME_BY_PERIOD rows of every model: its answers at arrival on the test
    instances, scored per evaluation_period_s after the split."""
    test = split.test
    duration_s, finished = observed_lifetimes(test, split.observation_end_us)
    start_us = test["start_time"].to_numpy(np.int64)
    frames = []
    for name, model in models.items():
        threshold_s, decision = arrival_decision(name, model, split, config, validation)
        frames.append(metrics_by_period(
            arrival_scores(model, model.encode(test)), start_us, duration_s, finished,
            split_time_us=split.split_time_us, period_s=float(config.evaluation_period_s),
            threshold_s=threshold_s, decision_threshold=decision,
            cap_s=float(config.lifetime_cap_s)).assign(model=name))
    return pd.concat(frames, ignore_index=True)


def feature_importance(models: Mapping[str, object]) -> pd.DataFrame:
    """The LIFETIME_FEATURE_IMPORTANCE rows of the boosted models among `models`."""
    frames = [model.feature_importance().assign(model=name)
              for name, model in models.items() if hasattr(model, "feature_importance")]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def evaluate(models: Mapping[str, object], split: TimeSplit, config
             ) -> Dict[str, pd.DataFrame]:
    """The evaluation tables of the fitted models {registry name: model} on the test part,
    by table name; each row names its model."""
    validation = validation_instances(split, config)
    parts: Dict[str, list] = {}
    for name, model in models.items():
        evaluation = EVALUATIONS[LIFETIME_MODELS[name].predicts]
        for table, frame in evaluation(model, split, config, validation).items():
            parts.setdefault(table, []).append(frame.assign(model=name))
    tables = {table: pd.concat(frames, ignore_index=True) for table, frames in parts.items()}
    tables["lifetime_concordance"] = concordance_table(
        models, split.test, observation_end_us=split.observation_end_us,
        cap_s=float(config.lifetime_cap_s))
    tables["lifetime_by_period"] = by_period(models, split, config, validation)
    tables["lifetime_feature_importance"] = feature_importance(models)
    return tables


def train_variant(split: TimeSplit, config, model_dir: ModelDir, variant: str
                  ) -> Dict[str, pd.DataFrame]:
    """Fits, saves and evaluates every model the (variant's) config asks for; the tables by
    name, each row naming the variant."""
    fitted = fit_models(split, config, variant)
    model_rows = [save_model(name, f, model_dir, split.split_time_us)
                  for name, f in fitted.items()]
    of = "" if variant == "default" else f" of variant {variant}"
    with progress.Heartbeat(f"lifetime: evaluating {len(fitted)} models{of} on "
                            f"{len(split.test):,} test instances"):
        frames = evaluate({name: f.model for name, f in fitted.items()}, split, config)
    frames["lifetime_models"] = pd.DataFrame(model_rows)
    return {name: frame.assign(variant=variant) for name, frame in frames.items()
            if len(frame)}


def train_and_evaluate(element, config, model_dir: ModelDir):
    """(key, {instances, span, cut}) → (table name, Arrow table) pairs of TRAINING_TABLES:
    `instances` the tables (or Spilled references) of the training sample's rows, `span`
    the whole trace's (it sets the split), `cut` the sample's (`sampling.py`).

    Raises:
      RunFailed: no instance to train on or to test on, naming the field whose split or cap
        caused it.
    """
    _, grouped = element
    (span,), ((rows, _),) = grouped["span"], grouped["cut"]
    # In a fixed order: runners deliver the tables in any order, and LightGBM's histogram
    # bins come from a sample of rows that depends on it.
    instances = sharding.concat(map(spill.load, grouped["instances"]), schemas.INSTANCES).sort_by(
        [("start_time", "ascending"), ("instance_id", "ascending")])
    if instances.num_rows < rows:
        progress.report("lifetime: training and evaluating on a sample of %s of the %s "
                        "instance rows (lifetime_model.max_training_instances)",
                        f"{instances.num_rows:,}", f"{rows:,}")
    parts = partition_instances(instances.to_pandas(), config.trace_start_us)
    if not len(parts.used):
        raise RunFailed(f"lifetime stage: no usable instance ({instances.num_rows} read, "
                        f"{len(parts.rejected)} rejected, {len(parts.before_trace)} started "
                        "before the trace)")
    split = split_instances(parts.used, config, span)
    split_field = "split_time_us" if config.HasField("split_time_us") else "train_fraction"
    for name, part in (("training", split.train), ("test", split.test)):
        if not len(part):
            raise RunFailed(f"lifetime_model.{split_field}: no {name} instance with the split "
                            f"at {split.split_time_us} µs (instances start from "
                            f"{parts.used['start_time'].min()} µs to "
                            f"{parts.used['start_time'].max()} µs); change train_fraction "
                            "or split_time_us")
    if not labelled_mask(split, config).any():
        raise RunFailed(f"lifetime_model.lifetime_cap_s: no training instance started "
                        f"lifetime_cap_s ({config.lifetime_cap_s} s) before the split at "
                        f"{split.split_time_us} µs, so no label is known; lower "
                        "lifetime_cap_s or raise train_fraction")
    parts_by_table: Dict[str, List[pd.DataFrame]] = {}
    for variant, variant_config in variants(config):
        variant_dir = model_dir.of_variant(variant) if config.variant else model_dir
        for name, frame in train_variant(split, variant_config, variant_dir, variant).items():
            parts_by_table.setdefault(name, []).append(frame)
    frames = {name: pd.concat(frames, ignore_index=True)
              for name, frames in parts_by_table.items()}
    frames["lifetime_split"] = split_counts(split, parts.before_trace, config)
    for name, frame in frames.items():
        yield name, pa.Table.from_pandas(frame, schema=schemas.TABLES[name],
                                         preserve_index=False)
