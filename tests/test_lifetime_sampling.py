"""The lifetime stage's training sample (max_training_instances) and the groupings of the
lifetime and placement stages carried as spill files (memory that does not grow with the
trace: issue 29)."""

import numpy as np
import pyarrow as pa
import pytest

from pipelines import config as run_config
from pipelines import schemas
from pipelines.io import sharding, spill
from pipelines.stages.lifetime import stage as lifetime_stage
from pipelines.stages.lifetime.sampling import SampleCut, sample_keys, sampled
from pipelines.stages.placement.pools import MODEL_COLUMNS, pool_inputs, prepare_pool
from tests.helpers import run_text_config
from tests.lifetime_cases import (
    CAP_S,
    LIFETIME_CONFIG,
    TRAIN_FRACTION,
    expected_split,
    hand_made_instances,
    reference_examples,
    write_instances,
)


def _ids_table(n: int) -> pa.Table:
    return pa.table({"instance_id": [f"{i // 3}:{i % 3}" for i in range(n)],
                     "start_time": pa.array(np.arange(n) * 1_000, pa.int64())})


def _cut(tables, size: int, seed: int):
    """SampleCut over `tables`, combined as a runner would: an accumulator per table,
    merged."""
    combine = SampleCut(size)
    accumulators = [combine.add_input(combine.create_accumulator(), sample_keys(t, seed))
                    for t in tables]
    return combine.extract_output(combine.merge_accumulators(accumulators))


def _sample(table: pa.Table, size: int, seed: int, pieces: int = 1) -> set:
    chunks = [table.slice(i, len(table) // pieces + 1)
              for i in range(0, len(table), len(table) // pieces + 1)]
    cut = _cut(chunks, size, seed)
    return set(sampled(table, cut, seed).column("instance_id").to_pylist())


def test_the_sample_has_exactly_the_cap_and_depends_only_on_the_seed():
    table = _ids_table(10_000)
    one = _sample(table, 1_000, seed=0)
    assert len(one) == 1_000
    # However the rows arrive (one table, seven, reversed), the same seed, the same rows.
    assert _sample(table, 1_000, seed=0, pieces=7) == one
    assert _sample(table.take(pa.array(np.arange(10_000)[::-1])), 1_000, seed=0) == one
    other = _sample(table, 1_000, seed=1)
    assert len(other) == 1_000 and other != one
    # About a tenth of the rows in common, as two independent 10 % samples have.
    assert 50 < len(one & other) < 160


def test_below_the_cap_every_row_is_in_the_sample():
    table = _ids_table(500)
    assert _cut([table], 500, seed=0) == (500, None)
    assert sampled(table, (500, None), seed=0) is table
    rows, largest = _cut([table], 499, seed=0)
    assert rows == 500 and len(sampled(table, (rows, largest), seed=0)) == 499


def test_sample_keys_are_uniform():
    keys = sample_keys(_ids_table(20_000), seed=3)
    counts = np.bincount((keys >> np.uint64(60)).astype(np.int64), minlength=16)
    # 16 bins of ~1,250: a chi-square far below its 0.1 % quantile (37.7 for 15 d.o.f.).
    assert ((counts - 1_250) ** 2 / 1_250).sum() < 37.7


@pytest.fixture(scope="module")
def capped_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("capped")
    frame = hand_made_instances()
    directory = write_instances(frame, root / "input_instances")
    config = LIFETIME_CONFIG.replace("num_shards: 3", "num_shards: 3 max_training_instances: 300")
    tables = run_text_config(f'instances {{ input {{ parquet: "{directory}" }} }}\n' + config,
                             root / "out")
    return frame, tables


def test_a_capped_run_trains_and_evaluates_on_exactly_its_sample(capped_run):
    frame, tables = capped_run
    # The sample: the 300 rows of smallest key, seed 0 (the config's default); the split
    # time is the whole trace's.
    table = pa.Table.from_pandas(frame, preserve_index=False)
    keys = sample_keys(table, seed=0)
    in_sample = keys <= np.sort(keys)[299]
    assert in_sample.sum() == 300
    split_us, _, parts, _ = expected_split(frame, CAP_S, TRAIN_FRACTION)
    split = tables["lifetime_split"].set_index("split")
    for part, rows in parts.items():
        assert split.loc[part, "instances"] == (rows & in_sample).sum(), part
    assert (split["split_time_us"] == split_us).all()
    models = tables["lifetime_models"].set_index("name")
    assert models.loc["uptime", "train_instances"] == (parts["train"] & in_sample).sum()
    # Examples still come from every instance, in the sample or not.
    split_us, observation_end, parts, view_end = expected_split(frame, CAP_S, TRAIN_FRACTION)
    reference = reference_examples(frame, parts, view_end, split_us, observation_end, CAP_S)
    assert len(tables["lifetime_examples"]) == len(reference)
    outside = set(frame["instance_id"][~in_sample])
    assert outside & set(tables["lifetime_examples"]["instance_id"])


@pytest.mark.parametrize("value, problem", [
    (0, "lifetime_model.max_training_instances: must be > 0, got 0"),
    (30_000_000, "lifetime_model.max_training_instances: must be at most 20,000,000 "
                 "instances: twice a Google 2019 cell-month's; one worker trains on them, so "
                 "30,000,000 would need ~90 GB"),
])
def test_max_training_instances_is_checked(value, problem):
    config = run_config.parse_config(
        f"synthetic {{}} lifetime_model {{ max_training_instances: {value} }}")
    problems = [str(p) for p in run_config.validate(config)]
    assert problem in problems, problems


def test_instance_shards_travel_as_spill_files(tmp_path):
    table = pa.Table.from_pandas(hand_made_instances(), preserve_index=False)
    to = spill.SpillTo(str(tmp_path), 0)
    spilled = list(lifetime_stage.shard_by_instance(table, 3, to))
    assert all(isinstance(rows, spill.Spilled) for _, rows in spilled)
    expected = dict(sharding.split_by_key(table, "instance_id", 3))
    assert {shard: spill.load(rows) for shard, rows in spilled} == expected


def test_a_pools_instance_rows_travel_as_a_spill_file(tmp_path):
    frame = hand_made_instances().dropna(subset=["pool", "end_time"])
    frame = frame[frame["end_time"] > frame["start_time"]]
    columns = {f.name: pa.array(frame[f.name], f.type) if f.name in frame
               else pa.nulls(len(frame), f.type) for f in schemas.INSTANCES}
    table = pa.table(columns, schema=schemas.INSTANCES)
    config = run_config.parse_config(
        'synthetic {} placement { policy: BEST_FIT host_shape { cpu: 4 memory: 8 } '
        'host_count: 50 }').placement
    to = spill.SpillTo(str(tmp_path), 0)
    element = ("cell", {"instances": [spill.spilled(table, to)], "machines": []})
    ((tag, pool_input),) = list(prepare_pool(element, config, True, to))
    assert tag == "pools" and isinstance(pool_input.instances, spill.Spilled)
    rows = pool_input.instance_rows()
    assert rows.equals(table.sort_by([("start_time", "ascending"),
                                      ("instance_id", "ascending")]).select(MODEL_COLUMNS))
    # Outside a run (nothing spilled) the rows are the table itself.
    ((_, kept),) = list(prepare_pool(("cell", {"instances": [table], "machines": []}), config,
                                     True))
    assert isinstance(kept.instances, pa.Table) and kept.instance_rows().equals(rows)
    # Code that replays a run's pools again (`pool_inputs`) keeps every column.
    (again,) = pool_inputs(table, config)
    assert again.instances.equals(table.sort_by([("start_time", "ascending"),
                                                 ("instance_id", "ascending")]))
