"""Constants of the synthetic trace that its modules share: the usage window, lifetime bounds,
resource units, the v3 enums and ids, and the table names and file suffixes."""

from configs.units import DAY_US, US_PER_S

WINDOW_US = 300 * US_PER_S
MAX_LIFETIME_US = 30 * DAY_US
MIN_LIFETIME_US = 10 * US_PER_S
# The placer counts resources in integer units of 1e-5 machine: exact capacity accounting,
# and requests that print short.
RESOURCE_UNITS = 100_000
USAGE_DECIMALS = 7

# v3 EventType (collection_events.type, instance_events.type).
SUBMIT, QUEUE, ENABLE, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST = range(9)
UPDATE_PENDING, UPDATE_RUNNING = 9, 10
# v3 MachineEvent.EventType.
MACHINE_ADD, MACHINE_REMOVE, MACHINE_UPDATE = 1, 2, 3
NO_MACHINE = 0
NO_ALLOC_COLLECTION = 0
NO_ALLOC_INDEX = -1
JOB = 0

TABLES = ("machine_events", "collection_events", "instance_events", "instance_usage")
FILE_SUFFIXES = {"json": ".json.gz", "csv": ".csv.gz", "parquet": ".parquet"}
# Where the shard files of a table go: a folder per table, or the public trace's buckets.
LAYOUTS = ("tables", "public")
