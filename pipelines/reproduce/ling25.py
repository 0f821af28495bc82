"""[Ling25] LAVA (MLSys 2025, main text): the lifetime distribution (§2.1), NILAS, LAVA and
LA-Binary against the baseline (§6.1, Fig. 6), LARS (§6.3, Table 2) and the lifetime model
(§6.4, §6.5, Fig. 9), on the Azure V1 vmtable sample (configs/azure_placement.textproto,
configs/azure_lifetime.textproto), the synthetic demo (configs/demo.textproto) and the Google
2011 tasks with models that know the customer (configs/google_2011_placement.textproto)."""

import pandas as pd

from pipelines.report.placement import empty_hosts_over_time, shown_replays, summary_bars
from pipelines.reproduce import google_2011, lava_limits
from pipelines.reproduce.azure_splits import LIFETIME_RUNS, over_fractions
from pipelines.reproduce.claims import (
    Claim,
    Computed,
    Measurement,
    NotComparable,
    Sql,
    at_least,
    same_order,
    same_sign,
    within,
    within_factor,
)
from pipelines.reproduce.paper import Paper, save_png
from pipelines.reproduce.placement import (
    DEMO,
    DEMO_RUN,
    GAIN,
    LIFETIME,
    PLACEMENT,
    PLACEMENT_RUN,
    difference,
    lars_reduction,
    lars_table,
    long_lived,
    ranking,
    replays_sql,
    summary_pivot,
    value,
)
from pipelines.reproduce.runs import over_splits, split_label

EXAMPLES_MODEL = "uptime_lifetime_fractions"  # the model trained on the paper's examples
MODEL, ONE_SHOT, ORACLE = "uptime_model", "one_shot_model", "oracle"
# Fig. 6's policies, each with the lifetimes it is built for: NILAS and LAVA repredict with
# the uptime model, LA-Binary asks LA's classifier once at arrival.
LAVA_M, NILAS_M, LA_BINARY_M = ("lava", MODEL), ("nilas", MODEL), ("la_binary", ONE_SHOT)

_LIFETIMES = (
    "WITH v AS (SELECT (coalesce(end_time, (SELECT max(coalesce(end_time, start_time)) FROM "
    "instances)) - start_time) / 3.6e9 AS hours, cpu_request AS cores FROM instances) "
    "SELECT 100 * avg(CASE WHEN hours < 1 THEN 1 ELSE 0 END) AS short_pct, "
    "100 * sum(CASE WHEN hours >= 1 THEN hours * cores ELSE 0 END) / sum(hours * cores) "
    "AS long_core_hours_pct FROM v")


def _column(name: str, fmt: str):
    def reduce(frame):
        number = float(frame[name].iat[0])
        return Measurement(number, fmt.format(number))
    return reduce


def _f1_by_quantile(model: str) -> str:
    return ("SELECT quantile, f1 FROM lifetime_f1_by_uptime WHERE model = "
            f"'{model}' ORDER BY quantile")


def _f1_at_zero(frame):
    return Measurement(float(frame.loc[frame["quantile"] == 0, "f1"].iat[0]),
                       f"{frame.loc[frame['quantile'] == 0, 'f1'].iat[0]:.2f}")


def _f1_after_eight(frame):
    later = frame[frame["quantile"] > 8]
    low = later.loc[later["f1"].idxmin()]
    return Measurement(float(low["f1"]), f"{low['f1']:.2f} (lowest, at quantile "
                                         f"{int(low['quantile'])})")


def _dip(frame):
    f1 = dict(zip(frame["quantile"], frame["f1"]))
    early = sum(f1[q] for q in range(1, 6)) / 5
    return Measurement(early - f1[0], f"{early - f1[0]:+.2f} (quantiles 1-5: {early:.2f}, "
                                      f"quantile 0: {f1[0]:.2f})")


def _lava_gain(classes: str):
    """LAVA's gain vs Best-Fit with the uptime model's exits and `classes` (lava_limits)."""
    def compute(runs):
        table = runs.derived(("lava_limits", PLACEMENT), lambda: lava_limits.lava_limits(
            runs.result_dir(PLACEMENT), runs.result(PLACEMENT).config))
        rows = table[(table["classes"] == classes) & (table["exits"] == "uptime_model")]
        if not len(rows):
            raise NotComparable(f"the run trained no model for LAVA's classes from {classes}")
        gain = float(rows["vs_best_fit_pp"].mean())
        return Measurement(gain, f"{gain:+.2f} pp")
    return compute


def _claims():
    claims = [
        Claim("88 % of VMs live less than 1 hour (censored VMs: the lifetime observed)",
              "§2.1, Fig. 1", 88.0, "88 %",
              Sql(LIFETIME, _LIFETIMES, _column("short_pct", "{:.1f} %")), within(5, " pp")),
        Claim("98 % of the core-hours are consumed by VMs living 1 hour or more", "§2.1",
              98.0, "98 %", Sql(LIFETIME, _LIFETIMES, _column("long_core_hours_pct",
                                                             "{:.1f} %")), within(5, " pp")),
        Claim("empty hosts vs the baseline with the lifetime model: LAVA > NILAS > LA-Binary "
              "(NILAS, LAVA: the uptime model; LA-Binary: LA's one-shot classifier)",
              "§6.1, Fig. 6", ("lava", "nilas", "la_binary"), "LAVA > NILAS > LA-Binary",
              ranking(PLACEMENT, (LAVA_M, NILAS_M, LA_BINARY_M)), same_order()),
    ]
    for (policy, source), gain in ((LAVA_M, 6.5), (NILAS_M, 6.1), (LA_BINARY_M, 5.0)):
        claims.append(Claim(f"{policy} with the lifetime model gains {gain} pp of empty hosts "
                            f"over the baseline ({source}; Best-Fit here)", "§6.1, Fig. 6",
                            gain, f"+{gain} pp", value(PLACEMENT, (policy, source)),
                            within_factor(2)))
    for classes in (lava_limits.CLASSIFIERS, lava_limits.TRUE):
        claims.append(Claim(f"LAVA with the lifetime model gains 6.5 pp (its VM classes from "
                            f"the {classes}, exits from the uptime model)", "§6.1, Fig. 6", 6.5,
                            "+6.5 pp", Computed((PLACEMENT,), _lava_gain(classes),
                                                "LAVA replayed by pipelines.reproduce."
                                                "lava_limits on the run's pool"),
                            within_factor(2)))
    claims += [
        Claim("NILAS gains 1.1 pp more than LA-Binary with the lifetime model", "§6.1", 1.1,
              "+1.1 pp", difference(PLACEMENT, NILAS_M, LA_BINARY_M), within_factor(2)),
        Claim("LAVA gains 1.5 pp more than LA-Binary with the lifetime model", "§6.1", 1.5,
              "+1.5 pp", difference(PLACEMENT, LAVA_M, LA_BINARY_M), within_factor(2)),
    ]
    for config in (PLACEMENT, DEMO):
        claims.append(Claim("with oracle lifetimes NILAS gains 2 pp more than LA (9.5 vs "
                            "7.5 pp)", "§6.1", 2.0, "+2.0 pp",
                            difference(config, ("nilas", ORACLE), ("la", ORACLE)),
                            within_factor(2)))
    claims += _google_2011_claims()
    claims += [
        Claim("LARS (lifetime order) performs fewer migrations than the baseline order on the "
              "same drains, oracle lifetimes", "§6.3, Table 2", 4.5,
              "4.32 %, 4.55 % fewer (≈ 4.5 %)", lars_reduction(PLACEMENT, ORACLE),
              same_sign(magnitude=True)),
        Claim("LARS saves about 4.5 % of the migrations, oracle lifetimes", "§6.3, Table 2",
              4.5, "≈ 4.5 %", lars_reduction(PLACEMENT, ORACLE), within_factor(2)),
        Claim("the lifetime model reaches 99 % precision at 70 % recall (long-lived at "
              "arrival: beyond 7 days in the paper)", "§6.4", 0.99, "0.99",
              over_fractions(lambda config: Sql(
                  config, "SELECT precision_at_recall_70, threshold_s FROM lifetime_long_lived "
                          "WHERE model = 'uptime'", long_lived("precision_at_recall_70"))),
              within(0.05)),
        Claim("F1 of long-lived at uptime quantile 0 (no reprediction) is 0.8 (the model on "
              "the paper's examples)", "§6.5, Fig. 9", 0.8, "0.8",
              over_fractions(lambda config: Sql(config, _f1_by_quantile(EXAMPLES_MODEL),
                                                _f1_at_zero)), within(0.1)),
        Claim("F1 rises above 0.9 after quantile 8 (40 % of the lifetime)", "§6.5, Fig. 9",
              0.9, "> 0.9", over_fractions(lambda config: Sql(
                  config, _f1_by_quantile(EXAMPLES_MODEL), _f1_after_eight)), at_least()),
        Claim("F1 dips at quantiles 1-5 below quantile 0 (mean of 1-5 minus quantile 0)",
              "§6.5, Fig. 9", -1.0, "< 0", over_fractions(lambda config: Sql(
                  config, _f1_by_quantile(EXAMPLES_MODEL), _dip)), same_sign()),
    ]
    return tuple(claims)


# The Google 2011 tasks' learned sources: the models with the customer's history.
CUSTOMER_MODEL = "uptime_model@customer_lifetimes"
CUSTOMER_ONE_SHOT = "one_shot_model@customer_lifetimes"


def _google_2011_claims():
    """The Google 2011 tasks' claims, each at the three splits (google_2011.TASKS_RUNS)."""
    splits = google_2011.TASKS_RUNS
    return [
        Claim("Google 2011 tasks: empty hosts vs the baseline with the lifetime model (the "
              "customer's history): LAVA > NILAS > LA-Binary", "§6.1, Fig. 6",
              ("lava", "nilas", "la_binary"), "LAVA > NILAS > LA-Binary",
              over_splits(splits, lambda config: ranking(config, (
                  ("lava", CUSTOMER_MODEL), ("nilas", CUSTOMER_MODEL),
                  ("la_binary", CUSTOMER_ONE_SHOT)))), same_order()),
        Claim("Google 2011 tasks: NILAS with the lifetime model keeps 64 % of its gain with "
              "oracle lifetimes (6.1 of 9.5 pp)", "§6.1, Fig. 6", 6.1 / 9.5, "0.64",
              over_splits(splits, lambda config: google_2011.gain_share(
                  CUSTOMER_MODEL, config=config)), within_factor(2)),
        Claim("Google 2011 tasks: LAVA with the lifetime model keeps 68 % of an oracle's gain "
              "(6.5 pp against NILAS's 9.5 with oracle lifetimes; here against LAVA's own "
              "oracle gain)", "§6.1, Fig. 6", 6.5 / 9.5, "0.68",
              over_splits(splits, lambda config: google_2011.gain_share(
                  CUSTOMER_MODEL, "lava", config)), within_factor(2)),
        Claim("Google 2011 tasks: LAVA with the lifetime model packs better than the baseline",
              "§6.1, Fig. 6", 6.5, "+6.5 pp",
              over_splits(splits, lambda config: value(config, ("lava", CUSTOMER_MODEL))),
              same_sign(magnitude=True)),
        Claim("Google 2011 tasks: NILAS with the lifetime model packs better than the baseline",
              "§6.1, Fig. 6", 6.1, "+6.1 pp",
              over_splits(splits, lambda config: value(config, ("nilas", CUSTOMER_MODEL))),
              same_sign(magnitude=True)),
    ]


def _split_gains(runs) -> pd.DataFrame:
    """Each replay's gain vs Best-Fit (pp) at each of the tasks' splits that ran, a column
    each (the config's own split among them)."""
    frames = [runs.result(spec.name).sql(replays_sql(GAIN)).set_index(
                  ["policy", "lifetime_source"])["value"].rename(
                  split_label(runs.config(spec.name)))
              for spec in google_2011.TASKS_RUNS if not runs.skipped(spec.name)]
    return pd.concat(frames, axis=1).reset_index()


def figures(runs, directory):
    """The report's placement figures for the Azure pool and the demo."""
    shown = []
    for config, what in ((PLACEMENT, "Azure V1 sample"), (DEMO, "demo")):
        if runs.skipped(config):
            continue
        tables = runs.result(config).tables()
        summary = tables["placement_summary"]
        pool, source = shown_replays(summary)
        shown.append((save_png(summary_bars(summary, pool), directory, f"{config}_summary"),
                      f"{what}: empty hosts, gain vs Best-Fit and failed placements per policy "
                      "and lifetime source"))
        shown.append((save_png(empty_hosts_over_time(tables["placement_timeseries"], pool,
                                                     source), directory, f"{config}_over_time"),
                      f"{what}: empty hosts over time ({source} lifetimes) with each policy's "
                      "upper bound"))
    return shown


def tables(runs):
    """Empty hosts per policy and lifetime source, LARS, and what limits LAVA."""
    shown = []
    for config, what in ((PLACEMENT, "Azure V1 sample"), (DEMO, "demo")):
        if not runs.skipped(config):
            shown.append((f"{what} ({config}): empty hosts % (gain vs Best-Fit, pp)",
                          summary_pivot(runs.result(config))))
    if not runs.skipped(google_2011.TASKS):
        shown.append(("Google 2011 tasks (google_2011_placement): empty hosts % (gain vs "
                      "Best-Fit, pp)", summary_pivot(runs.result(google_2011.TASKS))))
        shown.append(("Google 2011 tasks: gain vs Best-Fit (pp) of every replay at each split "
                      "(the lifetime models trained until it, the replay from it)",
                      _split_gains(runs)))
        shown.append(("Google 2011 tasks: LA's one-shot classifier (LA-Binary's classes) on "
                      "the test tasks: the share called long-lived (beyond 1 h) against the "
                      "share that is, %", google_2011.classifier_table(
                          runs.result(google_2011.TASKS))))
        if not runs.skipped(google_2011.SWEEP):
            shown.append(("Google 2011 tasks: the noisy accuracy at which NILAS gains what it "
                          "gains with each learned source (interpolated in the sweep)",
                          google_2011.sweep_table(runs, ("uptime_model@no_customer",
                                                         CUSTOMER_MODEL))))
    if not runs.skipped(PLACEMENT):
        shown.append(("LARS, paired on the same drains (azure_placement)",
                      lars_table(runs.result(PLACEMENT))))
        limits = runs.derived(("lava_limits", PLACEMENT), lambda: lava_limits.lava_limits(
            runs.result_dir(PLACEMENT), runs.result(PLACEMENT).config))
        shown.append(("What limits LAVA: empty hosts % (vs Best-Fit, pp) by the source of its "
                       "VM classes and of its exits (pipelines.reproduce.lava_limits)",
                       lava_limits.as_table(limits)))
    return shown


PAPER = Paper(
    key="Ling25",
    authors="Jianheng Ling, Pratik Worah, Yawen Wang, Yunchuan Kong, Chunlei Wang, Clifford "
            "Stein, Diwakar Gupta, Jason Behmer, Logan A. Bush, Prakash Ramanan, Rajesh Kumar, "
            "Thomas Chestna, Yajing Liu, Ying Liu, Ye Zhao, Kathryn S. McKinley, Meeyoung Park, "
            "Martin Maas",
    title="LAVA: Lifetime-Aware VM Allocation with Learned Distributions and Adaptation to "
          "Mispredictions",
    venue="MLSys 2025",
    summary="The paper replays seven weeks of 24 Google Cloud pools against Google's "
            "production baseline, with a model on features this trace lacks (admission "
            "policy, metadata). Here one Azure V1 region of 3.5 days (259,159 VMs; the pool "
            "starts empty, 2-day warm-up) and the synthetic demo trace stand in, Best-Fit is "
            "the baseline, and the lifetime model sees only VM size, deployment size and the "
            "arrival's hour and weekday; the sample's 3.5 days cap lifetimes at 1 day and "
            "call a VM long-lived beyond 12 hours. The model's Azure claims are measured "
            "trained on the first 50, 60 (the config's) and 70 % of the arrivals. The Google "
            "2011 claims replay the real tasks of the 2011 trace's hours 0-19.7 from a split "
            "on (hosts of half its largest machine, a 2-hour warm-up) with models trained "
            "until the split that know the user's and the logical job name's history; each "
            "claim is measured at three splits, hour 10 (the config's), 8.5 and 11.5. A claim "
            "measured several times holds only where it holds at every one.",
    runs=(PLACEMENT_RUN, *LIFETIME_RUNS, DEMO_RUN, *google_2011.TASKS_RUNS,
          google_2011.SWEEP_RUN),
    claims=_claims(), figures=figures,
    tables=tables)
