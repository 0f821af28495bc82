"""The built-in synthetic trace as a source: generated in Google v3 format under the run's
output directory, then read like the real trace (the same files a user would export)."""

from apache_beam.io.filesystems import FileSystems

from configs import fleetcast_pb2
from configs.checks import Limit, number, size
from pipelines.io import publish
from pipelines.sources.google_v3 import ReadGoogleV3

SYNTHETIC_TRACE_DIR = "synthetic_trace"
GOOGLE_V3_TABLES = ("instance_events", "instance_usage", "machine_events",
                    "collection_events")


def synthetic_as_google_v3(options, work_dir: str) -> fleetcast_pb2.GoogleV3Source:
    """Generates the trace a SyntheticSource message describes under work_dir and returns
    the source that reads it."""
    import synthetic  # the generator is only needed for this source

    # Within a run, generated into its staging area and published with its tables.
    trace_dir = publish.staged_dir(FileSystems.join(work_dir, SYNTHETIC_TRACE_DIR))
    kwargs = dict(machines=options.machines, days=options.days, seed=options.seed)
    if options.HasField("arrival_rate_per_machine_hour"):
        kwargs["arrival_rate_per_machine_hour"] = options.arrival_rate_per_machine_hour
    synthetic.generate(trace_dir, **kwargs)
    source = fleetcast_pb2.GoogleV3Source()
    for table in GOOGLE_V3_TABLES:
        getattr(source, table).path = FileSystems.join(trace_dir, table, "*")
    return source


def read_synthetic(options, work_dir: str) -> ReadGoogleV3:
    """The PTransform reading the generated trace (generated now, at pipeline build)."""
    return ReadGoogleV3(synthetic_as_google_v3(options, work_dir))


# 8 x a Google 2019 cell (~12,000 machines).
MAX_MACHINES = Limit(100_000, "machines", "8 x a Google 2019 cell")
MAX_DAYS = Limit(3_650, "days (10 years)", "longer than any trace")
# The generator holds the whole trace in memory, ~100 kB per machine-day at the default
# arrival rate (200 machines x 4 days: 74 MB); a Google cell-day (~12,000 machines) is the
# design's scale target.
MAX_MACHINE_DAYS = 12_000
BYTES_PER_MACHINE_DAY = 100_000


def validate_config(check, options, field: str = "synthetic"):
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
