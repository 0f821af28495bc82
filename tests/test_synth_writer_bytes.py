"""A synthetic shard's gzip'd text is the same bytes however its rows reach the writer (ISA-L
cuts its output where its input is cut: the writer feeds it fixed blocks)."""

import gzip

import numpy as np
import pytest

from synthetic import writers
from synthetic.writers import Column, _ShardWriter


def _columns(start: int, stop: int, rng_values: np.ndarray) -> list:
    return [Column("time", "int", np.arange(start, stop, dtype=np.int64) * 300_000_000),
            Column("average_usage.cpus", "float", rng_values[start:stop])]


def _written(path, file_format: str, cuts, values) -> bytes:
    writer = _ShardWriter(str(path), file_format)
    for start, stop in zip(cuts[:-1], cuts[1:]):
        writer.write(_columns(start, stop, values), stop - start)
    writer.close()
    return path.read_bytes()


@pytest.mark.parametrize("file_format", ["json", "csv"])
def test_the_file_is_the_same_bytes_however_the_rows_are_batched(tmp_path, monkeypatch,
                                                                 file_format):
    monkeypatch.setattr(writers, "_GZIP_BLOCK_BYTES", 4096)  # many blocks on a small shard
    n = 20_000
    values = np.random.default_rng(0).random(n)
    whole = _written(tmp_path / "whole", file_format, [0, n], values)
    cut = _written(tmp_path / "cut", file_format, [0, 1, 777, 5000, 5001, 13_333, n], values)
    empty_first = _written(tmp_path / "empty", file_format, [0, 0, 9000, n], values)
    assert whole == cut == empty_first
    lines = gzip.decompress(whole).decode().splitlines()
    assert len(lines) == n + (file_format == "csv")


def test_an_empty_shard_is_an_empty_gzip_member(tmp_path):
    data = _written(tmp_path / "none.json.gz", "json", [0, 0], np.zeros(0))
    assert gzip.decompress(data) == b""
