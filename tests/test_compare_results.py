"""scripts/compare_results.py run as a user would, on two tiny results directories."""

import gzip
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from tests.helpers import REPO

NAN = float("nan")
ROWS = [
    {"id": "a", "value": 1.5, "count": 1, "shape": [1.0, NAN]},
    {"id": "b", "value": NAN, "count": None, "shape": None},
    {"id": "c", "value": -2.0, "count": 3, "shape": []},
    {"id": "c", "value": -2.0, "count": 3, "shape": []},
]
SCHEMA = pa.schema([("id", pa.string()), ("value", pa.float64()), ("count", pa.int64()),
                    ("shape", pa.list_(pa.float64()))])


def write_results(root, rows=ROWS, schema=SCHEMA, shards=1, model_text="tree\n"):
    """A results directory: table `metrics` in `shards` files (rows dealt round-robin, so the
    order differs between shard counts), `lifetime_models` naming the directory's own model
    path, a model file and a gzip'd trace file."""
    (root / "metrics").mkdir(parents=True)
    for shard in range(shards):
        pq.write_table(pa.Table.from_pylist(rows[shard::shards], schema=schema),
                       root / "metrics" / f"part-{shard:05d}-of-{shards:05d}.parquet")
    (root / "lifetime_models").mkdir()
    pq.write_table(pa.table({"name": ["uptime"], "path": [str(root / "models" / "uptime")]}),
                   root / "lifetime_models" / "part-0.parquet")
    (root / "models" / "uptime").mkdir(parents=True)
    (root / "models" / "uptime" / "model.txt").write_text(model_text)
    (root / "synthetic_trace" / "usage").mkdir(parents=True)
    (root / "synthetic_trace" / "usage" / "usage-0.json.gz").write_bytes(
        gzip.compress(b'{"a": 1}\n', mtime=0))
    return root


def compare(a, b, *args):
    """(exit status, {table or file directory: report}) of the script on `a` and `b`."""
    done = subprocess.run([sys.executable, "scripts/compare_results.py", str(a), str(b), *args],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    lines = (line.split(None, 1) for line in done.stdout.splitlines())
    return done.returncode, {name: report for name, report in lines}


def test_same_rows_in_other_files_and_order_are_identical(tmp_path):
    a = write_results(tmp_path / "a")
    b = write_results(tmp_path / "b", rows=ROWS[::-1], shards=3)
    status, reports = compare(a, b, "--strict")
    assert reports == {"metrics": "identical", "models/uptime": "identical",
                       "synthetic_trace/usage": "identical",
                       "lifetime_models": "differs (metadata): only the results directory's "
                                          "own path"}
    assert status == 1  # --strict: the path of the models differs
    status, reports = compare(a, b)
    assert status == 0 and reports["metrics"] == "identical"


def test_a_trace_file_recompressed_with_a_header_time_differs_in_metadata(tmp_path):
    a, b = write_results(tmp_path / "a"), write_results(tmp_path / "b")
    (b / "synthetic_trace" / "usage" / "usage-0.json.gz").write_bytes(
        gzip.compress(b'{"a": 1}\n', mtime=1_700_000_000))
    status, reports = compare(a, b)
    assert status == 0
    assert reports["synthetic_trace/usage"] == "differs (metadata): usage-0.json.gz"


def test_a_changed_value_is_reported_with_its_row_and_difference(tmp_path):
    changed = [dict(r) for r in ROWS]
    changed[0]["value"] = 1.25
    status, reports = compare(write_results(tmp_path / "a"),
                              write_results(tmp_path / "b", rows=changed))
    assert status == 1
    report = reports["metrics"]
    assert report.startswith("1 of 4 rows differ in value; first at sorted row ")
    assert "value 1.5 vs 1.25" in report and report.endswith("max abs difference: value 0.25")


def test_lists_row_counts_schemas_files_and_ignore(tmp_path):
    a = write_results(tmp_path / "a")
    other_list = [dict(r) for r in ROWS]
    other_list[0]["shape"] = [1.0, 2.0]
    status, reports = compare(a, write_results(tmp_path / "b", rows=other_list))
    assert status == 1 and reports["metrics"].startswith("1 of 4 rows differ in shape")

    status, reports = compare(a, write_results(tmp_path / "c", rows=ROWS[:3]))
    assert reports["metrics"] == "row count 4 vs 3"

    narrow = SCHEMA.set(2, pa.field("count", pa.int32()))
    status, reports = compare(a, write_results(tmp_path / "d", schema=narrow))
    assert reports["metrics"] == "schema differs: count: int64 vs int32"

    d = write_results(tmp_path / "e", model_text="tree 2\n")
    (d / "extra").mkdir()
    status, reports = compare(a, d)
    assert reports["models/uptime"] == "model.txt differs" and reports["extra"] == "only in B"
    status, reports = compare(a, d, "--ignore", "extra", "models")
    assert status == 0 and set(reports) == {"metrics", "lifetime_models",
                                            "synthetic_trace/usage"}


def test_a_table_too_large_to_hold_twice_is_compared_by_its_rows_hashes(tmp_path, monkeypatch):
    """Above HASHED_TABLE_BYTES (0 here: every table): the same rows in other files and order
    are identical, a changed value or a lost row differs, by DuckDB's row hashes."""
    sys.path.insert(0, str(REPO / "scripts"))
    import compare_results
    monkeypatch.setattr(compare_results, "HASHED_TABLE_BYTES", 0)
    a = write_results(tmp_path / "a")
    changed = [dict(r) for r in ROWS]
    changed[2]["count"] = 4
    write_results(tmp_path / "b", shards=3)
    write_results(tmp_path / "c", rows=changed)
    write_results(tmp_path / "d", rows=ROWS[:3])
    files = {name: sorted(str(p) for p in (tmp_path / name / "metrics").glob("*.parquet"))
             for name in ("b", "c", "d")}
    mine = sorted(str(p) for p in (a / "metrics").glob("*.parquet"))
    assert compare_results.compare_table(mine, files["b"], str(a), str(tmp_path / "b")) \
        == "identical"
    assert compare_results.compare_table(mine, files["c"], str(a), "") == (
        "rows differ (4 each; compared by the sums of their hashes)")
    assert compare_results.compare_table(mine, files["d"], str(a), "") == "4 rows vs 3"
