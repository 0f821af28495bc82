"""The placement section ([Ling25] §6, [Barbalho23]): empty hosts over time with each policy's
own upper bound, the summary per policy and lifetime source with failed placements beside the
gains, and the noisy-oracle accuracy sweep ([Ling25ext] Fig. 15)."""

import numpy as np
import pandas as pd
from matplotlib import pyplot as plt

from pipelines.report.figures import line_style

US_PER_H = 3.6e9


def shown_replays(summary: pd.DataFrame):
    """(pool, lifetime source) the figures show: the largest pool, oracle lifetimes when
    configured, replays without defragmentation."""
    pool = summary.loc[summary["num_hosts"].idxmax(), "pool"]
    sources = list(dict.fromkeys(summary["lifetime_source"]))
    return pool, "oracle" if "oracle" in sources else sources[0]


def empty_hosts_over_time(series: pd.DataFrame, pool: str, source: str):
    """Empty hosts % per policy over time; each policy's upper bound ([Ling25ext] App. G.2) in its
    colour, dashed: the bound depends on the demand each policy has placed."""
    shown = series[(series["pool"] == pool) & (series["lifetime_source"] == source)
                   & (series["defrag"] == "none")]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for i, (policy, rows) in enumerate(shown.groupby("policy", sort=True)):
        rows = rows.sort_values("time")
        hours = rows["time"] / US_PER_H
        style = line_style(i)
        ax.plot(hours, rows["empty_hosts_pct"], label=policy, color=style["color"], lw=1.4)
        ax.plot(hours, rows["upper_bound_empty_hosts_pct"], color=style["color"], lw=0.9,
                linestyle="--", alpha=0.8, label=f"{policy} upper bound")
    ax.set_xlabel("trace time (h)")
    ax.set_ylabel("empty hosts (% of hosts)")
    ax.set_title(f"Empty hosts over time: pool {pool}, {source} lifetimes (dashed: each "
                 "policy's upper bound)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def _grouped_bars(ax, table: pd.DataFrame, annotate=None):
    """Bars of `table` (index: policy, columns: lifetime source); returns the bar x centres
    per (policy, source)."""
    policies, sources = list(table.index), list(table.columns)
    width = 0.8 / max(len(sources), 1)
    centres = {}
    for j, source in enumerate(sources):
        x = np.arange(len(policies)) + (j - (len(sources) - 1) / 2) * width
        ax.bar(x, table[source].to_numpy(np.float64), width, label=source, color=f"C{j}")
        for k, policy in enumerate(policies):
            centres[policy, source] = x[k]
    ax.set_xticks(np.arange(len(policies)))
    ax.set_xticklabels(policies, rotation=30, ha="right", fontsize=8)
    return centres


def summary_bars(summary: pd.DataFrame, pool: str):
    """Three panels per policy and lifetime source: empty hosts % with the policy's own upper
    bound, the difference vs Best-Fit (pp) with its failed placements written on the bar, and
    the failed placements themselves."""
    plain = summary[(summary["pool"] == pool) & (summary["defrag"] == "none")]

    def pivot(column):
        return plain.pivot_table(index="policy", columns="lifetime_source", values=column,
                                 aggfunc="first")

    fig, (ax_empty, ax_gain, ax_failed) = plt.subplots(1, 3, figsize=(16, 4.6))
    centres = _grouped_bars(ax_empty, pivot("empty_hosts_pct"))
    bound = pivot("upper_bound_empty_hosts_pct")
    for (policy, source), x in centres.items():
        ax_empty.plot([x - 0.12, x + 0.12], [bound.loc[policy, source]] * 2, color="black",
                      lw=2, label="upper bound (per replay)" if x == min(centres.values())
                      else None)
    ax_empty.set_ylabel("empty hosts (% of hosts, mean)")
    ax_empty.set_title("(a) empty hosts and each replay's upper bound", fontsize=10)
    ax_empty.legend(fontsize=7, title="lifetimes", title_fontsize=7, loc="lower right")
    failed = pivot("failed_placements")
    centres = _grouped_bars(ax_gain, pivot("empty_hosts_pct_vs_best_fit_pp"))
    for (policy, source), x in centres.items():
        n = failed.loc[policy, source]
        if n > 0:
            ax_gain.annotate(f"{int(n):,} failed", (x, 0), rotation=90, fontsize=7,
                             color="darkred", ha="center", va="bottom",
                             xytext=(0, 3), textcoords="offset points")
    ax_gain.axhline(0, color="black", lw=0.8)
    ax_gain.set_ylabel("empty hosts vs Best-Fit (pp)")
    ax_gain.set_title("(b) vs Best-Fit, same lifetimes (red: failed placements)", fontsize=10)
    _grouped_bars(ax_failed, failed)
    ax_failed.set_ylabel("failed placements (VMs, after warm-up)")
    ax_failed.set_title("(c) failed placements", fontsize=10)
    fig.suptitle(f"Pool {pool}: means over the metric window")
    fig.tight_layout()
    return fig


def accuracy_sweep(summary: pd.DataFrame, pool: str):
    """Empty hosts vs Best-Fit (pp) against the noisy oracle's accuracy (the oracle at 1),
    per policy: the mean over the accuracy's seeds, with their range as an error bar when
    there are several; None without noisy-oracle replays."""
    plain = summary[(summary["pool"] == pool) & (summary["defrag"] == "none")].copy()
    plain["accuracy"] = plain["noisy_oracle_accuracy"].where(
        plain["lifetime_source"] != "oracle", 1.0)
    sweep = plain.dropna(subset=["accuracy"])
    if sweep["noisy_oracle_accuracy"].nunique() == 0:
        return None
    gains = (sweep.groupby(["policy", "accuracy"])["empty_hosts_pct_vs_best_fit_pp"]
             .agg(["mean", "min", "max"]).reset_index())
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (policy, rows) in enumerate(gains.groupby("policy", sort=True)):
        style = dict(line_style(i), markevery=1)
        ax.plot(rows["accuracy"], rows["mean"], label=policy, **style)
        ax.errorbar(rows["accuracy"], rows["mean"], capsize=2, linestyle="none",
                    color=style["color"], yerr=[rows["mean"] - rows["min"],
                                                rows["max"] - rows["mean"]])
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xlabel("noisy-oracle accuracy (1 = oracle)")
    ax.set_ylabel("empty hosts vs Best-Fit (pp)")
    # Results written before the seed column existed have one seed per accuracy.
    seeds = (sweep.groupby("accuracy")["noisy_oracle_seed"].nunique().max()
             if "noisy_oracle_seed" in sweep else 1)
    spread = f", mean and range over {seeds} seeds" if seeds > 1 else ""
    ax.set_title(f"Accuracy sweep ([Ling25ext] Fig. 15): pool {pool}, "
                 f"{sweep['accuracy'].nunique()} accuracies{spread}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def section(tables: dict, config, figures) -> str:
    """The placement section's HTML, or "" when the run has no placement tables."""
    summary = tables.get("placement_summary")
    if summary is None or not len(summary):
        return ""
    pool, source = shown_replays(summary)
    parts = ["<h2>Placement</h2>",
             figures.html(empty_hosts_over_time(tables["placement_timeseries"], pool, source),
                          "placement_empty_hosts", "Empty hosts over time per policy, with "
                          "each policy's upper bound"),
             figures.html(summary_bars(summary, pool), "placement_summary",
                          "Summary per policy and lifetime source, failed placements shown")]
    sweep = accuracy_sweep(summary, pool)
    if sweep is not None:
        parts.append(figures.html(sweep, "placement_accuracy_sweep",
                                  "Accuracy sweep of the noisy oracle"))
    columns = ["pool", "policy", "lifetime_source", "defrag", "empty_hosts_pct",
               "upper_bound_empty_hosts_pct", "empty_hosts_pct_vs_best_fit_pp",
               "packing_density_pct", "failed_placements", "migrations"]
    parts.append("<h3>Summary</h3>" + summary.sort_values(
        ["pool", "lifetime_source", "defrag", "policy"])[columns].round(2).to_html(index=False))
    return "\n".join(parts)
