"""The pools' usage for an admission: the overcommit stage's metric on its grid, per run of
an instance (policies/replay/usage.py's `VmUsage`), built without a pool's samples whole in
memory.

    usage ─── UsageSamples ── (shard of instance, samples) ─┐
    instances ─ InstanceRuns ─ (shard of instance, runs) ───┴─ CoGroupByKey ─ RunsByPool
          ─ (pool, UsagePiece) ── the stage's GroupPools ── PreparePools: `pool_usage`

Samples meet their instances' rows where both are sharded by instance id: each sample goes
to the run (instance row) of its instance whose [start, end) holds the window's start, and
each run's samples are made contiguous there. A pool then receives, per shard, its runs
(instance id, start time, where their samples are) and their samples as arrays, and lays
them out in the order of its trace, a chunk of VMs at a time, into arrays that the run
spills to files (pipelines/io/spill.py) and the replays memory-map.
"""

from typing import NamedTuple, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from configs.units import US_PER_S
from pipelines.io import sharding, spill
from pipelines.stages.overcommit.steps import floor_to_grid, metric_values
from policies.replay.usage import NO_SAMPLE, VmUsage

NUM_SHARDS = 16
SAMPLES = pa.schema([("instance_id", pa.string()), ("start_time", pa.int64()),
                     ("usage", pa.float64()), ("limit", pa.float64())])
RUNS = pa.schema([("instance_id", pa.string()), ("start_time", pa.int64()),
                  ("end_time", pa.int64()), ("pool", pa.string())])
# A pool's runs with samples in one shard; run i's samples are values [offset, offset +
# num_samples) of the piece's arrays, from grid step first_step on.
PIECE_RUNS = pa.schema([("instance_id", pa.string()), ("start_time", pa.int64()),
                        ("first_step", pa.int64()), ("num_samples", pa.int64()),
                        ("offset", pa.int64())])
# Samples laid out at a time by `pool_usage` (~32 MB of values).
CHUNK_SAMPLES = 1 << 21

Array = Union[np.ndarray, spill.SpilledArray]


class UsagePiece(NamedTuple):
    """A pool's runs of one shard of instances (PIECE_RUNS, a table or its Spilled
    reference) and their samples' usage and limit (float64 arrays or SpilledArrays)."""
    runs: object
    usage: Array
    limit: Array


class PoolUsage(NamedTuple):
    """A pool's `VmUsage` whose usage and limit may be spilled arrays (`load` maps them)."""
    step_us: int
    first_step: np.ndarray
    offsets: np.ndarray
    usage: Array
    limit: Array

    def load(self) -> VmUsage:
        return VmUsage(0, self.step_us, self.first_step, self.offsets,
                       spill.load_array(self.usage), spill.load_array(self.limit))


def usage_samples(usage: pa.Table, metric, spill_to: Optional[spill.SpillTo] = None,
                  num_shards: int = NUM_SHARDS):
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
    yield from shard_samples(samples, spill_to, num_shards)


def shard_samples(samples: pa.Table, spill_to: Optional[spill.SpillTo] = None,
                  num_shards: int = NUM_SHARDS):
    """(shard of instance, SAMPLES table) pairs of a SAMPLES table."""
    shards = sharding.shard_of_strings(samples.column("instance_id"), num_shards)
    yield from spill.split_spilled(samples, shards, spill_to)


def instance_runs(instances: pa.Table, spill_to: Optional[spill.SpillTo] = None,
                  num_shards: int = NUM_SHARDS):
    """(shard of instance, RUNS table) pairs of an instances table."""
    runs = pa.table({"instance_id": instances.column("instance_id"),
                     "start_time": instances.column("start_time"),
                     "end_time": instances.column("end_time"),
                     "pool": pc.fill_null(instances.column("pool"), "")}, schema=RUNS)
    shards = sharding.shard_of_strings(runs.column("instance_id"), num_shards)
    yield from spill.split_spilled(runs, shards, spill_to)


def match_runs(run_id, run_start: np.ndarray, run_end: Optional[np.ndarray], sample_id,
               sample_time: np.ndarray) -> np.ndarray:
    """int64[n]: for each sample (`sample_id`, `sample_time` int64[n]), the run of its
    instance (`run_id`, `run_start` int64[R], `run_end` float64[R], NaN if censored; None:
    none ends) that started last at or before it, if it had not ended (of equal runs, the
    last); -1 for none."""
    num_runs = len(run_start)
    if not num_runs:
        return np.full(len(sample_time), -1, np.int64)
    ids = pa.chunked_array([*_chunks(run_id), *_chunks(sample_id)], pa.string())
    codes, _ = sharding.dictionary_codes(ids)
    run_code, sample_code = codes[:num_runs], codes[num_runs:]
    ranks, rank = np.unique(np.concatenate([run_start, sample_time]), return_inverse=True)
    run_key = run_code * len(ranks) + rank[:num_runs]
    by_key = np.argsort(run_key, kind="stable")
    at = np.searchsorted(run_key[by_key], sample_code * len(ranks) + rank[num_runs:],
                         side="right") - 1
    run = by_key[np.maximum(at, 0)]
    matched = (at >= 0) & (run_code[run] == sample_code)
    if run_end is not None:
        matched &= ~(sample_time >= run_end[run])
    return np.where(matched, run, -1)


def _chunks(strings) -> list:
    if isinstance(strings, pa.ChunkedArray):
        return strings.chunks
    return [strings if isinstance(strings, pa.Array) else pa.array(strings, pa.string())]


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """int64[sum(counts)]: starts[i], starts[i] + 1, ... (counts[i] of them), for every i."""
    before = np.cumsum(counts) - counts
    return np.arange(int(counts.sum())) + np.repeat(starts - before, counts)


def runs_by_pool(element, step_s: float, spill_to: Optional[spill.SpillTo] = None):
    """(shard, {samples, runs}) → (pool, UsagePiece) pairs: the shard's samples on the grid of
    `step_s` seconds, contiguous per run (`VmUsage.from_samples`: gaps filled, duplicates
    merged), a piece per pool of the runs with samples. Samples without a run are dropped
    (the overcommit stage counts them)."""
    _, grouped = element
    samples = sharding.concat(map(spill.load, grouped["samples"]), SAMPLES)
    runs = sharding.concat(map(spill.load, grouped["runs"]), RUNS)
    if not samples.num_rows or not runs.num_rows:
        return
    time = samples.column("start_time").to_numpy()
    end = pc.cast(runs.column("end_time"), pa.float64()).to_numpy(zero_copy_only=False)
    run = match_runs(runs.column("instance_id"), runs.column("start_time").to_numpy(), end,
                     samples.column("instance_id"), time)
    kept = run >= 0
    step_us = int(round(step_s * US_PER_S))
    usage = VmUsage.from_samples(run[kept], floor_to_grid(time[kept], step_us),
                                 samples.column("usage").to_numpy()[kept],
                                 samples.column("limit").to_numpy()[kept], runs.num_rows,
                                 step_us)
    with_samples = np.flatnonzero(usage.first_step != NO_SAMPLE)
    pool_code, pool_names = sharding.dictionary_codes(runs.column("pool"))
    codes = pool_code[with_samples]
    by_pool = with_samples[np.argsort(codes, kind="stable")]
    for members in np.split(by_pool, np.flatnonzero(np.diff(pool_code[by_pool])) + 1):
        if not len(members):
            continue
        counts = usage.num_samples[members]
        values = _ranges(usage.offsets[members], counts)
        pool_runs = pa.table({
            "instance_id": runs.column("instance_id").take(members),
            "start_time": runs.column("start_time").take(members),
            "first_step": usage.first_step[members], "num_samples": counts,
            "offset": np.cumsum(counts) - counts}, schema=PIECE_RUNS)
        yield pool_names[pool_code[members[0]]].as_py(), UsagePiece(
            spill.spilled(pool_runs, spill_to), _written(usage.usage[values], spill_to),
            _written(usage.limit[values], spill_to))


def _written(values: np.ndarray, spill_to: Optional[spill.SpillTo]) -> Array:
    writer = spill.ArrayWriter(len(values), np.float64, spill_to)
    writer.write(values)
    return writer.close()


def pool_usage(pieces, instance_id, start_us: np.ndarray, step_s: float,
               spill_to: Optional[spill.SpillTo] = None) -> PoolUsage:
    """The usage of a pool's VMs (trace order: `instance_id` [V], `start_us` int64[V]) from
    its UsagePieces: a VM has the samples of the run with its instance id and start time
    (of two equal VMs, the last). The arrays are laid out CHUNK_SAMPLES at a time, spilled
    as `spill_to` says."""
    step_us = int(round(step_s * US_PER_S))
    num_vms = len(start_us)
    pieces = list(pieces)
    piece_runs = [spill.load(piece.runs) for piece in pieces]
    runs = sharding.concat(piece_runs, PIECE_RUNS)
    piece_of_run = np.repeat(np.arange(len(pieces)), [t.num_rows for t in piece_runs])
    run_start = runs.column("start_time").to_numpy()
    vm = match_runs(instance_id, start_us, None,
                    runs.column("instance_id"), run_start)
    found = vm >= 0
    found[found] = start_us[vm[found]] == run_start[found]
    run_of_vm = np.full(num_vms, -1, np.int64)
    run_of_vm[vm[found]] = np.flatnonzero(found)
    has = run_of_vm >= 0
    run = run_of_vm[has]
    first_step = np.full(num_vms, NO_SAMPLE, np.int64)
    first_step[has] = runs.column("first_step").to_numpy()[run]
    counts = np.zeros(num_vms, np.int64)
    counts[has] = runs.column("num_samples").to_numpy()[run]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    source = np.full(num_vms, -1, np.int64)
    source[has] = runs.column("offset").to_numpy()[run]
    piece = np.full(num_vms, -1, np.int64)
    piece[has] = piece_of_run[run]
    arrays = [(spill.load_array(p.usage), spill.load_array(p.limit)) for p in pieces]
    writers = [spill.ArrayWriter(offsets[-1], np.float64, spill_to) for _ in range(2)]
    bounds = np.searchsorted(offsets, np.arange(CHUNK_SAMPLES, offsets[-1], CHUNK_SAMPLES))
    edges = np.unique(np.concatenate([[0], bounds, [num_vms]]))
    for first_vm, stop_vm in zip(edges[:-1].tolist(), edges[1:].tolist()):
        chunk = slice(first_vm, stop_vm)
        out = np.empty((2, offsets[stop_vm] - offsets[first_vm]))
        for p in np.unique(piece[chunk][has[chunk]]).tolist():
            members = first_vm + np.flatnonzero(piece[chunk] == p)
            into = _ranges(offsets[members] - offsets[first_vm], counts[members])
            taken = _ranges(source[members], counts[members])
            out[0, into], out[1, into] = arrays[p][0][taken], arrays[p][1][taken]
        for writer, values in zip(writers, out):
            writer.write(values)
    return PoolUsage(step_us, first_step, offsets, *(writer.close() for writer in writers))
