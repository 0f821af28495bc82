"""What limits LAVA with learned or noisy lifetimes on a placement run: its VM classes or
the exits it ranks hosts by? Prints `pipelines.reproduce.lava_limits` as one Markdown table
per pool (`fleetcast reproduce Ling25` puts the same table on its page).

    .venv/bin/python scripts/lava_limits.py results/azure_placement
    .venv/bin/python scripts/lava_limits.py results/azure_placement \
        --exits uptime_model noisy_0.8 noisy_0.6 oracle
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pipelines.config import load_config  # noqa: E402
from pipelines.report import read_config  # noqa: E402
from pipelines.reproduce.lava_limits import DEFAULT_EXITS, as_table, lava_limits  # noqa: E402
from pipelines.reproduce.page import frame_table  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir")
    parser.add_argument("--config", help="the run's config (default: the one its manifest "
                                         "records)")
    parser.add_argument("--exits", nargs="+", default=DEFAULT_EXITS,
                        help="uptime_model, oracle or noisy_<accuracy> (default: %(default)s)")
    args = parser.parse_args(argv)
    config = (load_config(args.config, check_inputs=False) if args.config
              else read_config(args.results_dir))
    print("LAVA's empty hosts % (vs Best-Fit, pp) by the source of its VM classes and exits")
    print(frame_table(as_table(lava_limits(args.results_dir, config, args.exits))))


if __name__ == "__main__":
    main()
