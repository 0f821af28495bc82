"""Building and running a fleetcast pipeline from a RunConfig.

    tables = pipeline | ReadCanonicalTables(config, work_dir)   # machines, instances, usage
    tables["instances"] |= AddHistory(...)                       # with customer_history
    outputs = {**tables, **stage outputs ...}                    # overcommit, lifetime, ...
    outputs | WriteTables(...)                                   # Parquet or BigQuery

Every stage reads the canonical tables, so a run configured with only a source writes the
canonical tables, the dead letters and the per-source counts; later stages add their tables.
"""

import dataclasses
import logging
from typing import Dict, Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pipeline import PipelineVisitor
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from apache_beam.runners.runner import PipelineState
from google.protobuf import text_format

from pipelines import config as run_config
from pipelines import dask_versions, fleetcast_version, portable, progress, schemas, worker_guard
from pipelines.history import AddHistory
from pipelines.io import bigquery, coders, publish, sinks
from pipelines.io.dead_letters import SummarizeCounts, SummarizeExclusions, all_rejected
from pipelines.io.failures import RunFailed
from pipelines.sources.registry import SOURCES
from pipelines.stages import registry as stage_registry

_LOG = logging.getLogger("fleetcast.run")


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """Where a run's tables go: a Parquet root directory or a BigQuery dataset."""

    parquet_dir: Optional[str] = None
    bigquery_dataset: Optional[str] = None
    num_shards: int = 4

    @classmethod
    def of(cls, config, output_dir: str) -> "OutputSpec":
        sink = config.output.WhichOneof("sink")
        if sink == "bigquery_dataset":
            return cls(bigquery_dataset=config.output.bigquery_dataset)
        return cls(parquet_dir=config.output.parquet_dir if sink == "parquet_dir" else output_dir,
                   num_shards=config.output.num_shards)

    def sink(self) -> sinks.WriteTables:
        """The sink of a run's {table name: PCollection} outputs."""
        if self.parquet_dir is not None:
            return sinks.WriteTables(parquet_dir=self.parquet_dir, num_shards=self.num_shards)
        return sinks.WriteTables(bigquery_dataset=self.bigquery_dataset)


class ReadCanonicalTables(beam.PTransform):
    """RunConfig → {machines, instances, usage, dead_letters, source_counts} PCollections of
    Arrow tables, from the configured source or from loaded intermediate tables (and the
    source's exclusions, ((source, table, reason), rows) pairs, when it has any).

    Without a source, a table the run does not load is an empty PCollection (see
    `absent_tables`).
    """

    def __init__(self, config, work_dir: str):
        super().__init__()
        self._config = config
        self._work_dir = work_dir

    def _source(self):
        which = self._config.WhichOneof("source")
        if which is None:
            return None
        return SOURCES[which].read(getattr(self._config, which), self._work_dir)

    def expand(self, pbegin):
        source = self._source()
        read = pbegin | "ReadSource" >> source if source else {}
        empty = []

        def table(name):
            if name in read:
                return read[name]
            # One empty PCollection stands for every table the run neither reads nor loads.
            if not empty:
                empty.append(pbegin | "NoTable" >> beam.Create([]))
            return empty[0]

        tables = {}
        for name in schemas.CANONICAL:
            load = getattr(self._config, name)
            tables[name] = (pbegin | f"Load{name}" >> sinks.ReadTable(
                load.input, schemas.CANONICAL[name], loaded_columns(self._config, name))
                            if load.HasField("input") else table(name))
        tables["dead_letters"] = table("dead_letters")
        tables["source_counts"] = (read["counts"] | "SourceCounts" >> SummarizeCounts(
            read.get("parts")) if source else table("counts"))
        if "exclusions" in read:  # what the source left out: ((source, table, reason), rows)
            tables["exclusions"] = read["exclusions"]
        return tables


def stages(config, work_dir: str):
    """(label, PTransform) for every configured analysis stage, in run order
    (pipelines/stages/registry.py)."""
    return [(stage.label, stage.build(config, work_dir))
            for _, stage in stage_registry.configured(config)]


def add_stage_outputs(outputs: Dict[str, beam.PCollection], new: Dict[str, beam.PCollection],
                      label: str):
    """Merges a stage's tables into `outputs` (dead letters and exclusions are flattened
    together)."""
    for name, tables in new.items():
        if name in ("dead_letters", "exclusions"):
            outputs[name] = ((outputs[name], tables)
                             | f"{label}Flatten_{name}" >> beam.Flatten())
        elif name in outputs:
            raise ValueError(f"stage {label} writes table {name!r} a second time")
        else:
            outputs[name] = tables


def loaded_tables(config):
    """Names of the canonical tables the run loads (LoadOrWrite input) instead of building."""
    return {name for name in schemas.CANONICAL if getattr(config, name).HasField("input")}


def loaded_columns(config, name: str):
    """The columns of a loaded canonical table the run reads (None: all of them).

    Only the overcommit stage reads usage, the widest table (two distribution lists per
    window), so a loaded usage table that no copy writes back is read with the columns that
    stage uses; its dead letters then carry those columns of a rejected window.
    """
    if name != "usage" or getattr(config, name).HasField("output"):
        return None
    if not config.HasField("overcommit"):
        return None
    from pipelines.stages.overcommit.stage import OvercommitStage
    return OvercommitStage.usage_columns(config.overcommit)


def absent_tables(config):
    """Names of the tables a run without a source has no rows for: the canonical tables it
    does not load, and the per-source counts."""
    if config.WhichOneof("source"):
        return set()
    return {name for name in schemas.CANONICAL if name not in loaded_tables(config)} | {
        "source_counts"}


def build(pipeline: beam.Pipeline, config, output: OutputSpec,
          work_dir: str) -> Dict[str, beam.PCollection]:
    """Adds the whole run to `pipeline`; returns the PCollections it writes, by table name.

    Loaded canonical tables feed the stages but are not written again; tables a run without
    a source has no rows for (`absent_tables`) are not written either.
    """
    coders.register()
    outputs = dict(pipeline | "Canonical" >> ReadCanonicalTables(config, work_dir))
    if "exclusions" not in outputs:
        outputs["exclusions"] = pipeline | "NoExclusions" >> beam.Create([])
    if config.HasField("customer_history"):
        outputs["instances"] = outputs["instances"] | "CustomerHistory" >> AddHistory(
            config.customer_history)
    loaded = loaded_tables(config)
    for name in schemas.CANONICAL:
        load_or_write = getattr(config, name)
        if load_or_write.HasField("output"):
            outputs[name] | f"Copy{name}" >> sinks.WriteTable.to_location(
                load_or_write.output, schemas.CANONICAL[name])
    for label, stage in stages(config, work_dir):
        add_stage_outputs(outputs, dict(outputs) | label >> stage, label)
    outputs["exclusions"] = outputs["exclusions"] | "Exclusions" >> SummarizeExclusions()
    # A loaded table is stored at its input location already; writing it again would be a
    # pure copy.
    absent = absent_tables(config)
    written_tables = {name: tables for name, tables in outputs.items()
                      if name not in loaded | absent}
    # Tables of an earlier run that this one does not write are removed when it publishes
    # (pipelines/io/publish.py), never before it succeeds.
    _ = written_tables | "WriteTables" >> output.sink()
    # One final step downstream of every Parquet sink in the pipeline (stages' extra copies
    # included): Beam's DaskRunner computes only the graph of the last transform, so without
    # it a multi-table run would write a single table.
    written = _parquet_sink_outputs(pipeline)
    if written:
        _ = tuple(written) | "AllFilesWritten" >> beam.Flatten()
    return written_tables


class _ParquetSinkOutputs(PipelineVisitor):
    def __init__(self):
        self.outputs = []

    def enter_composite_transform(self, node):
        if isinstance(node.transform, sinks.WriteParquetShards):
            self.outputs.extend(node.outputs.values())


def _parquet_sink_outputs(pipeline):
    """The (path, rows) outputs of every WriteParquetShards applied to `pipeline`."""
    visitor = _ParquetSinkOutputs()
    pipeline.visit(visitor)
    return visitor.outputs


def local_runner(options: PipelineOptions):
    """For the DirectRunner (Beam's default), its batch engine, the FnApiRunner, set up as
    the DirectRunner sets it up; for Beam's DaskRunner, fleetcast's (pipelines/dask_runner.py);
    None (the options' runner) for every other runner.

    Beam's DirectRunner first tries the Prism runner, which downloads its binary from GitHub
    at run time and, where that works, runs without direct_num_workers and
    direct_running_mode; fleetcast downloads nothing and runs the same engine everywhere.
    Beam's DaskRunner recomputes a side input's whole upstream in every task that reads it.
    """
    standard = options.view_as(StandardOptions)
    if standard.runner == "apache_beam.runners.dask.dask_runner.DaskRunner":
        # Before the import: another Beam release may lack the private names it uses.
        dask_versions.check_versions()
        from pipelines import dask_runner
        return dask_runner.DaskRunner()
    if standard.runner not in (None, "DirectRunner", "SwitchingDirectRunner"):
        return None
    all_options = options.get_all_options()
    # Worker processes (multi_processing) import worker_quiet, which keeps Beam's
    # tracebacks off the user's terminal.
    all_options["beam_plugins"] = (all_options.get("beam_plugins") or []) + [
        "pipelines.worker_quiet"]
    encoded_options = JobServiceHandle.encode_pipeline_options(all_options)
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded_options)))


def run(config, output_dir: str, beam_args=(), counters: Optional[dict] = None):
    """Runs `config` to completion with the given Beam pipeline options.

    Returns (OutputSpec, names of the tables written). `counters`, when given, receives the
    final values of the run's Beam counters (pipelines.progress.counter_values).
    """
    output = OutputSpec.of(config, output_dir)
    options = PipelineOptions(list(beam_args))
    portable.check_before_submitting(options)
    # A cluster's workers run in directories of their own: the pipeline is built with every
    # local path absolute (the manifest keeps the config as written).
    config_text = text_format.MessageToString(config)
    config, output_dir = run_config.with_absolute_paths(config), run_config.absolute_path(
        output_dir)
    built_output = OutputSpec.of(config, output_dir)
    # Results are staged and published only when the run succeeds; opening the staging area
    # checks that the output root is writable and locks it (one run at a time) before any
    # compute. A BigQuery run stages its tables' shards under --output_dir and loads them
    # into BigQuery when it publishes (pipelines/io/bigquery.py).
    area = publish.StagingArea.open(built_output.parquet_dir or output_dir)
    portable.name_job(options, area.run_id)
    publisher = bigquery.Publisher(area.extra_dir("bigquery"), area.run_id)
    counters = {} if counters is None else counters
    try:
        started_at = publish.now_utc()
        outputs = _run_pipeline(config, built_output, output_dir, options, area, publisher,
                                counters)
        publish_run(area, publisher, config, built_output, outputs, started_at, config_text,
                    counters)
    finally:
        area.release()
    return output, outputs


def _run_pipeline(config, output: OutputSpec, output_dir: str, options: PipelineOptions,
                  area: publish.StagingArea, publisher: bigquery.Publisher,
                  counters: Optional[dict]):
    """Builds and runs the pipeline, its files staged in `area` (BigQuery tables' shards
    with `publisher`); returns the names of the tables it wrote. A run that fails or is
    interrupted discards what it staged."""
    progress.report("writing to %s", output.parquet_dir or output.bigquery_dataset)
    pipeline = beam.Pipeline(runner=local_runner(options), options=options)
    try:
        with publish.staging(area), bigquery.publishing(publisher):
            outputs = build(pipeline, config, output, output_dir)
        publisher.check_writable()
        with worker_guard.watched_by_workers():
            _run_to_completion(pipeline, options, counters)
    except BaseException as e:
        _discard_after_failure(area)
        reason = portable.failure_reason(e) if isinstance(e, Exception) else None
        if reason is not None:
            raise RunFailed(reason) from None
        raise
    return sorted(outputs)


def _run_to_completion(pipeline: beam.Pipeline, options: PipelineOptions,
                       counters: Optional[dict]):
    """Runs `pipeline` until it ends. One that fails or is interrupted (SIGTERM, SIGINT)
    cancels what still runs of it: a Dask computation's tasks or a cluster's job would go on
    writing into the staging area that the run discards."""
    result = pipeline.run()
    # The DaskRunner opens a client of its own and leaves it reconnecting forever.
    client = getattr(result, "client", None)
    cancellable = client is not None or portable.is_portable(options)

    def cancel():
        if cancellable:
            _cancel(result, options)
    try:
        with worker_guard.before_signal_ends_run(cancel):
            result.wait_until_finish()
        if counters is not None:
            counters.update(progress.counter_values(result))
    except BaseException:
        cancel()
        raise
    finally:
        if client is not None:
            client.close()


def _cancel(result, options: PipelineOptions):
    """Cancels a run's job unless it has ended, on its cluster too (a cancel that fails is
    not the run's error)."""
    try:
        portable.cancel_cluster_job(options)
        if not PipelineState.is_terminal(result.state):
            result.cancel()
    except Exception as e:  # pylint: disable=broad-except
        _LOG.warning("could not cancel the run's job: %s", e)


def _discard_after_failure(area: publish.StagingArea):
    """Discards a failed run's staged files without hiding why it failed: a task of a
    cancelled Dask computation may still be writing there; the next run into the same root
    deletes what is left."""
    try:
        area.discard()
    except OSError as e:
        _LOG.warning("could not discard the failed run's staging area %s (%s); the next run "
                     "into %s deletes it", area.work_dir, e, area.root)


def _staged_table(area: publish.StagingArea, publisher: bigquery.Publisher,
                  output: OutputSpec, name: str, columns=None):
    """The rows this run staged for its output table `name` (before it publishes)."""
    if output.parquet_dir is not None:
        return area.staged_table(FileSystems.join(area.root, name), columns=columns)
    return publisher.staged_table(f"{output.bigquery_dataset}.{name}", columns=columns)


def publish_run(area: publish.StagingArea, publisher: bigquery.Publisher, config,
                output: OutputSpec, tables, started_at: str, config_text: Optional[str] = None,
                counters: Optional[dict] = None):
    """Publishes a finished run's staged tables (BigQuery ones first) with its manifest,
    unless a source table had every row rejected: then the run fails and its tables are
    kept aside (or, with `output.allow_all_rows_rejected`, it is published with a
    warning), or a table's files hold fewer rows than `counters` say its sink wrote. An
    overcommit filter that kept no usage window is published with a warning.
    `config_text` is the config as written (for the manifest)."""
    carried = _carried_tables(config, area)
    if output.parquet_dir is not None:
        _check_rows_reached_the_root(area, area.manifest(carried_tables=carried),
                                     counters or {}, tables)
    if "source_counts" in tables:
        problem = all_rejected(
            _staged_table(area, publisher, output, "source_counts"),
            _staged_table(area, publisher, output, "dead_letters",
                          columns=["source", "table", "reason"]))
        if problem and config.output.allow_all_rows_rejected:
            _LOG.warning("%s; published anyway (output.allow_all_rows_rejected)", problem)
        elif problem:
            kept = area.keep_failed(problem)
            where = output.parquet_dir or f"BigQuery dataset {output.bigquery_dataset}"
            raise RunFailed(f"{problem}; nothing was published ({where} keeps its previous "
                            f"results); this run's tables, dead letters included, are in {kept}")
    if "overcommit_counts" in tables:
        from pipelines.stages.overcommit.steps import filter_kept_nothing
        warning = filter_kept_nothing(
            _staged_table(area, publisher, output, "overcommit_counts"),
            config.overcommit.filter)
        if warning:
            _LOG.warning("%s", warning)
    run_fields = dict(name=config.name or None,
                      config=config_text or text_format.MessageToString(config),
                      fleetcast_version=fleetcast_version(), started_at=started_at)
    try:
        if output.bigquery_dataset is not None:
            bigquery.publish_dataset(publisher, output.bigquery_dataset, dict(
                run_fields, run_id=area.run_id, finished_at=publish.now_utc()))
        else:
            publisher.publish()  # LoadOrWrite copies into BigQuery tables
    except BaseException:
        area.discard()
        raise
    if output.parquet_dir is None and not area.staged_files():
        # A BigQuery run that wrote no local file (models, a synthetic trace) leaves
        # --output_dir, and an earlier run's results there, alone.
        area.discard()
        return
    area.publish(area.manifest(carried_tables=carried, finished_at=publish.now_utc(),
                               **run_fields))


def _carried_tables(config, area: publish.StagingArea):
    """The tables loaded from the output root itself: they stay there, in the new manifest
    too."""
    return [name for name in loaded_tables(config)
            if getattr(config, name).input.parquet.rstrip("/")
            == FileSystems.join(area.root, name)]


def _check_rows_reached_the_root(area: publish.StagingArea, manifest: dict, counters: dict,
                                 tables):
    """RunFailed, nothing published, when one of `tables`' staged files hold fewer rows than
    the workers counted writing (`<table>.rows_written`): workers on other machines wrote
    them to a folder of their own, not to one this process shares."""
    for name in tables:
        written = counters.get(f"{name}.rows_written")
        staged = manifest["tables"].get(name, {}).get("rows", 0)
        if written is not None and staged < written:
            area.discard()
            raise RunFailed(
                f"{name}: the workers wrote {written:,} rows and {staged:,} of them "
                f"are under {area.root}: the output directory must be a file system that "
                "this process and every worker share (NFS, gs://, s3://, hdfs://: "
                "docs/runners.md#where-outputs-go); nothing was published")
