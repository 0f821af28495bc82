"""The runs on the Google 2011 trace that the lifetime papers share ([Barbalho23],
[Ling25]): lifetime models that know the customer, trained on the past and tested on the
future (configs/google_2011_lifetime.textproto, the jobs), and placement of the real tasks
with them (configs/google_2011_placement.textproto), each run also with its split 1.5 h (the
jobs: 1.5 days) earlier and later, with the claims' measurements over their tables."""

import numpy as np
import pandas as pd

from pipelines.report import lifetime as lifetime_report
from pipelines.reproduce.claims import Measurement, NotComparable, Sql
from pipelines.reproduce.runs import (
    DAY_S,
    HOUR_S,
    TWO_WORKERS,
    RunSpec,
    keep_repeated,
    split_label,
    split_variants,
)

JOBS, TASKS = "google_2011_lifetime", "google_2011_placement"
# The feature variants of the jobs' run (its config says what each holds).
NO_CUSTOMER, SMALL, LARGE_USER, LARGE = ("no_customer", "customer_small",
                                         "customer_large_user_only", "customer_large")
HOUR_US, DAY_US = 3_600_000_000, 86_400_000_000
GAIN = "empty_hosts_pct_vs_best_fit_pp"


def _quick_jobs(config):
    """The first 80 parts of job_events (4.6 days), split at day 1.5, the variants the
    claims read, 100 trees."""
    config.google_2011.job_events = config.google_2011.job_events.replace(
        "part-*", "part-000[0-7]?")
    model = config.lifetime_model
    model.split_time_us = int(1.5 * DAY_US)
    model.num_trees, model.learning_rate = 100, 0.1
    keep_repeated(model.variant, lambda v: v.name in (NO_CUSTOMER, SMALL, LARGE_USER))


# Each claim on these runs is measured at the config's split and 1.5 h (the jobs: 1.5 days)
# before and after it: on the tasks (hours 0-19.7) training ends at hour 8.5, 10 or 11.5 and
# the replay starts there; on the jobs (days 0-14.5) at day 5.5, 7 or 8.5.
JOBS_RUNS = split_variants(RunSpec(
    "google_2011_lifetime.textproto", _quick_jobs,
    "job_events parts 0-79 (days 0-4.6), split at day 1.5, the variants no_customer, "
    "customer_small and customer_large_user_only, 100 trees"), (-1.5 * DAY_S, 1.5 * DAY_S))
_TASKS_SKIP = ("--quick leaves out the Google 2011 tasks (890k task runs on ~18k hosts: "
               "minutes on 2 cores)")
TASKS_RUNS = split_variants(RunSpec("google_2011_placement.textproto", lambda config: None, "",
                                    TWO_WORKERS, quick_skip=_TASKS_SKIP),
                            (-1.5 * HOUR_S, 1.5 * HOUR_S), "the split and the replay's start")
SWEEP_ACCURACIES = (0.9, 0.8, 0.6)


def _accuracy_sweep(config):
    """Best-Fit and NILAS with the oracle and noisy oracles, no model."""
    config.ClearField("lifetime_model")
    config.ClearField("customer_history")
    placement = config.placement
    keep_repeated(placement.policy, lambda p: p in (placement.BEST_FIT, placement.NILAS))
    keep_repeated(placement.lifetime_source, lambda s: s.WhichOneof("source") == "oracle")
    for accuracy in SWEEP_ACCURACIES:
        placement.lifetime_source.add(noisy_oracle_accuracy=accuracy)


SWEEP_RUN = RunSpec(
    "google_2011_placement.textproto", lambda config: None, "", TWO_WORKERS,
    quick_skip=_TASKS_SKIP,
    variant=("_accuracy_sweep", "Best-Fit and NILAS only, the oracle and noisy oracles of "
             f"accuracy {', '.join(map(str, SWEEP_ACCURACIES))} ([Ling25ext] App. G.1)",
             _accuracy_sweep))
SWEEP = TASKS + "_accuracy_sweep"


def sweep_position(source: str, policy: str = "nilas"):
    """Where `policy` with `source` (a learned one) falls in the accuracy sweep: the noisy
    accuracy whose gain vs Best-Fit it matches, interpolated (Computed over TASKS, SWEEP)."""
    def compute(runs):
        learned = runs.result(TASKS).sql(
            f"SELECT avg({GAIN}) AS g FROM placement_summary WHERE defrag = 'none' AND "
            f"policy = '{policy}' AND lifetime_source = '{source}'")["g"]
        sweep = runs.result(SWEEP).sql(
            f"SELECT coalesce(noisy_oracle_accuracy, 1) AS accuracy, avg({GAIN}) AS g FROM "
            f"placement_summary WHERE defrag = 'none' AND policy = '{policy}' GROUP BY ALL "
            "ORDER BY accuracy")
        if not len(learned) or np.isnan(learned.iat[0]) or len(sweep) < 2:
            raise NotComparable(f"the runs lack {policy} with {source} or the sweep")
        gain = float(learned.iat[0])
        order = np.argsort(sweep["g"].to_numpy())
        accuracy = float(np.interp(gain, sweep["g"].to_numpy()[order],
                                   sweep["accuracy"].to_numpy()[order]))
        points = ", ".join(f"{a:g}: {g:+.2f}" for a, g in zip(sweep["accuracy"], sweep["g"]))
        return Measurement(accuracy, f"{accuracy:.2f} ({policy} with {source} {gain:+.2f} pp; "
                                     f"sweep {points})")
    return compute


def variant_metric(table: str, model: str, variant: str, column: str, fmt: str = "{:.3f}",
                   config: str = JOBS):
    """`column` of `model` of `variant` in a lifetime table of the run `config`, with the
    share of positives."""
    def reduce(frame):
        if not len(frame):
            raise NotComparable(f"the run trained no {model} of variant {variant}")
        row = frame.iloc[0]
        number = float(row[column])
        return Measurement(number, fmt.format(number) + f" ({int(row['n_positive']):,} of "
                                                        f"{int(row['n']):,} test jobs long-lived"
                                                        f" beyond {row['threshold_s'] / 3600:g} h)")
    return Sql(config, f"SELECT {column}, n, n_positive, threshold_s FROM {table} WHERE "
                       f"model = '{model}' AND variant = '{variant}'", reduce)


def f1_slope(model: str, variant: str, column: str = "f1", config: str = JOBS):
    """The least-squares slope of `column` per day since the split (lifetime_by_period of the
    run `config`), over the days with a long-lived test job: on the others (the trace's last
    minutes) recall, hence F1, is undefined and the table's 0 is no measurement."""
    def reduce(frame):
        scored = frame[frame["n_positive"] > 0].dropna(subset=[column])
        if len(scored) < 3:
            raise NotComparable(f"fewer than 3 test days with a long-lived job for {model} of "
                                f"variant {variant}")
        slope = float(np.polyfit(scored["period"], scored[column], 1)[0])
        (first, first_f1), (last, last_f1) = (scored[["period", column]].iloc[i] for i in (0, -1))
        left_out = "".join(f"; day {day} left out: no long-lived job"
                           for day in sorted(set(frame["period"]) - set(scored["period"])))
        return Measurement(slope, f"{slope:+.4f} a day (day {int(first)}: {first_f1:.3f}, "
                                  f"day {int(last)}: {last_f1:.3f}{left_out})")
    return Sql(config, f"SELECT period, n_positive, {column} FROM lifetime_by_period WHERE "
                       f"model = '{model}' AND variant = '{variant}' ORDER BY period", reduce)


ABLATION_SQL = (
    "SELECT c.variant, l.auc, l.average_precision, l.f1, l.precision_at_recall_70, "
    "c.c_index AS la_c_index, u.c_index AS uptime_c_index, l.n, l.n_positive FROM "
    "lifetime_la_classifier l JOIN lifetime_concordance c USING (variant, model) JOIN "
    "lifetime_concordance u ON u.variant = c.variant AND u.model = 'uptime' "
    "WHERE l.model = 'la_classifier' ORDER BY l.auc")
IMPORTANCE_SQL = (
    "SELECT variant, feature, gain_fraction FROM lifetime_feature_importance WHERE model = "
    "'la_classifier' QUALIFY row_number() OVER (PARTITION BY variant ORDER BY gain_fraction "
    "DESC) <= 5 ORDER BY variant, gain_fraction DESC")


def ablation_tables(result):
    """The feature ablation on the test period, each variant's strongest features, and the
    classifier's F1 per test day."""
    by_day = result.sql("SELECT variant, period AS day, f1 FROM lifetime_by_period WHERE "
                        "model = 'la_classifier'")
    by_day = by_day.pivot(index="day", columns="variant", values="f1").reset_index()
    return [("Google 2011 jobs: LA's classifier and the uptime model per feature variant "
             "(test days 7-14.5)", result.sql(ABLATION_SQL)),
            ("Google 2011 jobs: the five strongest features of LA's classifier per variant "
             "(share of the gain)", result.sql(IMPORTANCE_SQL)),
            ("Google 2011 jobs: F1 of LA's classifier per day after the split",
             by_day.rename_axis(columns=None))]


SPLIT_METRICS = ("auc", "average_precision", "f1")


def split_table(runs) -> pd.DataFrame:
    """AUC, average precision and F1 of LA's classifier per variant (rows) at each of the
    jobs' splits that ran (columns "auc, split at day 7", ...: each metric's splits together)."""
    by_split = {}
    for spec in JOBS_RUNS:
        if not runs.skipped(spec.name):
            by_split[split_label(runs.config(spec.name))] = runs.result(spec.name).sql(
                f"SELECT variant, {', '.join(SPLIT_METRICS)} FROM lifetime_la_classifier "
                "WHERE model = 'la_classifier'").set_index("variant")
    return pd.DataFrame({f"{metric}, {label}": frame[metric] for metric in SPLIT_METRICS
                         for label, frame in by_split.items()}).sort_index().reset_index()


def aging_figure(result):
    """LA's classifier of each variant by day after the split."""
    frame = result.sql("SELECT variant AS model, period, auc, f1 FROM lifetime_by_period "
                       "WHERE model = 'la_classifier' ORDER BY variant, period")
    return lifetime_report.aging(pd.DataFrame(frame))


def gain_share(learned: str, policy: str = "nilas", config: str = TASKS):
    """`policy`'s gain vs Best-Fit with the `learned` source as a share of its gain with the
    oracle (in the run `config`)."""
    def reduce(frame):
        gains = dict(zip(frame["lifetime_source"], frame["value"]))
        if learned not in gains or "oracle" not in gains:
            raise NotComparable(f"the run has no {policy} replay with {learned} or the oracle")
        share = gains[learned] / gains["oracle"]
        return Measurement(float(share), f"{share:.2f} ({gains[learned]:+.2f} of "
                                         f"{gains['oracle']:+.2f} pp)")
    return Sql(config, f"SELECT lifetime_source, avg({GAIN}) AS value FROM placement_summary "
                       f"WHERE defrag = 'none' AND policy = '{policy}' GROUP BY ALL", reduce)


def sweep_table(runs, sources):
    """Where each learned source of NILAS sits in the accuracy sweep."""
    rows = []
    for source in sources:
        try:
            measured = sweep_position(source)(runs)
            rows.append({"lifetime source": source, "matches accuracy": measured.text})
        except NotComparable as e:
            rows.append({"lifetime source": source, "matches accuracy": str(e)})
    return pd.DataFrame(rows)


CLASSIFIER_SQL = (
    "SELECT variant, n, n_positive, 100.0 * n_positive / n AS long_pct, "
    "100.0 * recall * n_positive / nullif(precision, 0) / n AS predicted_long_pct, precision, "
    "recall, f1, auc FROM lifetime_la_classifier WHERE model = 'la_classifier' ORDER BY variant")


def classifier_table(result):
    """What LA-Binary's one-shot classes get wrong on the test tasks: the share of tasks
    called long against the share that are, and the precision of the call."""
    return result.sql(CLASSIFIER_SQL)
