"""The commands of `fleetcast` (pipelines/cli.py parses the command line, then calls
`run_command`): run a config, validate configs, query, report, estimate, reproduce, synth and
serve a worker pool, each failure reported in one line with its exit code.

Beam, and the modules that import it, load inside the functions that run a pipeline or read
its results, so that `validate` answers without them.
"""

import argparse
import collections
import difflib
import importlib
import logging
import os
import sys
import tempfile
import time
import traceback

import synthetic
from configs.checks import max_worker_processes
from pipelines import config as run_config
from pipelines import warning_groups, worker_guard
from pipelines.cli import EXIT_CONFIG_ERROR, EXIT_INTERRUPTED, EXIT_RUN_FAILED
from pipelines.io import failures
from pipelines.stages.registry import configured as configured_stages


class UsageError(ValueError):
    """A command line that cannot run (exit 2, like a config error)."""


def _option_strings(parser) -> list:
    # argparse has no public list of a parser's options; Beam reads _actions the same way.
    return [s for action in parser._actions for s in action.option_strings]


def _beam_parser():
    """The parser Beam reads pipeline options with: every registered PipelineOptions class."""
    from apache_beam.options.pipeline_options import PipelineOptions
    captured = []
    PipelineOptions([]).get_all_options(add_extra_args_fn=captured.append)
    parser = captured[0]
    parser.exit_on_error = False  # a bad value raises instead of printing Beam's long usage
    return parser


def _unrecognised_beam_args(beam_args):
    """(Beam's parser, the args of `beam_args` that Beam would discard as unparseable)."""
    parser = _beam_parser()
    known, unknown = parser.parse_known_args(beam_args)
    runner = known.runner or ""
    if "." in runner:
        # A runner named by its path (the DaskRunner) registers its options on import.
        _import_runner(runner)
        parser = _beam_parser()
        _, unknown = parser.parse_known_args(beam_args)
    elif runner:
        _check_runner_name(runner)
    return parser, unknown


# The runners docs/runners.md describes (Beam knows others by name too).
RUNNERS = ("DirectRunner", "FlinkRunner", "SparkRunner", "DataflowRunner",
           "apache_beam.runners.dask.dask_runner.DaskRunner")
RUNNERS_HINT = f"the runners: {', '.join(RUNNERS)} (docs/runners.md)"


def _check_runner_name(runner: str):
    """UsageError for a --runner name that Beam does not know (it accepts a known class name
    in any case, with or without "Runner")."""
    from apache_beam.options.pipeline_options import StandardOptions
    known = {path.rsplit(".", 1)[-1].lower() for path in StandardOptions.ALL_KNOWN_RUNNERS}
    if runner.lower() not in known and f"{runner.lower()}runner" not in known:
        raise UsageError(f"--runner={runner}: unknown runner; {RUNNERS_HINT}")


def _import_runner(runner: str):
    """Imports the module of a --runner named by its path; UsageError when it cannot be
    imported or has no such class."""
    module_name, name = runner.rsplit(".", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"--runner={runner}: cannot import the runner: {e}; "
                         f"{RUNNERS_HINT}") from None
    if not hasattr(module, name):
        raise UsageError(f"--runner={runner}: module {module_name} has no {name}; "
                         f"{RUNNERS_HINT}")


def check_beam_args(beam_args, own_options=("--output_dir",)):
    """Raises UsageError naming every arg that neither fleetcast nor Beam recognises."""
    try:
        beam_parser, unknown = _unrecognised_beam_args(list(beam_args))
    except argparse.ArgumentError as e:
        raise UsageError(str(e)) from None
    candidates = list(own_options) + _option_strings(beam_parser)
    problems, after_flag = [], False
    for arg in unknown:
        if arg.startswith("-"):
            name = arg.split("=", 1)[0]
            close = difflib.get_close_matches(name, candidates, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(f"{name}: unknown option{hint}")
            after_flag = "=" not in arg
        elif not after_flag:  # else the value of the unknown flag before it
            problems.append(f"{arg}: unexpected argument")
        else:
            after_flag = False
    if problems:
        raise UsageError("options that neither fleetcast nor Beam knows (fleetcast run --help):"
                         + "".join(f"\n  {problem}" for problem in problems))
    _check_direct_workers(beam_args)


def _check_direct_workers(beam_args):
    """UsageError for a --direct_num_workers below 0 or above the machine's bound (each
    worker is a process of its own with the pipeline's state)."""
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
    workers = PipelineOptions(list(beam_args)).view_as(DirectOptions).direct_num_workers
    limit = max_worker_processes("a Python process with its share of the pipeline")
    if workers < 0 or workers > limit.maximum:
        raise UsageError(f"--direct_num_workers={workers}: "
                         + ("must be at least 0 (0: one per core)" if workers < 0
                            else limit.problem(workers)))


def _read_table(root: str, manifest: dict, name: str):
    """Table `name` of the run published in `root` (its manifest's files) as a DataFrame."""
    import pandas as pd  # only the summary needs pandas
    import pyarrow.parquet as pq
    from apache_beam.io.filesystems import FileSystems

    from pipelines.io import manifests
    if name not in manifest["tables"]:
        return pd.DataFrame()
    frames = []
    for path in manifests.table_files(root, manifest, name):
        with FileSystems.open(path) as handle:
            # In this thread: pq.read_table's scanner threads may drop the Python file
            # object during interpreter shutdown, which aborts the process.
            frames.append(pq.ParquetFile(handle).read(use_threads=False).to_pandas())
    return pd.concat(frames, ignore_index=True)


def print_summary(output, tables, out=None):
    """Where the results are (`output`, the run's pipelines.run.OutputSpec), rows per table,
    per-source counts, dead-letter reasons and what the stages left out by design."""
    from apache_beam.io.filesystems import FileSystems

    from pipelines.io import manifests
    out = out or sys.stdout
    if output.parquet_dir is None:
        print(f"Results: BigQuery dataset {output.bigquery_dataset}, tables: "
              f"{', '.join(sorted(tables))}\n"
              f"  fleetcast query bq://{output.bigquery_dataset.replace(':', '.')} "
              f"\"SELECT ...\"", file=out)
        return
    root = output.parquet_dir
    manifest = manifests.require(root)
    print(f"Results: {root}", file=out)
    for name in tables:
        rows = manifest["tables"][name]["rows"] if name in manifest["tables"] else 0
        print(f"  {name:<28} {rows:>10,} rows   {FileSystems.join(root, name)}", file=out)
    counts = _read_table(root, manifest, "source_counts")
    if len(counts):
        print("Rows per source table (read / kept / rejected):", file=out)
        for row in counts.sort_values(["source", "table"]).itertuples():
            print(f"  {row.source}.{row.table:<22} {row.read:>10,} {row.kept:>10,} "
                  f"{row.rejected:>8,}", file=out)
    dead = _read_table(root, manifest, "dead_letters")
    print(f"Dead letters (malformed rows): {len(dead):,}", file=out)
    if len(dead):
        reasons = collections.Counter(
            f"{r.source}.{r.table}: {r.reason}" for r in dead.itertuples())
        for reason, n in reasons.most_common(10):
            print(f"  {n:>8,}  {reason}", file=out)
    excluded = _read_table(root, manifest, "exclusions")
    if len(excluded):
        print(f"Left out by design (exclusions, not errors): {excluded['rows'].sum():,}",
              file=out)
        for row in excluded.sort_values("rows", ascending=False).head(10).itertuples():
            print(f"  {row.rows:>8,}  {row.stage}.{row.table}: {row.reason}", file=out)


def print_counters(counters, out=None):
    """The final values of the run's Beam counters (pipelines/progress.py), by name."""
    out = out or sys.stdout
    if not counters:
        return
    print("Counters (Beam Metrics, namespace fleetcast):", file=out)
    width = max(map(len, counters))
    for name, value in counters.items():
        print(f"  {name:<{width}} {value:>12,}", file=out)


def configure_logging(verbose: bool = False, quiet: bool = False):
    """Beam's lines at WARNING (INFO with `verbose`; their tracebacks only then), fleetcast's
    progress lines at INFO unless `quiet`; on stderr, so that stdout keeps the results."""
    from pipelines import portable, progress
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S",
                        force=True)
    logging.getLogger("fleetcast").setLevel(logging.WARNING if quiet else logging.INFO)
    if not verbose:
        for handler in logging.getLogger().handlers:
            handler.addFilter(progress.NoBeamTracebacks())
        portable.quiet_engine_noise()
        # the progress lines of multi_processing workers too, unless quiet
        worker_lines = logging.getLogger(progress.WORKER_LOGGER)
        worker_lines.setLevel(logging.WARNING if quiet else logging.INFO)
        worker_lines.addFilter(progress.WorkerProgressLines())


def _run(args, beam_args):
    from apache_beam.io.filesystems import FileSystems

    from pipelines import run as run_pipeline
    configure_logging(args.verbose, args.quiet)
    if args.verbose:  # worker processes print their tracebacks too (pipelines/worker_quiet.py)
        os.environ["FLEETCAST_WORKER_TRACEBACKS"] = "1"
    config = run_config.load_config(args.config)
    print_warnings(args.config, config)
    name = run_config.config_name(config, args.config)
    output_dir = args.output_dir or FileSystems.join("results", name)
    started = time.time()
    counters = {}
    with worker_guard.ended_by_signals():
        output, tables = run_pipeline.run(config, output_dir, beam_args, counters=counters)
    print(f"fleetcast run {name!r} finished in {time.time() - started:.1f} s")
    print_summary(output, tables)
    print_counters(counters)
    return 0


def _validate(path, check_inputs: bool = False, grouped=None):
    """Validates the config at `path` and prints its summary; its warnings go to stderr, or,
    with a list `grouped`, onto it as a warning_groups.ConfigWarnings."""
    config, missing = run_config.read_config(path)
    if missing and check_inputs:
        raise run_config.ConfigError(path, missing)
    if grouped is not None:
        grouped.append(warning_groups.ConfigWarnings(
            path, config, missing, run_config.warnings_by_field(config)))
    else:
        for problem in missing:
            print(f"fleetcast: warning: {path}: {problem} (the config is valid; `fleetcast "
                  "run` fails until the input is there)", file=sys.stderr)
        print_warnings(path, config)
    name = run_config.config_name(config, path)
    stages = ["source: " + (config.WhichOneof("source") or "loaded tables")] + [
        stage.summary(getattr(config, field)) for field, stage in configured_stages(config)]
    print(f"{path}: valid config {name!r} ({'; '.join(stages)})")


def print_warnings(path: str, config):
    """`fleetcast: warning: CONFIG: ...` on stderr for each known-bad combination."""
    for line in run_config.warnings(config):
        print(f"fleetcast: warning: {path}: {line}", file=sys.stderr)


def one_line(message: str) -> str:
    """`message` on one line: its non-blank lines joined by "; " (lines of only carets, which
    point into the line above, dropped)."""
    lines = [line.strip() for line in message.splitlines()]
    return "; ".join(line for line in lines if line.strip("^ "))


def print_config_error(error: run_config.ConfigError):
    """One line per problem, `fleetcast: CONFIG: FIELD: REASON`, on stderr."""
    for problem in error.problems:
        print(f"fleetcast: {error.source}: {one_line(str(problem))}", file=sys.stderr)


def _validate_all(paths, check_inputs: bool = False):
    """Validates every config; reports each invalid one; 2 if any is invalid."""
    invalid, grouped = 0, [] if len(paths) > 1 else None
    for path in paths:
        try:
            _validate(path, check_inputs, grouped)
        except run_config.ConfigError as e:
            print_config_error(e)
            invalid += 1
    if grouped:
        warning_groups.print_grouped(grouped, len(paths), sys.stderr)
    if invalid and len(paths) > 1:
        print(f"fleetcast: {invalid} of {len(paths)} configs are invalid", file=sys.stderr)
    return EXIT_CONFIG_ERROR if invalid else 0


def _synth(args):
    importlib.import_module("synthetic.ownership")  # --out's rules: only this command's
    started = time.time()
    try:
        summary = synthetic.ownership.synth(args.out, dict(
            machines=args.machines, days=args.days, seed=args.seed,
            arrival_rate_per_machine_hour=args.arrival_rate, request_scale=args.request_scale,
            file_format=args.format, layout=args.layout, shards=args.shards,
            processes=args.processes))
    except ValueError as e:  # out of bounds, or refused by --out's owner (RunFailed)
        raise UsageError(f"synth: {e}") from None
    except OSError as e:  # a full disk, ...: the next synth into --out cleans up
        print(f"fleetcast: synth: failed: {one_line(str(e))}", file=sys.stderr)
        return EXIT_RUN_FAILED
    print(f"synthetic trace written to {args.out} in {time.time() - started:.1f} s")
    for table, rows in summary.get("rows", {}).items():
        print(f"  {table:<20} {rows:>10,} rows")
    return 0


def _query(args) -> int:
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    # DuckDB only for this command
    from pipelines.query import BATCH_ROWS, QueryError, open_result, text_table
    as_text = args.format == "table"
    batch_rows = min(args.max_rows + 1, BATCH_ROWS) if as_text else BATCH_ROWS
    try:
        with open_result(args.results_dir, args.sql, batch_rows) as result:
            if as_text:
                print(text_table(result, args.max_rows))
                return 0
            header = _flat(result.schema.empty_table()).schema
            with pa_csv.CSVWriter(sys.stdout.buffer, header) as csv:  # every row, as computed
                for batch in result:
                    csv.write_table(_flat(pa.Table.from_batches([batch])))
    except QueryError as e:
        raise UsageError(str(e)) from None
    return 0


def _flat(table):
    """`table` with each nested column (a distribution list) as JSON text, which CSV holds."""
    import json

    import pyarrow as pa
    for i, field in enumerate(table.schema):
        if pa.types.is_nested(field.type):
            text = pa.array([None if v is None else json.dumps(v)
                             for v in table.column(i).to_pylist()], pa.string())
            table = table.set_column(i, field.name, text)
    return table


def _reproduce(args) -> int:
    from pipelines.io.owned_files import Refused
    from pipelines.reproduce.page import counts_text, read_marker
    from pipelines.reproduce.registry import reproduce  # the papers' modules only here
    configure_logging(quiet=args.quiet)
    pages_dir = os.path.join(args.docs_dir, "reproduce")
    try:  # before any run: an hour of runs must not end on a page it cannot write
        os.makedirs(pages_dir, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{pages_dir}: cannot write the pages: {e.strerror or e}") from None
    started = time.time()
    with worker_guard.ended_by_signals():
        try:
            pages = reproduce(args.paper, args.quick, args.output_dir, args.docs_dir)
        except Refused as e:  # a file of the user's in the way, or another command's lock
            raise UsageError(str(e)) from None
    for page in pages:
        print(f"{page.stem}: {counts_text(read_marker(page)['counts'])}: {page}")
    print(f"fleetcast reproduce {args.paper}{' --quick' if args.quick else ''}: {len(pages)} "
          f"pages in {time.time() - started:.0f} s; index {pages[0].parent / 'index.md'}")
    return 0


def _worker_pool(args) -> int:
    from pipelines.worker_pool import serve
    if args.spare_workers < 0:
        raise UsageError(f"worker-pool: --spare_workers={args.spare_workers}: must be 0 or more")
    configure_logging()
    try:
        serve(args.port, args.ready_timeout_s, args.spare_workers)
    except OSError as e:  # the port is taken or not ours
        raise UsageError(f"worker-pool: {e}") from None
    return 0


def _estimate(args) -> int:
    from pipelines.estimate import estimate, format_estimates
    config = run_config.load_config(args.config)
    try:
        estimates = estimate(config, args.project)
    except ValueError as e:
        raise UsageError(f"{args.config}: {e}") from None
    print(format_estimates(estimates, args.usd_per_tib))
    return 0


def _report(args) -> int:
    from pipelines.query import QueryError
    from pipelines.report import write_report  # matplotlib only for this command
    try:
        page = write_report(args.results_dir, args.out)
    except (QueryError, failures.RunFailed) as e:
        raise UsageError(str(e)) from None
    except OSError as e:  # --out not writable
        raise UsageError(f"{e.filename or args.out}: cannot write the report: "
                         f"{e.strerror or e}") from None
    print(f"report: {page} (figures as PNG and SVG in {page.parent / 'figures'})")
    return 0


def run_command(args, extra, run_parser) -> int:
    """Runs the parsed command `args` (`extra`: the Beam options of `run`); its exit code."""
    try:
        if args.command == "run":
            check_beam_args(extra, own_options=_option_strings(run_parser))
            return _run(args, extra)
        if args.command == "validate":
            return _validate_all(args.config, args.check_inputs)
        if args.command == "query":
            return _query(args)
        if args.command == "report":
            return _report(args)
        if args.command == "estimate":
            return _estimate(args)
        if args.command == "reproduce":
            return _reproduce(args)
        if args.command == "worker-pool":
            return _worker_pool(args)
        return _synth(args)
    except run_config.ConfigError as e:
        print_config_error(e)
        return EXIT_CONFIG_ERROR
    except UsageError as e:
        print(f"fleetcast: {one_line(str(e))}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except KeyboardInterrupt:
        print("fleetcast: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # stdout closed early (`fleetcast query ... | head`): no message
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_RUN_FAILED
    except (Exception, SystemExit) as e:  # pylint: disable=broad-except
        # A run that failed on its input or its results: say why, naming the file, without
        # the runner's traceback; anything else is a bug (fleetcast's or a plug-in's).
        reason = failures.reason_of(e) if isinstance(e, Exception) else None
        if reason is None:
            return _internal_error(e)
        print(f"fleetcast: run failed: {one_line(reason)}", file=sys.stderr)
        return EXIT_RUN_FAILED


def _internal_error(error: BaseException) -> int:
    """Reports an error fleetcast did not foresee in one line, its traceback saved to a file
    that the line names (FLEETCAST_TRACEBACK=1 raises it instead)."""
    if os.environ.get("FLEETCAST_TRACEBACK"):
        raise error
    handle, path = tempfile.mkstemp(prefix="fleetcast-traceback-", suffix=".txt")
    with os.fdopen(handle, "w") as file:
        traceback.print_exception(error, file=file)
    if isinstance(error, SystemExit):
        what = f"something called sys.exit({error.code!r}) while the command ran"
    else:
        lines = [line for line in str(error).splitlines() if line.strip()]
        what = f"{type(error).__name__}: {lines[-1][:300] if lines else ''}"
    print(f"fleetcast: internal error (a bug in fleetcast or in a plug-in): {what}; the "
          f"traceback is in {path}", file=sys.stderr)
    return EXIT_RUN_FAILED
