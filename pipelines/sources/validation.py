"""Each trace source's config checks by field path, and what a configured source yields (its
hosts, its usage). No Beam, unlike the sources' readers (a module each): Beam's file systems
load only to match the files a config names."""

from configs import fleetcast_pb2
from configs.checks import Limit, number, size

Unit = fleetcast_pb2.Google2011Source.Unit
# What each TableInput choice must hold, for the message of an empty one.
_TABLE_INPUT_CONTENTS = {"path": "a file pattern (local or gs://)",
                         "bigquery_table": "'dataset.table' or 'project:dataset.table'",
                         "bigquery_query": "a SQL query"}
# A VM's default size: the trace's largest buckets are ">24" cores and ">64" GB; past these
# bounds the value is a unit mistake (MB for GB) or a typo.
MAX_VM_CORES = Limit(1_024, "cores", "no VM has more")
MAX_VM_MEMORY_GB = Limit(16_384, "GB", "no VM has more")
# 8 x a Google 2019 cell (~12,000 machines).
MAX_MACHINES = Limit(100_000, "machines", "8 x a Google 2019 cell")
MAX_DAYS = Limit(3_650, "days (10 years)", "longer than any trace")
# The generator holds the whole trace in memory, ~100 kB per machine-day at the default
# arrival rate (200 machines x 4 days: 74 MB); a Google cell-day (~12,000 machines) is the
# design's scale target.
MAX_MACHINE_DAYS = 12_000
BYTES_PER_MACHINE_DAY = 100_000


def _check_files(check, pattern: str, field: str, allow_missing_parts: bool):
    """Files match `pattern` and its numbered parts are whole (pipelines/sources/parts.py),
    as far as the checker checks inputs."""
    check.path_exists(pattern, field)
    if check.check_inputs:
        from pipelines.sources import parts  # lists the files through Beam's file systems
        parts.validate(check, pattern, field, allow_missing_parts)


def _validate_table_input(check, message, field: str, required: bool,
                          allow_missing_parts: bool = False):
    which = message.WhichOneof("input")
    if which is None:
        if required:
            check.fail(field, "is required (path, bigquery_table or bigquery_query)")
    elif not getattr(message, which).strip():
        check.fail(f"{field}.{which}", f"is empty: give {_TABLE_INPUT_CONTENTS[which]}")
    elif which == "path":
        _check_files(check, message.path, f"{field}.path", allow_missing_parts)
    elif which == "bigquery_table":
        check.bigquery_table(message.bigquery_table, f"{field}.bigquery_table")


def validate_google_v3(check, source, field: str = "google_v3"):
    """Checks a GoogleV3Source message (configs/checks.py Checker)."""
    check.positive(source, "num_shards", field)
    _validate_table_input(check, source.instance_events, f"{field}.instance_events", True,
                          source.allow_missing_parts)
    for name in ("instance_usage", "machine_events", "collection_events"):
        _validate_table_input(check, getattr(source, name), f"{field}.{name}", False,
                              source.allow_missing_parts)


def validate_azure_v1(check, source, field: str = "azure_v1"):
    """Checks an AzureV1Source message (configs/checks.py Checker)."""
    check.require(source.vmtable or source.vm_cpu_readings, field,
                  "names neither vmtable nor vm_cpu_readings")
    for name in ("vmtable", "vm_cpu_readings"):
        if getattr(source, name):
            check.path_exists(getattr(source, name), f"{field}.{name}")
    check.positive(source, "num_shards", field)
    check.positive(source, "default_core_count", field, maximum=MAX_VM_CORES)
    check.positive(source, "default_memory_gb", field, maximum=MAX_VM_MEMORY_GB)


def validate_azure_packing(check, source, field: str = "azure_packing_2020"):
    """Checks an AzurePacking2020Source message (configs/checks.py Checker)."""
    check.path_exists(source.sqlite_path, f"{field}.sqlite_path")


def validate_synthetic(check, options, field: str = "synthetic"):
    """Checks a SyntheticSource message (configs/checks.py Checker)."""
    from synthetic import DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR as DEFAULT_RATE

    problems = len(check.problems)
    check.positive(options, "machines", field, maximum=MAX_MACHINES)
    check.positive(options, "days", field, maximum=MAX_DAYS)
    check.positive(options, "seed", field, allow_zero=True)
    if options.HasField("arrival_rate_per_machine_hour"):
        check.positive(options, "arrival_rate_per_machine_hour", field)
    if len(check.problems) > problems:
        return
    rate = (options.arrival_rate_per_machine_hour
            if options.HasField("arrival_rate_per_machine_hour") else DEFAULT_RATE)
    machine_days = options.machines * options.days * rate / DEFAULT_RATE
    check.require(
        machine_days <= MAX_MACHINE_DAYS, field,
        f"machines x days (x arrival_rate_per_machine_hour / {DEFAULT_RATE:g}) must be at most "
        f"{MAX_MACHINE_DAYS:,} machine-days (a Google cell-day): the generator holds the "
        f"whole trace in memory, ~{size(BYTES_PER_MACHINE_DAY)} per machine-day, so "
        f"{number(machine_days)} would need ~{size(machine_days * BYTES_PER_MACHINE_DAY)}")


def google_2011_has_machines(source) -> bool:
    """Whether the configured Google 2011 trace gives hosts: machine_events is read."""
    return bool(source.machine_events)


def google_2011_has_usage(source) -> bool:
    """Whether the configured Google 2011 trace gives a usage table: task_usage, unit TASKS."""
    return bool(source.task_usage) and source.unit == Unit.TASKS


def google_2011_last_event(source):
    """(table, LastEvent) of the table the unit's instances arrive in (task_events for
    TASKS, job_events for JOBS): its parts are in time order, so its last part holds the
    trace's last arrival or a later event; None when its files do not tell."""
    table = {Unit.TASKS: "task_events", Unit.JOBS: "job_events"}.get(source.unit)
    if not table or not getattr(source, table):
        return None
    from apache_beam.io.filesystems import FileSystems  # only when inputs are checked

    from pipelines.sources.last_event import last_event
    try:
        paths = [f.path for f in FileSystems.match([getattr(source, table)])[0].metadata_list]
        found = last_event(paths)
    except Exception:  # pylint: disable=broad-except  # unreadable: the run says so
        return None
    return None if found is None else (f"google_2011.{table}", found)


def validate_google_2011(check, source, field: str = "google_2011"):
    """Checks a Google2011Source message (configs/checks.py Checker)."""
    check.require(source.unit != Unit.UNIT_UNSPECIFIED, f"{field}.unit",
                  "is UNIT_UNSPECIFIED: TASKS or JOBS")
    needed = {Unit.TASKS: "task_events", Unit.JOBS: "job_events"}.get(source.unit)
    if needed:
        check.require(bool(getattr(source, needed)), f"{field}.{needed}",
                      f"is required with unit {Unit.Name(source.unit)}")
    if source.unit == Unit.JOBS:
        for name in ("task_events", "task_usage"):
            check.require(not getattr(source, name), f"{field}.{name}",
                          "is unused with unit JOBS (jobs come from job_events alone): "
                          "remove it, or use unit TASKS")
    for name in ("job_events", "task_events", "machine_events", "task_usage"):
        if getattr(source, name):
            _check_files(check, getattr(source, name), f"{field}.{name}",
                         source.allow_missing_parts)
    check.require(bool(source.pool.strip()), f"{field}.pool", "is empty: give a pool name")
    check.positive(source, "num_shards", field)
