"""Hostile inputs and arguments become one-line answers or dead letters: a CSV field over
csv.reader's 128 KiB limit, an empty or root output path, a price or row count out of range,
SQL that is not UTF-8."""

import argparse
import math
import os
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import cli_args, schemas
from pipelines.io import manifests
from tests.helpers import FLEETCAST, SMALL, run_text_config, write_gz_lines

HUGE = "y" * (200 << 10)  # csv.reader refuses a field over 128 KiB


@pytest.mark.parametrize("huge_row", [f'vmH,s1,d1,100,"{HUGE}",,,,,2,4',
                                      f"vmH,s1,d1,100,{HUGE},,,,,2,4"])
def test_a_csv_field_over_128_kib_is_a_dead_letter(tmp_path, huge_row):
    vmtable = tmp_path / "vmtable.csv.gz"
    write_gz_lines(vmtable, ["vmA,s1,d1,100,4000,,,,Interactive,4,8", huge_row,
                             "vmC,s2,d2,300,7300.5,,,,,2,3.5"])
    tables = run_text_config(f'azure_v1 {{ vmtable: "{vmtable}" }}', tmp_path / "out")
    assert sorted(tables["instances"].instance_id) == ["vmA", "vmC"]
    counts = tables["source_counts"].set_index("table")
    assert counts.loc["vmtable", ["read", "kept", "rejected"]].tolist() == [3, 2, 1]
    (letter,) = tables["dead_letters"].itertuples()
    assert letter.raw.startswith("vmH,s1,d1,100,") and len(letter.raw) > len(HUGE)
    assert letter.reason in ("not a CSV record: field larger than field limit (131072)",
                             f"vmdeleted is not a number: {HUGE!r}")


def fleetcast(*args, cwd):
    return subprocess.run([FLEETCAST, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


ROOTS = ("", "/", "//", "/.", "gs://")


@pytest.mark.parametrize("command, path", [
    *((["synth", "--out"], path) for path in ROOTS),
    (["run", "small.textproto", "--output_dir"], "/"),
    (["report", "results", "--out"], ""), (["reproduce", "Bashir21", "--output_dir"], "//"),
    (["reproduce", "Bashir21", "--docs_dir"], "/")])
def test_an_empty_or_root_output_path_is_refused(tmp_path, command, path):
    (tmp_path / "small.textproto").write_text(SMALL)
    before = set(os.listdir("/"))
    got = fleetcast(*command[:-1], f"{command[-1]}={path}", cwd=tmp_path)
    assert got.returncode == 2, got.stderr
    reason = ("an empty path is not a directory to write in" if not path else
              f"{path!r} is a file system's root: give a directory of its own")
    assert got.stderr.splitlines()[-1] == (
        f"fleetcast {command[0]}: error: argument {command[-1]}: {reason}")
    assert set(os.listdir("/")) == before and os.listdir(tmp_path) == ["small.textproto"]


@pytest.mark.parametrize("path", ["out", "/tmp/out", "gs://bucket", "gs://bucket/out"])
def test_a_directory_of_its_own_is_an_output_path(path):
    assert cli_args.output_directory(path) == path


def test_estimate_refuses_a_price_that_is_not_one(tmp_path):
    (tmp_path / "small.textproto").write_text(SMALL)
    got = fleetcast("estimate", "small.textproto", "--usd_per_tib=nan", cwd=tmp_path)
    assert got.returncode == 2
    assert got.stderr.splitlines()[-1] == (
        "fleetcast estimate: error: argument --usd_per_tib: 'nan' is not a price (a finite "
        "number, 0 or more)")
    for price in ("inf", "-1", "1e400", "x", "-0.01"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a price"):
            cli_args.price(price)
    assert cli_args.price("0") == 0 and cli_args.price("6.25") == 6.25


def test_query_refuses_a_row_count_beyond_int64(tmp_path):
    got = fleetcast("query", "results", "SELECT 1", f"--max_rows={2**63}", cwd=tmp_path)
    assert got.returncode == 2
    assert got.stderr.splitlines()[-1] == (
        f"fleetcast query: error: argument --max_rows: '{2**63}' is not a number of rows "
        "(0 to 2^63 - 1)")


def test_query_refuses_sql_that_is_not_utf8(tmp_path):
    got = subprocess.run([FLEETCAST, "query", "results", b"SELECT '\xff'"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert got.returncode == 2
    assert got.stderr.splitlines()[-1] == (
        "fleetcast query: error: argument SQL: byte 0xff at position 8 is not UTF-8 text")


@pytest.mark.parametrize("flag", [True, 1.0, 2.0, "2", None, 3])
def test_a_manifest_format_that_is_not_a_version_number_is_refused(flag):
    manifest = {"fleetcast_manifest": flag, "success": True, "tables": {}, "files": []}
    with pytest.raises(manifests.ManifestError, match=rf"\(unknown format {flag!r}\)"):
        manifests.check(manifest, "out/fleetcast_manifest.json")
    assert manifests.check({**manifest, "fleetcast_manifest": 1}, "out/m.json")["files"] == {}


def _loaded_instances_run(tmp_path, table: pa.Table):
    directory = tmp_path / "in_instances"
    directory.mkdir()
    pq.write_table(table, directory / "part-0.parquet")
    config = tmp_path / "loaded.textproto"
    config.write_text(f'name: "loaded"\ninstances {{ input {{ parquet: "{directory}" }} }}\n'
                      "lifetime_model { }\n")
    return fleetcast("run", str(config), f"--output_dir={tmp_path / 'out'}", "-q",
                     cwd=tmp_path), directory / "part-0.parquet"


@pytest.mark.parametrize("end_time, reason", [
    (math.inf, "Float value inf was truncated converting to int64"),
    (2.0**63, "Float value 9223372036854775808.000000 was truncated converting to int64"),
])
def test_a_loaded_float_end_time_beyond_int64_fails_naming_the_file_and_column(
        tmp_path, end_time, reason):
    rows = [{"instance_id": f"1:{i}", "collection_id": 1, "instance_index": i,
             "start_time": 0, "end_time": end, "cpu_request": 1.0, "memory_request": 1.0}
            for i, end in enumerate([3.6e9, end_time])]
    schema = pa.schema([pa.field("end_time", pa.float64()) if f.name == "end_time" else f
                        for f in schemas.CANONICAL["instances"]])
    got, path = _loaded_instances_run(tmp_path, pa.Table.from_pylist(rows, schema=schema))
    assert got.returncode == 1
    assert got.stderr.splitlines()[-1].startswith(
        f"fleetcast: run failed: {path}: column end_time (double) does not convert to the "
        "table's int64: ")
    assert reason in got.stderr and not (tmp_path / "out" / "instances").exists()


def test_a_loaded_table_without_its_columns_fails_naming_them(tmp_path):
    table = pa.table({"instance_id": ["1:0"], "start_time": [0]})
    got, path = _loaded_instances_run(tmp_path, table)
    assert got.returncode == 1
    assert got.stderr.splitlines()[-1].startswith(
        f"fleetcast: run failed: {path}: lacks the columns collection_id, instance_index, ")
