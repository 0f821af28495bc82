"""The lifetime models on the real Azure V1 vmtable sample (../shared/data).

Bars were set from measurements on this sample (time split at 70 % of its 3.5 days, 30k
training and 10k test VMs drawn with a fixed seed, 60 trees): LA classifier AUC 0.79
([Barbalho23] Table 1: 0.89 with customer-history features the public trace lacks); uptime
model |log10 error| at arrival 0.38 vs 0.44 for the best constant; 0.21–0.28 once
repredicted at 40–70 % of the lifetime, where the no-uptime ablation is above 1.2;
C-index 0.66 vs 0.54 for Kaplan–Meier per request shape.
"""

import numpy as np
import pytest

from predictors.lifetime.evaluation import (
    concordance_table,
    la_classifier_metrics,
    log10_errors,
    long_lived_by_age,
    predict_at_uptime_quantiles,
)
from predictors.lifetime.examples import (
    ABSOLUTE_AGES,
    DAY_S,
    LIFETIME_FRACTIONS,
    label_known,
    make_examples,
    make_uptime_examples,
    split_time_at_fraction,
    time_split,
)
from predictors.lifetime.kaplan_meier import KaplanMeierLifetimeModel
from predictors.lifetime.la_classifier import LaClassifier
from predictors.lifetime.uptime_model import UptimeLifetimeModel

pytestmark = pytest.mark.real_data

MODEL = dict(num_trees=60, learning_rate=0.2, num_threads=1, early_stopping_rounds=0)


@pytest.fixture(scope="module")
def azure_split(azure_instances):
    split = time_split(azure_instances, split_time_at_fraction(azure_instances, 0.7))
    train = split.train.sample(30000, random_state=0).sort_values("start_time")
    test = split.test.sample(10000, random_state=0)
    return train, test, split


def test_la_classifier_separates_vms_living_beyond_two_hours(azure_split):
    train, test, split = azure_split
    classifier = LaClassifier(**MODEL).fit(train, observation_end_us=split.split_time_us)
    metrics = la_classifier_metrics(classifier, test,
                                    observation_end_us=split.observation_end_us).iloc[0]
    assert metrics["auc"] > 0.7
    # At the 85 %-recall operating point fitted on the training period ([Barbalho23] App. C.2);
    # measured 0.57, [Barbalho23] Table 1: 0.45–0.64.
    assert metrics["f1"] > 0.45
    assert metrics["average_precision"] > metrics["n_positive"] / metrics["n"] + 0.1


def test_uptime_model_beats_a_constant_and_improves_with_uptime(azure_split):
    train, test, split = azure_split
    examples, rejected = make_uptime_examples(train, observation_end_us=split.split_time_us)
    assert len(rejected) == 0
    model = UptimeLifetimeModel(**MODEL).fit(examples)
    ablation = UptimeLifetimeModel(use_uptime=False, **MODEL).fit(examples)

    lifetime_s, uptime_s, predicted = predict_at_uptime_quantiles(
        model, test, observation_end_us=split.observation_end_us)
    error = log10_errors(lifetime_s, uptime_s, predicted).mean(axis=0)
    constant_s = 10 ** np.median(examples.log10_remaining_s[examples.uptime_s == 0])
    constant_error = log10_errors(lifetime_s, uptime_s[:, :1],
                                  np.full((len(lifetime_s), 1), constant_s)).mean()
    assert error[0] < 0.95 * constant_error
    assert error[8:15].mean() < 0.75 * error[0]

    _, _, ablation_predicted = predict_at_uptime_quantiles(
        ablation, test, observation_end_us=split.observation_end_us)
    ablation_error = log10_errors(lifetime_s, uptime_s, ablation_predicted).mean(axis=0)
    assert error[8:15].mean() < 0.5 * ablation_error[8:15].mean()

    kaplan_meier = KaplanMeierLifetimeModel().fit(train, split.split_time_us)
    c_index = concordance_table({"uptime": model, "kaplan_meier": kaplan_meier}, test,
                                observation_end_us=split.observation_end_us)
    by_model = dict(zip(c_index["model"], c_index["c_index"]))
    assert by_model["uptime"] > 0.6
    assert by_model["uptime"] > by_model["kaplan_meier"]


def test_age_examples_predict_long_remaining_lifetimes_for_young_vms(azure_split):
    # Issue 11 on the real sample (1-day cap, "long" beyond 12 hours): trained on fractions
    # of the lifetime, the model's largest remaining lifetime at 1 minute of uptime is
    # minutes (measured 0.36 h on this subset, 0.13 h in configs/azure_lifetime) and it ranks
    # the VMs alive then no better than chance (AUC 0.41 here, 0.46 there); at absolute ages
    # it says up to 20.7 h here (7.9 h there) and ranks them at AUC 0.75 (0.75). At 30
    # minutes: 20.4 h vs 1.5 h here.
    train, test, split = azure_split
    labeled = train[label_known(train, split.split_time_us, DAY_S)]
    tables = {}
    for scheme in (ABSOLUTE_AGES, LIFETIME_FRACTIONS):
        examples, _ = make_examples(labeled, scheme, cap_s=DAY_S,
                                    observation_end_us=split.split_time_us)
        model = UptimeLifetimeModel(**MODEL).fit(examples)
        tables[scheme] = long_lived_by_age(
            model, test, [60, 1800], [12 * 3600] * 2, threshold_s=12 * 3600,
            observation_end_us=split.observation_end_us).set_index("uptime_s")
    ages, fractions = tables[ABSOLUTE_AGES], tables[LIFETIME_FRACTIONS]
    for uptime_s in (60, 1800):
        assert (ages.loc[uptime_s, "max_predicted_remaining_s"]
                > 5 * fractions.loc[uptime_s, "max_predicted_remaining_s"]), uptime_s
    assert ages.loc[60, "max_predicted_remaining_s"] > 2 * 3600
    assert ages.loc[60, "auc"] > 0.7 and ages.loc[60, "auc"] > fractions.loc[60, "auc"] + 0.1
