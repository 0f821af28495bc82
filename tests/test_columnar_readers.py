"""The columnar readers (pipelines/io/columnar.py) against the per-row reference: random
instance_usage rows with every kind of bad row injected give identical rows, dead letters
(reason and raw text) and counts, in JSON and Parquet, piece by piece and through Beam."""

import functools
import gzip
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.io import columnar
from pipelines.io.dead_letters import COUNTS, DEAD_LETTERS, ROWS, parse_tagged
from pipelines.io.readers import BOM, RowChunk, csv_chunks, iter_lines, json_chunks
from pipelines.sources import google_v3
from tests.helpers import run_text_config, sorted_frame

CPU, TAIL = 11, 9

# JSON lines the per-row path rejects (or reads in its own way), one per class.
BAD_LINES = [
    b'{"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1}}',                                       # missing start
    b'{"start_time":-5,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1}}',                                       # negative time
    b'{"start_time":900,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1}}',                                       # reversed times
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,'
    b'"machine_id":9223372036854775808,"average_usage":{"cpus":0.1}}',      # int64 overflow
    b'{"start_time":0,"end_time":1e19,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1}}',                                       # float past int64
    b'{"start_time":0,"end_time":600,"collection_id":true,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1}}',                                       # bool as number
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":NaN}}',                                       # NaN literal
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1},"maximum_usage":{"cpus":Infinity}}',     # infinity
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1},"x":Inf}',                               # not JSON for Python
    b'{"start_time":0,"end_time":600,"collection_id":"\xd9\xa1","instance_index":0,'
    b'"machine_id":1,"average_usage":{"cpus":0.1}}',                        # non-ASCII digits
    b'{"start_time":"0","end_time":"1e3","collection_id":" 7 ","instance_index":0,'
    b'"machine_id":1,"average_usage":{"cpus":"0.5"}}',                      # numbers as text: kept
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":"garbage"}}',                                 # text not a number
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":"garbage"}',                                          # record not a record
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage.cpus":0.25,"maximum_usage_cpus":0.5}',                 # flat keys: kept
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":-0.1}}',                                      # negative usage
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":-1,"machine_id":1,'
    b'"average_usage":{"cpus":0.1}}',                                       # negative index
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":null,'
    b'"average_usage":{"cpus":0.1}}',                                       # missing id
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"memory":0.1}}',                                     # missing avg cpu
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1},"cpu_usage_distribution":[0.1,0.2]}',    # short distribution
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1},"tail_cpu_usage_distribution":[1,1,1,1,1,1,1,1,-1]}',
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1},"tail_cpu_usage_distribution":[1,1,1,1,1,1,1,1,null]}',
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1},"cpu_usage_distribution":"[0,1,2,3,4,5,6,7,8,9,10]"}',
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1},"cpu_usage_distribution":[],'
    b'"tail_cpu_usage_distribution":[true,1,1,1,1,1,1,1,1]}',              # empty list, bools
    b'{"start_time":5.0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1}}',                                       # integral float
    b'{"start_time":0,"start_time":1,"end_time":600,"collection_id":1,"instance_index":0,'
    b'"machine_id":1,"average_usage":{"cpus":0.1}}',                        # duplicate key
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1},"x":"\\ud800"}',                         # lone surrogate
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1},"x":"\xff"}',                            # invalid UTF-8
    b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,"machine_id":1,'
    b'"average_usage":{"cpus":0.1}}\r',                                     # CRLF: kept
    b'{"start_time":0,"end_time":600} {"start_time":1}',                    # two objects
    BOM + b'{"start_time":0,"end_time":600,"collection_id":1,"instance_index":0,'
    b'"machine_id":1,"average_usage":{"cpus":0.1}}',                        # BOM inside
    b'{"start_\\u0074ime":0,"end_time":600,"collection_id":1,"instance_index":0,'
    b'"machine_id":1,"average_usage":{"cpus":1e-400},"maximum_usage":{"cpu\\u0073":'
    b'123456789012345678901234567890},"x":"\\ud83d\\ude00"}',              # escapes: kept
    b'null', b'[1, 2]', b'{"start_time":', b'   ', b'', b'{}',
]


def _good_row(rng, i):
    row = {
        "start_time": int(rng.integers(0, 10**12)) * 300,
        "collection_id": int(rng.integers(-2**62, 2**62)),
        "instance_index": int(rng.integers(0, 1000)),
        "machine_id": int(rng.integers(0, 2**40)),
        "average_usage": {"cpus": float(rng.random()), "memory": float(rng.random() / 3)},
        "random_sample_usage": {"cpus": 0.5}, "sample_rate": 1.0, "user": f"u{i}",
    }
    row["end_time"] = row["start_time"] + 300_000_000
    if rng.random() < 0.8:
        row["maximum_usage"] = {"cpus": float(rng.random() * 10.0 ** rng.integers(-6, 6))}
    if rng.random() < 0.7:
        row["cpu_usage_distribution"] = np.sort(rng.random(CPU)).tolist()
        row["tail_cpu_usage_distribution"] = rng.random(TAIL).round(7).tolist()
    if rng.random() < 0.1:
        row["cpu_usage_distribution"] = []
    return row


def _json_lines(seed: int, num_good: int = 3000) -> bytes:
    """Random good rows with every BAD_LINES entry injected at random places, BOM first."""
    rng = np.random.default_rng(seed)
    lines = [json.dumps(_good_row(rng, i)).encode() for i in range(num_good)]
    for bad in BAD_LINES:
        for _ in range(2):
            lines.insert(int(rng.integers(0, len(lines) + 1)), bad)
    return BOM + b"\n".join(lines) + b"\n"


def _collect(pairs, schema=google_v3.INSTANCE_USAGE):
    """(rows as a sorted list, sorted (reason, raw) dead letters, summed counts)."""
    pairs = list(pairs)
    rows = pa.concat_tables([v for t, v in pairs if t == ROWS] or [schema.empty_table()])
    dead = [d for t, v in pairs if t == DEAD_LETTERS for d in v.to_pylist()]
    totals = np.sum([v[1] for t, v in pairs if t == COUNTS], axis=0).tolist()
    assert rows.schema == schema
    return (sorted(rows.to_pylist(), key=repr),
            sorted((d["reason"], d["raw"]) for d in dead), totals)


def _per_row_json(data: bytes, parser=None):
    parser = parser or google_v3.InstanceUsageParser()
    for chunk in json_chunks(iter_lines([data]), chunk_rows=500):
        yield from parse_tagged(chunk, parser)


def _columnar_json(data: bytes, block_bytes: int, parser=None):
    parser = parser or google_v3.InstanceUsageColumns()
    blocks = (data[i:i + 4096] for i in range(0, len(data), 4096))
    for piece in columnar.line_pieces(blocks, block_bytes):
        yield from columnar.parse_json_piece(piece, parser)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("block_bytes", [1 << 14, 1 << 22])
def test_json_pieces_match_the_per_row_path(seed, block_bytes):
    data = _json_lines(seed)
    expected = _collect(_per_row_json(data))
    got = _collect(_columnar_json(data, block_bytes))
    assert got[2] == expected[2]
    assert got[1] == expected[1]
    assert got[0] == expected[0]
    # The injected classes really are rejected, and clean rows stay columnar.
    assert expected[2][2] > 40 and expected[2][1] > 3000


def test_a_bad_line_sends_only_its_small_piece_row_by_row(monkeypatch):
    rng = np.random.default_rng(3)
    lines = [json.dumps(_good_row(rng, i)).encode() for i in range(3000)]
    lines.insert(1234, BAD_LINES[5])  # a boolean id: the Arrow reader rejects the piece
    per_row = []
    real = columnar._lines_per_row
    monkeypatch.setattr(columnar, "_lines_per_row",
                        lambda data, parser: per_row.append(data.count(b"\n") + 1)
                        or real(data, parser))
    got = _collect(_columnar_json(b"\n".join(lines), 1 << 22))
    assert got[2] == [3001, 3000, 1]
    assert 0 < sum(per_row) <= columnar.PER_ROW_LINES


EVENT_BAD_LINES = [
    b'{"time":0,"type":11,"collection_id":1,"instance_index":0}',           # unknown type
    b'{"time":0,"type":"SCHEDULE","collection_id":1,"instance_index":0}',   # type by name: kept
    b'{"time":0,"type":"NOPE","collection_id":1,"instance_index":0}',
    b'{"time":0,"type":3,"collection_id":1,"instance_index":0,'
    b'"resource_request":{"cpus":-1}}',
    b'{"time":0,"type":3,"collection_id":1,"instance_index":0,"resource_request":7}',
    b'{"time":0,"type":3,"collection_id":1,"instance_index":0,"resource_request.cpus":0.5}',
    b'{"time":0,"type":3,"collection_id":1,"instance_index":0,"priority":-2}',
    b'{"time":0,"type":3,"collection_id":1,"instance_index":0,"machine_id":1.5}',
    b'{"time":0,"type":3,"instance_index":0}',
    b'{"time":0,"type":3,"collection_id":1,"instance_index":0,"alloc_collection_id":true}',
]


@pytest.mark.parametrize("seed", [0, 1])
def test_instance_event_pieces_match_the_per_row_path(seed):
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(2000):
        event = {"time": int(rng.integers(0, 10**12)), "type": int(rng.integers(0, 11)),
                 "collection_id": int(rng.integers(0, 2**50)),
                 "instance_index": int(rng.integers(0, 100)),
                 "priority": int(rng.integers(0, 400)), "scheduling_class": 1,
                 "collection_type": 0, "alloc_collection_id": 0}
        if rng.random() < 0.7:
            event["machine_id"] = int(rng.integers(0, 2**40))
            event["resource_request"] = {"cpus": float(rng.random()),
                                         "memory": float(rng.random())}
        lines.append(json.dumps(event).encode())
    for bad in EVENT_BAD_LINES + BAD_LINES[-8:]:
        lines.insert(int(rng.integers(0, len(lines) + 1)), bad)
    data = b"\n".join(lines)
    expected = _collect(_per_row_json(data, google_v3.InstanceEventParser()),
                        google_v3.INSTANCE_EVENTS)
    got = _collect(_columnar_json(data, 1 << 14, google_v3.InstanceEventColumns()),
                   google_v3.INSTANCE_EVENTS)
    assert got == expected
    assert expected[2][2] >= len(EVENT_BAD_LINES) and expected[2][1] > 2000


CSV_HEADER = ("start_time,end_time,collection_id,instance_index,machine_id,average_usage.cpus,"
              "average_usage.memory,maximum_usage_cpus,user,cpu_usage_distribution")
# Values the per-row path reads in its own way, by column: (column index, text).
CSV_BAD_VALUES = [
    (0, ""), (0, " 5"), (0, "+5"), (0, "1e3"), (0, "5.0"), (1, "-1"), (1, "0"), (2, "garbage"),
    (2, "\u0661"), (2, "9223372036854775808"), (3, "-2"), (4, "true"), (5, "nan"), (5, "inf"),
    (5, "1e400"), (5, ""), (5, "-0.5"), (6, ""), (6, "0.5 "), (7, "1_0"), (9, "[]"),
    (9, '"[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]"'), (9, '"[1,2]"'),
    (9, '"[1,2,3,4,5,6,7,8,9,10,-1]"'), (9, '"[1,2,3,4,5,6,7,8,9,10,NaN]"'), (9, "garbage"),
    (8, '"a,""b"""'),
]


def _csv_text(seed: int, num_rows: int = 2000, extra_lines=()) -> bytes:
    """Random CSV rows of CSV_HEADER with CSV_BAD_VALUES injected, then `extra_lines` at
    random places."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(num_rows):
        start = int(rng.integers(0, 10**9)) * 300
        dist = ("" if rng.random() < 0.2 else
                '"' + json.dumps(np.sort(rng.random(CPU)).round(7).tolist(),
                                 separators=(",", ":")) + '"')
        values = [str(start), str(start + 300), str(int(rng.integers(-2**62, 2**62))),
                  str(int(rng.integers(0, 99))), str(int(rng.integers(0, 2**40))),
                  repr(float(rng.random())), repr(float(rng.random() / 7)),
                  "" if rng.random() < 0.3 else repr(float(rng.random() * 1e-5)),
                  f"user{i}", dist]
        if rng.random() < len(CSV_BAD_VALUES) / num_rows * 3:
            column, text = CSV_BAD_VALUES[int(rng.integers(0, len(CSV_BAD_VALUES)))]
            values[column] = text
        lines.append(",".join(values).encode())
    for extra in extra_lines:
        lines.insert(int(rng.integers(0, len(lines) + 1)), extra)
    return BOM + CSV_HEADER.encode() + b"\n" + b"\n".join(lines) + b"\n"


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("extra_lines", [
    (),
    (b"1,2,3", b"", b"\xff,1", b'0,600,1,0,1,0.5,0.5,,"multi', b'line",'),
    (b'0,600,1,0,1,0.5,0.5,,user,"[1,2,3,4,5,6,7,8,9,10,11]"\r',),
])
def test_csv_pieces_match_the_per_row_path(seed, extra_lines):
    data = _csv_text(seed, extra_lines=extra_lines)
    blocks = [data[i:i + 4096] for i in range(0, len(data), 4096)]
    parser = google_v3.InstanceUsageColumns()
    expected = _collect(pair for chunk in csv_chunks(iter_lines(blocks), chunk_rows=300)
                        for pair in parse_tagged(chunk, parser.row_parser))
    got = _collect(columnar.parse_csv_file(columnar.line_pieces(blocks, 1 << 15), parser))
    assert got == expected
    assert expected[2][2] > 20 and expected[2][1] > 1500


def _parquet_table(seed: int) -> pa.Table:
    """Random rows in the synthetic trace's Parquet layout with bad values injected (nulls,
    NaN, infinities, negative or reversed times, wrong-length distributions)."""
    rng = np.random.default_rng(seed)
    rows = [_good_row(rng, i) for i in range(2000)]
    for row in rng.choice(rows, size=200, replace=False):
        kind = int(rng.integers(0, 8))
        if kind == 0:
            row["start_time"] = None
        elif kind == 1:
            row["end_time"] = row["start_time"]
        elif kind == 2:
            row["average_usage"]["cpus"] = float("nan")
        elif kind == 3:
            row["maximum_usage"] = {"cpus": float("inf")}
        elif kind == 4:
            row["cpu_usage_distribution"] = [0.1] * 3
        elif kind == 5:
            row["tail_cpu_usage_distribution"] = [0.1] * 8 + [-0.0 - 1]
        elif kind == 6:
            row["machine_id"] = None
        else:
            row["average_usage"] = None
    return pa.Table.from_pylist(rows)


@pytest.mark.parametrize("seed", [0, 1])
def test_parquet_batches_match_the_per_row_path(tmp_path, seed):
    table = _parquet_table(seed)
    path = tmp_path / "usage.parquet"
    pq.write_table(table, path)
    parser = google_v3.InstanceUsageColumns()
    batches = list(pq.ParquetFile(path).iter_batches(batch_size=700))
    expected = _collect(pair for b in batches for pair in parse_tagged(
        RowChunk(b.to_pylist(), [None] * b.num_rows), parser.row_parser))
    got = _collect(pair for b in batches for pair in columnar.parse_arrow_batch(b, parser))
    assert got == expected
    assert expected[2][2] > 150


def test_parquet_of_other_column_types_is_read_row_by_row():
    batch = pa.RecordBatch.from_pylist([
        {"start_time": "0", "end_time": 600, "collection_id": 1, "instance_index": 0,
         "machine_id": 1, "average_usage": {"cpus": 0.5}},
        {"start_time": "x", "end_time": 600, "collection_id": 1, "instance_index": 0,
         "machine_id": 1, "average_usage": {"cpus": 0.5}}])
    got = _collect(columnar.parse_arrow_batch(batch, google_v3.InstanceUsageColumns()))
    assert got[2] == [2, 1, 1]
    assert got[1][0][0] == "start_time is not an integer: 'x'"
    assert got[0][0]["start_time"] == 0


def _trace(root, usage_lines: bytes):
    """A tiny v3 trace as JSON.gz: one instance scheduled at 0 and the given usage lines."""
    event = {"time": 0, "type": 3, "collection_id": 1, "instance_index": 0, "machine_id": 1,
             "resource_request": {"cpus": 0.5, "memory": 0.25}}
    tables = {"instance_events": json.dumps(event).encode() + b"\n",
              "instance_usage": usage_lines}
    for name, data in tables.items():
        os.makedirs(root / name)
        with gzip.open(root / name / f"{name}-00000-of-00001.json.gz", "wb") as f:
            f.write(data)
    return "\n".join(f'  {n} {{ path: "{root}/{n}/*" }}' for n in tables)


def test_beam_run_gives_the_per_row_tables(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    good = []
    for i in range(300):
        row = _good_row(rng, i)
        row.update(collection_id=1, instance_index=0, start_time=300 * i,
                   end_time=300 * i + 300)
        good.append(json.dumps(row).encode())
    lines = b"\n".join(good + BAD_LINES) + b"\n"
    inputs = _trace(tmp_path / "trace", lines)
    results, real = {}, google_v3.ReadGoogleV3
    for columnar_readers in (True, False):
        monkeypatch.setattr(google_v3, "ReadGoogleV3", functools.partial(
            real, columnar_readers=columnar_readers))
        results[columnar_readers] = run_text_config(
            f"google_v3 {{\n{inputs}\n}}", tmp_path / f"out_{columnar_readers}")
    for name in ("usage", "dead_letters", "source_counts"):
        assert sorted_frame(results[True][name]).equals(sorted_frame(results[False][name])), \
            name
    counts = results[True]["source_counts"].set_index("table")
    assert counts.loc["instance_usage", "read"] == 300 + len(BAD_LINES) - 2  # 2 blank lines
