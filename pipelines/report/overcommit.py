"""The overcommit section: [Bashir21] Fig. 10 as one multi-panel figure (CDFs of the
per-machine violation rate, violation severity and savings ratio, and of the cell's savings
over time), each predictor labelled by what it computes."""

import numpy as np
import pandas as pd
from matplotlib import pyplot as plt

from pipelines.report import admission, page
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


def budget_column(budget) -> str:
    """The costs table's column of the violation rate at the budget's machine percentile."""
    return f"p{_percent(budget.machine_percentile)} machine violation %"


def teller_costs(tables: dict, config) -> pd.DataFrame:
    """Per teller: mean cell savings, mean and budget-percentile per-machine violation rate,
    mean severity (all %), whether it is within the config's violation budget and on the
    frontier (no other predictor saves at least as much at a mean violation rate at most
    its, one of the two strictly better: `admission.on_frontier`); the oracle,
    the bound, last."""
    summary = tables["overcommit_summary"]
    means = summary.pivot_table(index="predictor", columns="metric", values="mean",
                                sort=False)
    budget = config.overcommit.violation_budget
    machines = tables["overcommit_machine_metrics"]
    at_percentile = machines.groupby("predictor")["violation_rate"].quantile(
        budget.machine_percentile / 100)
    costs = pd.DataFrame({
        "teller": means.index,
        "cell savings %": 100 * means["cell_savings_ratio"].to_numpy(),
        "violation rate %": 100 * means["violation_rate"].to_numpy(),
        budget_column(budget): 100 * at_percentile.reindex(means.index).to_numpy(),
        "severity %": 100 * means["violation_severity"].to_numpy()})
    oracle = summary["oracle"].iloc[0]
    costs["within budget"] = (costs[budget_column(budget)] <= 100 * budget.max_violation_rate) \
        & (costs["teller"] != oracle)
    predicted = costs["teller"] != oracle
    costs["frontier"] = False
    costs.loc[predicted, "frontier"] = admission.on_frontier(
        costs.loc[predicted, "violation rate %"], costs.loc[predicted, "cell savings %"])
    return pd.concat([costs[predicted].sort_values("cell savings %", ascending=False),
                      costs[~predicted]], ignore_index=True)


def _budget_sentence(costs: pd.DataFrame, budget) -> str:
    """The most saving predictor within the budget, or the one closest to it."""
    column = budget_column(budget)
    machine = f"p{_percent(budget.machine_percentile)} machine"
    rule = f"{machine} ≤ {100 * budget.max_violation_rate:g} % of its steps violated"
    within = costs[costs["within budget"]]
    if len(within):
        best = within.iloc[0]
        return (f"Most saved within the violation budget ({rule}): {best['teller']}, "
                f"{best['cell savings %']:.1f} % (its {machine} {best[column]:.2f} %).")
    predicted = costs.iloc[:-1]
    closest = predicted.loc[predicted[column].idxmin()]
    return (f"No predictor is within the violation budget ({rule}); the closest: "
            f"{closest['teller']}, its {machine} {closest[column]:.1f} %, "
            f"{closest['cell savings %']:.1f} % saved.")


def findings(tables: dict, config) -> str:
    """The overcommit block of the findings: the oracle as the bound, the most saving
    predictor within the run's violation budget, and the savings-violation frontier."""
    summary = tables.get("overcommit_summary")
    if summary is None or not len(summary) or "overcommit_machine_metrics" not in tables:
        return ""
    costs, budget = teller_costs(tables, config), config.overcommit.violation_budget
    oracle = costs.iloc[-1]
    sentences = [f"Per machine and {config.overcommit.metric.step_s:g} s step: savings = "
                 "share of the limits not reserved (mean over the cell's steps); violations "
                 f"= share of a machine's steps predicted below the peak of "
                 f"{oracle['teller']}, the bound, which saves {oracle['cell savings %']:.1f} % "
                 "with none."]
    predicted = costs.iloc[:-1]
    if len(predicted):
        sentences.append(_budget_sentence(costs, budget))
        frontier = predicted[predicted["frontier"]].sort_values("violation rate %")
        sentences.append("Frontier (saved at mean violations): " + " → ".join(
            f"{row['teller']} {row['cell savings %']:.1f} % at {row['violation rate %']:.2f} %"
            for _, row in frontier.iterrows()) + ".")
    shown = pd.DataFrame({
        "teller": [f"{t} (bound)" if t == oracle["teller"] else t for t in costs["teller"]],
        "saved %": costs["cell savings %"].round(1),
        "violations %": costs["violation rate %"].round(2),
        budget_column(budget).replace(" violation %", " %"):
            costs[budget_column(budget)].round(2),
        "in budget": ["yes" if within else "no" for within in costs["within budget"]]})
    shown.loc[shown.index[-1], "in budget"] = "—"
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
        parts.append("<h3>Mean / median / p90 of each metric (0-1)</h3>"
                     + page.table(quantiles_table(summary, labels), index=True))
    return "\n".join(parts)


def quantiles_table(summary: pd.DataFrame, labels: dict) -> pd.DataFrame:
    """Per predictor (rows, labelled by what it computes) and metric (columns): its mean,
    median and p90 in one cell, "0.342 / 0.333 / 0.489"."""
    cells = summary.assign(cell=[f"{m:.3f} / {p50:.3f} / {p90:.3f}" for m, p50, p90 in
                                 zip(summary["mean"], summary["p50"], summary["p90"])])
    table = cells.pivot_table(index="predictor", columns="metric", values="cell",
                              aggfunc="first", sort=False)
    table.index = [labels.get(name, name) for name in table.index]
    return table.rename_axis(index=None, columns=None)
