"""The placement stage's admission by predicted peak: the configured admissions, their
checks, the pools' usage samples (the overcommit stage's metric on its grid) and the
`Admission` of a replay (policies/replay/admission.py).

    usage ── UsageSamples ── (shard of instance, samples) ─┐
    instances ── InstancePools ── (shard, instance, pool) ─┴─ CoGroupByKey ─ (pool, samples)

A pool's samples then meet its instances in the stage's GroupPools; each sample goes to the
run of its instance whose [start, end) holds the window's start.
"""

from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from configs.units import US_PER_S
from pipelines.io import sharding, spill
from pipelines.stages.overcommit.steps import floor_to_grid, metric_values
from pipelines.stages.overcommit.tellers import TellerFactory
from policies.replay.admission import (
    Admission,
    CombinedPeaks,
    HistoryPeaks,
    HostPeaks,
    OraclePeaks,
    TaskSharePeaks,
)
from policies.replay.usage import VmUsage
from predictors.peak.registry import build_predictor

REQUESTS = "requests"
NUM_SHARDS = 16
SAMPLES = pa.schema([("instance_id", pa.string()), ("start_time", pa.int64()),
                     ("usage", pa.float64()), ("limit", pa.float64())])
# The predictors an admission can use: a sum of per-task shares, or a bounded history.
SHARED_KINDS = ("borg_default", "rc_like", "task_max", "task_avg")
WINDOW_KINDS = ("n_sigma", "per_machine_percentile")
COMBINED_KINDS = {"max_of": np.max, "avg_of": np.mean}
CPU_METRICS = ("avg_cpu", "max_cpu", "cpu_percentile")


def admission_names(config) -> list:
    """The configured admissions by name, in config order ("requests" or a teller's name);
    [None] without any (admission by requests, no usage replayed)."""
    names = [REQUESTS if a.WhichOneof("rule") == "requests" else a.fortune_teller
             for a in config.admission]
    return names or [None]


def check_admissions(check, config, overcommit, has_usage: bool, field: str) -> None:
    """The admissions of PlacementConfig `config` against the run's OvercommitConfig
    `overcommit` (None without the stage); `has_usage`: whether the source gives usage."""
    if not config.admission:
        return
    where = f"{field}.admission"
    if overcommit is None:
        check.fail(where, "needs the overcommit stage (its metric, grid and scoring oracle)")
        return
    check.require(has_usage, where, "needs usage windows, which this trace source has not")
    check.require(overcommit.metric.WhichOneof("metric") in CPU_METRICS,
                  "overcommit.metric", "must be a CPU metric for a placement admission (the "
                  "admission judges CPU room)")
    tellers = {t.name: t for t in overcommit.fortune_teller}
    check.require(any(t.WhichOneof("teller") == "oracle" for t in tellers.values()), where,
                  "needs an oracle fortune teller in overcommit to score the usage replay")
    check.require(not config.HasField("lars"), where, "does not run with lars (a "
                  "migration's reservation is by request)")
    seen = set()
    for i, admission in enumerate(config.admission):
        at = f"{where}[{i}]"
        rule = admission.WhichOneof("rule")
        name = REQUESTS if rule == "requests" else admission.fortune_teller
        check.require(rule is not None and (rule != "requests" or admission.requests), at,
                      "names no rule: set requests: true or fortune_teller")
        check.require(name not in seen, at, f"{name!r} is listed twice")
        seen.add(name)
        if rule == "fortune_teller":
            check.require(name != REQUESTS, f"{at}.fortune_teller", f"{REQUESTS!r} names "
                          "the admission by requests (requests: true); rename the teller")
            teller = tellers.get(name)
            if teller is None:
                check.fail(f"{at}.fortune_teller", f"{name!r} is no overcommit.fortune_teller "
                           f"(there are {sorted(tellers)})")
            elif teller.WhichOneof("teller") == "predictor":
                problem = _unsupported(teller.predictor)
                check.require(problem is None, f"{at}.fortune_teller", f"{name!r}: {problem}")


def _unsupported(predictor) -> Optional[str]:
    which = predictor.WhichOneof("predictor")
    if which in COMBINED_KINDS:
        return next(filter(None, map(_unsupported, getattr(predictor, which).predictors)), None)
    if which in SHARED_KINDS + WINDOW_KINDS:
        return None
    return (f"a {which} predictor cannot admit (its peak depends on all of a machine's "
            f"history); use {', '.join(SHARED_KINDS + WINDOW_KINDS)} or their max_of / avg_of")


# --- Samples per pool -------------------------------------------------------------------------

def usage_samples(usage: pa.Table, metric, num_shards: int = NUM_SHARDS):
    """(shard of instance, SAMPLES table) pairs of a usage table: the overcommit metric of
    each window with a value and a limit (the overcommit stage counts the others)."""
    values, has_value, limit, has_limit = metric_values(usage, metric)
    keep = has_value & has_limit
    if not keep.any():
        return
    samples = pa.table({
        "instance_id": usage.column("instance_id").filter(pa.array(keep)),
        "start_time": pa.array(usage.column("start_time").to_numpy(zero_copy_only=False)[keep],
                               pa.int64()),
        "usage": pa.array(values[keep], pa.float64()),
        "limit": pa.array(limit[keep], pa.float64())}, schema=SAMPLES)
    yield from sharding.split_by_key(samples, "instance_id", num_shards)


def instance_pools(instances: pa.Table, num_shards: int = NUM_SHARDS):
    """(shard of instance, (instance_id, pool) table) pairs of an instances table."""
    pairs = pa.table({"instance_id": instances.column("instance_id"),
                      "pool": pc.fill_null(instances.column("pool"), "")})
    yield from sharding.split_by_key(pairs, "instance_id", num_shards)


def samples_by_pool(element, spill_to: Optional[spill.SpillTo] = None):
    """(shard, {samples, pools}) → (pool, SAMPLES table) pairs: each sample goes to its
    instance's pool (an instance id in two pools: the last row's); samples of an instance
    without rows are dropped (the overcommit stage counts them)."""
    _, grouped = element
    samples = sharding.concat(grouped["samples"], SAMPLES)
    if not samples.num_rows:
        return
    pools = sharding.concat(grouped["pools"], pa.schema([("instance_id", pa.string()),
                                                         ("pool", pa.string())]))
    ids = pa.chunked_array([*pools.column("instance_id").chunks,
                            *samples.column("instance_id").chunks], pa.string())
    codes, _ = sharding.dictionary_codes(ids)
    pool_code, pool_names = sharding.dictionary_codes(pools.column("pool"))
    pool_of_id = np.full(int(codes.max()) + 1, -1, np.int64)
    pool_of_id[codes[:pools.num_rows]] = pool_code
    sample_pool = pool_of_id[codes[pools.num_rows:]]
    kept = sample_pool >= 0
    for code, rows in sharding.split_table(samples.filter(pa.array(kept)), sample_pool[kept]):
        yield pool_names[code].as_py(), spill.spilled(rows, spill_to)


def pool_usage(samples: pa.Table, instance_id, start_us: np.ndarray, end_us: np.ndarray,
               step_s: float) -> VmUsage:
    """The VmUsage of a pool's VMs (trace order: `instance_id` [V], `start_us` int64[V],
    `end_us` float64[V], NaN if censored) from its SAMPLES: each window goes to the run of
    its instance that started at or before it and had not ended."""
    step_us = int(round(step_s * US_PER_S))
    num_vms = len(start_us)
    if not samples.num_rows:
        return VmUsage.from_samples([], [], [], [], num_vms, step_us)
    ids = pa.chunked_array([pa.array(instance_id, pa.string()),
                            *samples.column("instance_id").chunks])
    codes, _ = sharding.dictionary_codes(ids)
    vm_code, sample_code = codes[:num_vms], codes[num_vms:]
    time = samples.column("start_time").to_numpy()
    ranks, rank = np.unique(np.concatenate([start_us, time]), return_inverse=True)
    vm_key = vm_code * len(ranks) + rank[:num_vms]
    sample_key = sample_code * len(ranks) + rank[num_vms:]
    by_key = np.argsort(vm_key, kind="stable")
    at = np.searchsorted(vm_key[by_key], sample_key, side="right") - 1
    vm = by_key[np.maximum(at, 0)]
    end = end_us[vm]
    matched = (at >= 0) & (vm_code[vm] == sample_code) & ~(time >= end)
    return VmUsage.from_samples(vm[matched], floor_to_grid(time[matched], step_us),
                                samples.column("usage").to_numpy()[matched],
                                samples.column("limit").to_numpy()[matched], num_vms, step_us)


# --- The admission of a replay ----------------------------------------------------------------

def host_peaks(teller, usage: VmUsage, step_s: float, admits: bool,
               cache: Optional[dict] = None) -> HostPeaks:
    """The HostPeaks of a FortuneTeller message on a pool's `usage`; an oracle that `admits`
    reads the windows left up to the data's end (`OraclePeaks.partial`), the scoring oracle
    does not. A predictor's HostPeaks are kept in `cache` by configuration, so that a
    predictor inside a max_of / avg_of shares the per-pool work of the same one alone."""
    if teller.WhichOneof("teller") == "oracle":
        oracle = teller.oracle
        return OraclePeaks(usage, int(oracle.horizon_s // step_s), oracle.percentile,
                           oracle.cap_to_limit, partial=admits)
    return _predictor_peaks(teller.predictor, usage, TellerFactory(step_s),
                            {} if cache is None else cache)


def _predictor_peaks(config, usage: VmUsage, factory: TellerFactory, cache: dict) -> HostPeaks:
    key = config.SerializeToString(deterministic=True)
    if key in cache:
        return cache[key]
    which = config.WhichOneof("predictor")
    if which in COMBINED_KINDS:
        peaks = CombinedPeaks(COMBINED_KINDS[which], [
            _predictor_peaks(inner, usage, factory, cache)
            for inner in getattr(config, which).predictors])
    elif which in SHARED_KINDS:
        peaks = TaskSharePeaks(build_predictor(config, factory), usage)
    elif which in WINDOW_KINDS:
        peaks = HistoryPeaks(build_predictor(config, factory), usage)
    else:
        raise ValueError(f"a {which} predictor cannot admit ({_unsupported(config)})")
    cache[key] = peaks
    return peaks


def scoring_teller(overcommit):
    """The overcommit stage's scoring oracle (its first oracle teller)."""
    return next(t for t in overcommit.fortune_teller if t.WhichOneof("teller") == "oracle")


def make_admission(name: Optional[str], usage: Optional[VmUsage], request_cpu: np.ndarray,
                   overcommit, peaks_cache: Optional[dict] = None) -> Optional[Admission]:
    """The Admission named `name` (None: none) of a replay of a pool with `usage`; the
    tellers' HostPeaks are kept in `peaks_cache` (per pool) when given, as they hold
    per-pool work (a predictor's shares of every sample)."""
    if name is None:
        return None
    step_s = overcommit.metric.step_s
    cache = {} if peaks_cache is None else peaks_cache

    def peaks_of(teller, admits: bool):
        key = (teller.name, admits)
        if key not in cache:
            cache[key] = host_peaks(teller, usage, step_s, admits,
                                    cache.setdefault("predictors", {}))
        return cache[key]

    scoring = peaks_of(scoring_teller(overcommit), False)
    teller = next((t for t in overcommit.fortune_teller if t.name == name), None)
    peaks = None if name == REQUESTS else peaks_of(teller, True)
    return Admission(usage, request_cpu, scoring, peaks, name)
