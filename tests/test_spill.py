"""Tables grouped through files of the run (pipelines/io/spill.py): the same rows in the same
order as grouped inline, on every runner, and no file of them published."""

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from pipelines.io import publish, sharding, spill
from pipelines.io.failures import RunFailed
from tests.helpers import REPO, assert_tables_equal, run_text_config

TABLES = ("machines", "instances", "usage", "dead_letters", "source_counts")


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"key": rng.integers(0, 7, n), "x": rng.random(n),
                     "text": [f"row {i}" for i in range(n)],
                     "values": [[float(i)] * (i % 3) for i in range(n)]})


def test_split_spilled_gives_split_table_rows_in_order(tmp_path):
    table = _table(1000)
    shards = sharding.shard_of_ints(table.column("key").to_numpy(), 5)
    expected = list(sharding.split_table(table, shards))
    got = list(spill.split_spilled(table, shards, spill.SpillTo(str(tmp_path), 0)))
    assert [shard for shard, _ in got] == [shard for shard, _ in expected]
    assert all(isinstance(value, spill.Spilled) for _, value in got)
    assert len({value.path for _, value in got}) == 1  # the table is written once
    for (_, value), (_, rows) in zip(got, expected):
        assert spill.load(value).equals(rows)


@pytest.mark.parametrize("chunk_rows", [1, 7, 1000])
def test_spilled_take_gives_the_taken_rows_in_one_reference(tmp_path, monkeypatch, chunk_rows):
    monkeypatch.setattr(spill, "TAKE_CHUNK_ROWS", chunk_rows)
    table = pa.concat_tables([_table(40, 1), _table(60, 2)])  # two chunks
    indices = np.random.default_rng(3).permutation(100)[:83]
    value = spill.spilled_take(table, indices, spill.SpillTo(str(tmp_path), 0))
    assert isinstance(value, spill.Spilled)
    assert spill.load(value).equals(table.take(indices))
    assert spill.spilled_take(table, indices, None).equals(table.take(indices))
    assert spill.spilled_take(table, indices[:0], spill.SpillTo(str(tmp_path), 0)).num_rows == 0


@pytest.mark.parametrize("seed", range(6))
def test_take_rows_equals_arrows_take(seed):
    rng = np.random.default_rng(seed)
    table = pa.concat_tables([_table(int(rng.integers(2, 30)), seed + k)
                              for k in range(int(rng.integers(1, 6)))])
    # Its text column in one chunk, with a null: columns chunked unlike each other.
    table = table.set_column(2, "text", pa.chunked_array(
        [pa.array([None, *table.column("text").to_pylist()[1:]])]))
    for indices in (rng.integers(0, table.num_rows, 50), rng.permutation(table.num_rows),
                    np.arange(0)):
        assert sharding.take_rows(table, indices).equals(table.take(indices))


def test_take_rows_does_not_copy_a_chunked_string_column_whole(tmp_path):
    # Arrow's take of 100 rows of a string column of 20 chunks allocates the whole column
    # (~20 MB); `take_rows` what it takes. Measured in a process of its own: the memory
    # pool's high-water mark before and after.
    script = (
        "import numpy as np, pyarrow as pa\n"
        "from pipelines.io import sharding\n"
        "table = pa.table({'s': pa.chunked_array([pa.array(['x' * 100] * 10_000)] * 20)})\n"
        "before = pa.default_memory_pool().max_memory()\n"
        "taken = sharding.take_rows(table, np.arange(0, 200_000, 2_000))\n"
        "print(pa.default_memory_pool().max_memory() - before, taken.num_rows)\n")
    grown, rows = subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True,
                                 capture_output=True, text=True).stdout.split()
    assert int(rows) == 100 and int(grown) < 1 << 20


def test_small_tables_and_runs_without_a_spill_directory_stay_inline(tmp_path):
    table = _table(10)
    to = spill.SpillTo(str(tmp_path), table.nbytes + 1)
    assert spill.spilled(table, to) is table
    assert spill.spilled(table, None) is table
    assert [s for s, _ in spill.split_spilled(table, np.zeros(10, np.int64), None)] == [0]
    assert not os.listdir(tmp_path)
    assert spill.load(None) is None and spill.load(table) is table


def test_a_collection_shards_instance_rows_are_spilled(tmp_path):
    """A quarter cell-day's 388k instance rows arrive in 256 tables of ~0.5 MB: spilled, so
    the runner does not hold the 120 MB they add up to."""
    table = _table(3_000)
    assert 64 << 10 < table.nbytes < 1 << 20
    assert isinstance(spill.spilled(table, spill.SpillTo(str(tmp_path), spill.MIN_SPILL_BYTES)),
                      spill.Spilled)


def test_spilled_round_trip_and_empty_table(tmp_path):
    table = pa.concat_tables([_table(100), _table(50, seed=1)])  # two record batches
    to = spill.SpillTo(str(tmp_path), 0)
    reference = spill.spilled(table, to)
    assert reference == spill.Spilled(reference.path, 0, 2)
    assert spill.load(reference).equals(table)
    assert spill.spilled(table.slice(0, 0), to).num_rows == 0  # inline
    assert list(spill.split_spilled(table.slice(0, 0), np.zeros(0, np.int64), to)) == []


def test_a_spill_file_that_is_gone_fails_the_step_naming_it(tmp_path):
    """A table, an array or an object whose file was deleted (another run's cleanup, a disk
    that a worker does not share) is one line naming the file, never a traceback."""
    to = spill.SpillTo(str(tmp_path), 0)
    writer = spill.ArrayWriter(3, np.float64, to)
    writer.write(np.arange(3.0))
    spilled = [(spill.load, spill.spilled(_table(100), to)), (spill.load_array, writer.close()),
               (spill.load_object, spill.spilled_object({"x": list(range(100))}, to))]
    for load, reference in spilled:
        os.remove(reference.path)
        with pytest.raises(RunFailed, match=f"^{reference.path}: a file this run wrote into "
                                            "its staging area is gone"):
            load(reference)


def test_a_remote_spilled_piece_is_read_by_its_batches_alone(tmp_path, monkeypatch):
    table = _table(300)
    shards = np.arange(300) % 3
    pieces = list(spill.split_spilled(table, shards, spill.SpillTo(str(tmp_path), 0)))
    assert [value[1:] for _, value in pieces] == [(0, 1), (1, 2), (2, 3)]
    # As on gs://: through a file handle, not a memory map.
    monkeypatch.setattr(spill, "_local", lambda path: False)
    monkeypatch.setattr(spill.pa, "memory_map", None)
    for (_, value), (_, rows) in zip(pieces, sharding.split_table(table, shards)):
        assert spill.load(value).equals(rows)


def test_no_spill_directory_outside_a_run():
    assert spill.spill_to() is None


# The synthetic trace, generated into the run and read by the Google v3 source.
CONFIG = """
    synthetic { machines: 3 days: 0.5 seed: 0 }
    output { num_shards: 2 }
"""


@pytest.fixture(scope="module")
def inline_tables(tmp_path_factory):
    """The source's canonical tables with every table grouped inline (the reference)."""
    tmp_path = tmp_path_factory.mktemp("inline")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spill, "spill_to", lambda: None)
        return run_text_config(CONFIG, tmp_path)


@pytest.mark.parametrize("beam_args", [
    ["--runner=DirectRunner", "--direct_running_mode=in_memory"],
    ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
     "--direct_num_workers=2"],
], ids=["in_memory", "multi_processing"])
def test_every_table_spilled_gives_the_same_tables(inline_tables, tmp_path, monkeypatch,
                                                   beam_args):
    written = []
    write = spill.write
    monkeypatch.setattr(spill, "MIN_SPILL_BYTES", 0)  # every table, however small
    monkeypatch.setattr(spill, "write", lambda *a: written.append(write(*a)) or written[-1])
    out = tmp_path / "out"
    got = run_text_config(CONFIG, out, beam_args)
    assert_tables_equal(got, inline_tables, TABLES)
    if "in_memory" in beam_args[-1]:
        assert written  # the spill files were written in this process ...
    # ... and go with the staging area: nothing of them is published or left behind.
    files = [os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs]
    assert files and not [f for f in files if f.endswith(".arrow")]
    assert not [f for f in files if os.path.join(publish.STATE_DIR, "staging") in f]
