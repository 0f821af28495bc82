"""The overcommit section: [Bashir21] Fig. 10 as one multi-panel figure (CDFs of the
per-machine violation rate, violation severity and savings ratio, and of the cell's savings
over time), each predictor labelled by what it computes."""

import numpy as np
import pandas as pd
from matplotlib import pyplot as plt

from pipelines.report import page
from pipelines.report.figures import legend_below, line_style

PANELS = (
    ("violation_rate", "machine", "(a) violation rate per machine"),
    ("violation_severity", "machine", "(b) violation severity per machine"),
    ("savings_ratio", "machine", "(c) savings ratio per machine"),
    ("savings_ratio", "cell", "(d) cell savings ratio over time"),
)


def _percent(value: float) -> str:
    return f"{value:g}"


def predictor_label(config) -> str:
    """What a PeakPredictorConfig or PeakOracleConfig computes, in the paper's words:
    "max(N-sigma n=5, RC-like p99)", "borg-default φ=0.9", "peak oracle 24 h"."""
    if config.DESCRIPTOR.name == "PeakOracleConfig":
        return f"peak oracle {config.horizon_s / 3600:g} h p{_percent(config.percentile)}"
    kind = config.WhichOneof("predictor")
    part = getattr(config, kind)
    if kind in ("max_of", "avg_of"):
        inner = ", ".join(predictor_label(p) for p in part.predictors)
        return f"{kind[:3]}({inner})"
    return {
        "borg_default": lambda: f"borg-default φ={part.phi:g}",
        "rc_like": lambda: f"RC-like p{_percent(part.percentile)}",
        "per_machine_percentile": lambda: f"per-machine p{_percent(part.percentile)}",
        "n_sigma": lambda: f"N-sigma n={part.n:g}",
        "plugin": lambda: f"plug-in {part.class_path}",
    }.get(kind, lambda: kind.replace("_", " "))()


def teller_labels(config) -> dict:
    """{teller name: "name: what it computes"} of a RunConfig's fortune tellers."""
    labels = {}
    for teller in config.overcommit.fortune_teller:
        which = teller.WhichOneof("teller")
        labels[teller.name] = f"{teller.name}: {predictor_label(getattr(teller, which))}"
    return labels


def _cdf(ax, values: np.ndarray, label: str, style: dict):
    values = np.sort(values[np.isfinite(values)])
    if not len(values):
        return
    fraction = np.arange(1, len(values) + 1) / len(values)
    ax.step(np.concatenate([values[:1], values]), np.concatenate([[0], fraction]),
            where="post", label=label, **style)


def fig10(machines: pd.DataFrame, cell: pd.DataFrame, labels: dict):
    """One figure, four CDF panels, one curve per predictor (oracles included)."""
    predictors = list(dict.fromkeys(machines["predictor"]))
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.2), sharey=True)
    for ax, (metric, level, title) in zip(axes, PANELS):
        frame = machines if level == "machine" else cell
        for i, name in enumerate(predictors):
            values = frame.loc[frame["predictor"] == name, metric].to_numpy(np.float64)
            _cdf(ax, values, labels.get(name, name), line_style(i))
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(metric.replace("_", " ") + " (0-1)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("CDF: P(X ≤ x)")
    axes[0].set_ylim(0, 1.02)
    fig.suptitle("Overcommit ([Bashir21] Fig. 10): each predictor scored against the oracle")
    fig.tight_layout()
    legend_below(fig, axes[2:3], ncol=3)
    return fig


def findings(tables: dict, config) -> str:
    """The overcommit block of the findings: each teller's mean cell savings and its mean
    violation rate and severity per machine (against the oracle), and which saves most."""
    summary = tables.get("overcommit_summary")
    if summary is None or not len(summary):
        return ""
    means = summary.pivot_table(index="predictor", columns="metric", values="mean",
                                sort=False)
    shown = pd.DataFrame({
        "teller": means.index,
        "cell savings %": (100 * means["cell_savings_ratio"]).round(1).to_numpy(),
        "violation rate %": (100 * means["violation_rate"]).round(1).to_numpy(),
        "severity %": (100 * means["violation_severity"]).round(2).to_numpy()})
    oracle = summary["oracle"].iloc[0]
    predicted = shown[means.index != oracle]
    sentences = [f"Scored against {oracle}, per machine and {config.overcommit.metric.step_s:g}"
                 " s step; savings are of the limits, means over the cell's steps."]
    if len(predicted):
        best = predicted.loc[predicted["cell savings %"].idxmax()]
        safest = predicted.loc[predicted["violation rate %"].idxmin()]
        sentences.append(f"Most saved: {best['teller']}, {best['cell savings %']:g} % at a "
                         f"{best['violation rate %']:g} % violation rate; fewest violations: "
                         f"{safest['teller']}, {safest['violation rate %']:g} % "
                         f"({safest['cell savings %']:g} % saved).")
    return page.finding("overcommit", "Overcommit", sentences, shown)


def section(tables: dict, config, figures) -> str:
    """The overcommit section's HTML, or "" when the run has no overcommit tables."""
    machines = tables.get("overcommit_machine_metrics")
    if machines is None or not len(machines):
        return ""
    labels = teller_labels(config)
    parts = ['<h2 id="overcommit">Overcommit</h2>',
             figures.html(fig10(machines, tables["overcommit_cell_metrics"], labels),
                          "overcommit_fig10", "Fig. 10: CDFs of violation rate, severity and "
                          "savings per machine, and of the cell's savings over time")]
    summary = tables.get("overcommit_summary")
    if summary is not None and len(summary):
        pivot = summary.pivot_table(index="predictor", columns="metric",
                                    values=["mean", "p50", "p90"]).round(4)
        pivot.index = [labels.get(name, name) for name in pivot.index]
        parts.append("<h3>Mean, median and p90 of each metric</h3>" + page.table(pivot,
                                                                                index=True))
    return "\n".join(parts)
