"""The built-in synthetic trace as a source: generated in Google v3 format under the run's
output directory, then read like the real trace (the same files a user would export)."""

from apache_beam.io.filesystems import FileSystems

from configs import fleetcast_pb2
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
