"""Broken input files fail the run, naming the file: compressed files cut short (the real
Azure samples and a Google v3 JSON shard from the synthetic writer), files that are not of
their format. Rows lost inside a broken file cannot be counted as dead letters."""

import bz2
import gzip
import lzma
import os
import shutil
import subprocess
import sys

import pytest
import zstandard
from apache_beam.io import fileio
from apache_beam.io.filesystem import FileMetadata

import synthetic
from fleetcast_testing.azure_samples import AZURE_READINGS, AZURE_VMTABLE
from pipelines.io.failures import RunFailed
from pipelines.io.readers import file_blocks
from pipelines.sources.synthetic import GOOGLE_V3_TABLES
from tests.helpers import REPO, require_sample

FLEETCAST = [sys.executable, "-m", "pipelines.cli"]


def _read(path) -> bytes:
    return b"".join(file_blocks(fileio.ReadableFile(FileMetadata(str(path),
                                                                 os.path.getsize(path)))))


def _cut(source, target, keep_bytes: int):
    data = source.read_bytes()
    target.write_bytes(data[:keep_bytes])
    return len(data)


@pytest.fixture(scope="module")
def v3_trace(tmp_path_factory):
    """A small synthetic Google v3 trace (JSON .gz shards, as the public trace)."""
    trace = tmp_path_factory.mktemp("v3")
    synthetic.generate(str(trace), machines=2, days=0.2, seed=1)
    return trace


def _cut_points(size: int):
    # The header only, inside the deflate stream, and inside the 8-byte CRC/size trailer.
    return [10, size // 3, size // 2, size - 9, size - 4, size - 1]


@pytest.mark.real_data
@pytest.mark.parametrize("sample", [AZURE_READINGS, AZURE_VMTABLE], ids=["readings", "vmtable"])
def test_a_cut_azure_gzip_fails_naming_the_file(sample, tmp_path):
    sample = require_sample(sample)
    size = sample.stat().st_size
    assert _read(sample) == gzip.decompress(sample.read_bytes())  # the whole file is fine
    for keep in _cut_points(size):
        cut = tmp_path / f"cut_{keep}.csv.gz"
        _cut(sample, cut, keep)
        with pytest.raises(RunFailed, match=f"^{cut}: not a valid gzip file: "):
            _read(cut)


def test_a_cut_google_v3_json_shard_fails_naming_the_file(v3_trace, tmp_path):
    shard = v3_trace / "instance_usage" / "instance_usage-00000-of-00004.json.gz"
    size = shard.stat().st_size
    for keep in _cut_points(size):
        cut = tmp_path / f"cut_{keep}.json.gz"
        _cut(shard, cut, keep)
        with pytest.raises(RunFailed, match=f"^{cut}: not a valid gzip file: "):
            _read(cut)


@pytest.mark.parametrize("suffix,compress", [
    (".bz2", bz2.compress), (".xz", lzma.compress), (".zst", zstandard.compress)])
def test_other_compressions_read_whole_and_fail_when_cut(suffix, compress, tmp_path):
    data = b"".join(b'{"time": %d}\n' % i for i in range(50_000))
    whole = tmp_path / f"whole.json{suffix}"
    whole.write_bytes(compress(data))
    assert _read(whole) == data
    for keep in (0, whole.stat().st_size // 2, whole.stat().st_size - 1):
        cut = tmp_path / f"cut_{keep}.json{suffix}"
        _cut(whole, cut, keep)
        with pytest.raises(RunFailed, match=f"^{cut}: not a valid "):
            _read(cut)


def test_concatenated_gzip_members_are_read_whole(tmp_path):
    two = tmp_path / "two.json.gz"
    two.write_bytes(gzip.compress(b'{"a": 1}\n') + gzip.compress(b'{"a": 2}\n'))
    assert _read(two) == b'{"a": 1}\n{"a": 2}\n'


def test_plain_text_named_gz_fails_naming_the_file(tmp_path):
    plain = tmp_path / "plain.csv.gz"
    plain.write_text("1,v1,0,10,5\n")
    with pytest.raises(RunFailed,
                       match=f"^{plain}: not a valid gzip file: .*Invalid gzip/zlib wrapper"):
        _read(plain)


def _run(config_text, tmp_path):
    config = tmp_path / "broken.textproto"
    config.write_text(config_text)
    return subprocess.run([*FLEETCAST, "run", str(config), "--output_dir",
                           str(tmp_path / "out"), "-q"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def test_run_on_a_cut_v3_shard_exits_1_naming_it_and_publishes_nothing(v3_trace, tmp_path):
    trace = tmp_path / "trace"
    shutil.copytree(v3_trace, trace)
    cut = trace / "instance_usage" / "instance_usage-00001-of-00004.json.gz"
    _cut(cut, cut, cut.stat().st_size * 2 // 3)
    result = _run("google_v3 {" + "".join(
        f' {t} {{ path: "{trace}/{t}/*" }}' for t in GOOGLE_V3_TABLES) + " }", tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().endswith(
        f"fleetcast: run failed: {cut}: not a valid gzip file: the file ends before its "
        "end-of-stream marker (truncated?)")
    assert not (tmp_path / "out" / "usage").exists()


def test_a_file_that_is_not_parquet_fails_naming_it(tmp_path):
    fake = tmp_path / "events.parquet"
    fake.write_text('{"time": 0}\n')
    result = _run(f'google_v3 {{ instance_events {{ path: "{fake}" }} }}', tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"fleetcast: run failed: {fake}: not a readable Parquet file: " in result.stderr
