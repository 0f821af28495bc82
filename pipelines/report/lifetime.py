"""The lifetime section ([Ling25] §3, [Barbalho23] §3.2): F1 of "long-lived" as the uptime grows
(Fig. 9), the |log10 error| histogram (App. C, Fig. 12) and the models compared one metric per
panel, LA's classifier included."""

import numpy as np
import pandas as pd
from matplotlib import pyplot as plt

from pipelines.report import page
from pipelines.report.figures import legend_below, legend_right, line_style

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
        ax.grid(alpha=0.3)
        ax.set_ylim(0, 1.02)
    legend_right(axes[1])
    fig.tight_layout()
    return fig


def model_table(tables: dict) -> pd.DataFrame:
    """One row per model: C-index, and the long-lived classification at arrival (the
    regressors from lifetime_long_lived, LA's classifier from lifetime_la_classifier)."""
    classified = pd.concat([tables[name] for name in ("lifetime_long_lived",
                                                      "lifetime_la_classifier")
                            if name in tables], ignore_index=True)
    columns = ["model", "n", "n_positive", "threshold_s", "precision", "recall", "f1", "auc",
               "average_precision", "precision_at_recall_70"]
    table = tables["lifetime_concordance"][["model", "c_index"]].merge(
        classified[columns], on="model", how="outer")
    return table.set_index("model")


def model_comparison(table: pd.DataFrame):
    """One panel per metric, one bar per model (missing: no bar, e.g. no C-index)."""
    fig, axes = plt.subplots(1, len(COMPARED), figsize=(4 * len(COMPARED), 3.8), sharey=True)
    models = list(table.index)
    for ax, (metric, title) in zip(axes, COMPARED):
        values = table[metric].to_numpy(np.float64)
        ax.bar(models, np.nan_to_num(values), color=[f"C{i}" for i in range(len(models))])
        for i, value in enumerate(values):
            ax.annotate("n/a" if np.isnan(value) else f"{value:.2f}", (i, np.nan_to_num(value)),
                        ha="center", va="bottom", fontsize=7)
        if metric in ("c_index", "auc"):
            ax.axhline(0.5, color="gray", linestyle="--", lw=0.8)  # chance
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", rotation=35, labelsize=7)
    axes[0].set_ylim(0, 1.05)
    fig.tight_layout()
    return fig


def findings(tables: dict, config) -> str:
    """The lifetime block of the findings: each model's C-index and AUC / AP / F1 of
    "long-lived" on the test period (per feature variant when the run has several)."""
    if "lifetime_concordance" not in tables or not len(tables["lifetime_concordance"]):
        return ""
    table = model_table(by_variant(tables))
    shown = table[["c_index", "auc", "average_precision", "f1"]].round(3).rename(columns={
        "c_index": "C-index", "average_precision": "AP", "auc": "AUC", "f1": "F1"})
    splits = tables["lifetime_split"]
    test = splits[splits["split"] == "test"].iloc[0]
    threshold_h = config.lifetime_model.long_lived_threshold_s / 3600
    sentences = [f"{int(test['instances']):,} test instances; \"long-lived\" = beyond "
                 f"{threshold_h:g} h, at arrival."]
    if shown["AUC"].notna().any():
        best = shown["AUC"].idxmax()
        sentences.append(f"Best AUC: {best}, {shown.loc[best, 'AUC']:.3f} (AP "
                         f"{shown.loc[best, 'AP']:.3f}).")
    if shown["C-index"].notna().any():
        best = shown["C-index"].idxmax()
        sentences.append(f"Best ranking of lifetimes: {best}, C-index "
                         f"{shown.loc[best, 'C-index']:.3f}.")
    return page.finding("lifetime", "Lifetime models", sentences,
                        shown.rename_axis("model").reset_index())


def section(tables: dict, config, figures) -> str:
    """The lifetime section's HTML, or "" when the run has no lifetime tables."""
    if "lifetime_concordance" not in tables or not len(tables["lifetime_concordance"]):
        return ""
    tables = by_variant(tables)
    table = model_table(tables)
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

