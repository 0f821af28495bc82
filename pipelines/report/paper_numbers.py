"""The papers' numbers that a run's results stand beside: [Barbalho23] Table 1's LightGBM
classifier per feature set, beside the Google 2011 jobs' variants that stand for those sets."""

from typing import Dict

# [Barbalho23] §5.1, Table 1 (LGB): LA's 2-hour classifier with the small and the large
# customer feature set, by metric column of lifetime_la_classifier.
TABLE1_WHERE = "§5.1, Table 1 (LGB)"
TABLE1 = {"small": {"auc": 0.89, "average_precision": 0.46, "f1": 0.45},
          "large": {"auc": 0.94, "average_precision": 0.62, "f1": 0.62}}
TABLE1_LABELS = {"auc": "AUC", "average_precision": "average precision", "f1": "F1"}
# The variants of configs/google_2011_lifetime.textproto that stand for Table 1's sets (the
# Google 2011 trace names a user, not a subscription: the large set of the user only).
GOOGLE_2011_FEATURE_SETS = {"customer_small": "small", "customer_large_user_only": "large"}
COLUMN = f"[Barbalho23] {TABLE1_WHERE}, LA's classifier"


def table1_text(feature_set: str) -> str:
    """"AUC 0.89, average precision 0.46, F1 0.45": Table 1's numbers for `feature_set`."""
    return ", ".join(f"{TABLE1_LABELS[column]} {value:.2f}"
                     for column, value in TABLE1[feature_set].items())


def by_variant(config) -> Dict[str, str]:
    """{variant name: the paper's numbers} for a Google 2011 run's lifetime variants that
    stand for one of Table 1's feature sets ("the small feature set: AUC 0.89, ..."); {} for
    any other run."""
    if config.WhichOneof("source") != "google_2011":
        return {}
    return {variant.name: f"{GOOGLE_2011_FEATURE_SETS[variant.name]} feature set: "
                          f"{table1_text(GOOGLE_2011_FEATURE_SETS[variant.name])}"
            for variant in config.lifetime_model.variant
            if variant.name in GOOGLE_2011_FEATURE_SETS}
