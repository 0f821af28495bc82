"""The runs the papers on lifetime-aware placement share ([Ling25], [Ling25ext],
[Barbalho23]), and their claims and tables over a run's placement replays.

A replay is named (policy, lifetime source), e.g. ("nilas", "oracle"); every number is the
mean over the run's pools of a placement_summary column of replays without
defragmentation, the gains in percentage points vs Best-Fit with the same lifetimes.
"""

from typing import Sequence, Tuple

import pandas as pd

from pipelines.reproduce.claims import Measurement, NotComparable, Sql
from pipelines.reproduce.runs import TWO_WORKERS, RunSpec, keep_repeated, use_synthetic

GAIN = "empty_hosts_pct_vs_best_fit_pp"
EMPTY, DENSITY = "empty_hosts_pct", "packing_density_pct"
Replay = Tuple[str, str]


def replays_sql(column: str, replays: Sequence[Replay] = ()) -> str:
    """Policy, lifetime_source and the mean of `column` of every replay without
    defragmentation (of `replays` only, when given)."""
    chosen = " OR ".join(f"(policy = '{policy}' AND lifetime_source = '{source}')"
                         for policy, source in replays)
    return (f"SELECT policy, lifetime_source, avg({column}) AS value FROM placement_summary "
            f"WHERE defrag = 'none'{f' AND ({chosen})' if chosen else ''} GROUP BY ALL "
            "ORDER BY ALL")


def _values(frame: pd.DataFrame, replays: Sequence[Replay]) -> list:
    by_replay = {(r.policy, r.lifetime_source): r.value for r in frame.itertuples()}
    missing = [f"{policy} with {source}" for policy, source in replays
               if (policy, source) not in by_replay]
    if missing:
        raise NotComparable(f"the run has no replay of {', '.join(missing)}")
    return [float(by_replay[replay]) for replay in replays]


def label(replay: Replay) -> str:
    return f"{replay[0]} ({replay[1]})"


def value(config: str, replay: Replay, column: str = GAIN, unit: str = " pp") -> Sql:
    """A replay's `column`."""
    def reduce(frame):
        [number] = _values(frame, [replay])
        return Measurement(number, f"{number:+.2f}{unit}" if column == GAIN
                           else f"{number:.2f}{unit}")
    return Sql(config, replays_sql(column, [replay]), reduce)


def difference(config: str, first: Replay, second: Replay, column: str = GAIN,
               unit: str = " pp") -> Sql:
    """`column` of replay `first` minus that of replay `second`."""
    def reduce(frame):
        a, b = _values(frame, [first, second])
        return Measurement(a - b, f"{a - b:+.2f}{unit} ({label(first)} {a:.2f}, "
                                  f"{label(second)} {b:.2f})")
    return Sql(config, replays_sql(column, [first, second]), reduce)


def ranking(config: str, replays: Sequence[Replay], column: str = GAIN) -> Sql:
    """The policies of `replays` by their `column`, largest first (an ordering of names)."""
    def reduce(frame):
        values = _values(frame, replays)
        ranked = sorted(zip(values, replays), key=lambda pair: -pair[0])
        return Measurement(tuple(r[0] for _, r in ranked),
                           " > ".join(f"{label(r)} {v:+.2f}" for v, r in ranked))
    return Sql(config, replays_sql(column, replays), reduce)


LARS_SQL = ("SELECT lifetime_source, defrag, count(*) AS replays, avg(lars_migrations) AS "
            "migrations, min(lars_migrations) AS fewest, max(lars_migrations) AS most, "
            "max(lars_scheduled_migrations) AS scheduled, max(lars_drained_hosts) AS "
            "drained_hosts FROM placement_summary WHERE defrag <> 'none' GROUP BY ALL "
            "ORDER BY ALL")


def lars_reduction(config: str, source: str) -> Sql:
    """1 − LARS's migrations / the baseline order's (mean over its seeds), in %, on the
    same drains ([Ling25] §6.3's pairing), lifetimes from `source`."""
    def reduce(frame):
        rows = frame[frame["lifetime_source"] == source].set_index("defrag")
        if "lars_lifetime" not in rows.index or "lars_baseline" not in rows.index:
            raise NotComparable(f"the run has no paired LARS replays with {source}")
        lars, baseline = rows.loc["lars_lifetime"], rows.loc["lars_baseline"]
        reduction = 100 * (1 - lars["migrations"] / baseline["migrations"])
        return Measurement(float(reduction),
                           f"{reduction:.1f} % ({lars['migrations']:g} vs "
                           f"{baseline['migrations']:g}, mean of {int(baseline['replays'])} "
                           f"baseline seeds; {int(lars['scheduled'])} scheduled)")
    return Sql(config, LARS_SQL, reduce)


def summary_pivot(result) -> pd.DataFrame:
    """Empty hosts % per policy (rows) and lifetime source (columns), each cell "x (±gain)"
    with its failed placements in brackets when there are any."""
    frame = result.sql("SELECT policy, lifetime_source, avg(empty_hosts_pct) AS e, "
                       f"avg({GAIN}) AS g, sum(failed_placements) AS f FROM placement_summary"
                       " WHERE defrag = 'none' GROUP BY ALL")
    frame["cell"] = [f"{r.e:.2f} ({r.g:+.2f})" + (f" [{int(r.f):,} failed]" if r.f else "")
                     for r in frame.itertuples()]
    pivot = frame.pivot(index="policy", columns="lifetime_source", values="cell").fillna("—")
    return pivot.reset_index().rename_axis(columns=None)


def density_pivot(result) -> pd.DataFrame:
    """Packing density % per policy (rows) and lifetime source (columns)."""
    frame = result.sql(replays_sql(DENSITY))
    pivot = frame.pivot(index="policy", columns="lifetime_source", values="value")
    return pivot.reset_index().rename_axis(columns=None)


def lars_table(result) -> pd.DataFrame:
    """The paired LARS replays: migrations performed and scheduled per order and seed."""
    return result.sql(LARS_SQL)


def long_lived(column: str):
    """A lifetime_long_lived metric (`column`), with the run's long-lived threshold."""
    def reduce(frame):
        number, hours = float(frame[column].iat[0]), frame["threshold_s"].iat[0] / 3600
        return Measurement(number, f"{number:.3f} (long-lived: beyond {hours:g} h)")
    return reduce


def quick_lifetime_model(config):
    """The lifetime stage scaled to a 4-day synthetic trace, as configs/demo.textproto does:
    lifetimes capped at 6 h, long-lived beyond 1 h, 100 trees."""
    model = config.lifetime_model
    model.lifetime_cap_s = 21600
    model.long_lived_threshold_s = 3600
    model.num_trees = 100
    model.learning_rate = 0.1
    del model.kaplan_meier_stratum_feature[:]
    model.kaplan_meier_stratum_feature.extend(["priority", "scheduling_class"])


def quick_pool(config):
    """The placement stage on a synthetic trace's own machines (20 × 4 days), a 6-hour
    warm-up, samples every 15 minutes."""
    use_synthetic(config, machines=20, days=4)
    placement = config.placement
    placement.ClearField("host_shape")
    placement.ClearField("target_utilization")
    placement.warmup_s = 21600
    placement.sample_period_s = 900


def _quick_placement(config):
    quick_pool(config)
    keep_repeated(config.placement.lifetime_source,
                  lambda s: s.WhichOneof("source") != "noisy_oracle_accuracy"
                  or s.noisy_oracle_accuracy == 0.6)
    quick_lifetime_model(config)


def _quick_lifetime(config):
    use_synthetic(config, machines=20, days=4)
    quick_lifetime_model(config)


def _quick_noisy_seeds(config):
    quick_pool(config)
    keep_repeated(config.placement.lifetime_source, lambda s: s.noisy_oracle_seed < 2)


def _quick_demo(config):
    for stage in ("overcommit", "lifetime_model", "shaping"):
        config.ClearField(stage)


_SYNTHETIC = "the synthetic trace (20 machines × 4 days, its own machines) instead of the Azure "
PLACEMENT_RUN = RunSpec(
    "azure_placement.textproto", _quick_placement,
    _SYNTHETIC + "vmtable; a 6 h warm-up; one noisy accuracy (0.6); lifetimes capped at 6 h, "
    "long-lived beyond 1 h, 100 trees",
    TWO_WORKERS)
LIFETIME_RUN = RunSpec(
    "azure_lifetime.textproto", _quick_lifetime,
    _SYNTHETIC + "vmtable; lifetimes capped at 6 h, long-lived beyond 1 h, 100 trees")
NOISY_SEEDS_RUN = RunSpec(
    "azure_noisy_seeds.textproto", _quick_noisy_seeds,
    _SYNTHETIC + "vmtable; a 6 h warm-up; seeds 0 and 1 of each accuracy",
    TWO_WORKERS)
DEMO_RUN = RunSpec("demo.textproto", _quick_demo, "the placement stage only")
PLACEMENT, LIFETIME, NOISY_SEEDS, DEMO = "azure_placement", "azure_lifetime", \
    "azure_noisy_seeds", "demo"
