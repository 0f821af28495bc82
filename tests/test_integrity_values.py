"""Every bad value is a dead letter with its reason, never a crash, and the counts close:
read = kept + rejected for every source table. One row per class of bad value
(docs/reliability.md, "Nothing is dropped silently"), with exact counts, through real runs of
each source."""

import gzip
import json
import sqlite3

import pytest

from pipelines.io.dead_letters import RowError, get_field, to_float, to_int
from pipelines.io.failures import RunFailed
from pipelines.sources import azure_packing
from tests.helpers import run_text_config

GOOD = {"time": 0, "type": 3, "collection_id": 1, "instance_index": 0, "machine_id": 5,
        "resource_request": {"cpus": 0.1, "memory": 0.1}, "priority": 0}


def _line(**changes) -> bytes:
    return json.dumps({**GOOD, **changes}).encode() + b"\n"


# (line of instance_events, the reason of its dead letter), one per class of bad value.
BAD_EVENTS = [
    (_line(machine_id=2 ** 63), "machine_id is outside int64: 9223372036854775808"),
    (_line(time=1e19), "time is outside int64: 1e+19"),
    (b'{"time": 0, "type": 3, "collection_id": 1, "instance_index": 0, '
     b'"resource_request": {"cpus": NaN, "memory": 0.1}}\n',
     "resource_request.cpus is not finite: nan"),
    (b'{"time": 0, "type": 3, "collection_id": 1, "instance_index": 0, "user": "\\ud800"}\n',
     "invalid Unicode: a lone surrogate (\\ud800-\\udfff)"),
    (_line(instance_index=True), "instance_index is a boolean, not a number: True"),
    (_line(collection_id="١٢٣"), "collection_id is not an integer: '١٢٣'"),
    (_line(resource_request="garbage"), "resource_request is not a record: 'garbage'"),
    (b"null\n", "JSON row is not an object: null"),
    (b'{"time": 0, "type": 3, "collection_id": "\xff\xfe"}\n', "not valid UTF-8"),
]


def _dead(tables, source, table):
    dead = tables["dead_letters"]
    return sorted(dead[(dead.source == source) & (dead.table == table)].reason)


def _counts(tables):
    return {f"{r.source}.{r.table}": (r.read, r.kept, r.rejected)
            for r in tables["source_counts"].itertuples()}


def test_every_bad_value_of_a_v3_json_shard_is_one_dead_letter(tmp_path):
    events = tmp_path / "instance_events.json.gz"
    good = (_line() + _line(time=100, type=6)  # instance 1:0 runs from 0 to 100
            # instance 2:0 is scheduled twice without a terminal event between
            + _line(collection_id=2, time=10) + _line(collection_id=2, time=20))
    events.write_bytes(gzip.compress(b"\xef\xbb\xbf" + good + b"".join(
        line for line, _ in BAD_EVENTS)))
    tables = run_text_config(
        f'google_v3 {{ instance_events {{ path: "{events}" }} num_shards: 2 }}',
        tmp_path / "out")
    assert _dead(tables, "google_v3", "instance_events") == sorted(
        [reason for _, reason in BAD_EVENTS]
        + ["SCHEDULE followed by another SCHEDULE of the same instance without a terminal "
           "event"])
    assert _counts(tables)["google_v3.instance_events"] == (13, 3, 10)
    assert sorted(tables["instances"].instance_id) == ["1:0", "2:0"]


def test_a_bom_at_the_start_of_a_google_csv_is_not_part_of_its_header(tmp_path):
    events = tmp_path / "instance_events.csv"
    events.write_text("\ufefftime,type,collection_id,instance_index,resource_request.cpus,"
                      "resource_request.memory\n0,3,1,0,0.5,0.5\n100,6,1,0,,\n")
    tables = run_text_config(f'google_v3 {{ instance_events {{ path: "{events}" }} }}',
                             tmp_path / "out")
    assert _counts(tables)["google_v3.instance_events"] == (2, 2, 0)
    assert tables["instances"].start_time.tolist() == [0]


def test_azure_bad_values_are_dead_letters_and_a_vmtable_bom_is_stripped(tmp_path):
    vmtable = tmp_path / "vmtable.csv.gz"
    vmtable.write_bytes(gzip.compress(
        "\ufeffv0000001,s,d,0,,50,10,40,Interactive,4,8\n"
        "v0000002,s,d,true,,50,10,40,Interactive,2,4\n".encode()))
    readings = tmp_path / "readings.csv"
    readings.write_bytes(
        b"0,v0000001,1,20,10\n"            # 4 cores from the vmtable: avg 0.4, max 0.8
        b"300,v0000001,1,\xd9\xa1\xd9\xa2,10\n"  # Unicode digits
        b"600,v0000001,1,garbage,10\n"
        b"1e300,v0000001,1,20,10\n"        # a time past int64 microseconds
        b"900,v0000001,1,20,inf\n"
        b"1200,v0000001,1,20,\xff\n")      # not UTF-8
    tables = run_text_config(
        f'azure_v1 {{ vmtable: "{vmtable}" vm_cpu_readings: "{readings}" }}', tmp_path / "out")
    assert _dead(tables, "azure_v1", "vmtable") == ["vmcreated is not a number: 'true'"]
    assert _dead(tables, "azure_v1", "vm_cpu_readings") == sorted([
        "maxcpu is not a number: '١٢'", "maxcpu is not a number: 'garbage'",
        "timestamp is outside int64 microseconds: '1e300'", "avgcpu is not finite: 'inf'",
        "not valid UTF-8"])
    assert _counts(tables) == {"azure_v1.vmtable": (2, 1, 1),
                               "azure_v1.vm_cpu_readings": (6, 1, 5)}
    assert tables["instances"].instance_id.tolist() == ["v0000001"]
    assert tables["usage"][["instance_id", "cpu_limit", "avg_cpu", "max_cpu"]].to_dict(
        "records") == [{"instance_id": "v0000001", "cpu_limit": 4.0, "avg_cpu": 0.4,
                        "max_cpu": 0.8}]


def _packing_trace(path, vms, vm_types):
    with sqlite3.connect(path) as connection:
        # Columns without declared types: SQLite keeps whatever each row stores.
        connection.execute("CREATE TABLE vm (vmId, tenantId, vmTypeId, priority, starttime, "
                           "endtime)")
        connection.execute("CREATE TABLE vmType (id, vmTypeId, machineId, core, memory, hdd, "
                           "ssd, nic)")
        connection.executemany("INSERT INTO vm VALUES (?, ?, ?, ?, ?, ?)", vms)
        connection.executemany("INSERT INTO vmType VALUES (?, ?, 7, ?, ?, 0, 0, 0)", vm_types)


def test_sqlite_loose_typing_in_the_packing_trace_is_dead_letters(tmp_path):
    trace = tmp_path / "packing.sqlite"
    _packing_trace(trace, [
        (1, 10, 1, 0, 0.0, 1.0),
        (2, 10, 1, 0, "abc", 1.0),
        (3, 10, 1, 0, 0.0, "1.5"),
        (4, 10, 1, "high", 0.0, 1.0),
        (5, 10, 2, 0, 0.0, 1.0),            # its type's core is text
        (6, 10, 1, 0, 1e300, None),
        (7, 10, b"\x01", 0, 0.0, None),     # a blob
    ], [(1, 1, 0.25, 0.25), (2, 2, "big", 0.5)])
    tables = run_text_config(f'azure_packing_2020 {{ sqlite_path: "{trace}" }}',
                             tmp_path / "out")
    assert _dead(tables, "azure_packing_2020", "vm") == sorted([
        "starttime is not a finite number of days: 'abc'",
        "endtime is not a finite number of days: '1.5'",
        "priority is not an integer: 'high'",
        "vmTypeId 2 has an invalid size (core='big', memory=0.5)",
        "starttime is not a finite number of days: 1e+300",
        "vmTypeId b'\\x01' has no size on machine type 7"])
    assert _counts(tables) == {"azure_packing_2020.vm": (7, 1, 6)}


def test_invalid_utf8_text_in_the_packing_trace_is_one_dead_letter_per_row(tmp_path):
    trace = tmp_path / "packing.sqlite"
    _packing_trace(trace, [
        (1, 10, 1, 0, 0.0, 1.0),
        (2, b"\xff2", 1, 0, 0.0, 1.0),
        (b"v\xfe", 10, 1, 0, 0.0, 1.0),
        (4, 10, b"\xc3", 0, 0.0, None),
        (5, 10, 1, 0, 0.0, None),
        (6, "ten \u00fc", 1, 0, 0.0, 2.0),   # valid UTF-8 beyond ASCII is kept
    ], [(1, 1, 0.25, 0.25)])
    with sqlite3.connect(trace) as connection:  # the blobs become text that is not UTF-8
        for column in ("vmId", "tenantId", "vmTypeId"):
            connection.execute(f"UPDATE vm SET {column} = CAST({column} AS TEXT) "
                               f"WHERE typeof({column}) = 'blob'")
    tables = run_text_config(f'azure_packing_2020 {{ sqlite_path: "{trace}" }}',
                             tmp_path / "out")
    assert _dead(tables, "azure_packing_2020", "vm") == sorted([
        "tenantId is not valid UTF-8: b'\\xff2'", "vmId is not valid UTF-8: b'v\\xfe'",
        "vmTypeId is not valid UTF-8: b'\\xc3'"])
    assert _counts(tables) == {"azure_packing_2020.vm": (6, 3, 3)}
    assert sorted(tables["instances"].user) == ["10", "10", "ten \u00fc"]


@pytest.mark.parametrize("content, reason", [
    (b"this is not a database, just text\n" * 100, "file is not a database"),
    (None, "no such table: vmType"),
])
def test_a_file_that_is_not_the_packing_trace_fails_naming_it(tmp_path, content, reason):
    path = tmp_path / "trace.sqlite"
    if content is None:
        sqlite3.connect(path).execute("CREATE TABLE other (x)").connection.close()
    else:
        path.write_bytes(content)
    with pytest.raises(RunFailed, match=f"^{path}: not an Azure packing trace .*{reason}"):
        list(azure_packing.read_packing_trace(str(path)))


@pytest.mark.parametrize("value, parse, reason", [
    (2 ** 63, to_int, "x is outside int64: 9223372036854775808"),
    ("-9223372036854775809", to_int, "x is outside int64: '-9223372036854775809'"),
    (float("inf"), to_int, "x is not an integer: inf"),
    ("1_000", to_int, "x is not an integer: '1_000'"),
    (False, to_float, "x is a boolean, not a number: False"),
    ("١.٥", to_float, "x is not a number: '١.٥'"),
    ("1e999", to_float, "x is not finite: '1e999'"),
])
def test_number_rules(value, parse, reason):
    with pytest.raises(RowError) as error:
        parse(value, "x")
    assert str(error.value) == reason


def test_number_rules_keep_what_the_traces_write():
    assert [to_int(v, "x") for v in (7, "7", " -7 ", 7.0, "7e2", 2 ** 63 - 1)] == [
        7, 7, -7, 7, 700, 2 ** 63 - 1]
    assert [to_float(v, "x") for v in (1, "0.5", ".5", "5.", "-1E-3")] == [
        1.0, 0.5, 0.5, 5.0, -0.001]
    assert get_field({"resource_request.cpus": "0.5"}, "resource_request", "cpus") == "0.5"
    assert get_field({"resource_request": None}, "resource_request", "cpus") is None
