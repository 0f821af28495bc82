"""Arrow schemas of fleetcast's canonical tables and of its outputs.

Times are integer microseconds from the trace start (Google v3 convention; a value below
zero means "before the trace started"). Resources are in the trace's own units: normalized
machine fractions for Google v3, cores and GB for Azure V1, machine fractions for the Azure
packing trace.

Every table that fleetcast writes is declared here, once, so that the Parquet and the
BigQuery sinks, the notebooks and the tests agree on names and types.
"""

import pyarrow as pa

# Google v3 cpu_usage_distribution holds the 0th, 10th, ..., 100th percentiles and
# tail_cpu_usage_distribution the 91st ... 99th.
CPU_DISTRIBUTION_PERCENTILES = tuple(range(0, 101, 10))
TAIL_CPU_DISTRIBUTION_PERCENTILES = tuple(range(91, 100))

MACHINES = pa.schema([
    pa.field("machine_id", pa.int64(), nullable=False),
    pa.field("time", pa.int64(), nullable=False),
    pa.field("event_type", pa.string()),
    pa.field("cpu_capacity", pa.float64()),
    pa.field("memory_capacity", pa.float64()),
    pa.field("platform_id", pa.string()),
    pa.field("pool", pa.string()),
])

INSTANCES = pa.schema([
    # Identity of the task or VM ("collection_id:instance_index" for Google v3, the VM id
    # for Azure). A task that is rescheduled has one row per run; (instance_id, start_time)
    # is unique.
    pa.field("instance_id", pa.string(), nullable=False),
    pa.field("collection_id", pa.int64()),
    pa.field("instance_index", pa.int64()),
    pa.field("machine_id", pa.int64()),
    pa.field("pool", pa.string()),
    pa.field("start_time", pa.int64(), nullable=False),
    # Null: still running at trace end (right-censored).
    pa.field("end_time", pa.int64()),
    # FINISH, KILL, FAIL, EVICT, LOST for Google v3; DELETED for Azure; null when censored.
    pa.field("end_type", pa.string()),
    pa.field("cpu_request", pa.float64()),
    pa.field("memory_request", pa.float64()),
    pa.field("priority", pa.int64()),
    pa.field("scheduling_class", pa.int64()),
    pa.field("collection_type", pa.int64()),
    pa.field("user", pa.string()),
    pa.field("collection_logical_name", pa.string()),
    pa.field("collection_name", pa.string()),
    pa.field("alloc_collection_id", pa.int64()),
    pa.field("alloc_instance_index", pa.int64()),
    pa.field("vertical_scaling", pa.int64()),
    pa.field("scheduler", pa.int64()),
    pa.field("parent_collection_id", pa.int64()),
    # Azure feature columns (null for Google v3).
    pa.field("subscription_id", pa.string()),
    pa.field("deployment_id", pa.string()),
    pa.field("vm_category", pa.string()),
    pa.field("deployment_size", pa.int64()),
])

USAGE = pa.schema([
    pa.field("machine_id", pa.int64()),
    pa.field("instance_id", pa.string(), nullable=False),
    pa.field("start_time", pa.int64(), nullable=False),
    pa.field("end_time", pa.int64(), nullable=False),
    # The request in force at the window start (latest instance event at or before it with
    # cpus > 0 and memory > 0).
    pa.field("cpu_limit", pa.float64(), nullable=False),
    pa.field("memory_limit", pa.float64(), nullable=False),
    pa.field("avg_cpu", pa.float64()),
    pa.field("max_cpu", pa.float64()),
    pa.field("cpu_usage_distribution", pa.list_(pa.float64())),
    pa.field("tail_cpu_usage_distribution", pa.list_(pa.float64())),
    pa.field("avg_memory", pa.float64()),
    pa.field("max_memory", pa.float64()),
    pa.field("priority", pa.int64()),
    pa.field("scheduling_class", pa.int64()),
    pa.field("collection_type", pa.int64()),
    pa.field("alloc_collection_id", pa.int64()),
])

DEAD_LETTERS = pa.schema([
    pa.field("source", pa.string(), nullable=False),
    pa.field("table", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    # The rejected row as the source gave it (a JSON object, or the CSV line).
    pa.field("raw", pa.string()),
])

SOURCE_COUNTS = pa.schema([
    pa.field("source", pa.string(), nullable=False),
    pa.field("table", pa.string(), nullable=False),
    pa.field("read", pa.int64(), nullable=False),
    pa.field("kept", pa.int64(), nullable=False),
    pa.field("rejected", pa.int64(), nullable=False),
])

CANONICAL = {"machines": MACHINES, "instances": INSTANCES, "usage": USAGE}

# Every table a run may write, by its output name. Later stages register theirs here.
TABLES = {
    **CANONICAL,
    "dead_letters": DEAD_LETTERS,
    "source_counts": SOURCE_COUNTS,
}


def empty_table(schema: pa.Schema) -> pa.Table:
    """A zero-row table of `schema`."""
    return schema.empty_table()
