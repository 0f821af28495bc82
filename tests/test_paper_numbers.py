"""The papers' numbers beside fleetcast's: Table 1 of [Barbalho23] beside the Google 2011
variants that stand for its feature sets, and the Azure lifetime claims over three training
fractions."""

import pathlib

from pipelines import config as run_config
from pipelines.report import lifetime_ablation, paper_numbers
from pipelines.reproduce import barbalho23, google_2011, ling25ext
from pipelines.reproduce.azure_splits import LIFETIME_RUNS, fraction_label, over_fractions
from pipelines.reproduce.claims import Spread

REPO = pathlib.Path(__file__).resolve().parents[1]


def _config(name):
    return run_config.load_config(str(REPO / "configs" / f"{name}.textproto"),
                                  check_inputs=False)


def test_the_feature_sets_name_variants_of_the_google_2011_config():
    variants = [v.name for v in _config("google_2011_lifetime").lifetime_model.variant]
    assert set(paper_numbers.GOOGLE_2011_FEATURE_SETS) <= set(variants)
    assert paper_numbers.GOOGLE_2011_FEATURE_SETS == {google_2011.SMALL: "small",
                                                      google_2011.LARGE_USER: "large"}


def test_the_ablation_table_shows_table_1_beside_the_variants_it_stands_for():
    frame = lifetime_ablation.features_table(_config("google_2011_lifetime"))
    paper = dict(zip(frame["variant"], frame[paper_numbers.COLUMN]))
    assert paper == {
        "no_customer": "",
        "customer_small": "small feature set: AUC 0.89, average precision 0.46, F1 0.45",
        "customer_large_user_only": "large feature set: AUC 0.94, average precision 0.62, "
                                    "F1 0.62",
        "customer_large": ""}


def test_a_run_of_another_trace_has_no_paper_column_even_with_the_same_variant_names():
    config = run_config.parse_config(
        'synthetic {}\nlifetime_model {\n'
        '  variant { name: "no_customer" feature: "start_hour_of_day" }\n'
        '  variant { name: "customer_small" feature: "start_hour_of_day" '
        'feature: "customer_prior_instances" }\n}\n')
    frame = lifetime_ablation.features_table(config)
    assert list(frame.columns) == ["variant", "features (vs the variant above)"]
    assert paper_numbers.by_variant(config) == {}


def test_the_reproduction_claims_quote_table_1_as_it_is():
    # The small set twice (the Azure sample's classifier and the Google 2011 jobs'), the
    # large once (the Google 2011 jobs').
    for feature_set, metrics in paper_numbers.TABLE1.items():
        for column, value in metrics.items():
            label = paper_numbers.TABLE1_LABELS[column]
            quoted = [c for c in barbalho23.CLAIMS
                      if f"({feature_set} feature set): {label} {value:.2f}" in c.text]
            assert [c.paper for c in quoted] == [value] * (2 if feature_set == "small" else 1)


def test_the_azure_lifetime_runs_differ_only_in_their_training_fraction():
    own, *others = LIFETIME_RUNS
    assert [spec.name for spec in LIFETIME_RUNS] == [
        "azure_lifetime", "azure_lifetime_train0.5", "azure_lifetime_train0.7"]
    configs = [spec.config(quick=False) for spec in LIFETIME_RUNS]
    assert [fraction_label(c) for c in configs] == [
        "trained on 60 %", "trained on 50 %", "trained on 70 %"]
    for config in configs[1:]:
        config.lifetime_model.train_fraction = configs[0].lifetime_model.train_fraction
        assert config == configs[0]
    assert own.quick_skip is None and all(spec.quick_skip for spec in others)


def test_every_azure_lifetime_claim_is_measured_at_the_three_fractions():
    names = tuple(spec.name for spec in LIFETIME_RUNS)
    for paper in (barbalho23, ling25ext):
        on_azure = [claim for claim in paper.CLAIMS if isinstance(claim.measure, Spread)
                    and claim.measure.configs[0] == "azure_lifetime"]
        assert on_azure, paper.__name__
        assert all(claim.measure.configs == names and
                   claim.measure.what == "training fraction" for claim in on_azure)
        plain = [claim for claim in paper.CLAIMS if not isinstance(claim.measure, Spread)]
        assert not [claim.text for claim in plain
                    if "azure_lifetime" in getattr(claim.measure, "configs", ())]
    assert over_fractions(str).configs == names
