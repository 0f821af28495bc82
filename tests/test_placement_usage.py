"""A pool's usage for an admission (pipelines/stages/placement/usage.py): samples meet their
runs per shard of instances and are laid out in the pool's trace order, spilled or not, as a
direct reading of the rows gives them."""

import numpy as np
import pyarrow as pa
import pytest

from pipelines.io import spill
from pipelines.stages.placement import usage as stage_usage
from policies.replay.usage import VmUsage

S = 1_000_000
STEP_S = 300


def pool_usages(samples: pa.Table, runs: pa.Table, spill_to=None, num_shards: int = 3):
    """{pool: VmUsage} through the stage's functions: samples and runs sharded, matched per
    shard, then laid out per pool in trace order (start time, then instance id)."""
    grouped = {}
    for shard, value in stage_usage.shard_samples(samples, spill_to, num_shards):
        grouped.setdefault(shard, {"samples": [], "runs": []})["samples"].append(value)
    for shard, value in stage_usage.instance_runs(runs, spill_to, num_shards):
        grouped.setdefault(shard, {"samples": [], "runs": []})["runs"].append(value)
    pieces = {}
    for element in grouped.items():
        for pool, piece in stage_usage.runs_by_pool(element, STEP_S, spill_to):
            pieces.setdefault(pool, []).append(piece)
    usages = {}
    for pool in set(runs.column("pool").to_pylist()):
        rows = runs.filter(pa.compute.equal(runs.column("pool"), pool)).sort_by(
            [("start_time", "ascending"), ("instance_id", "ascending")])
        usages[pool] = stage_usage.pool_usage(
            pieces.get(pool, []), rows.column("instance_id"),
            rows.column("start_time").to_numpy(), STEP_S, spill_to)
    return usages


def reference_usages(samples: pa.Table, runs: pa.Table):
    """The same, row by row: a sample goes to the latest run of its instance that started at
    or before it and has not ended; every (instance, start) is distinct."""
    run_rows = runs.to_pylist()
    by_pool = {}
    for pool in set(r["pool"] for r in run_rows):
        members = sorted((r for r in run_rows if r["pool"] == pool),
                         key=lambda r: (r["start_time"], r["instance_id"]))
        by_pool[pool] = members
    found = {pool: ([], [], [], []) for pool in by_pool}
    for sample in samples.to_pylist():
        held = [r for r in run_rows if r["instance_id"] == sample["instance_id"]
                and r["start_time"] <= sample["start_time"]]
        if not held:
            continue
        run = max(held, key=lambda r: r["start_time"])
        if run["end_time"] is not None and sample["start_time"] >= run["end_time"]:
            continue
        vm, step_us = by_pool[run["pool"]].index(run), STEP_S * S
        for column, value in zip(found[run["pool"]], (
                vm, sample["start_time"] // step_us * step_us, sample["usage"],
                sample["limit"])):
            column.append(value)
    return {pool: VmUsage.from_samples(*found[pool], len(by_pool[pool]), STEP_S * S)
            for pool in by_pool}


def random_rows(seed: int):
    rng = np.random.default_rng(seed)
    runs, samples = [], []
    for i in range(int(rng.integers(5, 40))):
        start = int(rng.integers(0, 50)) * 100 * S
        for _ in range(int(rng.integers(1, 4))):  # an instance may run several times
            end = start + int(rng.integers(1, 40)) * 100 * S
            runs.append({"instance_id": f"i{i}", "start_time": start,
                         "end_time": None if rng.random() < 0.2 else end,
                         "pool": str(rng.choice(["a", "b", "c"]))})
            start = end + int(rng.integers(0, 5)) * 100 * S
    for _ in range(int(rng.integers(0, 600))):
        samples.append({"instance_id": f"i{int(rng.integers(0, 45))}",
                        "start_time": int(rng.integers(0, 120)) * 50 * S,
                        "usage": float(rng.choice([rng.random(), -1.0, np.nan], p=[.9, .05, .05])),
                        "limit": float(rng.choice([1.0, 2.0, 0.0], p=[.5, .45, .05]))})
    return (pa.Table.from_pylist(samples, schema=stage_usage.SAMPLES),
            pa.Table.from_pylist(runs, schema=stage_usage.RUNS))


def assert_same_usage(got: VmUsage, expected: VmUsage):
    for name in ("first_step", "offsets", "usage", "limit"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), name)
    assert got.step_us == expected.step_us and got.grid_start_us == expected.grid_start_us


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("spilled", [False, True])
def test_a_pools_usage_is_the_direct_reading_of_its_rows(seed, spilled, tmp_path, monkeypatch):
    monkeypatch.setattr(stage_usage, "CHUNK_SAMPLES", 7)  # many chunks of VMs
    samples, runs = random_rows(seed)
    spill_to = spill.SpillTo(str(tmp_path), 0) if spilled else None
    got = pool_usages(samples, runs, spill_to)
    expected = reference_usages(samples, runs)
    assert got.keys() == expected.keys()
    for pool, usage in got.items():
        if spilled and usage.offsets[-1]:
            assert isinstance(usage.usage, spill.SpilledArray)
        assert_same_usage(usage.load(), expected[pool])


def test_a_hand_made_pool_usage():
    samples = pa.table({"instance_id": ["x", "x", "x", "y", "z", "x"],
                        "start_time": [0, 400 * S, 1000 * S, 100 * S, 0, 1000 * S],
                        "usage": [1.0, 2.0, 3.0, 4.0, 5.0, 3.5], "limit": [9.0] * 6},
                       schema=stage_usage.SAMPLES)
    # x ran twice: [0, 600 s) and [900 s, censored); y from 0 to 50 s only; z has no row.
    runs = pa.table({"instance_id": ["x", "y", "x"], "start_time": [0, 0, 900 * S],
                     "end_time": [600 * S, 50 * S, None], "pool": ["p"] * 3},
                    schema=stage_usage.RUNS)
    usage = pool_usages(samples, runs)["p"].load()
    # Trace order: x@0, y@0, x@900 s. The first x has windows 0 and 1; y's sample comes after
    # its end; the second x's two samples in window 3 merge by their max.
    assert usage.first_step.tolist() == [0, -1, 3]
    assert usage.offsets.tolist() == [0, 2, 2, 3]
    assert usage.usage.tolist() == [1.0, 2.0, 3.5]


def test_an_array_writer_spills_its_chunks_to_one_memory_mapped_file(tmp_path):
    values = np.random.default_rng(0).random(1000)
    writer = spill.ArrayWriter(1000, np.float64, spill.SpillTo(str(tmp_path), 0))
    for start in range(0, 1000, 300):
        writer.write(values[start:start + 300])
    reference = writer.close()
    assert isinstance(reference, spill.SpilledArray) and reference.length == 1000
    loaded = spill.load_array(reference)
    np.testing.assert_array_equal(loaded, values)
    assert not loaded.flags.writeable
    with pytest.MonkeyPatch.context() as remote:  # as on gs://: read through a file handle
        remote.setattr(spill, "_local", lambda path: False)
        np.testing.assert_array_equal(spill.load_array(reference), values)
    inline = spill.ArrayWriter(3, np.float64, None)
    inline.write(values[:3])
    np.testing.assert_array_equal(inline.close(), values[:3])
    short = spill.ArrayWriter(3, np.float64, None)
    short.write(values[:2])
    with pytest.raises(ValueError, match="2 items written to an array of 3"):
        short.close()
