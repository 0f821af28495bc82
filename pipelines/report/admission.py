"""The placement section's overcommit frontier (placement.admission; docs/stages/placement.md,
"Overcommit-aware placement"): per (admission, policy), the empty hosts gained over Best-Fit
admitting by requests against the violation rate of the usage replay, and which points no
other beats on both."""

import numpy as np
import pandas as pd
from matplotlib import pyplot as plt

from pipelines.report.figures import legend_right, line_style

REQUESTS = "requests"


def admissions(frame: pd.DataFrame) -> list:
    """The admissions of a placement table, "requests" first (results written before
    admissions existed: requests only)."""
    if "admission" not in frame:
        return [REQUESTS]
    names = list(dict.fromkeys(frame["admission"]))
    return sorted(names, key=lambda name: name != REQUESTS)


def of_admission(frame: pd.DataFrame, admission: str) -> pd.DataFrame:
    """The rows of one admission (all rows of results without the column)."""
    return frame if "admission" not in frame else frame[frame["admission"] == admission]


def on_frontier(violation: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """bool[n]: the points that no other point beats on both, i.e. none has a violation rate
    at most theirs and a gain at least theirs with one of the two strictly better."""
    violation, gain = np.asarray(violation, float), np.asarray(gain, float)
    no_worse = (violation[None, :] <= violation[:, None]) & (gain[None, :] >= gain[:, None])
    better = (violation[None, :] < violation[:, None]) | (gain[None, :] > gain[:, None])
    return ~np.any(no_worse & better, axis=1)


def frontier(summary: pd.DataFrame, pool: str, source: str) -> pd.DataFrame:
    """One row per (admission, policy) of `pool` with `source` lifetimes, no defragmentation:
    violation_rate_pct, empty_hosts_pct, gain_pp (vs Best-Fit by requests, same lifetimes),
    failed_placements, on_frontier. Empty without admissions."""
    rows = summary[(summary["pool"] == pool) & (summary["lifetime_source"] == source)
                   & (summary["defrag"] == "none")]
    if "admission" not in rows or rows["violation_rate_pct"].isna().all():
        return pd.DataFrame()
    base = rows[(rows["admission"] == REQUESTS) & (rows["policy"] == "best_fit")]
    if not len(base):
        return pd.DataFrame()
    points = rows[["admission", "policy", "violation_rate_pct", "mean_severity_pct",
                   "savings_pct", "overflow_pct", "empty_hosts_pct",
                   "failed_placements"]].dropna(subset=["violation_rate_pct"]).copy()
    points["gain_pp"] = points["empty_hosts_pct"] - float(base["empty_hosts_pct"].iloc[0])
    points["on_frontier"] = on_frontier(points["violation_rate_pct"], points["gain_pp"])
    return points.sort_values(["violation_rate_pct", "gain_pp"]).reset_index(drop=True)


def frontier_figure(points: pd.DataFrame, pool: str, source: str):
    """Empty hosts gained (pp) against violation rate (%), a marker per policy and a colour
    per admission; the frontier joined by a line."""
    fig, ax = plt.subplots(figsize=(9, 4.8))
    markers = dict(zip(sorted(points["policy"].unique()), "osD^vP*X"))
    for i, (admission, rows) in enumerate(points.groupby("admission", sort=False)):
        color = line_style(i)["color"]
        for _, row in rows.iterrows():
            ax.scatter(row["violation_rate_pct"], row["gain_pp"], color=color, s=55,
                       marker=markers[row["policy"]], edgecolors="black" if row["on_frontier"]
                       else "none", linewidths=1.2, zorder=3)
        ax.scatter([], [], color=color, marker="s", label=admission)
    for policy, marker in markers.items():
        ax.scatter([], [], color="grey", marker=marker, label=policy)
    best = points[points["on_frontier"]].sort_values("violation_rate_pct")
    ax.plot(best["violation_rate_pct"], best["gain_pp"], color="black", lw=0.9, zorder=2,
            label="frontier (outlined)")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xlabel("violation rate of the usage replay (% of scored host windows)")
    ax.set_ylabel("empty hosts vs Best-Fit by requests (pp)")
    ax.set_title(f"Overcommit-aware placement: pool {pool}, {source} lifetimes", fontsize=10)
    ax.grid(alpha=0.3)
    legend_right(ax, ncol=1)
    fig.tight_layout()
    return fig


def frontier_sentences(points: pd.DataFrame) -> list:
    """The findings' sentences on the frontier."""
    if not len(points):
        return []
    best = points[points["on_frontier"]].sort_values("violation_rate_pct")
    safe = points[points["violation_rate_pct"] == 0]
    sentences = ["Overcommit frontier (empty hosts vs Best-Fit by requests, against the "
                 "usage replay's violation rate): " + "; ".join(
                     f"{row.admission} / {row.policy} {row.gain_pp:+.2f} pp at "
                     f"{row.violation_rate_pct:.2f} %" for row in best.itertuples()) + "."]
    if len(safe):
        top = safe.loc[safe["gain_pp"].idxmax()]
        sentences.append(f"Without violations the most is {top['admission']} / "
                         f"{top['policy']}, {top['gain_pp']:+.2f} pp.")
    return sentences
