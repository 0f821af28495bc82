"""The `fleetcast` command line: its commands, their options and help texts
(`build_parser`), light enough to answer `--help` before Beam loads; pipelines/commands.py
runs them."""

import argparse
import inspect
import math
import os

import synthetic
from pipelines import fleetcast_version

DESCRIPTION = """\
Apache Beam batch analysis of cluster traces (overcommit, lifetimes, placement, shaping):
run a config, check configs, estimate what a config's BigQuery reads scan, query or report
on a run's results, write a synthetic trace, or check a paper's claims."""

EPILOG = """\
synopsis:
  fleetcast run CONFIG [--output_dir DIR] [any Beam pipeline option]
  fleetcast validate CONFIG [CONFIG ...]
  fleetcast estimate CONFIG [--project PROJECT]
  fleetcast query RESULTS_DIR "SQL" [--format table|csv]
  fleetcast report RESULTS_DIR [--out DIR]
  fleetcast synth --out DIR [--machines N --days D --seed S --format F --processes P ...]
  fleetcast reproduce PAPER [--quick] [--output_dir DIR] [--docs_dir DIR]
  fleetcast worker-pool [--port PORT]

`run` passes every Beam pipeline option (--runner=DataflowRunner, --direct_num_workers=2,
...) through unchanged. `fleetcast COMMAND --help` describes a command and its defaults."""

RUN_EPILOG = """\
Every Beam pipeline option (any registered PipelineOptions class: --runner, Direct, Dataflow,
Flink, Spark, Dask, setup options, ...) passes through to the pipeline unchanged. A flag that
neither fleetcast nor Beam knows fails before anything runs (exit 2). Examples:

  # DirectRunner with 2 worker processes
  fleetcast run configs/demo.textproto --direct_running_mode=multi_processing \\
      --direct_num_workers=2

  # Google Cloud Dataflow
  fleetcast run configs/demo.textproto --output_dir gs://BUCKET/fleetcast/demo \\
      --runner=DataflowRunner --project=PROJECT --region=us-central1 \\
      --temp_location=gs://BUCKET/tmp --setup_file=./setup.py

  # Flink or Spark: a job server jar and a running cluster (docs/runners.md)
  fleetcast run configs/demo.textproto --output_dir /shared/fleetcast/demo \\
      --runner=FlinkRunner --flink_master=HOST:8081 --flink_job_server_jar=JAR \\
      --parallelism=2 --environment_type=LOOPBACK

  # Dask (pip install -e ".[dask]")
  fleetcast run configs/demo.textproto \\
      --runner=apache_beam.runners.dask.dask_runner.DaskRunner \\
      --dask_client_address=tcp://HOST:8786
"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter,
                     argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the epilog's line breaks and shows each option's default, unless it is None or
    the False of a flag."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def output_directory(text: str) -> str:
    """A directory a command writes under: neither empty nor a file system's root (a command
    would lock, scan and write the whole file system)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path is not a directory to write in")
    scheme, separator, rest = text.partition("://")
    is_root = not (rest if separator else os.path.abspath(text)).strip("/")
    if is_root:
        raise argparse.ArgumentTypeError(
            f"{text!r} is a file system's root: give a directory of its own")
    return text


def utf8_text(text: str) -> str:
    """An argument that must be UTF-8 text (a byte that is not comes in as a surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        byte = text[e.start].encode("utf-8", "surrogateescape")
        raise argparse.ArgumentTypeError(
            f"byte 0x{byte.hex()} at position {e.start} is not UTF-8 text") from None
    return text


def price(text: str) -> float:
    """A --usd_per_tib value: a finite number of dollars, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a price (a finite number, 0 or more)")
    return value


# BigQuery's on-demand price per TiB processed (US and EU multi-regions, 2023 list price):
# `fleetcast estimate --usd_per_tib`'s default.
ON_DEMAND_USD_PER_TIB = 6.25


def version() -> str:
    return fleetcast_version()


def build_parser():
    """(the `fleetcast` parser, its `run` subparser)."""
    parser = argparse.ArgumentParser(prog="fleetcast", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run", help="run a config end to end", formatter_class=HelpFormatter,
        allow_abbrev=False,  # like Beam's own parser: an option is spelled out in full
        usage="fleetcast run [-h] CONFIG [--output_dir DIR] [-v | -q] [any Beam pipeline "
              "option]",
        description="Runs CONFIG end to end, logging each stage's progress, then prints where\n"
                    "the results are, the rows per table, the rows per source table, the\n"
                    "dead-letter reasons and the final Beam counters.",
        epilog=RUN_EPILOG)
    run.add_argument("config", metavar="CONFIG",
                     help="a text-format RunConfig (configs/*.textproto)")
    run.add_argument("--output_dir", metavar="DIR", type=output_directory,
                     help="Parquet output root, local or gs:// (default: results/<config "
                          "name>; ignored when the config writes to BigQuery)")
    loudness = run.add_mutually_exclusive_group()
    loudness.add_argument("-v", "--verbose", action="store_true",
                          help="log at INFO, Beam's own lines too (default: fleetcast's "
                               "stage progress only, at least every 30 s in long stages)")
    loudness.add_argument("-q", "--quiet", action="store_true",
                          help="log warnings and errors only (no progress lines)")
    validate = commands.add_parser(
        "validate", help="check configs without running them", formatter_class=HelpFormatter,
        description="Checks each CONFIG without running it and prints one line per valid\n"
                    "config; every problem of an invalid one names its field. An input file\n"
                    "that is not there (yet) is a warning naming it (an error with\n"
                    "--check_inputs; `fleetcast run` fails on it). Exits 2 if any config is\n"
                    "invalid.")
    validate.add_argument("config", nargs="+", metavar="CONFIG",
                          help="a text-format RunConfig (configs/*.textproto)")
    validate.add_argument("--check_inputs", action="store_true",
                          help="a missing input file makes the config invalid")
    _add_synth(commands)
    _add_estimate(commands)
    _add_query(commands)
    _add_report(commands)
    _add_reproduce(commands)
    _add_worker_pool(commands)
    return parser, run


def _add_query(commands):
    query = commands.add_parser(
        "query", help="SQL over a run's tables (DuckDB, or BigQuery)",
        formatter_class=HelpFormatter,
        description="Runs SQL over the Parquet tables of a local results directory: every\n"
                    "table is a view named after it (DuckDB's SQL dialect), read-only: one\n"
                    "SELECT, which reads those tables' files and nothing else. With\n"
                    "bq://PROJECT.DATASET, runs it in BigQuery over a run's output dataset\n"
                    "(tables by their bare names; BigQuery's SQL dialect).",
        epilog="examples:\n  fleetcast query results/demo \"SELECT policy, lifetime_source, "
               "empty_hosts_pct\n    FROM placement_summary WHERE defrag = 'none' ORDER BY "
               "empty_hosts_pct DESC\"\n"
               "  fleetcast query bq://my-project.fleet \"SELECT COUNT(*) FROM usage\"")
    query.add_argument("results_dir", metavar="RESULTS_DIR",
                       help="a results directory written by `fleetcast run`, or "
                            "bq://PROJECT.DATASET of a run that wrote to BigQuery")
    query.add_argument("sql", metavar="SQL", type=utf8_text,
                       help="one read-only SELECT statement (also DESCRIBE, SHOW, SUMMARIZE) "
                            "over the run's tables; any other statement is refused")
    query.add_argument("--format", choices=("table", "csv"), default="table",
                       help="a text table, or CSV with a header (every row)")

    def row_count(text: str) -> int:
        """A --max_rows value: a whole number of rows, 0 or more."""
        if not (text.isascii() and text.isdigit() and int(text) < 2**63):
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a number of rows (0 to 2^63 - 1)")
        return int(text)
    query.add_argument("--max_rows", type=row_count, default=100, metavar="N",
                       help="rows a text table shows: the first N (the result is read no further)")


def _add_estimate(commands):
    estimate = commands.add_parser(
        "estimate", help="bytes a config's BigQuery reads will scan (dry runs)",
        formatter_class=HelpFormatter,
        description="Validates CONFIG, then dry-runs each of its BigQuery reads (trace tables\n"
                    "by the columns the source parses, trace queries as written, loaded\n"
                    "fleetcast tables by the columns the run uses) and prints the bytes each\n"
                    "would scan, their total and its on-demand price. A dry run bills nothing.",
        epilog="example:\n  fleetcast estimate configs/google_2019_bigquery.textproto "
               "--project=PROJECT")
    estimate.add_argument("config", metavar="CONFIG",
                          help="a text-format RunConfig (configs/*.textproto)")
    estimate.add_argument("--project", metavar="PROJECT",
                          help="the project the dry runs (and the run's queries) bill to "
                               "(default: the client's, e.g. GOOGLE_CLOUD_PROJECT)")
    estimate.add_argument("--usd_per_tib", type=price, default=ON_DEMAND_USD_PER_TIB,
                          metavar="USD", help="on-demand price per TiB processed")


def _add_report(commands):
    report = commands.add_parser(
        "report", help="an HTML report of a run, with its figures",
        formatter_class=HelpFormatter,
        description="Writes one self-contained HTML page of a local results directory: the\n"
                    "config, rows per table and per source table, dead letters, and each\n"
                    "stage's paper-style figures (also saved as PNG and SVG).")
    report.add_argument("results_dir", metavar="RESULTS_DIR",
                        help="a results directory written by `fleetcast run`")
    report.add_argument("--out", metavar="DIR", type=output_directory,
                        help="where report.html and figures/ go (default: RESULTS_DIR/report)")


def _add_reproduce(commands):
    from pipelines.reproduce import KEYS
    reproduce = commands.add_parser(
        "reproduce", help="check a paper's claims: run its configs, write its page",
        formatter_class=HelpFormatter,
        description="Runs the configs of PAPER (one run after the other; `all`: every paper,\n"
                    "a config shared by two papers run once) and writes DOCS_DIR/reproduce/\n"
                    "PAPER.md: each claim of the paper that fleetcast checks, the paper's\n"
                    "number, fleetcast's, the data, the rule and its verdict, then figures\n"
                    "and tables; DOCS_DIR/reproduce/index.md summarises every page present.",
        epilog="examples:\n  fleetcast reproduce Bashir21\n"
               "  fleetcast reproduce all --quick --output_dir /tmp/repro --docs_dir /tmp/docs")
    reproduce.add_argument("paper", metavar="PAPER", choices=(*KEYS, "all"),
                           help=f"a paper's key ({', '.join(KEYS)}) or all")
    reproduce.add_argument("--quick", action="store_true",
                           help="small inputs (a few minutes for all): checks that every claim "
                                "is computed; its numbers are not results")
    reproduce.add_argument("--output_dir", metavar="DIR", type=output_directory,
                           help="where the runs go, one directory per config (default: "
                                "results/reproduce/PAPER, -quick appended with --quick)")
    reproduce.add_argument("--docs_dir", metavar="DIR", default="docs", type=output_directory,
                           help="the pages go to DIR/reproduce/")
    reproduce.add_argument("-q", "--quiet", action="store_true",
                           help="log warnings and errors only (no progress lines)")


def _add_synth(commands):
    default = {name: p.default for name, p in
               inspect.signature(synthetic.generate).parameters.items()}
    synth = commands.add_parser(
        "synth", help="write a synthetic Google-v3-format trace", formatter_class=HelpFormatter,
        description="Writes a synthetic Google cluster trace v3 (machine_events,\n"
                    "collection_events, instance_events, instance_usage) under --out, in\n"
                    "place of the trace an earlier synth wrote there (listed in its\n"
                    "fleetcast_synth_manifest.json), holding --out's lock as `run` does. It\n"
                    "refuses (exit 2), before writing, an argument beyond its bound and a file\n"
                    "in the way that no synth manifest lists: it never replaces or deletes a\n"
                    "file it did not write.")
    synth.add_argument("--out", required=True, metavar="DIR", type=output_directory,
                       help="output directory, local or any Beam file system (gs://...)")
    synth.add_argument("--machines", type=int, default=default["machines"], metavar="N",
                       help="machines in the cell")
    synth.add_argument("--days", type=float, default=default["days"], metavar="D",
                       help="trace length in days")
    synth.add_argument("--seed", type=int, default=default["seed"], metavar="S",
                       help="random seed; the same arguments give byte-identical files")
    synth.add_argument("--arrival_rate", type=float, metavar="R", default=None,
                       help="collections (jobs of ~5 tasks) submitted per machine and hour "
                            f"(default: {synthetic.DEFAULT_ARRIVAL_RATE_PER_MACHINE_HOUR:g} / "
                            "request_scale)")
    synth.add_argument("--request_scale", type=float, metavar="X",
                       default=default["request_scale"],
                       help="every task's request and usage as a multiple of the default's: "
                            "with the default arrival rate, 1/X as many tasks per machine")
    synth.add_argument("--format", choices=("json", "csv", "parquet"),
                       default=default["file_format"],
                       help="table files: json (newline-delimited, gzip), csv (gzip, header "
                            "row) or parquet")
    synth.add_argument("--layout", choices=synthetic.LAYOUTS, default=default["layout"],
                       help="tables: DIR/TABLE/TABLE-00000-of-0000N.json.gz; public: the "
                            "public trace's names, DIR/TABLE-000000000000.json.gz")
    synth.add_argument("--shards", type=int, default=default["shards"], metavar="K",
                       help="files per table")
    synth.add_argument("--processes", type=int, default=default["processes"], metavar="P",
                       help="worker processes (the same files for any number)")


def _add_worker_pool(commands):
    pool = commands.add_parser(
        "worker-pool", help="serve Python workers to Flink or Spark (EXTERNAL environment)",
        formatter_class=HelpFormatter,
        description="Serves fleetcast's Python SDK workers to a portable runner's task\n"
                    "slots (`fleetcast run ... --environment_type=EXTERNAL\n"
                    "--environment_config=HOST:PORT`), each a process of this interpreter\n"
                    "in this directory, until SIGTERM or SIGINT; its workers end with it. A\n"
                    "worker that cannot start fails the runner's request with its error.",
        epilog="example (beside each TaskManager or Spark worker):\n"
               "  fleetcast worker-pool --port 50000")
    pool.add_argument("--port", type=int, default=50000, metavar="PORT",
                      help="the port the runner's workers reach the pool on")
    pool.add_argument("--ready_timeout_s", type=float, default=60.0, metavar="S",
                      help="how long a starting worker may take before the request fails")
    pool.add_argument("--spare_workers", type=int, default=2, metavar="N",
                      help="workers kept started ahead of the runner's requests (each holds "
                           "an interpreter with fleetcast imported, ~0.25 GB)")
