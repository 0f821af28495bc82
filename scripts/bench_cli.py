"""Benchmark: how long the `fleetcast` commands users call most take to answer, against a
bare interpreter start (`python -c pass`) on the same machine in the same run.

    python scripts/bench_cli.py [--runs 5]

Each command runs RUNS times as a user types it (the installed `fleetcast` next to this
interpreter, from the repository root); a line per command prints its median and min wall
time and its ratio to the bare interpreter's median.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLEETCAST = os.path.join(os.path.dirname(sys.executable), "fleetcast")
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "fleetcast --help": [FLEETCAST, "--help"],
    "fleetcast run --help": [FLEETCAST, "run", "--help"],
    "fleetcast synth --help": [FLEETCAST, "synth", "--help"],
    "fleetcast validate configs/demo.textproto": [FLEETCAST, "validate",
                                                  "configs/demo.textproto"],
}


def wall_times(command, runs: int):
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    bare = None
    for name, command in COMMANDS.items():
        times = wall_times(command, args.runs)
        median = statistics.median(times)
        bare = bare or median
        print(f"{name:45s} median {median:6.3f} s  min {min(times):6.3f} s  "
              f"{median / bare:6.1f}x python -c pass", flush=True)


if __name__ == "__main__":
    main()
