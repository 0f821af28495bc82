"""Every row of every matched file is counted, whatever the file: each is read by what it is
(a compressed file by its ending or its leading bytes, a Parquet file as Parquet, a CSV file
among JSON by its ending), or the run fails naming it; and an id that must be unique (a VM of
the Azure traces) is kept once, its other rows dead letters. Runs through the CLI, as users
run them; for every source table read = kept + rejected = the rows in the files."""

import gzip
import json
import sqlite3
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.sources.azure_v1 import VMTABLE_COLUMNS
from tests.helpers import REPO, read_table

FLEETCAST = [sys.executable, "-m", "pipelines.cli"]


def _event(collection_id, time, event_type, cpus=0.25):
    return {"time": time, "type": event_type, "collection_id": collection_id,
            "instance_index": 0, "machine_id": 5, "priority": 0,
            "resource_request": {"cpus": cpus, "memory": 0.5}}


# Three shards of instance_events, each holding whole collections: runs 1:0 and 2:0, 3:0,
# and 4:0 and 5:0 with one row whose cpus are negative (a dead letter).
SHARDS = [
    [_event(1, 0, 3), _event(1, 100, 6), _event(2, 10, 3), _event(2, 50, 7)],
    [_event(3, 20, 3), _event(3, 90, 6)],
    [_event(4, 30, 3), _event(4, 60, 5), _event(5, 40, 3), _event(5, 80, 6),
     _event(5, 85, 6, cpus=-1)],
]
INSTANCES = ["1:0", "2:0", "3:0", "4:0", "5:0"]


def _json(rows) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def _csv(rows) -> bytes:
    lines = ["time,type,collection_id,instance_index,machine_id,priority,"
             "resource_request.cpus,resource_request.memory"]
    lines += [",".join(str(v) for v in (r["time"], r["type"], r["collection_id"],
                                         r["instance_index"], r["machine_id"], r["priority"],
                                         r["resource_request"]["cpus"],
                                         r["resource_request"]["memory"])) for r in rows]
    return "\n".join(lines).encode() + b"\n"


def _parquet(rows, path):
    pq.write_table(pa.Table.from_pylist(rows), path)


def _run(config_text, tmp_path):
    config = tmp_path / "run.textproto"
    config.write_text(config_text)
    return subprocess.run([*FLEETCAST, "run", str(config), "--output_dir",
                           str(tmp_path / "out"), "-q"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def _counts(tmp_path):
    return {f"{r.source}.{r.table}": (r.read, r.kept, r.rejected)
            for r in read_table(tmp_path / "out" / "source_counts").itertuples()}


def _dead(tmp_path, source, table):
    dead = read_table(tmp_path / "out" / "dead_letters")
    return sorted(dead[(dead.source == source) & (dead.table == table)].reason)


def _run_events(tmp_path, last_shard_name, write_last_shard):
    """Runs instance_events from a directory of the first two shards as plain JSON and the
    third as `write_last_shard(rows, path)` writes it, matched by a pattern."""
    shards = tmp_path / "instance_events"
    shards.mkdir()
    for i, rows in enumerate(SHARDS[:2]):
        (shards / f"events-{i}.json").write_bytes(_json(rows))
    write_last_shard(SHARDS[2], shards / last_shard_name)
    return _run(f'google_v3 {{ instance_events {{ path: "{shards}/*" }} }}', tmp_path)


@pytest.mark.parametrize("name,write", [
    # gzip whose name does not say so: by its leading bytes.
    ("events-2.json", lambda rows, path: path.write_bytes(gzip.compress(_json(rows)))),
    ("events-2.json.gzip", lambda rows, path: path.write_bytes(gzip.compress(_json(rows)))),
    # Parquet among JSON shards (the pattern says JSON): by its magic bytes.
    ("events-2.parquet", _parquet),
    ("events-2", _parquet),
    # CSV (with its header) among JSON shards: by its ending.
    ("events-2.csv", lambda rows, path: path.write_bytes(_csv(rows))),
    ("events-2.csv.gz", lambda rows, path: path.write_bytes(gzip.compress(_csv(rows)))),
], ids=["gzip_named_json", "gzip_named_gzip", "parquet", "parquet_no_ending", "csv",
        "csv_gz"])
def test_every_row_of_a_shard_of_another_format_is_counted(tmp_path, name, write):
    result = _run_events(tmp_path, name, write)
    assert result.returncode == 0, result.stderr
    assert _counts(tmp_path) == {"google_v3.instance_events": (11, 10, 1)}
    assert _dead(tmp_path, "google_v3", "instance_events") == [
        "resource_request.cpus is below 0: -1.0"]
    instances = read_table(tmp_path / "out" / "instances").sort_values("instance_id")
    assert instances.instance_id.tolist() == INSTANCES
    assert instances.end_type.tolist() == ["FINISH", "KILL", "FINISH", "FAIL", "FINISH"]


def test_a_compressed_parquet_shard_fails_naming_it(tmp_path):
    def write(rows, path):
        _parquet(rows, tmp_path / "plain.parquet")
        path.write_bytes(gzip.compress((tmp_path / "plain.parquet").read_bytes()))

    result = _run_events(tmp_path, "events-2.parquet.gz", write)
    shard = tmp_path / "instance_events" / "events-2.parquet.gz"
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"fleetcast: run failed: {shard}: a gzip-compressed Parquet file, which cannot be read "
        "in place; decompress it (Parquet compresses its own pages)")
    assert not (tmp_path / "out" / "instances").exists()


def test_a_gzip_file_holding_parquet_fails_naming_it(tmp_path):
    def write(rows, path):
        _parquet(rows, tmp_path / "plain.parquet")
        path.write_bytes(gzip.compress((tmp_path / "plain.parquet").read_bytes()))

    result = _run_events(tmp_path, "events-2.json.gz", write)
    shard = tmp_path / "instance_events" / "events-2.json.gz"
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"fleetcast: run failed: {shard}: a gzip-compressed Parquet file, which cannot be read "
        "in place; decompress it (Parquet compresses its own pages)")


VMTABLE_ROWS = [
    "vm1,s1,d1,0,3600,,,,Interactive,2,4",
    "vm2,s1,d1,60,,,,,Interactive,4,8",
    "vm3,s2,d2,120,7200,,,,Unknown,1,2",
]


def test_a_parquet_vmtable_among_csv_files_is_read_by_its_columns(tmp_path):
    (tmp_path / "vmtable-a.csv").write_text("\n".join(VMTABLE_ROWS[:2]) + "\n")
    values = ("vm3", "s2", "d2", 120, 7200, None, None, None, "Unknown", 1, 2.0)
    pq.write_table(pa.table({c: [v] for c, v in zip(VMTABLE_COLUMNS, values)}),
                   tmp_path / "vmtable-b.parquet")
    result = _run(f'azure_v1 {{ vmtable: "{tmp_path}/vmtable-*" }}', tmp_path)
    assert result.returncode == 0, result.stderr
    assert _counts(tmp_path) == {"azure_v1.vmtable": (3, 3, 0)}
    instances = read_table(tmp_path / "out" / "instances").sort_values("instance_id")
    assert instances.instance_id.tolist() == ["vm1", "vm2", "vm3"]
    assert instances.cpu_request.tolist() == [2, 4, 1]


def test_a_parquet_vmtable_without_its_columns_fails_naming_it(tmp_path):
    (tmp_path / "vmtable-a.csv").write_text("\n".join(VMTABLE_ROWS) + "\n")
    pq.write_table(pa.table({"vm": ["vm4"], "cores": [2]}), tmp_path / "vmtable-b.parquet")
    result = _run(f'azure_v1 {{ vmtable: "{tmp_path}/vmtable-*" }}', tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"fleetcast: run failed: {tmp_path}/vmtable-b.parquet: a Parquet file without the "
        "input's columns vmid, subscriptionid, deploymentid, vmcreated, vmdeleted, maxcpu, "
        "avgcpu, p95maxcpu, vmcategory, vmcorecount, vmmemory (it has vm, cores)")


def _packing_trace(path, vms):
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE vm (vmId, tenantId, vmTypeId, priority, starttime, "
                           "endtime)")
        connection.execute("CREATE TABLE vmType (id, vmTypeId, machineId, core, memory, hdd, "
                           "ssd, nic)")
        connection.executemany("INSERT INTO vm VALUES (?, ?, ?, ?, ?, ?)", vms)
        connection.execute("INSERT INTO vmType VALUES (1, 1, 7, 0.25, 0.25, 0, 0, 0)")


def test_duplicate_vm_ids_of_the_packing_trace_are_dead_letters(tmp_path):
    trace = tmp_path / "packing.sqlite"
    _packing_trace(trace, [
        (17, 1, 1, 0, 0.0, 1.0),       # rowid 1: vmId 17, kept
        (3, 1, 1, 0, None, 1.0),       # rowid 2: vmId 3 without a start: its own reason
        (17, 1, 1, 0, 0.0, 1.0),       # rowid 3: an exact copy of rowid 1
        (3, 1, 1, 0, 0.5, 2.0),        # rowid 4: the first valid row of vmId 3, kept
        ("17", 2, 1, 0, 2.0, 3.0),     # rowid 5: "17" as text is the same instance_id
        (3, 1, 1, 0, 0.5, 2.0),        # rowid 6
        (4, 1, 1, 0, 0.0, None),       # rowid 7
    ])
    result = _run(f'azure_packing_2020 {{ sqlite_path: "{trace}" }}', tmp_path)
    assert result.returncode == 0, result.stderr
    assert _counts(tmp_path) == {"azure_packing_2020.vm": (7, 3, 4)}
    assert _dead(tmp_path, "azure_packing_2020", "vm") == [
        "duplicate vmId 17 (first at rowid 1)", "duplicate vmId 17 (first at rowid 1)",
        "duplicate vmId 3 (first at rowid 4)", "missing starttime"]
    instances = read_table(tmp_path / "out" / "instances").sort_values("instance_id")
    assert instances.instance_id.tolist() == ["17", "3", "4"]
    assert instances.start_time.tolist() == [0, 43_200_000_000, 0]


def test_duplicate_vmids_of_the_azure_vmtable_are_dead_letters(tmp_path):
    (tmp_path / "vmtable-a.csv").write_text("\n".join(VMTABLE_ROWS + [
        "vm2,s1,d1,60,,,,,Interactive,4,8"]) + "\n")        # an exact copy, same file
    (tmp_path / "vmtable-b.csv").write_text("\n".join([
        "vm1,s9,d9,30,90,,,,Unknown,8,16",                   # another vm1, next file
        "vm4,s2,d2,0,60,,,,Unknown,1,1"]) + "\n")
    (tmp_path / "readings.csv").write_text("0,vm1,1,50,25\n300,vm2,1,50,50\n")
    result = _run(f'azure_v1 {{ vmtable: "{tmp_path}/vmtable-*" '
                  f'vm_cpu_readings: "{tmp_path}/readings.csv" }}', tmp_path)
    assert result.returncode == 0, result.stderr
    assert _counts(tmp_path) == {"azure_v1.vmtable": (6, 4, 2),
                                 "azure_v1.vm_cpu_readings": (2, 2, 0)}
    assert _dead(tmp_path, "azure_v1", "vmtable") == [
        f"duplicate vmid vm1 (first in {tmp_path}/vmtable-a.csv)",
        f"duplicate vmid vm2 (first in {tmp_path}/vmtable-a.csv)"]
    instances = read_table(tmp_path / "out" / "instances").sort_values("instance_id")
    assert instances.instance_id.tolist() == ["vm1", "vm2", "vm3", "vm4"]
    assert instances.cpu_request.tolist() == [2, 4, 1, 1]
    assert instances.deployment_size.tolist() == [2, 2, 2, 2]
    usage = read_table(tmp_path / "out" / "usage").sort_values("instance_id")
    assert usage[["instance_id", "cpu_limit", "avg_cpu"]].to_dict("records") == [
        {"instance_id": "vm1", "cpu_limit": 2.0, "avg_cpu": 0.5},
        {"instance_id": "vm2", "cpu_limit": 4.0, "avg_cpu": 2.0}]
