"""The `fleetcast` command.

    fleetcast run CONFIG [--output_dir DIR] [any Beam pipeline option]
    fleetcast validate CONFIG
    fleetcast synth --out DIR [--machines N --days D --seed S --arrival_rate R --format F]

Beam options (--runner, --direct_num_workers, --direct_running_mode, Dataflow, Flink, Spark
and Dask options) pass through to the pipeline unchanged.
"""

import os

# Multithreaded BLAS makes the ARIMA / Gaussian-process fits several times slower on small
# machines (threads fight over 2 cores); set before numpy loads. An explicit setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import collections  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import pyarrow.parquet as pq  # noqa: E402
from apache_beam.io.filesystems import FileSystems  # noqa: E402

from pipelines import config as run_config  # noqa: E402
from pipelines import run as run_pipeline  # noqa: E402

EXIT_CONFIG_ERROR = 2


def _parser():
    parser = argparse.ArgumentParser(prog="fleetcast", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a config end to end")
    run.add_argument("config", help="a text-format RunConfig (configs/*.textproto)")
    run.add_argument("--output_dir", help="Parquet output root (default results/<run name>)")
    validate = commands.add_parser("validate", help="check a config without running it")
    validate.add_argument("config")
    synth = commands.add_parser("synth", help="write a synthetic Google-v3-format trace")
    synth.add_argument("--out", required=True, help="output directory (local or gs://)")
    synth.add_argument("--machines", type=int, default=20)
    synth.add_argument("--days", type=float, default=2.0)
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--arrival_rate", type=float, default=None,
                       help="collections (jobs of ~5 tasks) per machine and hour")
    synth.add_argument("--format", choices=("json", "csv", "parquet"), default="json")
    return parser


def table_rows(table_dir: str) -> int:
    """Rows in a Parquet dataset directory (from the files' footers)."""
    matches = FileSystems.match([FileSystems.join(table_dir, "*.parquet")])[0].metadata_list
    total = 0
    for match in matches:
        with FileSystems.open(match.path) as handle:
            total += pq.ParquetFile(handle).metadata.num_rows
    return total


def _read_table(table_dir: str):
    matches = FileSystems.match([FileSystems.join(table_dir, "*.parquet")])[0].metadata_list
    frames = []
    for match in matches:
        with FileSystems.open(match.path) as handle:
            frames.append(pq.read_table(handle).to_pandas())
    import pandas as pd  # only the summary needs pandas
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def print_summary(output: run_pipeline.OutputSpec, tables, out=None):
    """Where the results are, rows per table, per-source counts and dead-letter reasons."""
    out = out or sys.stdout
    if output.parquet_dir is None:
        print(f"Results: BigQuery dataset {output.bigquery_dataset}, tables: "
              f"{', '.join(sorted(tables))}", file=out)
        return
    print(f"Results: {output.parquet_dir}", file=out)
    for name in tables:
        path = FileSystems.join(output.parquet_dir, name)
        print(f"  {name:<28} {table_rows(path):>10,} rows   {path}", file=out)
    counts = _read_table(FileSystems.join(output.parquet_dir, "source_counts"))
    if len(counts):
        print("Rows per source table (read / kept / rejected):", file=out)
        for row in counts.sort_values(["source", "table"]).itertuples():
            print(f"  {row.source}.{row.table:<22} {row.read:>10,} {row.kept:>10,} "
                  f"{row.rejected:>8,}", file=out)
    dead = _read_table(FileSystems.join(output.parquet_dir, "dead_letters"))
    print(f"Dead letters: {len(dead):,}", file=out)
    if len(dead):
        reasons = collections.Counter(
            f"{r.source}.{r.table}: {r.reason}" for r in dead.itertuples())
        for reason, n in reasons.most_common(10):
            print(f"  {n:>8,}  {reason}", file=out)


def _run(args, beam_args):
    config = run_config.load_config(args.config)
    name = run_config.config_name(config, args.config)
    output_dir = args.output_dir or FileSystems.join("results", name)
    started = time.time()
    output, tables = run_pipeline.run(config, output_dir, beam_args)
    print(f"fleetcast run {name!r} finished in {time.time() - started:.1f} s")
    print_summary(output, tables)
    return 0


def _validate(args):
    config = run_config.load_config(args.config)
    name = run_config.config_name(config, args.config)
    stages = ["source: " + (config.WhichOneof("source") or "loaded tables")]
    if config.HasField("overcommit"):
        stages.append(f"overcommit: {len(config.overcommit.fortune_teller)} fortune tellers")
    if config.HasField("lifetime_model"):
        stages.append("lifetime model")
    if config.HasField("placement"):
        policies = len(config.placement.policy) + len(config.placement.policy_plugin)
        stages.append(f"placement: {policies} policies")
    print(f"{args.config}: valid config {name!r} ({'; '.join(stages)})")
    return 0


def _synth(args):
    import synthetic
    kwargs = dict(machines=args.machines, days=args.days, seed=args.seed,
                  file_format=args.format)
    if args.arrival_rate is not None:
        kwargs["arrival_rate_per_machine_hour"] = args.arrival_rate
    started = time.time()
    summary = synthetic.generate(args.out, **kwargs)
    print(f"synthetic trace written to {args.out} in {time.time() - started:.1f} s")
    for table, rows in summary.get("rows", {}).items():
        print(f"  {table:<20} {rows:>10,} rows")
    return 0


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING)
    args, beam_args = _parser().parse_known_args(argv)
    if args.command != "run" and beam_args:
        _parser().error(f"unrecognized arguments: {' '.join(beam_args)}")
    try:
        if args.command == "run":
            return _run(args, beam_args)
        if args.command == "validate":
            return _validate(args)
        return _synth(args)
    except run_config.ConfigError as e:
        print(f"fleetcast: {e}", file=sys.stderr)
        return EXIT_CONFIG_ERROR


if __name__ == "__main__":
    sys.exit(main())
