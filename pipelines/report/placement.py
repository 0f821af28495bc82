"""The placement section ([Ling25] §6, [Barbalho23]): empty hosts over time with each policy's
own upper bound, the summary per policy and lifetime source with failed placements beside the
gains, the noisy-oracle accuracy sweep ([Ling25ext] Fig. 15) and, with placement.admission,
the overcommit frontier (admission.py). The figures before the frontier show the replays
admitting by requests (the first admission when none does)."""

import numpy as np
import pandas as pd
from matplotlib import pyplot as plt

from pipelines.report import admission, page
from pipelines.report.figures import legend_below, legend_right, line_style, say_none

US_PER_H = 3.6e9
GAIN = "empty_hosts_pct_vs_best_fit_pp"


def shown_replays(summary: pd.DataFrame):
    """(pool, lifetime source) the figures show: the largest pool, oracle lifetimes when
    configured, replays without defragmentation."""
    pool = summary.loc[summary["num_hosts"].idxmax(), "pool"]
    sources = list(dict.fromkeys(summary["lifetime_source"]))
    return pool, "oracle" if "oracle" in sources else sources[0]


def plain_replays(frame: pd.DataFrame, pool: str) -> pd.DataFrame:
    """The rows of `pool` without defragmentation, of the first admission (requests)."""
    frame = admission.of_admission(frame, admission.admissions(frame)[0])
    return frame[(frame["pool"] == pool) & (frame["defrag"] == "none")]


def empty_hosts_over_time(series: pd.DataFrame, pool: str, source: str):
    """Empty hosts % per policy over time; each policy's upper bound ([Ling25ext] App. G.2) in its
    colour, dashed: the bound depends on the demand each policy has placed."""
    shown = plain_replays(series, pool)
    shown = shown[shown["lifetime_source"] == source]
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
    legend_right(ax, ncol=1 if shown["policy"].nunique() <= 6 else 2)
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
    plain = plain_replays(summary, pool)

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
    if failed.to_numpy(np.float64).any():
        _grouped_bars(ax_failed, failed)
        ax_failed.set_ylabel("failed placements (VMs, after warm-up)")
    else:
        say_none(ax_failed, "no placement failed")
    ax_failed.set_title("(c) failed placements", fontsize=10)
    fig.suptitle(f"Pool {pool}: means over the metric window")
    fig.tight_layout()
    legend_below(fig, [ax_empty], ncol=6, title="lifetimes", title_fontsize=8)
    return fig


def accuracy_sweep(summary: pd.DataFrame, pool: str):
    """Empty hosts vs Best-Fit (pp) against the noisy oracle's accuracy (the oracle at 1),
    per policy: the mean over the accuracy's seeds, with their range as an error bar when
    there are several; None without noisy-oracle replays."""
    plain = plain_replays(summary, pool).copy()
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
    legend_right(ax)
    fig.tight_layout()
    return fig


def gains_table(summary: pd.DataFrame, pool: str) -> pd.DataFrame:
    """Per policy but Best-Fit (rows) and lifetime source (columns): empty hosts vs Best-Fit
    in pp, with the failed placements when there are any ("+1.23", "-0.40 (12 failed)")."""
    plain = plain_replays(summary, pool)
    plain = plain[plain["policy"] != "best_fit"]

    def cell(row):
        failed = int(row["failed_placements"])
        text = page.signed(row["empty_hosts_pct_vs_best_fit_pp"])
        return text + (f" ({failed:,} failed)" if failed else "")

    cells = plain.assign(cell=plain.apply(cell, axis=1))
    table = cells.pivot_table(index="policy", columns="lifetime_source", values="cell",
                              aggfunc="first").fillna("—")
    return table.rename_axis(columns=None).reset_index()


def source_kinds(replays: pd.DataFrame) -> np.ndarray:
    """Per replay, "oracle", "noisy" or "learned": what its lifetimes are."""
    noisy = (replays["noisy_oracle_accuracy"].notna() if "noisy_oracle_accuracy" in replays
             else pd.Series(False, index=replays.index))
    return np.where(replays["lifetime_source"] == "oracle", "oracle",
                    np.where(noisy, "noisy", "learned"))


def _best(rows: pd.DataFrame) -> pd.Series:
    return rows.loc[rows[GAIN].idxmax()]


def _failed(row) -> str:
    failed = int(row["failed_placements"])
    return f", {failed:,} failed placement{'s' if failed > 1 else ''}" if failed else ""


def _noisy_sentence(noisy: pd.DataFrame) -> str:
    """Per accuracy, the best policy's mean gain over the seeds with their range, and
    whether the runner-up is within it; one seed says that the spread is unknown."""
    gains = (noisy.groupby(["noisy_oracle_accuracy", "policy"])[GAIN]
             .agg(["mean", "min", "max", "count"]).reset_index())
    parts = []
    for accuracy, rows in gains.sort_values("noisy_oracle_accuracy", ascending=False).groupby(
            "noisy_oracle_accuracy", sort=False):
        rows = rows[rows["policy"] != "best_fit"].sort_values("mean", ascending=False)
        if not len(rows):
            continue
        top = rows.iloc[0]
        text = f"at {accuracy:g}, {top['policy']} {page.signed(top['mean'])} pp"
        if top["count"] > 1:
            text += f" (seeds {page.signed(top['min'])} to {page.signed(top['max'])})"
            if len(rows) > 1 and rows.iloc[1]["max"] >= top["min"]:
                text += f", {rows.iloc[1]['policy']} within that spread"
        parts.append(text)
    n_seeds = int(gains["count"].max())
    said = (f"mean over {n_seeds} seeds" if n_seeds > 1 else
            "one seed each: a gain cannot be told from one draw's noise")
    return f"Noisy oracles ({said}): " + "; ".join(parts) + "."


def findings(tables: dict, config) -> str:
    """The placement block of the findings: on the largest pool, each policy and lifetime
    source against Best-Fit (pp), the oracle's best as the bound, learned lifetimes apart
    from it and the noisy oracles with their seeds' spread."""
    summary = tables.get("placement_summary")
    if summary is None or not len(summary):
        return ""
    pool, _ = shown_replays(summary)
    plain = plain_replays(summary, pool)
    plain = plain.assign(kind=source_kinds(plain))
    best_fit = plain[plain["policy"] == "best_fit"]
    sentences = [f"Pool {pool}, {int(plain['num_hosts'].max()):,} hosts: empty hosts vs "
                 "Best-Fit with the same lifetimes (pp of hosts, means over the metric "
                 "window)."]
    if len(best_fit):
        first = best_fit.iloc[0]
        sentences[0] += (f" Best-Fit keeps {first['empty_hosts_pct']:.2f} % empty; upper "
                         f"bound {first['upper_bound_empty_hosts_pct']:.2f} % (the most its "
                         "demand could leave empty, [Ling25ext] App. G.2).")
    others = plain[plain["policy"] != "best_fit"]
    oracle, learned = others[others["kind"] == "oracle"], others[others["kind"] == "learned"]
    if len(oracle):
        top = _best(oracle)
        sentences.append(f"Oracle lifetimes (perfect predictions): most {top['policy']}, "
                         f"{page.signed(top[GAIN])} pp{_failed(top)}.")
    if len(learned):
        top = _best(learned)
        same = oracle[oracle["policy"] == top["policy"]]
        share = (f" ({top[GAIN] / same[GAIN].iloc[0]:.0%} of its gain with the oracle, "
                 f"{page.signed(same[GAIN].iloc[0])})"
                 if len(same) and same[GAIN].iloc[0] > 0 and top[GAIN] > 0 else "")
        sentences.append(f"Learned lifetimes: most {top['policy']} with "
                         f"{top['lifetime_source']}, {page.signed(top[GAIN])} pp{share}"
                         f"{_failed(top)}.")
    noisy = others[others["kind"] == "noisy"]
    if len(noisy):
        sentences.append(_noisy_sentence(noisy))
    _, source = shown_replays(summary)
    sentences += admission.frontier_sentences(admission.frontier(summary, pool, source))
    return page.finding("placement", "Placement", sentences, gains_table(summary, pool))


def section(tables: dict, config, figures) -> str:
    """The placement section's HTML, or "" when the run has no placement tables."""
    summary = tables.get("placement_summary")
    if summary is None or not len(summary):
        return ""
    pool, source = shown_replays(summary)
    parts = ['<h2 id="placement">Placement</h2>',
             figures.html(empty_hosts_over_time(tables["placement_timeseries"], pool, source),
                          "placement_empty_hosts", "Empty hosts over time per policy, with "
                          "each policy's upper bound"),
             figures.html(summary_bars(summary, pool), "placement_summary",
                          "Summary per policy and lifetime source, failed placements shown")]
    sweep = accuracy_sweep(summary, pool)
    if sweep is not None:
        parts.append(figures.html(sweep, "placement_accuracy_sweep",
                                  "Accuracy sweep of the noisy oracle"))
    parts += _frontier(summary, pool, figures)
    columns = ["pool", "policy", "lifetime_source", "defrag", "admission", "empty_hosts_pct",
               "upper_bound_empty_hosts_pct", "empty_hosts_pct_vs_best_fit_pp",
               "packing_density_pct", "failed_placements", "migrations",
               "violation_rate_pct", "overflow_pct"]
    parts.append("<h3>Summary</h3>" + page.table(summary.sort_values(
        ["pool", "lifetime_source", "defrag", "policy"]).reindex(columns=columns).round(2)))
    return "\n".join(parts)


def _frontier(summary: pd.DataFrame, pool: str, figures) -> list:
    """The overcommit frontier's figure and table per lifetime source (none without
    admissions)."""
    parts = []
    for source in dict.fromkeys(summary["lifetime_source"]):
        points = admission.frontier(summary, pool, source)
        if not len(points):
            continue
        parts.append(figures.html(admission.frontier_figure(points, pool, source),
                                  f"placement_frontier_{len(parts) // 2}",
                                  f"Overcommit frontier with {source} lifetimes"))
        parts.append(page.table(points.round(3)))
    return (["<h3>Overcommit-aware placement</h3>"] + parts) if parts else []
