"""How accurate are the trained uptime model's repredicted exits, next to the noisy-oracle
sweep of [Ling25ext] App. G.1 (why do the model's placement gains stay near Best-Fit)?

On the results of a placement run with the uptime model (e.g. `fleetcast run
configs/azure_placement.textproto`), this rebuilds the replay's pools and lifetime sources
with the placement stage's own functions (pipelines/stages/placement/: `pool_inputs`,
`lifetime_source`, i.e. the exact lifetime curves of <results>/models/uptime and
`NoisyOracleLifetimes` seeded per pool as in the replay) and compares predicted with true
*remaining* lifetimes at a few absolute uptimes. A prediction at uptime u is counted in a
window when it is made there (arrival + u in the window) and the VM is alive then (true
lifetime > u). Windows: the replay's metric window (`start + warmup_s` to the last arrival)
and the model's training period (the first arrival to the split time in `lifetime_models`).
Censored VMs (no end time) are excluded: their true remaining lifetime is unknown; their
count and the share of model predictions already below their observed (lower-bound)
remaining lifetime are printed apart.

Per (window, uptime, source): |log10 predicted - log10 true| remaining seconds (both floored
at 1 s, as the noisy oracle floors them): p50, p90, the fractions within 0.1, 0.3 and 1
decade; and NILAS's view, the temporal-cost bucket (policies/nilas.py) of the predicted vs
the true remaining lifetime, equal and within one bucket. Then the "equivalent accuracy":
the noisy-oracle accuracy whose within-0.3, within-1 and bucket-equal fractions match the
model's, interpolated linearly in the sweep ("<a" / ">a" outside it). All VMs, no sampling.

    .venv/bin/python scripts/lifetime_accuracy.py /work/azp_new
    .venv/bin/python scripts/lifetime_accuracy.py RESULTS \
        --config configs/azure_placement.textproto \
        --uptimes 0 300 3600 14400 --accuracies 1 0.9 0.8 0.6 0.4 0.2 0
    # a run with feature variants (lifetime_model.variant): the uptime model of one of them
    .venv/bin/python scripts/lifetime_accuracy.py results/google_2011_placement \
        --config configs/google_2011_placement.textproto --variant customer_lifetimes
"""

import argparse
import os
import sys
from typing import Dict, List, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from configs.units import US_PER_S  # noqa: E402
from pipelines.config import load_config  # noqa: E402
from pipelines.stages.placement.pools import pool_inputs  # noqa: E402
from pipelines.stages.placement.replays import (  # noqa: E402
    UPTIME_MODEL_NAME,
    LifetimeSpec,
    lifetime_source,
)
from policies.nilas import TEMPORAL_COST_BUCKETS_S  # noqa: E402
from predictors.lifetime.noisy_oracle import MIN_LIFETIME_S  # noqa: E402

DEFAULT_UPTIMES_S = (0.0, 300.0, 3600.0, 14400.0)
DEFAULT_ACCURACIES = (1.0, 0.9, 0.8, 0.6, 0.4, 0.2, 0.0)
WITHIN_DECADES = (0.1, 0.3, 1.0)
MODEL = "model"
_BUCKETS_S = np.asarray(TEMPORAL_COST_BUCKETS_S, dtype=np.float64)


def abs_log10_error(predicted_s, true_s) -> np.ndarray:
    """|log10 predicted - log10 true| of remaining seconds, both floored at MIN_LIFETIME_S."""
    floor = MIN_LIFETIME_S
    return np.abs(np.log10(np.maximum(predicted_s, floor)) - np.log10(np.maximum(true_s, floor)))


def cost_bucket(remaining_s) -> np.ndarray:
    """NILAS's temporal-cost bucket (`policies.nilas.temporal_cost`) of remaining seconds."""
    return np.maximum(np.searchsorted(_BUCKETS_S, remaining_s, side="right") - 1, 0)


def error_stats(predicted_s, true_s) -> Dict[str, float]:
    """p50, p90 of the |log10| error, fractions within WITHIN_DECADES, bucket agreement and
    the largest prediction (hours)."""
    error = abs_log10_error(predicted_s, true_s)
    gap = np.abs(cost_bucket(predicted_s) - cost_bucket(true_s))
    stats = {"n": len(error), "p50": np.percentile(error, 50), "p90": np.percentile(error, 90),
             "max_h": np.max(predicted_s) / 3600}
    stats.update({f"<={d:g}": float(np.mean(error <= d)) for d in WITHIN_DECADES})
    stats.update({"bucket=": float(np.mean(gap == 0)), "bucket+-1": float(np.mean(gap <= 1))})
    return stats


def equivalent_accuracy(value: float, accuracies: Sequence[float],
                        values: Sequence[float]) -> float:
    """The accuracy at which the sweep's `values` (one per accuracy, non-decreasing in it, as
    the noisy oracle's nested draws make them) reach `value`, linear between sweep points;
    -inf below the sweep's lowest value, +inf above its highest."""
    order = np.argsort(accuracies)
    accuracies, values = np.asarray(accuracies)[order], np.asarray(values)[order]
    if value < values[0]:
        return -np.inf
    if value > values[-1]:
        return np.inf
    return float(np.interp(value, values, accuracies))


def read_table(results_dir: str, name: str) -> pa.Table:
    return pq.read_table(os.path.join(results_dir, name))


def uptime_model(results_dir: str, models: List[dict], variant=None):
    """(directory, split time in µs) of the run's uptime model of feature `variant` (None:
    the run's only one), from its `lifetime_models` rows; ValueError naming the variants
    when `variant` is None and the run trained several, or when it trained no such one."""
    rows = [m for m in models if m["name"] == UPTIME_MODEL_NAME
            and variant in (None, m.get("variant"))]
    variants = sorted(str(m.get("variant")) for m in rows)
    if len(rows) != 1:
        raise ValueError(f"{results_dir}: the run's uptime models are of variants {variants}: "
                         "give --variant" if rows else
                         f"{results_dir}: no uptime model of variant {variant!r}")
    # The run may have been elsewhere: its path from the output's models/ folder down.
    parts = rows[0]["path"].rstrip("/").split("/")
    below = parts[len(parts) - 1 - parts[::-1].index("models"):]
    return os.path.join(results_dir, *below), rows[0]["split_time_us"]


def pool_sources(pool_input, config, model_dir: str, accuracies) -> dict:
    """Label -> the replay's lifetime source on `pool_input`: the model, noisy oracles."""
    model_tables = [pa.table({"name": [UPTIME_MODEL_NAME], "path": [model_dir]})]
    sources = {MODEL: lifetime_source(LifetimeSpec("uptime_model"), pool_input, config,
                                      model_tables)}
    for accuracy in accuracies:
        sources[f"noisy {accuracy:g}"] = lifetime_source(
            LifetimeSpec("noisy_oracle", accuracy), pool_input, config, ())
    return sources


def pool_predictions(pool_input, sources: dict, uptimes_s) -> List[dict]:
    """Per uptime: prediction time, true remaining (NaN if censored) and every source's
    prediction, for the VMs alive at that uptime (censored ones: alive until their bound)."""
    trace = pool_input.trace
    lifetime_s = trace.lifetime_s()
    censored = np.asarray(pool_input.instances.column("end_time").is_null())
    out = []
    for uptime_s in uptimes_s:
        vms = np.flatnonzero((lifetime_s > uptime_s) | (uptime_s == 0))
        uptime = np.full(len(vms), float(uptime_s))
        remaining = np.where(censored[vms], np.nan, lifetime_s[vms] - uptime_s)
        row = {"uptime_s": uptime_s, "now_us": trace.arrival_us[vms] + int(uptime_s * US_PER_S),
               "true_s": remaining, "bound_s": lifetime_s[vms] - uptime_s,
               "predicted": {label: source.predict_remaining_s(vms, uptime)
                             for label, source in sources.items()}}
        out.append(row)
    return out


def merge_pools(per_pool: List[List[dict]]) -> List[dict]:
    """Concatenates `pool_predictions` outputs of several pools, uptime by uptime."""
    merged = []
    for rows in zip(*per_pool):
        merged.append({
            "uptime_s": rows[0]["uptime_s"],
            **{k: np.concatenate([r[k] for r in rows]) for k in ("now_us", "true_s", "bound_s")},
            "predicted": {label: np.concatenate([r["predicted"][label] for r in rows])
                          for label in rows[0]["predicted"]}})
    return merged


def window_rows(predictions: List[dict], window_us) -> List[dict]:
    """Statistics of every (uptime, source) on predictions made in [start, end) of
    `window_us`, finished VMs only, plus the censored VMs' counts; an uptime without a
    finished VM's prediction in the window has no rows."""
    start_us, end_us = window_us
    rows = []
    for p in predictions:
        inside = (p["now_us"] >= start_us) & (p["now_us"] < end_us)
        known = inside & ~np.isnan(p["true_s"])
        if not known.any():
            continue
        censored = inside & np.isnan(p["true_s"])
        below_bound = (np.mean(p["predicted"][MODEL][censored] < p["bound_s"][censored])
                       if censored.any() else np.nan)
        for label, predicted in p["predicted"].items():
            stats = error_stats(predicted[known], p["true_s"][known])
            rows.append({"uptime_s": p["uptime_s"], "source": label, **stats,
                         "censored": int(censored.sum()), "model<bound": below_bound})
    return rows


def equivalent_rows(rows: List[dict], accuracies) -> List[dict]:
    """Per uptime, the model's equivalent accuracy on <=0.3, <=1 and bucket=."""
    out = []
    for uptime_s in sorted({r["uptime_s"] for r in rows}):
        at = {r["source"]: r for r in rows if r["uptime_s"] == uptime_s}
        line = {"uptime_s": uptime_s}
        for metric in ("<=0.3", "<=1", "bucket="):
            sweep = [at[f"noisy {a:g}"][metric] for a in accuracies]
            line[metric] = equivalent_accuracy(at[MODEL][metric], accuracies, sweep)
        out.append(line)
    return out


def format_accuracy(value: float, accuracies) -> str:
    if value == -np.inf:
        return f"<{min(accuracies):g}"
    if value == np.inf:
        return f">{max(accuracies):g}"
    return f"{value:.2f}"


def print_window(title: str, rows: List[dict], accuracies) -> None:
    """One window's statistics table and equivalent accuracies."""
    print(f"\n== {title} ==")
    if not rows:  # e.g. a replay that starts at the split: no prediction before it
        print("no prediction of a finished VM is made in this window")
        return
    print(f"{'uptime':>7} {'source':<10} {'n':>7} {'p50':>6} {'p90':>6} {'<=0.1':>6} "
          f"{'<=0.3':>6} {'<=1':>6} {'bkt=':>6} {'bkt+-1':>6} {'max h':>6}")
    for r in rows:
        print(f"{r['uptime_s'] / 60:6g}m {r['source']:<10} {r['n']:7d} {r['p50']:6.3f} "
              f"{r['p90']:6.3f} {r['<=0.1']:6.3f} {r['<=0.3']:6.3f} {r['<=1']:6.3f} "
              f"{r['bucket=']:6.3f} {r['bucket+-1']:6.3f} {r['max_h']:6.1f}")
    censored = {r["uptime_s"]: (r["censored"], r["model<bound"]) for r in rows}
    print("censored VMs, excluded (share the model predicts below their observed remaining): "
          + ", ".join(f"{u / 60:g}m {n} ({share:.0%})" for u, (n, share) in censored.items()))
    print("equivalent noisy-oracle accuracy of the model (<=0.3 dec, <=1 dec, bucket=): "
          + "; ".join(f"{e['uptime_s'] / 60:g}m " + ", ".join(
              format_accuracy(e[m], accuracies) for m in ("<=0.3", "<=1", "bucket="))
              for e in equivalent_rows(rows, accuracies)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir")
    parser.add_argument("--config", default="configs/azure_placement.textproto")
    parser.add_argument("--uptimes", type=float, nargs="+", default=DEFAULT_UPTIMES_S)
    parser.add_argument("--accuracies", type=float, nargs="+", default=DEFAULT_ACCURACIES)
    parser.add_argument("--variant", help="the feature variant whose uptime model to check "
                        "(lifetime_model.variant; default: the run's only one)")
    args = parser.parse_args(argv)
    config = load_config(args.config, check_inputs=False).placement
    try:
        model_dir, split_us = uptime_model(
            args.results_dir, read_table(args.results_dir, "lifetime_models").to_pylist(),
            args.variant)
    except ValueError as e:
        parser.error(str(e))
    pools = pool_inputs(read_table(args.results_dir, "instances"), config)
    predictions = merge_pools([
        pool_predictions(p, pool_sources(p, config, model_dir, args.accuracies), args.uptimes)
        for p in pools])
    start_us = min(p.start_us for p in pools)
    metrics_us = (start_us + int(config.warmup_s * US_PER_S), max(p.end_us for p in pools) + 1)
    for title, window in ((f"metric window (predictions in [start + {config.warmup_s} s, "
                           "last arrival])", metrics_us),
                          ("training period (predictions before the split time)",
                           (start_us, split_us))):
        print_window(title, window_rows(predictions, window), args.accuracies)


if __name__ == "__main__":
    main()
