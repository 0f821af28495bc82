"""A run's lifetime feature variants read as an ablation: each model's headline metric from
the config's first variant to its best one, and what each variant adds to the one before."""

import pandas as pd

from pipelines.report import page, paper_numbers

# The metric each table's models are judged by in the ablation.
HEADLINES = (("lifetime_concordance", "c_index", "C-index"),
             ("lifetime_la_classifier", "auc", "AUC"))


def variant_names(config) -> list:
    """The variants' names in the config's order ([] without variants)."""
    return [variant.name for variant in config.lifetime_model.variant]


def _headline(table: pd.DataFrame, column: str, variants: list) -> dict:
    """{model: [(variant, value)] in the config's order} of the models that have `column`
    in every variant."""
    values = {}
    for model, rows in table.dropna(subset=[column]).groupby("model", sort=False):
        by_variant = dict(zip(rows["variant"], rows[column]))
        if all(v in by_variant for v in variants):
            values[model] = [(v, float(by_variant[v])) for v in variants]
    return values


def sentences(tables: dict, config) -> list:
    """One sentence per headline metric: each model's value in the first variant and in its
    best, with the gain; nothing for a run with fewer than two variants."""
    variants = variant_names(config)
    if len(variants) < 2:
        return []
    said = [f"Ablation over {len(variants)} feature variants, in the config's order: "
            + " → ".join(variants) + "."]
    for name, column, label in HEADLINES:
        if name not in tables or column not in tables[name]:
            continue
        steps = []
        for model, values in _headline(tables[name], column, variants).items():
            (first, start), (best, top) = values[0], max(values, key=lambda item: item[1])
            steps.append(f"{model} {start:.3f} ({first}) → {top:.3f} ({best}), "
                         f"{page.signed(top - start, 3)}")
        if steps:
            said.append(f"{label}, from the first variant to the best: " + "; ".join(steps)
                        + ".")
    return said


def features_table(config) -> pd.DataFrame:
    """Per variant in the config's order, its features: the first's in full, each other's
    as what it adds to (+) and drops from (−) the variant before it, and the paper's numbers
    for the variants a reproduction claim compares with them (paper_numbers); empty without
    variants."""
    variants = list(config.lifetime_model.variant)
    if len(variants) < 2:
        return pd.DataFrame()
    every = "every feature of the instances table"
    rows = [{"variant": variants[0].name, "features": ", ".join(variants[0].feature) or every}]
    for before, variant in zip(variants, variants[1:]):
        features, earlier = list(variant.feature), list(before.feature)
        added = [f for f in features if f not in earlier]
        dropped = [f for f in earlier if f not in features]
        text = "; ".join(part for part in (
            "+ " + ", ".join(added) if added else "",
            "− " + ", ".join(dropped) if dropped else "") if part)
        rows.append({"variant": variant.name,
                     "features": every if not features else text or "the same"})
    frame = pd.DataFrame(rows).rename(columns={"features": "features (vs the variant above)"})
    paper = paper_numbers.by_variant(config)
    if paper:
        frame[paper_numbers.COLUMN] = [paper.get(name, "") for name in frame["variant"]]
    return frame
