"""The `fleetcast` command: run, check and synthesise cluster-trace analyses on Apache Beam.

    fleetcast run CONFIG [--output_dir DIR] [any Beam pipeline option]
    fleetcast validate CONFIG [CONFIG ...]
    fleetcast synth --out DIR [--machines N --days D --seed S --format F --processes P ...]
    fleetcast reproduce PAPER [--quick] [--output_dir DIR] [--docs_dir DIR]
    fleetcast worker-pool [--port PORT]
    fleetcast --version

The command line is parsed before anything heavy loads (pipelines/cli_args.py), so `--help`
and argument errors answer at once; pipelines/commands.py, which imports Beam, runs the
command. Beam options (--runner, --direct_num_workers, Dataflow, Flink, Spark and Dask
options) pass through to the pipeline unchanged. A flag that neither fleetcast nor any
registered Beam PipelineOptions class knows fails `run` before anything runs.
"""

import os

# Multithreaded BLAS slows the small ARIMA / Gaussian-process fits down on small machines
# (threads fight over the cores); set before numpy loads. An explicit setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import logging  # noqa: E402
import sys  # noqa: E402

from pipelines import heap  # noqa: E402
from pipelines.cli_args import build_parser  # noqa: E402

EXIT_CONFIG_ERROR = 2
EXIT_RUN_FAILED = 1
EXIT_INTERRUPTED = 130


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING)
    heap.map_large_blocks()
    parser, run = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command != "run" and extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from pipelines import commands  # Beam and the stages load here, once a command runs
    return commands.run_command(args, extra, run)


if __name__ == "__main__":
    sys.exit(main())
