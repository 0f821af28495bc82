"""The resource-shaping section ([Pace18] §IV): Fig. 2 (per-application turnaround and
slack of the baseline and of each shaping policy with the oracle, as boxplots), Fig. 3
(turnaround ratio vs the baseline, memory slack and failed applications over K1 × K2, one
row per forecaster and policy), the speed-up against the offered load (a run sweeping
`target_offered_load`) and a summary table of the runs. Fig. 2 and Fig. 3 show one load:
`figure_load`'s. notebooks/shaping.ipynb draws the same figures with these functions."""

import numpy as np
import pandas as pd
from matplotlib import pyplot as plt

from pipelines.report import page
from pipelines.report.figures import legend_below

BASELINE, ORACLE = "baseline", "oracle"
POLICIES = ("baseline", "optimistic", "pessimistic")
# (shaping_applications column, axis label, scale to the label's unit).
FIG2_METRICS = (("turnaround_s", "turnaround (h, log)", 1 / 3600),
                ("cpu_slack_pct", "CPU slack (% of allocated)", 1.0),
                ("memory_slack_pct", "memory slack (% of allocated)", 1.0))
# (shaping_runs column, title, colour map: brighter = better): [Pace18] Fig. 3's turnaround
# ratio, memory slack and failures; CPU slack stands in for memory's when memory is not
# shaped (fig3_panels).
FIG3_PANELS = (("turnaround_speedup_vs_baseline", "turnaround ratio vs baseline (> 1 better)",
                "viridis"),
               ("mean_memory_slack_pct", "memory slack (%)", "viridis_r"),
               ("failed_applications_pct", "failed applications (%)", "viridis_r"))
CPU_SLACK_PANEL = ("mean_cpu_slack_pct", "CPU slack (%)", "viridis_r")
SUMMARY_COLUMNS = ("turnaround_speedup_vs_baseline", "mean_turnaround_s",
                   "failed_applications_pct", "preempted_applications_pct",
                   "mean_cpu_slack_pct", "mean_memory_slack_pct")


def figure_load(runs: pd.DataFrame):
    """The target load Fig. 2 and Fig. 3 show: where the oracle's pessimistic runs (at the
    smallest K1, K2) have the highest mean speed-up (else the highest load), or None when
    the runs sweep no load."""
    loads = runs["target_offered_load"].dropna().unique()
    if len(loads) < 2:
        return None
    cell = oracle_cell(runs)
    if cell is None or not (runs["policy"] == "pessimistic").any():
        return float(loads.max())
    oracle = runs[(runs["forecaster"] == ORACLE) & (runs["policy"] == "pessimistic")
                  & (runs["k1"] == cell[0]) & (runs["k2"] == cell[1])]
    speedups = oracle.groupby("target_offered_load")["turnaround_speedup_vs_baseline"].mean()
    return float(speedups.idxmax()) if len(speedups) else float(loads.max())


def at_load(frame: pd.DataFrame, load):
    """The rows of `frame` at target load `load` (all of them when `load` is None)."""
    return frame if load is None else frame[frame["target_offered_load"] == load]


def fig_load(runs: pd.DataFrame):
    """Mean speed-up over the baseline (left) and the baseline's mean queue length (right)
    against the mean offered load, per target load: one line per forecaster and shaping
    policy at its smallest K1, K2 (Fig. 2's cell); None with fewer than two loads."""
    loads = runs.groupby("target_offered_load")["offered_load"].mean()
    if len(loads) < 2:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    shaped = runs[runs["policy"] != BASELINE]
    for (forecaster, policy), group in shaped.groupby(["forecaster", "policy"], sort=True):
        cell = group[(group["k1"] == group["k1"].min()) & (group["k2"] == group["k2"].min())]
        means = cell.groupby("target_offered_load")["turnaround_speedup_vs_baseline"].mean()
        left.plot(loads[means.index], means.to_numpy(), marker="o",
                  label=f"{forecaster} {policy} (K1 = {cell['k1'].iloc[0]:g}, "
                        f"K2 = {cell['k2'].iloc[0]:g})")
    left.axhline(1.0, color="grey", lw=0.8)
    left.set_yscale("log")
    left.set_xlabel("offered load (requested / capacity)")
    left.set_ylabel("mean turnaround speed-up vs baseline (log)")
    queue = runs[runs["policy"] == BASELINE].groupby("target_offered_load")[
        "mean_queue_length"].mean()
    right.plot(loads[queue.index], queue.to_numpy(), marker="o", color="k")
    right.set_xlabel("offered load (requested / capacity)")
    right.set_ylabel("baseline mean queue length (applications)")
    for ax in (left, right):
        ax.axvline(1.0, color="grey", lw=0.8, ls="--")
        ax.grid(alpha=0.3)
    fig.suptitle("Resource shaping: speed-up against the offered load (means over seeds)")
    fig.tight_layout()
    legend_below(fig, [left], ncol=2)
    return fig


def oracle_cell(frame: pd.DataFrame):
    """(k1, k2) of Fig. 2: the oracle's smallest buffer ([Pace18] Fig. 2 uses K1 = K2 = 0), or
    None without oracle rows."""
    oracle = frame[frame["forecaster"] == ORACLE]
    if not len(oracle):
        return None
    return oracle["k1"].min(), oracle["k2"].min()


def fig2(applications: pd.DataFrame):
    """Boxplots per policy (baseline, and each shaping policy with the oracle at its
    smallest K1, K2) of turnaround and CPU / memory slack per application; None without
    oracle runs. Means are the red triangles."""
    cell = oracle_cell(applications)
    if cell is None:
        return None
    oracle = applications[(applications["forecaster"] == ORACLE)
                          & (applications["k1"] == cell[0]) & (applications["k2"] == cell[1])]
    shown = pd.concat([applications[applications["policy"] == BASELINE], oracle])
    policies = [p for p in POLICIES if p in set(shown["policy"])]
    metrics = [m for m in FIG2_METRICS if shown[m[0]].notna().any()]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 4.2), squeeze=False)
    for ax, (metric, label, scale) in zip(axes[0], metrics):
        data = [shown.loc[shown["policy"] == p, metric].dropna().to_numpy(np.float64) * scale
                for p in policies]
        ax.boxplot(data, showmeans=True,
                   meanprops={"marker": "^", "markerfacecolor": "red", "markeredgecolor": "red"})
        ax.set_xticks(range(1, len(policies) + 1), policies)
        ax.set_ylabel(label)
        if metric == "turnaround_s":
            ax.set_yscale("log")
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"Resource shaping ([Pace18] Fig. 2): oracle forecasts, K1 = {cell[0]:g}, "
                 f"K2 = {cell[1]:g}, per application over every seed")
    fig.tight_layout()
    return fig


def _heatmap(fig, ax, grid: pd.DataFrame, cmap: str, limits: tuple, title: str):
    """One K2 × K1 panel; `limits` (vmin, vmax) shared by the column's panels so that colours
    compare across forecasters and policies; labels dark on light cells."""
    values = grid.to_numpy(dtype=np.float64)
    image = ax.imshow(values, cmap=cmap, aspect="auto", origin="lower", vmin=limits[0],
                      vmax=limits[1])
    ax.set_xticks(range(len(grid.columns)), [f"{v:g}" for v in grid.columns])
    ax.set_yticks(range(len(grid.index)), [f"{v:g}" for v in grid.index])
    ax.set_xlabel("K1 (fraction of the request)")
    ax.set_ylabel("K2 (× uncertainty)")
    ax.set_title(title, fontsize=9)
    for (i, j), value in np.ndenumerate(values):
        red, green, blue, _ = image.cmap(image.norm(value))
        light = 0.299 * red + 0.587 * green + 0.114 * blue > 0.5
        ax.text(j, i, f"{value:.3g}", ha="center", va="center", fontsize=8,
                color="k" if light else "w")
    fig.colorbar(image, ax=ax)


def _limits(values: pd.Series) -> tuple:
    """(vmin, vmax) of a panel column; a constant column gets a unit-wide range."""
    low, high = float(values.min()), float(values.max())
    return (low, high) if high > low else (low - 0.5, high + 0.5)


def fig3_panels(runs: pd.DataFrame) -> tuple:
    """FIG3_PANELS, with the CPU slack for the memory slack when no run shaped memory."""
    if runs["mean_memory_slack_pct"].notna().any():
        return FIG3_PANELS
    return tuple(CPU_SLACK_PANEL if panel[0] == "mean_memory_slack_pct" else panel
                 for panel in FIG3_PANELS)


def fig3(runs: pd.DataFrame):
    """Heatmaps over K1 × K2 (means over seeds) of the turnaround ratio vs the baseline, the
    memory (else CPU) slack and the failed applications, one row per (forecaster, shaping
    policy), one colour scale per column; None without shaping runs."""
    shaped = runs[runs["policy"] != BASELINE]
    rows = list(shaped.groupby(["forecaster", "policy"], sort=True).groups)
    if not rows:
        return None
    panels = fig3_panels(shaped)
    means = shaped.groupby(["forecaster", "policy", "k1", "k2"])[
        [metric for metric, _, _ in panels]].mean()
    fig, axes = plt.subplots(len(rows), len(panels), squeeze=False,
                             figsize=(5.2 * len(panels), 3.3 * len(rows)))
    for row, (forecaster, policy) in enumerate(rows):
        cell = shaped[(shaped["forecaster"] == forecaster) & (shaped["policy"] == policy)]
        for col, (metric, title, cmap) in enumerate(panels):
            grid = cell.pivot_table(index="k2", columns="k1", values=metric, aggfunc="mean")
            _heatmap(fig, axes[row][col], grid, cmap, _limits(means[metric]),
                     f"{forecaster}, {policy}: {title}")
    fig.suptitle("Resource shaping ([Pace18] Fig. 3): means over seeds per K1 × K2")
    # Leave the suptitle its own band (tight_layout alone lets it cover the first titles).
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.25 / fig.get_figheight()))
    return fig


def summary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Means over seeds of the runs' metrics: the baseline, and per (forecaster, policy)
    its Fig. 2 cell (smallest K1, K2) and its cell of highest turnaround ratio."""
    cells = (runs.fillna({"k1": -1.0, "k2": -1.0})
             .groupby(["forecaster", "policy", "k1", "k2"])[list(SUMMARY_COLUMNS)].mean()
             .reset_index())
    chosen = [cells[cells["policy"] == BASELINE].assign(cell="baseline")]
    for _, group in cells[cells["policy"] != BASELINE].groupby(["forecaster", "policy"]):
        smallest = group[(group["k1"] == group["k1"].min()) & (group["k2"] == group["k2"].min())]
        best = group.loc[[group["turnaround_speedup_vs_baseline"].idxmax()]]
        chosen += [smallest.assign(cell="smallest K1, K2"), best.assign(cell="best ratio")]
    table = pd.concat(chosen, ignore_index=True).replace({"k1": {-1.0: np.nan},
                                                          "k2": {-1.0: np.nan}})
    return table[["forecaster", "policy", "cell", "k1", "k2", *SUMMARY_COLUMNS]].round(3)


def findings(tables: dict, config) -> str:
    """The shaping block of the findings: per forecaster and policy, at each target load,
    the speed-up over the baseline at its best K1, K2 and the applications that failed."""
    runs = tables.get("shaping_runs")
    if runs is None or not len(runs):
        return ""
    rows = []
    for load, at in runs.groupby(runs["target_offered_load"].fillna(-1.0)):
        table = summary_table(at)
        for row in table[table["cell"] == "best ratio"].itertuples():
            rows.append({"forecaster": row.forecaster, "policy": row.policy,
                         "load": "the trace's load" if load < 0 else f"load {load:g}",
                         "speed-up": row.turnaround_speedup_vs_baseline,
                         "failed": row.failed_applications_pct})
    if not rows:
        return ""
    best = pd.DataFrame(rows)
    cells = best.assign(cell=[f"{s:.2f}×, {f:.1f} % failed"
                              for s, f in zip(best["speed-up"], best["failed"])])
    shown = (cells.pivot_table(index=["forecaster", "policy"], columns="load", values="cell",
                               aggfunc="first", sort=False).fillna("—")
             .rename_axis(columns=None).reset_index())
    top = best.loc[best["speed-up"].idxmax()]
    sentences = ["Turnaround speed-up over the baseline (its mean turnaround over the "
                 "policy's, same seed, means over seeds; above 1× is faster) at each policy's "
                 "best K1, K2, and the share of applications that failed."]
    at = (f"{top['forecaster']} {top['policy']} at {top['load']}, {top['speed-up']:.2f}× "
          f"with {top['failed']:.1f} % of applications failed")
    sentences.append(f"Most: {at}." if top["speed-up"] > 1 else
                     f"No shaping policy beat the baseline: the closest is {at}.")
    return page.finding("shaping", "Resource shaping", sentences, shown)


def section(tables: dict, config, figures) -> str:
    """The shaping section's HTML, or "" when the run has no shaping tables."""
    runs = tables.get("shaping_runs")
    if runs is None or not len(runs):
        return ""
    parts = ['<h2 id="shaping">Resource shaping</h2>']
    drawn = fig_load(runs)
    load = figure_load(runs)
    if drawn is not None:
        parts.append(figures.html(
            drawn, "shaping_load", "Speed-up of each shaping policy over the baseline (same "
            f"seed and load) and the baseline's queue, against the offered load; Fig. 2 and "
            f"Fig. 3 below are at target load {load:g}"))
    applications, runs = at_load(tables["shaping_applications"], load), at_load(runs, load)
    drawn = fig2(applications)
    if drawn is not None:
        parts.append(figures.html(
            drawn, "shaping_fig2", "Fig. 2: turnaround and CPU / memory slack per application,"
            " baseline and each shaping policy with the oracle (boxes: quartiles, whiskers: "
            "1.5 IQR, red triangles: means)"))
    drawn = fig3(runs)
    if drawn is not None:
        parts.append(figures.html(
            drawn, "shaping_fig3", "Fig. 3: turnaround ratio vs the baseline (same seed), "
                                   "memory slack (CPU slack when memory is not shaped) and "
                                   "failed applications over K1 × K2, per forecaster and policy"))
    at = "" if load is None else f" at target load {load:g}"
    parts += [f"<h3>Runs: means over seeds{at}</h3>",
              page.table(summary_table(runs), na_rep="—")]
    return "\n".join(parts)
