"""The lifetime section ([Ling25] §3, [Barbalho23] §3.2): F1 of "long-lived" as the uptime grows
(Fig. 9), the |log10 error| histogram (App. C, Fig. 12) and the models compared one metric per
panel, LA's classifier included."""

import numpy as np
import pandas as pd
from matplotlib import pyplot as plt
from matplotlib.ticker import MaxNLocator

from pipelines.report import lifetime_ablation, page
from pipelines.report.figures import legend_below, legend_right, line_style
from predictors.lifetime.evaluation import trivial_f1s

# A test recall this far below the target the decision was set for is said, and an F1 at
# most this far above calling every instance long-lived.
RECALL_SHORTFALL = 0.1
TRIVIAL_MARGIN = 0.005
COMPARED = (("c_index", "C-index (arrival)"), ("auc", "AUC of \"long-lived\""),
            ("average_precision", "average precision"), ("f1", "F1 at the decision"))


def f1_vs_uptime(by_age: pd.DataFrame, by_uptime: pd.DataFrame):
    """(a) F1 by absolute uptime (no leak), (b) precision at recall 0.70 by absolute uptime,
    (c) F1 by uptime quantile of the true lifetime (the paper's view, which leaks it)."""
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2), sharey=True)
    for i, (model, rows) in enumerate(by_age.groupby("model", sort=False)):
        rows = rows[rows["uptime_s"] > 0].sort_values("uptime_s")
        axes[0].plot(rows["uptime_s"] / 3600, rows["f1"], label=model, **line_style(i))
        axes[1].plot(rows["uptime_s"] / 3600, rows["precision_at_recall_70"], label=model,
                     **line_style(i))
    for i, (model, rows) in enumerate(by_uptime.groupby("model", sort=False)):
        rows = rows.sort_values("quantile")
        axes[2].plot(rows["quantile"], rows["f1"], label=model, **line_style(i))
    for ax in axes[:2]:
        ax.set_xscale("log")
        ax.set_xlabel("uptime (h, absolute; arrival not shown)")
    axes[2].set_xlabel("uptime quantile (uptime = q / 20 of the true lifetime)")
    titles = ("(a) F1 by absolute uptime", "(b) precision at recall 0.70",
              "(c) F1 by uptime quantile (leaks the lifetime)")
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("'lives beyond the threshold' (0-1)")
    axes[0].set_ylim(0, 1.02)
    fig.tight_layout()
    legend_below(fig, axes)
    return fig


def error_histogram(histogram: pd.DataFrame):
    """Per model, the share of predictions per |log10 error| bin at arrival and with every
    reprediction."""
    names = list(dict.fromkeys(histogram["model"]))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), sharey=True,
                             squeeze=False)
    for ax, name in zip(axes[0], names):
        rows = histogram[histogram["model"] == name].sort_values("error_lower")
        labels = [f"{lo:g}-{hi:g}" if np.isfinite(hi) else f">{lo:g}"
                  for lo, hi in zip(rows["error_lower"], rows["error_upper"])]
        x = np.arange(len(rows))
        ax.bar(x - 0.2, rows["initial_fraction"], width=0.4, label="at arrival")
        ax.bar(x + 0.2, rows["with_repredictions_fraction"], width=0.4,
               label="with repredictions")
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=60, fontsize=7)
        ax.set_xlabel("|log10 error| (decades)")
        ax.set_title(name, fontsize=10)
    axes[0][0].set_ylabel("share of predictions")
    fig.tight_layout()
    legend_below(fig, axes[0][:1])
    return fig


def by_variant(tables: dict) -> dict:
    """The lifetime tables with each model named "<model>@<variant>" when the run trained
    feature variants (lifetime_model.variant), so that every figure and table tells them
    apart; as they are otherwise."""
    variants = set(tables["lifetime_models"]["variant"]) if "lifetime_models" in tables else set()
    if variants <= {"default"}:
        return tables
    renamed = dict(tables)
    for name, table in tables.items():
        if name.startswith("lifetime_") and {"model", "variant"} <= set(table.columns):
            renamed[name] = table.assign(model=table["model"] + "@" + table["variant"])
    return renamed


def aging(by_period: pd.DataFrame):
    """AUC and F1 of each model's answer at arrival per period after the split: the age of
    the model ([Barbalho23] Fig. 14)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharex=True)
    for i, (model, rows) in enumerate(by_period.groupby("model", sort=False)):
        rows = rows.sort_values("period")
        for ax, metric in zip(axes, ("auc", "f1")):
            ax.plot(rows["period"], rows[metric], label=model, **line_style(i))
    for ax, title in zip(axes, ("AUC of \"long-lived\" at arrival", "F1 at the decision")):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("periods after the split (evaluation_period_s)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # periods are whole
        ax.grid(alpha=0.3)
        ax.set_ylim(0, 1.02)
    legend_right(axes[1])
    fig.tight_layout()
    return fig


def model_table(tables: dict) -> pd.DataFrame:
    """One row per model: C-index, and the long-lived classification at arrival (the
    regressors from lifetime_long_lived, LA's classifier from lifetime_la_classifier) with
    what no model needs (the F1 of calling every instance long-lived) and the recall the
    decision was set for."""
    classified = pd.concat([tables[name] for name in ("lifetime_long_lived",
                                                      "lifetime_la_classifier")
                            if name in tables], ignore_index=True)
    columns = ["model", "n", "n_positive", "threshold_s", "precision", "recall",
               "target_recall", "f1", "f1_every_long_lived", "auc", "average_precision",
               "precision_at_recall_70"]
    classified = classified.reindex(columns=columns)
    if classified["f1_every_long_lived"].isna().all():  # results written before the column
        classified["f1_every_long_lived"] = [
            trivial_f1s(int(n), int(positive), float("nan"))[0]
            for n, positive in zip(classified["n"], classified["n_positive"])]
    table = tables["lifetime_concordance"][["model", "c_index"]].merge(
        classified, on="model", how="outer")
    return table.set_index("model")


def model_comparison(table: pd.DataFrame):
    """One panel per metric, one horizontal bar per model, the models' names once on the
    shared y axis (missing: no bar, "n/a")."""
    models = list(table.index)
    fig, axes = plt.subplots(1, len(COMPARED), figsize=(4 * len(COMPARED),
                                                        1.2 + 0.32 * len(models)), sharey=True)
    y = np.arange(len(models))
    for ax, (metric, title) in zip(axes, COMPARED):
        values = table[metric].to_numpy(np.float64)
        ax.barh(y, np.nan_to_num(values), color=[f"C{i % 10}" for i in range(len(models))])
        for i, value in enumerate(values):
            ax.annotate("n/a" if np.isnan(value) else f"{value:.2f}", (np.nan_to_num(value), i),
                        ha="left", va="center", fontsize=7, xytext=(2, 0),
                        textcoords="offset points")
        if metric in ("c_index", "auc"):
            ax.axvline(0.5, color="gray", linestyle="--", lw=0.8)  # chance
        ax.set_title(title, fontsize=10)
        ax.set_xlim(0, 1.12)
    axes[0].set_yticks(y)
    axes[0].set_yticklabels(models, fontsize=8)
    axes[0].invert_yaxis()
    fig.tight_layout()
    return fig


def findings(tables: dict, config) -> str:
    """The lifetime block of the findings: the models ranked only against models scored on
    the same test instances with the same labels (one group per "long-lived" threshold),
    each beside what no model needs, and the ablation when the run has feature variants."""
    if "lifetime_concordance" not in tables or not len(tables["lifetime_concordance"]):
        return ""
    renamed = by_variant(tables)
    table = in_config_order(model_table(renamed).reset_index(), tables, config)
    sentences = [" ".join(["Answers at arrival; a model is ranked only among those scored "
                           "on the same test instances and labels."]
                          + _concordance_sentences(renamed["lifetime_concordance"]))]
    for _, group in _comparable_groups(table):
        sentences.append(_threshold_sentence(group))
    trivial = table[table["f1"] <= table["f1_every_long_lived"] + TRIVIAL_MARGIN]
    if len(trivial):
        sentences.append("No better than calling every instance long-lived: " + ", ".join(
            f"{row.model} (F1 {row.f1:.3f} vs {row.f1_every_long_lived:.3f})"
            for row in trivial.itertuples()) + ".")
    short = table[table["recall"] < table["target_recall"] - RECALL_SHORTFALL]
    if len(short):
        sentences.append("Test recall below the target its decision was set for on the "
                         "training period: " + ", ".join(
                             f"{row.model} {row.recall:.2f} ({row.target_recall:.2f})"
                             for row in short.itertuples()) + ".")
    sentences += lifetime_ablation.sentences(tables, config)
    features = lifetime_ablation.features_table(config)
    return page.finding("lifetime", "Lifetime models", sentences, [_box_table(table)] + (
        [page.table(features, classes="wrap")] if len(features) else []))


def in_config_order(table: pd.DataFrame, tables: dict, config) -> pd.DataFrame:
    """`table` (a `model` column, "<model>@<variant>" with variants) with the variants in
    the config's order, then the models in the order the run trained them."""
    models = list(dict.fromkeys(tables["lifetime_models"]["name"])) \
        if "lifetime_models" in tables else []
    variants = [v.name for v in config.lifetime_model.variant] or ["default"]
    parts = table["model"].str.partition("@")
    base, variant = parts[0], parts[2].where(parts[2] != "", "default")
    key = [(variants.index(v) if v in variants else len(variants),
            models.index(b) if b in models else len(models)) for b, v in zip(base, variant)]
    order = sorted(range(len(table)), key=lambda i: key[i])
    return table.iloc[order].reset_index(drop=True)


def _comparable_groups(table: pd.DataFrame):
    """(key, rows) per set of models scored on the same question: the same threshold, test
    instances and long-lived ones; by threshold, then size."""
    scored = table.dropna(subset=["threshold_s"])
    keys = ["threshold_s", "n", "n_positive"]
    return sorted(scored.groupby(keys, sort=False), key=lambda item: item[0])


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g} h"


def _concordance_sentences(concordance: pd.DataFrame) -> list:
    """The best ranking of lifetimes among the models scored on the same instances."""
    sentences = []
    for n, rows in concordance.dropna(subset=["c_index"]).groupby("n"):
        best = rows.loc[rows["c_index"].idxmax()]
        of = f"best of {len(rows)}" if len(rows) > 1 else "only"
        sentences.append(f"C-index ({int(n):,} instances, 0.5 = chance): {of} "
                         f"{best['model']}, {best['c_index']:.3f}.")
    return sentences


def _threshold_sentence(group: pd.DataFrame) -> str:
    """The group's best AUC and its F1 against calling every instance long-lived."""
    first = group.iloc[0]
    n, positive = int(first["n"]), int(first["n_positive"])
    base = positive / max(n, 1)
    head = (f"Long-lived = beyond {_hours(first['threshold_s'])} ({n:,} instances, "
            f"{100 * base:.1f} % long-lived): ")
    if not group["auc"].notna().any():
        return head + "no AUC (the test instances lack a class)."
    best = group.loc[group["auc"].idxmax()]
    every = first["f1_every_long_lived"]
    return (head + f"{'best AUC' if len(group) > 1 else 'AUC'} {best['model']}, "
            f"{best['auc']:.3f} (AP {best['average_precision']:.3f}; chance 0.5 and "
            f"{base:.3f}), F1 {best['f1']:.3f}"
            + (f" against {every:.3f} calling all long-lived." if pd.notna(every) else "."))


def _box_table(table: pd.DataFrame) -> pd.DataFrame:
    """The findings' table: one row per model, grouped by the question it was scored on."""
    order = sorted(range(len(table)), key=lambda i: (np.nan_to_num(
        table["threshold_s"].iat[i], nan=np.inf), table["n"].iat[i]))
    shown = table.iloc[order]
    return pd.DataFrame({
        "model": shown["model"],
        "beyond": shown["threshold_s"].map(lambda s: "—" if pd.isna(s) else _hours(s)),
        "C-index": shown["c_index"].round(3), "AUC": shown["auc"].round(3),
        "F1": shown["f1"].round(3), "F1 all long": shown["f1_every_long_lived"].round(3),
        "recall (target)": [_recall_text(r, t) for r, t in zip(shown["recall"],
                                                               shown["target_recall"])]})


def _recall_text(recall: float, target: float) -> str:
    if pd.isna(recall):
        return "—"
    return f"{recall:.2f}" + (f" ({target:.2f})" if pd.notna(target) else "")


def section(tables: dict, config, figures) -> str:
    """The lifetime section's HTML, or "" when the run has no lifetime tables."""
    if "lifetime_concordance" not in tables or not len(tables["lifetime_concordance"]):
        return ""
    tables = by_variant(tables)
    table = in_config_order(model_table(tables).reset_index(), tables, config).set_index("model")
    aged = ([figures.html(aging(tables["lifetime_by_period"]), "lifetime_aging",
                          "The models by period after the split ([Barbalho23] Fig. 14)")]
            if len(tables.get("lifetime_by_period", ())) else [])
    return "\n".join([
        '<h2 id="lifetime">Lifetime models</h2>',
        figures.html(f1_vs_uptime(tables["lifetime_f1_by_age"],
                                  tables["lifetime_f1_by_uptime"]),
                     "lifetime_f1_vs_uptime",
                     "F1 of \"long-lived\" vs uptime ([Ling25ext] Fig. 9)"),
        figures.html(error_histogram(tables["lifetime_error_histogram"]),
                     "lifetime_error_histogram", "|log10 error| of the remaining lifetime "
                     "([Ling25ext] App. C, Fig. 12)"),
        figures.html(model_comparison(table), "lifetime_model_comparison",
                     "Models compared, one metric per panel"),
        *aged,
        "<h3>Models</h3>" + page.table(table.round(3), index=True),
        "<h3>Trained models</h3>" + page.table(trained_models(tables["lifetime_models"])),
    ])


def trained_models(models: pd.DataFrame) -> pd.DataFrame:
    """The trained models' table as shown: num_trees (int64 with nulls, which pandas reads
    back as float) as whole numbers, "—" where a model has no trees."""
    shown = models[["name", "variant", "kind", "train_instances", "train_examples",
                    "num_trees"]].copy()
    shown["num_trees"] = shown["num_trees"].map(
        lambda trees: "—" if pd.isna(trees) else str(int(trees)))
    return shown

