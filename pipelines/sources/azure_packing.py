"""Azure Trace for Packing 2020 (SQLite) → canonical instances.

Tables: vm(vmId, tenantId, vmTypeId, priority, starttime, endtime) with times in fractional
days (a negative start: alive when the trace starts; a NULL end: still alive at its end), and
vmType(id, vmTypeId, machineId, core, memory, hdd, ssd, nic) giving each VM type's demand as
fractions of one machine of type machineId. One machine type is chosen (the config's, else the
one most VM types are sized for); requests are its fractions and the pool is named after it.
A VM is one instance: of the rows of a vmId (as text, its instance_id) the first valid one in
the file (lowest rowid) is kept, the others are dead letters. The trace has no hosts:
`machines` is empty and the placement config gives host counts.
"""

import json
import math
import os
import shutil
import sqlite3
import tempfile

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems

from configs.units import DAY_US
from pipelines import schemas
from pipelines.io.dead_letters import (
    COUNTS,
    DEAD_LETTERS,
    INT64_MAX,
    ROWS,
    SplitByTag,
    counts,
    dead_letter_table,
)
from pipelines.io.failures import RunFailed

SOURCE = "azure_packing_2020"

CHUNK_ROWS = 50_000
VM_COLUMNS = ("vmId", "tenantId", "vmTypeId", "priority", "starttime", "endtime")
# vmId as its instance_id, `str(vmId)` (SQLite's text of an integer is Python's), so that the
# rows of one instance_id come together when sorted by it.
_VM_ID_TEXT = ("CASE typeof(vmId) WHEN 'integer' THEN CAST(vmId AS TEXT) "
               "WHEN 'real' THEN python_str(vmId) WHEN 'blob' THEN python_str(vmId) "
               "ELSE vmId END")


def _local_copy(path: str):
    """(local path, temporary dir or None): sqlite3 needs a local file."""
    if os.path.exists(path):
        return path, None
    tmp = tempfile.mkdtemp(prefix="fleetcast-sqlite-")
    local = os.path.join(tmp, os.path.basename(path))
    with FileSystems.open(path) as src, open(local, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return local, tmp


def chosen_machine_type(connection, machine_type_id=None) -> int:
    if machine_type_id is not None:
        return machine_type_id
    row = connection.execute(
        "SELECT machineId FROM vmType GROUP BY machineId ORDER BY COUNT(*) DESC, machineId "
        "LIMIT 1").fetchone()
    if row is None:
        raise ValueError("vmType table is empty")
    return int(row[0])


def read_packing_trace(path: str, machine_type_id=None):
    """Yields (instances table, dead letters table, (read, kept, rejected)) per chunk. A file
    that is not SQLite, or lacks the trace's tables, fails the run naming it."""
    local, tmp = _local_copy(path)
    try:
        connection = sqlite3.connect(f"file:{local}?mode=ro", uri=True)
        # Text that is not UTF-8 would fail the whole fetch: keep its bytes as lone
        # surrogates, so that its row alone is a dead letter (`_reject_reason`).
        connection.text_factory = lambda raw: raw.decode("utf-8", "surrogateescape")
        try:
            machine_type = chosen_machine_type(connection, machine_type_id)
            sizes = {vm_type: (core, memory) for vm_type, core, memory in connection.execute(
                "SELECT vmTypeId, core, memory FROM vmType WHERE machineId = ?",
                (machine_type,))}
            connection.create_function("python_str", 1, str, deterministic=True)
            cursor = connection.execute(f"SELECT rowid, {', '.join(VM_COLUMNS)} FROM vm "
                                        f"ORDER BY {_VM_ID_TEXT}, rowid")
            pool = f"machine_type_{machine_type}"
            last_kept = [None, None]
            while rows := cursor.fetchmany(CHUNK_ROWS):
                yield _chunk(rows, sizes, pool, machine_type, last_kept)
        except (sqlite3.DatabaseError, ValueError) as e:
            raise RunFailed(f"{path}: not an Azure packing trace (SQLite with tables vm and "
                            f"vmType): {e}") from None
        finally:
            connection.close()
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _number(value) -> bool:
    """SQLite is loosely typed: a numeric column may hold text or a blob."""
    return type(value) in (int, float)


def _days(value) -> bool:
    """A finite number of days whose µs fit in int64."""
    return _number(value) and math.isfinite(value) and abs(value) * DAY_US < INT64_MAX


def _not_utf8(row):
    """The reason a row holds text that was not valid UTF-8 in the file, or None."""
    for name, value in zip(VM_COLUMNS, row):
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return f"{name} is not valid UTF-8: {value.encode('utf-8', 'surrogateescape')!r}"
    return None


def _reject_reason(row, sizes, machine_type):
    vm_id, _, vm_type, priority, start, end = row
    not_utf8 = _not_utf8(row)
    if not_utf8:
        return not_utf8
    if vm_id is None:
        return "missing vmId"
    if start is None:
        return "missing starttime"
    for name, value in (("starttime", start), ("endtime", end)):
        if value is not None and not _days(value):
            return f"{name} is not a finite number of days: {value!r}"
    if priority is not None and type(priority) is not int:
        return f"priority is not an integer: {priority!r}"
    if end is not None and end <= start:
        return f"endtime {end} is not after starttime {start}"
    if vm_type not in sizes:
        return f"vmTypeId {vm_type!r} has no size on machine type {machine_type}"
    core, memory = sizes[vm_type]
    if not (_number(core) and _number(memory) and math.isfinite(core + memory)
            and core > 0 and memory >= 0):
        return f"vmTypeId {vm_type} has an invalid size (core={core!r}, memory={memory!r})"
    return None


def _chunk(rows, sizes, pool, machine_type, last_kept: list):
    """(instances, dead letters, counts) of (rowid, *VM_COLUMNS) rows in the order of their
    instance_id, then rowid; `last_kept` is [instance_id, rowid] of the last row kept before
    them, updated: a valid row of the same instance_id is a duplicate."""
    keep, reasons, raws = [], [], []
    for rowid, *row in rows:
        reason = _reject_reason(row, sizes, machine_type)
        if reason is None and str(row[0]) == last_kept[0]:
            reason = f"duplicate vmId {last_kept[0]} (first at rowid {last_kept[1]})"
        if reason is None:
            keep.append(row)
            last_kept[:] = [str(row[0]), rowid]
        else:
            reasons.append(reason)
            raws.append(json.dumps(dict(zip(VM_COLUMNS, row)),
                                   default=repr))  # a blob in a loosely typed column
    n = len(keep)
    vm_id, tenant, vm_type, priority, start, end = (list(c) for c in zip(*keep)) if keep \
        else ([],) * 6
    end_missing = np.array([e is None for e in end], dtype=bool)
    end_us = np.round(np.array([0.0 if e is None else e for e in end]) * DAY_US)
    columns = {
        "instance_id": pa.array([str(v) for v in vm_id], pa.string()),
        "pool": pa.array([pool] * n, pa.string()),
        "start_time": pa.array(np.round(np.array(start, dtype=float) * DAY_US), pa.int64()),
        "end_time": pa.array(end_us, pa.int64(), mask=end_missing),
        "end_type": pa.array([None if m else "DELETED" for m in end_missing], pa.string()),
        "cpu_request": pa.array([sizes[t][0] for t in vm_type], pa.float64()),
        "memory_request": pa.array([sizes[t][1] for t in vm_type], pa.float64()),
        "priority": pa.array(priority, pa.int64()),
        "user": pa.array([None if t is None else str(t) for t in tenant], pa.string()),
        "vm_category": pa.array([str(t) for t in vm_type], pa.string()),
    }
    instances = pa.Table.from_arrays(
        [columns.get(f.name, pa.nulls(n, f.type)) for f in schemas.INSTANCES],
        schema=schemas.INSTANCES)
    dead = dead_letter_table(SOURCE, "vm", reasons, raws)
    return instances, dead, (len(rows), n, len(reasons))


def read_tagged(path: str, machine_type_id):
    """(tag, value) pairs of the packing trace: instances, dead letters and counts."""
    for instances, dead, (read, kept, rejected) in read_packing_trace(path, machine_type_id):
        yield COUNTS, counts(SOURCE, "vm", read, kept, rejected)
        if dead.num_rows:
            yield DEAD_LETTERS, dead
        if instances.num_rows:
            yield ROWS, instances


class ReadAzurePacking2020(beam.PTransform):
    """AzurePacking2020Source config → dict of PCollections (machines, instances, usage,
    dead_letters, counts) of Arrow tables."""

    def __init__(self, source):
        super().__init__()
        self._source = source

    def expand(self, pbegin):
        machine_type = (self._source.machine_type_id
                        if self._source.HasField("machine_type_id") else None)
        read = (
            pbegin
            | "Path" >> beam.Create([self._source.sqlite_path])
            | "ReadSqlite" >> beam.FlatMap(read_tagged, machine_type)
            | "Split" >> SplitByTag((ROWS, DEAD_LETTERS, COUNTS)))
        return {
            "machines": pbegin | "NoMachines" >> beam.Create([]),
            "instances": read[ROWS],
            "usage": pbegin | "NoUsage" >> beam.Create([]),
            "dead_letters": read[DEAD_LETTERS],
            "counts": read[COUNTS],
        }
