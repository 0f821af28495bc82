"""Benchmark of the overcommit peak oracle and peak predictors, and of the whole stage.

    python scripts/bench_overcommit.py                 # both
    python scripts/bench_overcommit.py --quick         # small sizes
    python scripts/bench_overcommit.py --no-end-to-end --machines 20 --tasks 100

1. Predictors (no Beam), on a synthetic numpy cell (machines x a week of 5-minute steps):
   task-samples per second of the oracle and each predictor on the whole cell, and the
   speed-up against the per-step reference (fleetcast_testing/reference/peak.py) on a subset.
2. End to end on the DirectRunner: a synthetic Google v3 trace through the whole run, and
   through the overcommit stage alone from the usage table (its marginal rate: minus the
   same run on the first hour, Beam's per-run costs), in task-samples per second against the
   per-step reference predictors on a subset of the machines; the best of --e2e-repeat runs
   on both sides, as timeit does.

Rates are per core: BLAS is pinned to one thread and the DirectRunner runs in one process.
"""

import os
import pathlib
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Runnable from a checkout without installing the package.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.dataset as ds  # noqa: E402

import synthetic  # noqa: E402
from fleetcast_testing.reference import peak as ref  # noqa: E402
from pipelines import config as run_config  # noqa: E402
from pipelines import run as run_pipeline  # noqa: E402
from pipelines.sources.synthetic import GOOGLE_V3_TABLES  # noqa: E402
from pipelines.stages.overcommit import tellers  # noqa: E402
from predictors.peak.arima_forecaster import ArimaForecaster  # noqa: E402
from predictors.peak.borg_default import BorgDefaultPredictor  # noqa: E402
from predictors.peak.gp_forecaster import GaussianProcessForecaster  # noqa: E402
from predictors.peak.machine_samples import MachineSamples  # noqa: E402
from predictors.peak.max_decorator import MaxDecorator  # noqa: E402
from predictors.peak.n_sigma import NSigmaPredictor  # noqa: E402
from predictors.peak.peak_oracle import PeakOracle  # noqa: E402
from predictors.peak.per_machine_percentile import PerMachinePercentilePredictor  # noqa: E402
from predictors.peak.rc_like import RcLikePredictor  # noqa: E402
from predictors.peak.task_avg import AvgPredictor  # noqa: E402
from predictors.peak.task_max import MaxPredictor  # noqa: E402

STEP_S = 300
HOUR_US = 3_600_000_000
STEPS_PER_DAY = 86400 // STEP_S


def synthetic_machine(rng, num_slots: int, num_steps: int) -> MachineSamples:
    """One machine running about `num_slots` tasks at a time.

    Each slot runs a sequence of tasks with heavy-tailed lifetimes (lognormal, median 6 h)
    back to back, so tasks arrive and leave all week. Limits are in {0.5, 1, 2, 4}; usage is
    limit * (base + diurnal wave + noise + rare bursts), clipped to [0, 1.1]; 1 % of the
    machine's steps are missing.
    """
    lifetimes = np.maximum(rng.lognormal(np.log(6 * 12), 1.5, (num_slots, num_steps // 8 + 2)), 1)
    # The first task of each slot started before the week: start the clock inside it.
    starts = np.cumsum(lifetimes.astype(np.int64) + 1, axis=1)
    starts -= rng.integers(0, starts[:, :1] + 1)
    arrival = np.concatenate([np.zeros((num_slots, 1), np.int64), starts[:, :-1]], axis=1)
    arrival = np.clip(arrival, 0, num_steps)
    departure = np.clip(starts, 0, num_steps)
    arrival, departure = arrival.ravel(), departure.ravel()
    length = departure - arrival
    num_tasks = len(length)
    task = np.repeat(np.arange(num_tasks), length)
    first_sample = np.repeat(np.cumsum(length) - length, length)
    step = np.repeat(arrival, length) + np.arange(length.sum()) - first_sample
    limit = rng.choice([0.5, 1.0, 2.0, 4.0], num_tasks)[task]
    base, phase = rng.uniform(0.1, 0.5, num_tasks)[task], rng.uniform(0, 2 * np.pi, num_tasks)[task]
    wave = 0.15 * np.sin(2 * np.pi * step / STEPS_PER_DAY + phase)
    burst = np.where(rng.random(len(step)) < 0.01, rng.uniform(0.2, 0.6, len(step)), 0.0)
    ratio = np.clip(base + wave + rng.normal(0, 0.03, len(step)) + burst, 0.0, 1.1)
    keep = (rng.random(num_steps) >= 0.01)[step]
    return MachineSamples.from_arrays(step[keep] * STEP_S * 1_000_000, task[keep],
                                      (ratio * limit)[keep], limit[keep])


def synthetic_cell(num_machines: int, mean_tasks: int, num_steps: int, seed: int = 0):
    """`num_machines` machines running 0.2x..1.8x `mean_tasks` tasks at a time each."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(max(1, mean_tasks // 5), max(2, 9 * mean_tasks // 5) + 1, num_machines)
    return [synthetic_machine(rng, int(n), num_steps) for n in counts]


def samples_per_second(predictor, machines, repeat: int = 3) -> float:
    """Task-samples per second of `predictor.predict` over `machines`, best of `repeat` passes
    (the machine is shared: the best pass is the least disturbed). Every pass gets fresh
    MachineSamples, so derived arrays (task order, runs) are built inside the timing."""
    best = np.inf
    for _ in range(repeat):
        fresh = [dataclasses.replace(machine) for machine in machines]
        start = time.perf_counter()
        for machine in fresh:
            predictor.predict(machine)
        best = min(best, time.perf_counter() - start)
    return sum(m.num_samples for m in machines) / best


def truncate(machine: MachineSamples, num_steps: int) -> MachineSamples:
    """The machine's first `num_steps` steps."""
    end = machine.step_offsets[min(num_steps, machine.num_steps)]
    return MachineSamples(times=machine.times[:machine.step[end - 1] + 1], step=machine.step[:end],
                          task=machine.task[:end], usage=machine.usage[:end],
                          limit=machine.limit[:end])


def measure(name, fast, reference, cell, subset, repeat=3):
    """Prints one row: cell rate (skipped for an empty cell), then fast and reference rates
    on the subset and their ratio."""
    cell_rate = samples_per_second(fast, cell, repeat) if cell else float("nan")
    subset_rate = samples_per_second(fast, subset, repeat)
    reference_rate = samples_per_second(reference, subset, repeat=1)
    print(f"{name:<34} {cell_rate:>14,.0f} {subset_rate:>14,.0f} {reference_rate:>12,.0f} "
          f"{subset_rate / reference_rate:>9.1f}x", flush=True)


def bench_oracle(cell, subset):
    for percentile in (100, 90):
        measure(f"peak oracle 24h p{percentile} cap", PeakOracle(86400, percentile, True),
                ref.ReferenceOracle(86400, percentile, True), cell, subset)


def bench_limit_and_percentile_predictors(cell, subset):
    measure("borg-default phi=0.9", BorgDefaultPredictor(0.9), ref.ReferenceBorgDefault(0.9),
            cell, subset)
    measure("RC-like p99 10h/2h cap", RcLikePredictor(99, 120, 24, True),
            ref.ReferenceRcLike(99, 120, 24, True), cell, subset)
    measure("per-machine p99 10h/2h cap", PerMachinePercentilePredictor(99, 120, 24, True),
            ref.ReferencePerMachinePercentile(99, 120, 24, True), cell, subset)
    measure("N-sigma n=5 10h/2h cap", NSigmaPredictor(5, 120, 24, True),
            ref.ReferenceNSigma(5, 120, 24, True), cell, subset)
    measure("task max 2h cap", MaxPredictor(24, True), ref.ReferenceMax(24, True), cell, subset)
    measure("task avg 2h cap", AvgPredictor(24, True), ref.ReferenceAvg(24, True), cell, subset)
    measure("max(N-sigma n=3, RC-like p80)",
            MaxDecorator([NSigmaPredictor(3, 120, 24, True), RcLikePredictor(80, 120, 24, True)]),
            ref.ReferenceMaxDecorator([ref.ReferenceNSigma(3, 120, 24, True),
                                       ref.ReferenceRcLike(80, 120, 24, True)]), cell, subset)


def bench_forecasters(subset):
    """Model fits dominate both sides, so these run on the subset only."""
    for name, forecaster in (("ARIMA(p,1,0) refit 1h (subset)", ArimaForecaster()),
                             ("GP h=10 refit 1h (subset)", GaussianProcessForecaster())):
        measure(name, forecaster, ref.ReferenceForecaster(forecaster), [], subset, repeat=1)


# The paper's suite (Fig. 10 and the reference's other predictors), without the forecasters,
# whose model fits dominate both sides (they are measured per predictor above).
SUITE_TELLERS = """
metric { cpu_percentile: 90 }
fortune_teller { name: "oracle" oracle { horizon_s: 86400 cap_to_limit: true } }
fortune_teller { name: "borg_default" predictor { borg_default { phi: 0.9 } } }
fortune_teller { name: "rc_like" predictor { rc_like { percentile: 99 cap_to_limit: true } } }
fortune_teller { name: "per_machine_p99" predictor { per_machine_percentile {
  percentile: 99 cap_to_limit: true } } }
fortune_teller { name: "n_sigma" predictor { n_sigma { n: 5 cap_to_limit: true } } }
fortune_teller { name: "task_max" predictor { task_max { cap_to_limit: true } } }
fortune_teller { name: "task_avg" predictor { task_avg { cap_to_limit: true } } }
fortune_teller { name: "max_n_sigma_rc_like" predictor { max_of {
  predictors { n_sigma { n: 5 cap_to_limit: true } }
  predictors { rc_like { percentile: 99 cap_to_limit: true } } } } }
"""


def reference_suite():
    """The per-step references of SUITE_TELLERS, in the same order."""
    return [ref.ReferenceOracle(86400, 100, True), ref.ReferenceBorgDefault(0.9),
            ref.ReferenceRcLike(99, 120, 24, True),
            ref.ReferencePerMachinePercentile(99, 120, 24, True),
            ref.ReferenceNSigma(5, 120, 24, True), ref.ReferenceMax(24, True),
            ref.ReferenceAvg(24, True),
            ref.ReferenceMaxDecorator([ref.ReferenceNSigma(5, 120, 24, True),
                                       ref.ReferenceRcLike(99, 120, 24, True)])]


def timed_run(text: str, output_dir: str, repeat: int = 1):
    """(wall seconds, CPU seconds of this process) of a DirectRunner run of a text config,
    the best of `repeat` runs (each the least disturbed by other jobs, as timeit reports).

    The in-memory DirectRunner runs the pipeline in this process, so its CPU time is the
    run's cost on one core even when other jobs share the machine.
    """
    config = run_config.parse_config(text)
    problems = run_config.validate(config)
    if problems:
        raise ValueError(problems)
    runs = []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        run_pipeline.run(config, output_dir, ["--runner=DirectRunner"])
        runs.append((time.perf_counter() - start, time.process_time() - start_cpu))
    return min(wall for wall, _ in runs), min(cpu for _, cpu in runs)


def reference_rates(machines, repeat: int):
    """(samples/s wall, samples/s CPU) of the per-step reference suite over `machines`, the
    best of `repeat` passes."""
    samples = sum(m.num_samples for m in machines)
    walls, cpus = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        for predictor in reference_suite():
            for machine in machines:
                predictor.predict(machine)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    return samples / min(walls), samples / min(cpus)


def scheduled_machines(directory: str, count: int):
    """MachineSamples of the first `count` machines of a scheduled-usage Parquet dataset."""
    table = ds.dataset(directory).to_table()
    machine_ids = np.unique(table.column("machine_id").to_numpy())[:count]
    machines = []
    for machine_id in machine_ids:
        rows = table.filter(pc.equal(table.column("machine_id"), machine_id))
        machines.append(tellers.build_machine_samples(rows)[0])
    return machines


def bench_end_to_end(machines: int, days: float, reference_machines: int, repeat: int):
    with tempfile.TemporaryDirectory() as work:
        trace = os.path.join(work, "trace")
        start = time.perf_counter()
        synthetic.generate(trace, machines=machines, days=days, seed=0)
        print(f"\nend to end: synthetic trace, {machines} machines x {days:g} days, generated in "
              f"{time.perf_counter() - start:.0f} s", flush=True)
        source = "\n".join(f'  {t} {{ path: "{trace}/{t}/*" }}'
                           for t in GOOGLE_V3_TABLES)
        usage, scheduled = os.path.join(work, "usage"), os.path.join(work, "scheduled")
        full_s = timed_run(f"""google_v3 {{\n{source}\n}}
            usage {{ output {{ parquet: "{usage}" }} }}
            overcommit {{ scheduled_usage {{ output {{ parquet: "{scheduled}" }} }}
            {SUITE_TELLERS} }}""", os.path.join(work, "full"))
        loaded = f'usage {{ input {{ parquet: "{usage}" }} }}\n'
        stage_s = timed_run(f"{loaded}overcommit {{ {SUITE_TELLERS} }}",
                            os.path.join(work, "stage"), repeat)
        # The same run on the first hour of data only: Beam's per-run costs (building and
        # translating the pipeline, bundles, reading the loaded usage table).
        fixed_s = timed_run(
            f"{loaded}overcommit {{ filter {{ end_time: {HOUR_US} }}\n{SUITE_TELLERS} }}",
            os.path.join(work, "first_hour"), repeat)
        num_samples = ds.dataset(scheduled).count_rows()
        subset = scheduled_machines(scheduled, reference_machines)
        subset_samples = sum(m.num_samples for m in subset)
        reference_rate, reference_cpu_rate = reference_rates(subset, repeat)
    tellers = SUITE_TELLERS.count("fortune_teller")
    print(f"{num_samples:,} task-samples, {tellers} fortune tellers; reference suite on "
          f"{len(subset)} machine(s), {subset_samples:,} task-samples; stage, first-hour run "
          f"and reference: best of {repeat}")
    print(f"{'DirectRunner, 1 process':<44} {'wall s':>7} {'CPU s':>7} {'samples/s':>11} "
          f"{'vs reference':>13} {'(CPU time)':>11}")
    for name, (wall_s, cpu_s) in (
            ("whole run (source, join, overcommit, sinks)", full_s),
            ("overcommit stage from the usage table", stage_s),
            ("marginal: stage minus its first-hour run",
             (stage_s[0] - fixed_s[0], stage_s[1] - fixed_s[1]))):
        rate = num_samples / wall_s
        print(f"{name:<44} {wall_s:>7.1f} {cpu_s:>7.1f} {rate:>11,.0f} "
              f"{rate / reference_rate:>12.0f}x "
              f"{num_samples / cpu_s / reference_cpu_rate:>10.0f}x")
    print(f"{'stage on the first hour only (per-run cost)':<44} {fixed_s[0]:>7.1f} "
          f"{fixed_s[1]:>7.1f}")
    print(f"{'per-step reference suite (predictors only)':<44} {'':>7} {'':>7} "
          f"{reference_rate:>11,.0f}")
    print("Wall-time ratios hold on an idle machine; on one shared with other jobs, the "
          "CPU-time ratios (both sides on one core) are the fair ones.")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=50,
                        help="mean number of tasks running on a machine at a time")
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--reference-machines", type=int, default=2)
    parser.add_argument("--reference-days", type=float, default=1.5,
                        help="steps of each reference machine kept (the oracle needs > 1 day)")
    parser.add_argument("--quick", action="store_true", help="10 machines, 1 reference machine")
    parser.add_argument("--no-forecasters", action="store_true")
    parser.add_argument("--no-end-to-end", action="store_true")
    parser.add_argument("--e2e-machines", type=int, default=100)
    parser.add_argument("--e2e-days", type=float, default=7.0)
    parser.add_argument("--e2e-reference-machines", type=int, default=3)
    parser.add_argument("--e2e-repeat", type=int, default=3,
                        help="runs of the stage, of its first-hour run and passes of the "
                             "reference; the best of each is reported")
    args = parser.parse_args(argv)
    if args.quick:
        args.machines, args.reference_machines, args.reference_days = 10, 1, 1.25
        args.e2e_machines, args.e2e_days, args.e2e_reference_machines = 10, 2.0, 1
        args.e2e_repeat = 1
    num_steps = int(args.days * STEPS_PER_DAY)
    cell = synthetic_cell(args.machines, args.tasks, num_steps)
    reference_steps = int(args.reference_days * STEPS_PER_DAY)
    subset = [truncate(m, reference_steps) for m in cell[:args.reference_machines]]
    print(f"cell: {len(cell)} machines x {num_steps} steps, {sum(m.num_samples for m in cell):,} "
          f"task-samples; reference subset: {len(subset)} machine(s) x "
          f"{reference_steps} steps, {sum(m.num_samples for m in subset):,} "
          "task-samples (rates are per sample, so they compare across sizes)")
    print(f"{'predictor':<34} {'cell samples/s':>14} {'subset fast/s':>14} {'reference/s':>12} "
          f"{'speed-up':>10}")
    bench_oracle(cell, subset)
    bench_limit_and_percentile_predictors(cell, subset)
    if not args.no_forecasters:
        bench_forecasters(subset)
    if not args.no_end_to_end:
        bench_end_to_end(args.e2e_machines, args.e2e_days, args.e2e_reference_machines,
                         args.e2e_repeat)


if __name__ == "__main__":
    main()
