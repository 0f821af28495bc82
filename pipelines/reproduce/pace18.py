"""[Pace18] Dynamic resource shaping: the oracle's shaping against the baseline (§IV-B, Fig.
2) and the K1 × K2 sweeps of ARIMA and the GP (§IV-B, Fig. 3), each claim checked on §IV-A's
setup scaled to 2 cores (configs/shaping_002.textproto: per-minute monitoring, the
simulator's semantics, three offered loads; claims read at the load of the oracle's peak),
Fig. 2's also on the oracle over a run about as long as §IV-A's
(configs/shaping_002_long.textproto), and on four small runs: the synthetic trace and the
Azure V1 CPU readings, each under a host-overload failure (configs/synthetic_shaping.textproto,
configs/azure_shaping.textproto) and under the container limit (the *_component_limit
configs). Tables add the speed-up against the offered load and against the shaping interval
(1, 5 and 12 one-minute steps)."""

import math

import pandas as pd

from pipelines.report.shaping import (
    at_load,
    fig2,
    fig3,
    fig_load,
    figure_load,
    summary_table,
)
from pipelines.reproduce.claims import (
    Claim,
    Measurement,
    NotComparable,
    Sql,
    above,
    at_most,
    same_sign,
    within,
    within_factor,
)
from pipelines.reproduce.paper import Paper, save_png
from pipelines.reproduce.runs import TWO_WORKERS, RunSpec, keep_repeated

CELLS_SQL = (
    "SELECT target_offered_load AS load, forecaster, policy, k1, k2, "
    "avg(turnaround_speedup_vs_baseline) AS speedup, "
    "avg(failed_applications_pct) AS failed, avg(mean_cpu_slack_pct) AS cpu_slack, "
    "avg(mean_memory_slack_pct) AS memory_slack, avg(preempted_applications_pct) AS "
    "preempted, count(*) AS seeds FROM shaping_runs WHERE policy <> 'baseline' "
    "GROUP BY ALL ORDER BY ALL")
# The cells the tables show: (forecaster, K1, K2).
SHOWN_CELLS = (("oracle", 0.0, 0.0), ("arima", 0.05, 0.0), ("arima", 0.05, 3.0),
               ("arima", 0.5, 3.0), ("arima", 1.0, 0.0), ("arima_011", 0.05, 0.0),
               ("gaussian_process", 0.05, 0.0),
               ("gaussian_process", 0.05, 3.0))
ORACLE, ARIMA, ARIMA_011, GP = "oracle", "arima", "arima_011", "gaussian_process"
OPTIMISTIC, PESSIMISTIC = "optimistic", "pessimistic"


def _quick(config):
    shaping = config.shaping
    keep_repeated(shaping.forecaster, lambda f: f != shaping.GAUSSIAN_PROCESS)
    keep_repeated(shaping.k1, lambda k: k in (0.0, 0.05, 1.0))
    keep_repeated(shaping.k2, lambda k: k in (0.0, 3.0))
    keep_repeated(shaping.seed, lambda s: s == 0)


_QUICK_NOTE = "ORACLE and ARIMA only, K1 ∈ {0, 0.05, 1}, K2 ∈ {0, 3}, seed 0"


def _quick_002(config):
    _quick(config)
    shaping = config.shaping
    keep_repeated(shaping.k1, lambda k: k in (0.0, 0.05))
    keep_repeated(shaping.k2, lambda k: k == 0.0)
    shaping.host_count = 2
    shaping.sampled_applications = 60


def _interval(steps: int):
    """The variant of shaping_002 that shapes every `steps` steps: the oracle and ARIMA at
    their Fig. 2 / Fig. 3a cells (K1 0 and 5 %, K2 0), every load and seed."""
    def edit(config):
        shaping = config.shaping
        shaping.shaping_interval_steps = steps
        keep_repeated(shaping.forecaster, lambda f: f != shaping.GAUSSIAN_PROCESS)
        keep_repeated(shaping.k1, lambda k: k in (0.0, 0.05))
        keep_repeated(shaping.k2, lambda k: k == 0.0)
    return (f"_interval_{steps}", f"`shaping_interval_steps: {steps}`, ORACLE and ARIMA at "
            "K1 ∈ {0, 0.05}, K2 = 0", edit)


def _quick_long(config):
    shaping = config.shaping
    keep_repeated(shaping.seed, lambda s: s == 0)
    keep_repeated(shaping.target_offered_load, lambda load: load in (1.05, 1.3))
    shaping.host_count = 2
    shaping.sampled_applications = 120


_QUICK_LONG_NOTE = "2 hosts, 120 applications, loads 1.05 and 1.3, seed 0"
_QUICK_002_NOTE = ("2 hosts, 60 applications, ORACLE and ARIMA only, K1 ∈ {0, 0.05}, K2 = 0, "
                   "seed 0")
_AZURE_SKIP = ("--quick leaves out the Azure readings' shaping runs (27.8 days of 50 VMs, "
               "about half an hour each)")
RUNS = (
    RunSpec("shaping_002.textproto", _quick_002, _QUICK_002_NOTE, TWO_WORKERS),
    RunSpec("shaping_002.textproto", _quick_002, _QUICK_002_NOTE, TWO_WORKERS,
            variant=_interval(5)),
    RunSpec("shaping_002.textproto", _quick_002, _QUICK_002_NOTE, TWO_WORKERS,
            variant=_interval(12)),
    RunSpec("shaping_002_long.textproto", _quick_long, _QUICK_LONG_NOTE, TWO_WORKERS),
    RunSpec("synthetic_shaping.textproto", _quick, _QUICK_NOTE),
    RunSpec("synthetic_shaping_component_limit.textproto", _quick, _QUICK_NOTE),
    RunSpec("azure_shaping.textproto", _quick, _QUICK_NOTE, quick_skip=_AZURE_SKIP),
    RunSpec("azure_shaping_component_limit.textproto", _quick, _QUICK_NOTE,
            quick_skip=_AZURE_SKIP),
)
# The runs of the oracle alone: Fig. 2's claims only.
ORACLE_ONLY = ("shaping_002_long",)
# The runs every claim is checked on (the interval variants feed a table only).
CLAIM_RUNS = tuple(spec for spec in RUNS if spec.variant is None)
WHAT = {"shaping_002": "§IV-A's setup, scaled, at the peak load",
        "shaping_002_long": "§IV-A's setup over about three months, the oracle, at the peak "
                            "load",
        "synthetic_shaping": "synthetic, host overload",
        "synthetic_shaping_component_limit": "synthetic, container limit",
        "azure_shaping": "Azure readings, host overload",
        "azure_shaping_component_limit": "Azure readings, container limit"}


def _at_peak_load(frame: pd.DataFrame) -> pd.DataFrame:
    """The cells at the target load where the oracle's pessimistic speed-up peaks (the
    report's Fig. 2 / Fig. 3 load); all of them when the run sweeps no load."""
    load = figure_load(frame.rename(columns={"load": "target_offered_load",
                                             "speedup": "turnaround_speedup_vs_baseline"}))
    return frame if load is None else frame[frame["load"] == load]


def _cells(frame: pd.DataFrame, forecaster: str, policy: str, k1=None, k2=None):
    """The rows of one forecaster and policy (and K1, K2 when given)."""
    rows = frame[(frame["forecaster"] == forecaster) & (frame["policy"] == policy)]
    if k1 is not None:
        rows = rows[(rows["k1"] - k1).abs() < 1e-9]
    if k2 is not None:
        rows = rows[(rows["k2"] - k2).abs() < 1e-9]
    if not len(rows):
        cell = "" if k1 is None else f" at K1 = {k1:g}" + ("" if k2 is None else f", K2 = {k2:g}")
        raise NotComparable(f"the run has no {forecaster} {policy} runs{cell}")
    return rows


def _slack(row) -> tuple:
    """(slack %, which): memory slack, or CPU slack when memory is not shaped."""
    if not math.isnan(row["memory_slack"]):
        return float(row["memory_slack"]), "memory"
    return float(row["cpu_slack"]), "CPU"


def _metric(forecaster, policy, k1, k2, column):
    def reduce(frame):
        row = _cells(frame, forecaster, policy, k1, k2).iloc[0]
        if column == "slack":
            value, which = _slack(row)
            return Measurement(value, f"{value:.1f} % ({which})")
        unit = "×" if column == "speedup" else " %"
        return Measurement(float(row[column]), f"{row[column]:.2f}{unit}")
    return reduce


def _policy_ratio(frame):
    pessimistic = float(_cells(frame, ORACLE, PESSIMISTIC, 0.0, 0.0)["speedup"].iat[0])
    optimistic = float(_cells(frame, ORACLE, OPTIMISTIC, 0.0, 0.0)["speedup"].iat[0])
    return Measurement(pessimistic / optimistic, f"{pessimistic / optimistic:.2f} "
                                                 f"({pessimistic:.2f}× vs {optimistic:.2f}×)")


def _farthest_speedup(forecaster, k1, policies=(PESSIMISTIC,)):
    """The speedup farthest from 1× over K2 (and `policies`; every forecaster for None)."""
    def reduce(frame):
        rows = frame[(frame["k1"] - k1).abs() < 1e-9]
        rows = rows[rows["policy"].isin(policies)]
        if forecaster is not None:
            rows = rows[rows["forecaster"] == forecaster]
        if not len(rows):
            raise NotComparable(f"the run has no runs at K1 = {k1:g}")
        far = rows.loc[(rows["speedup"] - 1).abs().idxmax()]
        return Measurement(float(far["speedup"]), f"{far['speedup']:.2f}× (farthest from 1× "
                                                  f"of {len(rows)} cells)")
    return reduce


def _most_failed(frame):
    rows = frame[(frame["k1"] - 1.0).abs() < 1e-9]
    if not len(rows):
        raise NotComparable("the run has no runs at K1 = 1")
    return Measurement(float(rows["failed"].max()), f"{rows['failed'].max():.2f} % (most of "
                                                    f"{len(rows)} cells)")


def _k2_effect(forecaster, column):
    """`column` at the largest K2 minus (or, for speedup, over) the smallest, K1 = 5 %."""
    def reduce(frame):
        rows = _cells(frame, forecaster, PESSIMISTIC, 0.05).sort_values("k2")
        first, last = rows.iloc[0], rows.iloc[-1]
        if len(rows) < 2:
            raise NotComparable(f"the run has one K2 only for {forecaster}")
        if column == "speedup":
            ratio = last["speedup"] / first["speedup"]
            return Measurement(float(ratio), f"{ratio:.2f} ({first['speedup']:.2f}× at K2 = "
                                             f"{first['k2']:g}, {last['speedup']:.2f}× at "
                                             f"{last['k2']:g})")
        change = last[column] - first[column]
        return Measurement(float(change), f"{change:+.2f} pp ({first[column]:.2f} → "
                                          f"{last[column]:.2f} %)")
    return reduce


def _best_gp(frame):
    rows = _cells(frame, GP, PESSIMISTIC)
    best = rows.loc[rows["speedup"].idxmax()]
    return Measurement(float(best["speedup"]), f"{best['speedup']:.2f}× (K1 = {best['k1']:g},"
                                               f" K2 = {best['k2']:g})")


def _claims(config: str):
    def claim(text, where, paper, paper_text, reduce, rule):
        return Claim(f"[{WHAT[config]}] {text}", where, paper, paper_text,
                     Sql(config, CELLS_SQL, lambda frame: reduce(_at_peak_load(frame))), rule)
    oracle = (
        claim("oracle, pessimistic: slack becomes negligibly small (memory; CPU when only "
              "CPU is shaped)", "§IV-B, Fig. 2", 0.0, "≈ 0 %",
              _metric(ORACLE, PESSIMISTIC, 0.0, 0.0, "slack"), at_most(5, " pp")),
        claim("oracle, pessimistic: turnaround almost two orders of magnitude below the "
              "baseline's", "§IV-B, Fig. 2", 100.0, "≈ 100×",
              _metric(ORACLE, PESSIMISTIC, 0.0, 0.0, "speedup"), within_factor(2)),
        claim("oracle, optimistic: 37.67 % of applications fail", "§IV-B, Fig. 2", 37.67,
              "37.67 %", _metric(ORACLE, OPTIMISTIC, 0.0, 0.0, "failed"), within_factor(2)),
        claim("oracle, pessimistic: no application fails", "§IV-B, Fig. 2", 0.0, "0 %",
              _metric(ORACLE, PESSIMISTIC, 0.0, 0.0, "failed"), within(0, " pp")),
        claim("oracle: pessimistic outperforms optimistic (ratio of their speedups)",
              "§IV-B, Fig. 2", 1.0, "> 1", _policy_ratio, above()),
    )
    if config in ORACLE_ONLY:
        return oracle
    return oracle + (
        claim("ARIMA, K1 = 5 %, K2 = 0, pessimistic: 7.5× turnaround", "§IV-B, Fig. 3a", 7.5,
              "7.5×", _metric(ARIMA, PESSIMISTIC, 0.05, 0.0, "speedup"), within_factor(2)),
        claim("ARIMA, K1 = 5 %, K2 = 0, pessimistic: about 26 % of applications fail",
              "§IV-B, Fig. 3a", 26.0, "≈ 26 %",
              _metric(ARIMA, PESSIMISTIC, 0.05, 0.0, "failed"), within_factor(2)),
        claim("ARIMA, K1 = 5 %, K2 = 0, pessimistic: slack about 30 %", "§IV-B, Fig. 3a", 30.0,
              "≈ 30 %", _metric(ARIMA, PESSIMISTIC, 0.05, 0.0, "slack"), within_factor(2)),
        claim("ARIMA, K1 = 0: turnaround very close to the baseline's whatever K2", "§IV-B, "
              "Fig. 3a", 1.0, "≈ 1×", _farthest_speedup(ARIMA, 0.0), within_factor(1.25)),
        claim("ARIMA, K1 = 5 %: as K2 grows the metrics stay similar (speedup at the largest "
              "K2 over the smallest)", "§IV-B, Fig. 3a", 1.0, "≈ 1",
              _k2_effect(ARIMA, "speedup"), within_factor(1.25)),
        claim("K1 = 100 %: turnaround equals the baseline's (every forecaster and policy)",
              "§IV-B, Fig. 3", 1.0, "1×",
              _farthest_speedup(None, 1.0, (OPTIMISTIC, PESSIMISTIC)), within(0.01, "×")),
        claim("K1 = 100 %: no application fails", "§IV-B, Fig. 3", 0.0, "0 %", _most_failed,
              within(0, " pp")),
        *(_simulator_arima_claims(claim) if config == "shaping_002" else ()),
        claim("GP, pessimistic: turnaround ratios up to 10.6× (best cell)", "§IV-B, Fig. 3b",
              10.6, "10.6×", _best_gp, within_factor(2)),
        claim("GP, K1 = 5 %: failures fall as K2 grows (largest K2 minus smallest)",
              "§IV-B, Fig. 3b", -1.0, "< 0", _k2_effect(GP, "failed"), same_sign()),
        claim("GP, K1 = 5 %, largest K2, pessimistic: slack about 22 %", "§IV-B, Fig. 3b",
              22.0, "≈ 22 %", _metric(GP, PESSIMISTIC, 0.05, 3.0, "slack"), within_factor(2)),
    )


def _simulator_arima_claims(claim):
    """Fig. 3a's ARIMA claims on [Pace18]'s simulator's ARIMA(0, 1, 1) (ARIMA_011)."""
    return (
        claim("ARIMA(0, 1, 1) (the simulator's), K1 = 5 %, K2 = 0, pessimistic: 7.5× "
              "turnaround", "§IV-B, Fig. 3a", 7.5, "7.5×",
              _metric(ARIMA_011, PESSIMISTIC, 0.05, 0.0, "speedup"), within_factor(2)),
        claim("ARIMA(0, 1, 1) (the simulator's), K1 = 5 %, K2 = 0, pessimistic: about 26 % of "
              "applications fail", "§IV-B, Fig. 3a", 26.0, "≈ 26 %",
              _metric(ARIMA_011, PESSIMISTIC, 0.05, 0.0, "failed"), within_factor(2)),
        claim("ARIMA(0, 1, 1) (the simulator's), K1 = 5 %, K2 = 0, pessimistic: slack about "
              "30 %", "§IV-B, Fig. 3a", 30.0, "≈ 30 %",
              _metric(ARIMA_011, PESSIMISTIC, 0.05, 0.0, "slack"), within_factor(2)),
    )


def _run_tables(runs, spec):
    """The run's shaping_runs and shaping_applications at its figure load, and that load."""
    tables = runs.result(spec.name).tables()
    load = figure_load(tables["shaping_runs"])
    return ({name: at_load(tables[name], load) for name in ("shaping_runs",
                                                            "shaping_applications")}, load)


def figures(runs, directory):
    """The speed-up against the offered load, and Fig. 2 and Fig. 3 (the report's) of every
    claim run, at its figure load."""
    shown = []
    for spec in CLAIM_RUNS:
        if runs.skipped(spec.name):
            continue
        drawn = fig_load(runs.result(spec.name).tables()["shaping_runs"])
        if drawn is not None:
            shown.append((save_png(drawn, directory, f"{spec.name}_load"),
                          f"{spec.name}: speed-up of each policy over the baseline and the "
                          "baseline's queue against the offered load"))
        tables, load = _run_tables(runs, spec)
        at = "" if load is None else f", at target load {load:g}"
        drawn = fig2(tables["shaping_applications"])
        if drawn is not None:
            shown.append((save_png(drawn, directory, f"{spec.name}_fig2"),
                          f"{WHAT[spec.name]}: Fig. 2, turnaround and slack per application, "
                          f"baseline and each policy with the oracle{at}"))
        drawn = None if spec.name in ORACLE_ONLY else fig3(tables["shaping_runs"])
        if drawn is not None:
            shown.append((save_png(drawn, directory, f"{spec.name}_fig3"),
                          f"{WHAT[spec.name]}: Fig. 3, turnaround ratio, slack and failed "
                          f"applications over K1 × K2{at}"))
    return shown


def _shown_cells(result) -> pd.DataFrame:
    frame = _at_peak_load(result.sql(CELLS_SQL))
    keep = [any(r.forecaster == f and abs(r.k1 - k1) < 1e-9 and abs(r.k2 - k2) < 1e-9
                for f, k1, k2 in SHOWN_CELLS) for r in frame.itertuples()]
    return frame[keep].reset_index(drop=True)


LOAD_SQL = (
    "SELECT target_offered_load AS target_load, avg(offered_load) AS offered_load, "
    "avg(baseline_mean_queue_length) AS baseline_queue, forecaster, policy, k1, k2, "
    "avg(turnaround_speedup_vs_baseline) AS speedup, avg(failed_applications_pct) AS failed "
    "FROM shaping_runs WHERE policy <> 'baseline' AND (forecaster = 'oracle' AND k1 = 0 "
    "OR forecaster IN ('arima', 'arima_011') AND k1 = 0.05) AND k2 = 0 GROUP BY ALL "
    "ORDER BY ALL")


def _by_interval(runs) -> pd.DataFrame:
    """LOAD_SQL's cells of shaping_002 and its interval variants, with the interval."""
    frames = []
    for spec in RUNS:
        if spec.file == "shaping_002.textproto" and not runs.skipped(spec.name):
            steps = spec.config(runs.quick).shaping.shaping_interval_steps
            frames.append(runs.result(spec.name).sql(LOAD_SQL).assign(interval_steps=steps))
    if not frames:
        return pd.DataFrame()
    frame = pd.concat(frames, ignore_index=True)
    return frame[["target_load", "forecaster", "policy", "k1", "interval_steps", "speedup",
                  "failed"]].sort_values(["target_load", "forecaster", "policy",
                                          "interval_steps"]).round(3)


def tables(runs):
    """Per claim run: the baseline and each (forecaster, policy)'s smallest-buffer and best
    cells and the cells the README's tables showed (at the figure load); for shaping_002, the
    speed-up against the offered load and against the shaping interval."""
    shown = []
    for spec in CLAIM_RUNS:
        if runs.skipped(spec.name):
            continue
        result = runs.result(spec.name)
        tables_at, load = _run_tables(runs, spec)
        at = "" if load is None else f", target load {load:g}"
        shown.append((f"{WHAT[spec.name]} ({spec.name}): baseline, smallest buffer and best "
                      f"cell per forecaster and policy (means over seeds{at})",
                      summary_table(tables_at["shaping_runs"])))
        shown.append((f"{WHAT[spec.name]}: selected cells (means over seeds{at})",
                      _shown_cells(result)))
        if load is not None:
            shown.append((f"{spec.name}: the oracle's and ARIMA's Fig. 2 / Fig. 3a cells at "
                          "each offered load (means over seeds)", result.sql(LOAD_SQL).round(3)))
    intervals = _by_interval(runs)
    if len(intervals) and intervals["interval_steps"].nunique() > 1:
        shown.append(("shaping_002: speed-up and failed applications (%) against the shaping "
                      "interval (one-minute steps), per offered load", intervals))
    return shown


PAPER = Paper(
    key="Pace18",
    authors="Francesco Pace, Dimitrios Milios, Damiano Carra, Pietro Michiardi",
    title="Dynamic Resource Shaping for Compute Clusters",
    venue="2018",
    summary="The paper simulates 150,000 applications sampled from public traces on 250 hosts "
            "of 32 cores and 128 GB for about three months, monitoring usage every minute. "
            "Here configs/shaping_002.textproto runs that setup on 5 hosts with 750 "
            "applications per run (the synthetic trace's jobs, 10 seeds, three offered loads, "
            "one-minute monitoring, the simulator's semantics; the full size is "
            "configs/shaping_002_full.textproto), and configs/shaping_002_long.textproto runs "
            "its oracle alone with 12,000 applications on the 5 hosts, which last 78-110 "
            "simulated days, about as long as the paper's run (five loads, 3 seeds); besides, "
            "the synthetic trace (8 machines, "
            "1 day) gives 75 applications on 2 hosts and "
            "the Azure readings 50 single-VM applications on one 8-core host (CPU only), "
            "shaped every hour (synthetic) or 6 hours (Azure) on 5-minute maxima. Each claim "
            "is checked under two readings of a failure: the host's total usage above its "
            "capacity (host overload) and a component's usage above its own allocation "
            "(container limit, 002's; a failed application then retries unshaped).",
    runs=RUNS, claims=sum((_claims(spec.name) for spec in CLAIM_RUNS), ()), figures=figures,
    tables=tables)
