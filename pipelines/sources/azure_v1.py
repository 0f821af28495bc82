"""Azure Public Dataset V1/V2 → canonical instances and usage tables.

vmtable (CSV, no header): vmid, subscriptionid, deploymentid, vmcreated, vmdeleted, maxcpu,
avgcpu, p95maxcpu, vmcategory, vmcorecount(bucket), vmmemory(bucket); times in seconds.
vm_cpu_readings (CSV, no header): timestamp (s), vmid, mincpu, maxcpu, avgcpu (percent).

A VM's limit is its core count (and memory in GB); usage = cpu% / 100 × cores. A VM is one
instance: of the valid vmtable rows of a vmid the first in the input (files in path order) is
kept, the others are dead letters. VMs that the readings name but the vmtable does not (or no
vmtable at all) get the configured default size. The trace has no hosts: `machines` is empty
and the config gives host shapes.

V2's size buckets such as ">24" are read as their lower bound (24), documented rather than
guessed upward.
"""

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from configs import fleetcast_pb2
from configs.units import US_PER_S
from pipelines import schemas
from pipelines.io import sharding
from pipelines.io.dead_letters import (
    COUNTS,
    DEAD_LETTERS,
    INT64_MAX,
    ROWS,
    ChunkParser,
    RowError,
    SplitByTag,
    counts,
    dead_letter_table,
    parse_tagged,
    rows_as_dead_letters,
    to_float,
)
from pipelines.io.readers import ReadFileChunks

SOURCE = "azure_v1"
VMTABLE_COLUMNS = ("vmid", "subscriptionid", "deploymentid", "vmcreated", "vmdeleted", "maxcpu",
                   "avgcpu", "p95maxcpu", "vmcategory", "vmcorecount", "vmmemory")
READINGS_COLUMNS = ("timestamp", "vmid", "mincpu", "maxcpu", "avgcpu")
WINDOW_US = 300_000_000


VMTABLE = pa.schema([
    ("vmid", pa.string()), ("subscription_id", pa.string()), ("deployment_id", pa.string()),
    ("created_us", pa.int64()), ("deleted_us", pa.int64()), ("cores", pa.float64()),
    ("memory_gb", pa.float64()), ("vm_category", pa.string()),
])

# A parsed vmtable row and its place in the input: its file and its order there.
PLACED_VMTABLE = VMTABLE.append(pa.field("file", pa.string())).append(
    pa.field("order", pa.int64()))

READINGS = pa.schema([
    ("vmid", pa.string()), ("time_us", pa.int64()), ("max_cpu_percent", pa.float64()),
    ("avg_cpu_percent", pa.float64()),
])


def _text(value):
    return value.strip() or None if isinstance(value, str) else value


def _vm_id(row) -> str:
    vmid = _text(row["vmid"])
    if vmid is None:
        raise RowError("missing vmid")
    return vmid


def _size(value, field: str):
    """A size bucket: a number, or ">N" read as N."""
    value = _text(value)
    if isinstance(value, str) and value.startswith(">"):
        value = value[1:]
    return to_float(value, field, min_value=0)


def _seconds_to_us(value, field: str, required: bool):
    """Seconds (fractional in some exports) → integer µs; a time past int64 µs (year 294,000)
    is an error."""
    seconds = to_float(value, field, required=required, min_value=0)
    if seconds is None:
        return None
    if seconds * US_PER_S >= INT64_MAX:
        raise RowError(f"{field} is outside int64 microseconds: {value!r}")
    return int(round(seconds * US_PER_S))


def _percent(value, field: str, required: bool):
    number = to_float(value, field, required=required, min_value=0)
    if number is not None and number > 100:
        raise RowError(f"{field} above 100 %: {number}")
    return number


class VmTableParser(ChunkParser):
    """Rows of the vmtable → VMTABLE rows (times in µs; deleted after created; cores > 0)."""

    source, table, schema = SOURCE, "vmtable", VMTABLE

    def parse_row(self, row):
        vmid = _vm_id(row)
        created = _seconds_to_us(row["vmcreated"], "vmcreated", required=True)
        deleted = _seconds_to_us(row["vmdeleted"], "vmdeleted", required=False)
        if deleted is not None and deleted <= created:
            raise RowError(f"vmdeleted {deleted} is not after vmcreated {created}")
        cores = _size(row["vmcorecount"], "vmcorecount")
        if cores == 0:
            raise RowError("vmcorecount is 0")
        return (vmid, _text(row["subscriptionid"]), _text(row["deploymentid"]),
                created, deleted,
                cores, _size(row["vmmemory"], "vmmemory"), _text(row["vmcategory"]))


class ReadingsParser(ChunkParser):
    """Rows of vm_cpu_readings → READINGS rows (time in µs, CPU % in [0, 100])."""

    source, table, schema = SOURCE, "vm_cpu_readings", READINGS

    def parse_row(self, row):
        return (_vm_id(row), _seconds_to_us(row["timestamp"], "timestamp", required=True),
                _percent(row["maxcpu"], "maxcpu", required=False),
                _percent(row["avgcpu"], "avgcpu", required=True))


def parse_placed_vmtable(chunk, parser: VmTableParser):
    """(tag, value) pairs of a RowChunk of the vmtable (parse_tagged), the rows with their
    place in the input (PLACED_VMTABLE)."""
    for tag, value in parse_tagged(chunk, parser):
        if tag == ROWS:
            path, index = chunk.origin
            n = value.num_rows
            value = value.append_column("file", pa.array([path] * n, pa.string()))
            value = value.append_column("order", pa.array((index << 32) + np.arange(n)))
        yield tag, value


def first_of_each_vm(vms: pa.Table):
    """(the first row of each vmid of PLACED_VMTABLE rows in input order, dead letters of the
    others)."""
    order = pc.sort_indices(vms, sort_keys=[("vmid", "ascending"), ("file", "ascending"),
                                            ("order", "ascending")]).to_numpy()
    ids = vms.column("vmid").to_numpy(zero_copy_only=False)[order]
    repeated = np.zeros(len(ids), dtype=bool)
    repeated[1:] = ids[1:] == ids[:-1]
    if not repeated.any():
        return vms, dead_letter_table(SOURCE, "vmtable", [], [])
    first = np.maximum.accumulate(np.where(repeated, 0, np.arange(len(ids))))
    files = vms.column("file").to_numpy(zero_copy_only=False)[order]
    reasons = [f"duplicate vmid {vmid} (first in {file})"
               for vmid, file in zip(ids[repeated], files[first[repeated]])]
    dead = rows_as_dead_letters(SOURCE, "vmtable",
                                vms.take(order[repeated]).drop_columns(["order"]), reasons)
    return vms.take(np.sort(order[~repeated])), dead


def split_by_deployment(table: pa.Table, num_shards: int):
    """All VMs of a deployment share a shard (a VM without one is its own deployment)."""
    ids = table.column("deployment_id")
    key = pc.if_else(pc.is_null(ids), table.column("vmid"), ids)
    return sharding.split_by_key(table, key, num_shards)


def deployment_sizes(vms: pa.Table) -> np.ndarray:
    """int64[n]: how many VMs of `vms` share each row's deployment id (null → 1)."""
    deployment = vms.column("deployment_id")
    encoded = pc.dictionary_encode(deployment).combine_chunks()
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    valid = ~np.asarray(pc.is_null(encoded.indices))
    sizes = np.bincount(np.where(valid, indices, 0)[valid], minlength=len(encoded.dictionary))
    return np.where(valid, sizes[np.where(valid, indices, 0)], 1).astype(np.int64)


def vm_instances(vms: pa.Table, pool: str) -> pa.Table:
    """The canonical `instances` rows of parsed vmtable rows (whole deployments)."""
    n = vms.num_rows
    deleted = vms.column("deleted_us")
    columns = {
        "instance_id": vms.column("vmid"),
        "pool": pa.array([pool] * n, pa.string()),
        "start_time": vms.column("created_us"),
        "end_time": deleted,
        "end_type": pc.if_else(pc.is_null(deleted), pa.scalar(None, pa.string()), "DELETED"),
        "cpu_request": vms.column("cores"),
        "memory_request": vms.column("memory_gb"),
        "subscription_id": vms.column("subscription_id"),
        "deployment_id": vms.column("deployment_id"),
        "vm_category": vms.column("vm_category"),
        "deployment_size": pa.array(deployment_sizes(vms), pa.int64()),
    }
    return pa.Table.from_arrays(
        [columns.get(f.name, pa.nulls(n, f.type)) for f in schemas.INSTANCES],
        schema=schemas.INSTANCES)


def readings_usage(readings: pa.Table, vms: pa.Table, default_cores: float,
                   default_memory_gb: float) -> pa.Table:
    """Canonical `usage` rows: readings scaled by each VM's cores (the default when unknown)."""
    vm_ids = vms.column("vmid").to_numpy(zero_copy_only=False).astype(str)
    order = np.argsort(vm_ids)
    ids = readings.column("vmid").to_numpy(zero_copy_only=False).astype(str)
    position = np.minimum(np.searchsorted(vm_ids[order], ids), max(len(vm_ids) - 1, 0))
    known = (vm_ids[order][position] == ids) if len(vm_ids) else np.zeros(len(ids), bool)
    row = order[position] if len(vm_ids) else position
    cores = np.where(known, vms.column("cores").to_numpy()[row] if len(vm_ids) else 0,
                     default_cores)
    memory = np.where(known, np.nan_to_num(vms.column("memory_gb").to_numpy(
        zero_copy_only=False)[row], nan=default_memory_gb) if len(vm_ids) else 0,
                      default_memory_gb)
    start = readings.column("time_us").to_numpy()
    n = readings.num_rows
    max_percent = readings.column("max_cpu_percent").to_numpy(zero_copy_only=False)
    columns = {
        "instance_id": readings.column("vmid"),
        "start_time": pa.array(start, pa.int64()),
        "end_time": pa.array(start + WINDOW_US, pa.int64()),
        "cpu_limit": pa.array(cores, pa.float64()),
        "memory_limit": pa.array(memory, pa.float64()),
        "avg_cpu": pa.array(readings.column("avg_cpu_percent").to_numpy() / 100 * cores),
        "max_cpu": pa.array(max_percent / 100 * cores, mask=np.isnan(max_percent)),
    }
    return pa.Table.from_arrays(
        [columns.get(f.name, pa.nulls(n, f.type)) for f in schemas.USAGE], schema=schemas.USAGE)


def _deployment_instances(element, pool: str) -> pa.Table:
    _, tables = element
    return vm_instances(sharding.concat(tables, PLACED_VMTABLE), pool)


def _shard_vms_and_usage(element, default_cores: float, default_memory_gb: float):
    """(vmid shard, {vms, readings}) → (tag, value) pairs: the shard's VMs without duplicate
    vmids ("vms"), their dead letters and counts, and the usage of its readings."""
    _, grouped = element
    vms, dead = first_of_each_vm(sharding.concat(grouped["vms"], PLACED_VMTABLE))
    if vms.num_rows:
        yield "vms", vms
    if dead.num_rows:
        # Parsed rows that turn out duplicates move from kept to rejected.
        yield COUNTS, counts(SOURCE, "vmtable", 0, -dead.num_rows, dead.num_rows)
        yield DEAD_LETTERS, dead
    readings = sharding.concat(grouped["readings"], READINGS)
    if readings.num_rows:
        yield "usage", readings_usage(readings, vms, default_cores, default_memory_gb)


class ReadAzureV1(beam.PTransform):
    """AzureV1Source config → dict of PCollections (machines, instances, usage,
    dead_letters, counts) of Arrow tables."""

    def __init__(self, source):
        super().__init__()
        self._source = source
        self._num_shards = source.num_shards

    def _read(self, pbegin, name, path, columns, parse, parser):
        if not path:
            empty = pbegin | f"No{name}" >> beam.Create([])
            return empty, empty, empty
        parsed = (
            pbegin
            | f"Read{name}" >> ReadFileChunks(path, fleetcast_pb2.TableInput.CSV,
                                              fieldnames=list(columns))
            | f"Parse{name}" >> beam.FlatMap(parse, parser)
            | f"Split{name}" >> SplitByTag((ROWS, DEAD_LETTERS, COUNTS)))
        return parsed[ROWS], parsed[DEAD_LETTERS], parsed[COUNTS]

    def expand(self, pbegin):
        source = self._source
        vms, vms_dead, vms_counts = self._read(
            pbegin, "vmtable", source.vmtable, VMTABLE_COLUMNS, parse_placed_vmtable,
            VmTableParser())
        readings, readings_dead, readings_counts = self._read(
            pbegin, "vm_cpu_readings", source.vm_cpu_readings, READINGS_COLUMNS, parse_tagged,
            ReadingsParser())
        # A VM's rows and readings together: duplicate vmids out, usage scaled by its cores.
        by_vm = (
            {"vms": vms | "ShardVms" >> beam.FlatMap(sharding.split_by_key, "vmid",
                                                      self._num_shards),
             "readings": readings | "ShardReadings" >> beam.FlatMap(
                 sharding.split_by_key, "vmid", self._num_shards)}
            | "GroupByVm" >> beam.CoGroupByKey()
            | "VmsAndUsage" >> beam.FlatMap(_shard_vms_and_usage, source.default_core_count,
                                            source.default_memory_gb)
            | "SplitVmsAndUsage" >> SplitByTag(("vms", "usage", DEAD_LETTERS, COUNTS)))
        # Deployment sizes need every VM of a deployment together.
        instances = (
            by_vm["vms"]
            | "ShardByDeployment" >> beam.FlatMap(split_by_deployment, self._num_shards)
            | "GroupDeployments" >> beam.GroupByKey()
            | "Instances" >> beam.Map(_deployment_instances, source.pool))
        return {
            "machines": pbegin | "NoMachines" >> beam.Create([]),
            "instances": instances,
            "usage": by_vm["usage"],
            "dead_letters": ((vms_dead, readings_dead, by_vm[DEAD_LETTERS])
                             | "FlattenDeadLetters" >> beam.Flatten()),
            "counts": ((vms_counts, readings_counts, by_vm[COUNTS])
                       | "FlattenCounts" >> beam.Flatten()),
        }
