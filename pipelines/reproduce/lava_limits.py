"""What limits LAVA on a placement run: the VM classes it reads at arrival, or the exits it
ranks hosts by?

LAVA reads lifetimes twice: a VM's class at arrival picks the tier of hosts ([Ling25ext] App.
I, Algorithm 3), and the repredicted host exits rank the hosts inside a tier (NILAS). This
replays LAVA on a run's pools with each combination of
- exits: a lifetime source of the placement stage (`uptime_model`, `oracle`, or
  `noisy_<accuracy>` with the config's seed);
- classes: from the VM's remaining lifetime that source predicts at arrival (plain LAVA), from
  the lifetime stage's class classifiers (P(lifetime > 1 h, 10 h, 100 h) at arrival; when the
  run trained them), or from its true lifetime (censored VMs: the lifetime observed);
and gives the empty hosts % (mean over the metric window) with the difference to Best-Fit in
percentage points. Pools, models, lifetime sources and simulator settings are the placement
stage's own (`pool_inputs`, `lifetime_source`, `lava_vm_classes`, `simulate_options`), so
the plain-LAVA cells equal the run's `lava` rows of those sources.
"""

import os
from typing import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.query import table_files
from pipelines.stages.placement.pools import pool_inputs
from pipelines.stages.placement.replays import (
    LifetimeSpec,
    lava_vm_classes,
    lifetime_source,
    simulate_options,
)
from policies.best_fit import BestFit
from policies.lava import Lava
from policies.replay.lifetime_source import OracleLifetimes
from policies.replay.simulator import simulate
from predictors.lifetime.registry import LAVA_CLASS_MODEL_NAMES

OWN, CLASSIFIERS, TRUE = ("the exits' source at arrival (plain LAVA)", "class classifiers",
                          "true lifetime")
CLASS_SOURCES = (OWN, CLASSIFIERS, TRUE)
DEFAULT_EXITS = ("uptime_model", "oracle")


def exit_spec(name: str) -> LifetimeSpec:
    """The lifetime source named `name`: uptime_model, oracle or noisy_<accuracy>."""
    if name.startswith("noisy_"):
        return LifetimeSpec("noisy_oracle", float(name[len("noisy_"):]))
    if name not in ("uptime_model", "oracle"):
        raise ValueError(f"unknown exits {name!r}: uptime_model, oracle or noisy_<accuracy>")
    return LifetimeSpec(name)


def read_run_table(results_dir: str, name: str, columns=None) -> pa.Table:
    """Table `name` of the run in `results_dir` (the files its manifest lists)."""
    return pa.concat_tables([pq.read_table(f, columns=columns)
                             for f in table_files(results_dir)[name]])


def model_tables(results_dir: str) -> list:
    """The run's `lifetime_models` rows, with paths under `results_dir` (the run may have
    moved since); empty when the run trained no model."""
    if "lifetime_models" not in table_files(results_dir):
        return [pa.table({"name": pa.array([], pa.string()), "path": pa.array([], pa.string())})]
    names = read_run_table(results_dir, "lifetime_models", ["name"]).column("name").to_pylist()
    return [pa.table({"name": names,
                      "path": [os.path.join(results_dir, "models", n) for n in names]})]


def true_classes(pool_input) -> np.ndarray:
    """LAVA's class of each VM's true (or censored) lifetime."""
    lifetime_us = pool_input.trace.exit_us - pool_input.trace.arrival_us
    return np.array([Lava.lifetime_class(t) for t in lifetime_us.tolist()], dtype=np.int64)


def empty_hosts_pct(pool_input, config, policy, source) -> float:
    result = simulate(pool_input.trace, pool_input.spec, policy, source,
                      **simulate_options(pool_input, config))
    return result.summary["empty_hosts_pct"]


def pool_rows(pool_input, config, tables, exits: Sequence[str]) -> list:
    """[pool, classes, exits, empty hosts %, vs Best-Fit pp] of LAVA on one pool."""
    classes = {OWN: None, TRUE: true_classes(pool_input)}
    if LAVA_CLASS_MODEL_NAMES[0] in tables[0].column("name").to_pylist():
        classes[CLASSIFIERS] = lava_vm_classes(pool_input, tables)
    lava = Lava(config.lava_recycle_fraction)
    best_fit = empty_hosts_pct(pool_input, config, BestFit(),
                               OracleLifetimes(pool_input.trace.lifetime_s()))
    rows = []
    for name in exits:
        source = lifetime_source(exit_spec(name), pool_input, config, tables)
        for classes_name in CLASS_SOURCES:
            if classes_name not in classes:
                continue
            vm_classes = classes[classes_name]
            policy = lava if vm_classes is None else lava.with_vm_classes(vm_classes)
            empty = empty_hosts_pct(pool_input, config, policy, source)
            rows.append([pool_input.pool, classes_name, name, empty, empty - best_fit])
    return rows


def lava_limits(results_dir: str, config, exits: Sequence[str] = DEFAULT_EXITS) -> pd.DataFrame:
    """LAVA's empty hosts % on every pool of the run in `results_dir` (its RunConfig
    `config`), one row per (pool, classes, exits): columns pool, classes, exits,
    empty_hosts_pct, vs_best_fit_pp."""
    for name in exits:
        exit_spec(name)
    placement = config.placement
    tables = model_tables(results_dir)
    run_tables = table_files(results_dir)
    machines = (read_run_table(results_dir, "machines") if "machines" in run_tables
                and not placement.HasField("host_shape") else None)
    rows = []
    for pool_input in pool_inputs(read_run_table(results_dir, "instances"), placement,
                                  machines):
        rows += pool_rows(pool_input, placement, tables, exits)
    return pd.DataFrame(rows, columns=["pool", "classes", "exits", "empty_hosts_pct",
                                       "vs_best_fit_pp"])


def as_table(rows: pd.DataFrame) -> pd.DataFrame:
    """`lava_limits` rows as one row per (pool, classes), one column per exits source, each
    cell "empty hosts % (±vs Best-Fit)"."""
    cells = rows.assign(cell=[f"{r.empty_hosts_pct:.2f} ({r.vs_best_fit_pp:+.2f})"
                              for r in rows.itertuples()])
    table = cells.pivot(index=["pool", "classes"], columns="exits", values="cell")
    order = [c for c in CLASS_SOURCES if c in set(rows["classes"])]
    table = table.reindex(order, level="classes")[list(dict.fromkeys(rows["exits"]))]
    return table.rename(columns=lambda e: f"exits: {e}").reset_index().rename_axis(
        columns=None)
