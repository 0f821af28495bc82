"""What limits LAVA with learned or noisy lifetimes on a placement run: its VM classes or
the exits it ranks hosts by?

LAVA reads lifetimes twice: a VM's class at arrival picks the tier of hosts ([Ling25ext] App. I
Algorithm 3), and the repredicted host exits rank the hosts inside a tier (NILAS). This
replays LAVA on the run's pools with each combination of
- exits: a lifetime source of the placement stage (`--exits`: the uptime model's exact
  curves, noisy oracles of a given accuracy with the config's seed, the oracle);
- classes: from the VM's predicted remaining lifetime at arrival by that same source
  (plain LAVA), from the lifetime stage's class classifiers (P(lifetime > 1 h, 10 h, 100 h)
  at arrival, the `uptime_model_lava_classes` source; if the run trained them), or from its
  true lifetime (censored VMs: the lifetime observed, a lower bound);
and prints the empty hosts % (mean over the metric window) and the difference to Best-Fit
in percentage points. The pools, models, lifetime sources and simulator settings are the
placement stage's own (`pool_inputs`, `lifetime_source`, `lava_vm_classes`,
`simulate_options`), so the plain-LAVA cells equal the run's `lava` rows of those sources,
and the class classifiers with the uptime model its `uptime_model_lava_classes` row (its
timing: docs/performance.md).

    .venv/bin/python scripts/lava_limits.py results/azure_placement
    .venv/bin/python scripts/lava_limits.py results/azure_placement \
        --exits uptime_model noisy_0.8 noisy_0.6 oracle
"""

import argparse
import os
import sys
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from configs.units import US_PER_S  # noqa: E402
from pipelines.config import load_config  # noqa: E402
from pipelines.stages.placement.pools import pool_inputs  # noqa: E402
from pipelines.stages.placement.replays import (  # noqa: E402
    LifetimeSpec,
    lava_vm_classes,
    lifetime_source,
    simulate_options,
)
from policies.best_fit import BestFit  # noqa: E402
from policies.lava import Lava  # noqa: E402
from policies.replay.lifetime_source import OracleLifetimes  # noqa: E402
from policies.replay.simulator import simulate  # noqa: E402
from predictors.lifetime.registry import LAVA_CLASS_MODEL_NAMES  # noqa: E402

OWN, CLASSIFIERS, TRUE = ("the exits' source at arrival (plain LAVA)", "class classifiers",
                          "true lifetime")
DEFAULT_EXITS = ("uptime_model", "oracle")


def exit_spec(name: str) -> LifetimeSpec:
    """The lifetime source named `name`: uptime_model, oracle or noisy_<accuracy>."""
    if name.startswith("noisy_"):
        return LifetimeSpec("noisy_oracle", float(name[len("noisy_"):]))
    if name not in ("uptime_model", "oracle"):
        raise ValueError(f"unknown exits {name!r}: uptime_model, oracle or noisy_<accuracy>")
    return LifetimeSpec(name)


def model_tables(results_dir: str) -> list:
    """The run's `lifetime_models` rows, with paths under `results_dir` (the run may have
    moved since)."""
    names = pq.read_table(os.path.join(results_dir, "lifetime_models"),
                          columns=["name"]).column("name").to_pylist()
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


def pool_table(pool_input, config, tables, exits: Sequence[str]) -> dict:
    """{(classes, exits) or "best_fit": empty hosts %} on one pool."""
    classes = {OWN: None, TRUE: true_classes(pool_input)}
    if LAVA_CLASS_MODEL_NAMES[0] in tables[0].column("name").to_pylist():
        classes[CLASSIFIERS] = lava_vm_classes(pool_input, tables)
    lava = Lava(config.lava_recycle_fraction)
    table = {"best_fit": empty_hosts_pct(pool_input, config, BestFit(),
                                         OracleLifetimes(pool_input.trace.lifetime_s()))}
    for name in exits:
        source = lifetime_source(exit_spec(name), pool_input, config, tables)
        for classes_name, vm_classes in classes.items():
            policy = lava if vm_classes is None else lava.with_vm_classes(vm_classes)
            table[classes_name, name] = empty_hosts_pct(pool_input, config, policy, source)
    return table


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir")
    parser.add_argument("--config", default="configs/azure_placement.textproto")
    parser.add_argument("--exits", nargs="+", default=DEFAULT_EXITS,
                        help="uptime_model, oracle or noisy_<accuracy> (default: %(default)s)")
    args = parser.parse_args(argv)
    for name in args.exits:
        exit_spec(name)
    config = load_config(args.config, check_inputs=False).placement
    tables = model_tables(args.results_dir)
    pools = pool_inputs(pq.read_table(os.path.join(args.results_dir, "instances")), config)
    for pool_input in pools:
        table = pool_table(pool_input, config, tables, args.exits)
        best_fit = table["best_fit"]
        print(f"pool {pool_input.pool!r}: {len(pool_input.trace):,} VMs, metric window from "
              f"{config.warmup_s / 86400:g} days after {pool_input.start_us / US_PER_S:.0f} s;"
              f" Best-Fit {best_fit:.2f} % empty hosts")
        print(f"| LAVA's VM classes from | {' | '.join(f'exits: {e}' for e in args.exits)} |")
        print(f"|---|{'---|' * len(args.exits)}")
        for name in (OWN, CLASSIFIERS, TRUE):
            if (name, args.exits[0]) in table:
                cells = [f"{table[name, e]:.2f} ({table[name, e] - best_fit:+.2f})"
                         for e in args.exits]
                print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
