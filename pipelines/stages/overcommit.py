"""The overcommit stage: peak oracle and peak predictors per machine (paper 004 §3-5).

    usage ─ filter ─ metric ─ reset_and_shift ─ scheduler ──────────────────────┐
            (or a loaded filtered_usage)            (or a loaded scheduled_usage)
            one ParDo per run of per-table steps (RunSteps); only a filtered_usage copy
            and a reset to time zero (grouped by instance) split the chain
    ┌───────────────────────────────────────────────────────────────────────────┘
    └─ RunFortuneTellers: GroupByKey per machine, one MachineSamples per machine, every teller
         ├─ overcommit_timeseries, overcommit_machine_metrics
         └─ CellMetrics (Combine per teller) ─ overcommit_cell_metrics ─ Summarize

The stages run in paper 004's order on PCollections of Arrow tables; the samples are grouped
once, per machine, and every fortune teller runs on the same MachineSamples (a predictor
configured twice, e.g. N-sigma alone and inside max(N-sigma, RC-like), is computed once per
machine). Predictors are scored against the first oracle teller.

Bad input never crashes the stage and never disappears (each step is counted in
overcommit_counts as read = kept + filtered + rejected; rejected rows are dead letters with
their reason):

- filter: rows outside the configured ranges are `filtered` (a row lacking the tested field,
  e.g. a null priority under a priority range, counts as outside).
- metric: a window without the chosen value (null avg_cpu, a distribution too short for the
  percentile) or without a limit is rejected.
- scheduler.by_machine_id: a window without a machine id is rejected.
- samples (per machine): usage that is negative or not finite, and limits that are zero,
  negative or not finite, are rejected (a task without a limit cannot be overcommitted).
  Duplicate windows of one task at one grid time merge into one sample with the max usage and
  the max limit, as the paper's reference simulator aligns windows; each extra row is a dead
  letter saying so.
- Usage above the limit is kept as it is: the recorded total_usage caps each task at its limit
  (as the reference does), predictors see the raw usage unless cap_to_limit says otherwise.
- Missing windows: a task missing at a step starts a new run (warm-up and history start over,
  as in the reference); steps where no task has a sample do not exist for the machine.
- A machine with a single task is a machine like any other.
"""

import functools
import hashlib
import json
from typing import Dict, List, NamedTuple, Sequence, Tuple

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from configs.units import US_PER_S
from configs import fleetcast_pb2
from pipelines import schemas
from pipelines.io import sharding
from pipelines.io.dead_letters import COUNTS, DEAD_LETTERS, ROWS, SplitByTag, dead_letter_table
from pipelines.io.sinks import ReadTable, WriteTable
from predictors.peak.arima_forecaster import ArimaForecaster
from predictors.peak.avg_decorator import AvgDecorator
from predictors.peak.avg_predictor import AvgPredictor
from predictors.peak.borg_default import BorgDefaultPredictor
from predictors.peak.gp_forecaster import GaussianProcessForecaster
from predictors.peak.machine_samples import MachineSamples
from predictors.peak.max_decorator import MaxDecorator
from predictors.peak.max_predictor import MaxPredictor
from predictors.peak.n_sigma import NSigmaPredictor
from predictors.peak.overcommit_metrics import (CDF_QUANTILES, CellSums, cdf_quantiles,
                                           cell_savings, cell_sums, machine_metrics,
                                           merge_cell_sums, total_limit, total_usage)
from predictors.peak.peak_oracle import PeakOracle
from predictors.peak.peak_predictor import PeakPredictor
from predictors.peak.per_machine_percentile import PerMachinePercentilePredictor
from predictors.peak.rc_like import RcLikePredictor

SOURCE = "overcommit"
UNCERTAINTY = fleetcast_pb2.PeakPredictorConfig.Uncertainty
# Samples before the scheduler: the trace's machine_id, possibly null.
SAMPLES = pa.schema([f.with_nullable(f.name != "machine_id")
                     for f in schemas.OVERCOMMIT_SCHEDULED_USAGE])
TIMESERIES = "overcommit_timeseries"
MACHINE_METRICS = "overcommit_machine_metrics"
CELL_METRICS = "overcommit_cell_metrics"
SUMMARY = "overcommit_summary"
OVERCOMMIT_COUNTS = "overcommit_counts"
CELL = "cell"
# Summary rows: the per-machine metrics (over machines) and the cell's savings (over time).
MACHINE_METRIC_NAMES = ("violation_rate", "violation_severity", "savings_ratio")
CELL_METRIC_NAME = "cell_savings_ratio"
# Dead-letter reasons of the per-machine samples step.
INVALID_USAGE = "usage is negative or not finite"
INVALID_LIMIT = "limit is not > 0 (or not finite): a task without a limit cannot be overcommitted"
DUPLICATE_SAMPLE = ("duplicate sample of an instance at one time on one machine: merged into "
                    "one sample (max usage, max limit)")


# --- Step counts ------------------------------------------------------------------------------

def step_counts(step: str, read: int, kept: int, filtered: int = 0, rejected: int = 0):
    """One (COUNTS, (step, [read, kept, filtered, rejected])) element."""
    return COUNTS, (step, np.array([read, kept, filtered, rejected], dtype=np.int64))


def counts_table(element) -> pa.Table:
    step, (read, kept, filtered, rejected) = element
    return pa.table({"step": [step], "read": [int(read)], "kept": [int(kept)],
                     "filtered": [int(filtered)], "rejected": [int(rejected)]},
                    schema=schemas.OVERCOMMIT_COUNTS)


def _sum_counts(values) -> np.ndarray:
    return np.sum(list(values), axis=0)


def _raw_rows(table: pa.Table, rows: np.ndarray) -> List[str]:
    return [json.dumps(row, default=str) for row in table.take(pa.array(rows)).to_pylist()]


def _rejected(table: pa.Table, rows: np.ndarray, reasons: Sequence[str], source_table: str):
    return DEAD_LETTERS, dead_letter_table(SOURCE, source_table, reasons, _raw_rows(table, rows))


# --- Filter -----------------------------------------------------------------------------------

def filter_mask(usage: pa.Table, config) -> np.ndarray:
    """bool[n]: the rows of a `usage` table that the Filter config keeps."""
    keep = np.ones(usage.num_rows, dtype=bool)

    def require(condition):
        nonlocal keep
        keep &= np.asarray(pc.fill_null(condition, False))

    start = usage.column("start_time")
    if config.HasField("start_time"):
        require(pc.greater_equal(start, config.start_time))
    if config.HasField("end_time"):
        require(pc.less(start, config.end_time))
    if config.top_level_only:
        require(pc.equal(pc.fill_null(usage.column("alloc_collection_id"), 0), 0))
    for name, bounds in (("priority", config.priority_range),
                         ("scheduling_class", config.scheduling_class_range)):
        if bounds.HasField("lower_bound"):
            require(pc.greater_equal(usage.column(name), bounds.lower_bound))
        if bounds.HasField("upper_bound"):
            require(pc.less_equal(usage.column(name), bounds.upper_bound))
    if config.machine_id:
        require(pc.is_in(usage.column("machine_id"),
                         value_set=pa.array(list(config.machine_id), pa.int64())))
    return keep


def filter_columns(config) -> List[str]:
    """The usage columns `filter_mask` reads under the Filter config."""
    columns = ["start_time"]
    if config.top_level_only:
        columns.append("alloc_collection_id")
    for name, bounds in (("priority", config.priority_range),
                         ("scheduling_class", config.scheduling_class_range)):
        if bounds.HasField("lower_bound") or bounds.HasField("upper_bound"):
            columns.append(name)
    if config.machine_id:
        columns.append("machine_id")
    return columns


def filter_tagged(usage: pa.Table, config):
    """(tag, value) pairs: the kept rows and the filter's counts."""
    keep = filter_mask(usage, config)
    kept = int(keep.sum())
    yield step_counts("filter", usage.num_rows, kept, filtered=usage.num_rows - kept)
    if kept:
        yield ROWS, usage if kept == usage.num_rows else usage.filter(pa.array(keep))


# --- Metric -----------------------------------------------------------------------------------

def metric_name(config) -> str:
    which = config.WhichOneof("metric")
    return f"p{config.cpu_percentile} cpu" if which == "cpu_percentile" else which


def list_element(column, index: int) -> Tuple[np.ndarray, np.ndarray]:
    """(values float64[n], present bool[n]): element `index` of each list of a list<double>
    column; absent (NaN) for a null list or one too short."""
    lists = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = lists.offsets.to_numpy()
    flat = lists.values.to_numpy(zero_copy_only=False).astype(np.float64)
    present = ~np.asarray(lists.is_null()) & (np.diff(offsets) > index)
    values = np.full(len(lists), np.nan)
    values[present] = flat[offsets[:-1][present] + index]
    return values, present


def metric_columns(config) -> List[str]:
    """The usage columns `metric_values` reads: the metric's and its limit's."""
    which = config.WhichOneof("metric")
    if which == "cpu_percentile":
        value = ("tail_cpu_usage_distribution"
                 if config.cpu_percentile in schemas.TAIL_CPU_DISTRIBUTION_PERCENTILES
                 else "cpu_usage_distribution")
    else:
        value = which
    return [value, "memory_limit" if "memory" in which else "cpu_limit"]


def _column_values(table: pa.Table, name: str) -> Tuple[np.ndarray, np.ndarray]:
    column = table.column(name)
    return (column.to_numpy(zero_copy_only=False).astype(np.float64),
            np.asarray(column.is_valid()))


def metric_values(usage: pa.Table, config):
    """(usage, usage present, limit, limit present): float64[n] and bool[n] arrays of the
    configured metric and the matching limit (cpu_limit, or memory_limit for memory)."""
    which = config.WhichOneof("metric")
    if which == "cpu_percentile":
        percentile = config.cpu_percentile
        if percentile in schemas.TAIL_CPU_DISTRIBUTION_PERCENTILES:
            values = list_element(usage.column("tail_cpu_usage_distribution"),
                                  schemas.TAIL_CPU_DISTRIBUTION_PERCENTILES.index(percentile))
        else:
            values = list_element(usage.column("cpu_usage_distribution"),
                                  schemas.CPU_DISTRIBUTION_PERCENTILES.index(percentile))
    else:
        values = _column_values(usage, which)
    limit = _column_values(usage, "memory_limit" if "memory" in which else "cpu_limit")
    return (*values, *limit)


def floor_to_grid(time_us: np.ndarray, step_us: int) -> np.ndarray:
    return np.floor_divide(time_us, step_us) * step_us


def metric_tagged(usage: pa.Table, config, step_us: int):
    """(tag, value) pairs: samples (SAMPLES schema, times floored to the grid), dead letters
    for windows without the metric's value or without a limit, and counts.

    Present values are passed on as they are; `build_machine_samples` judges them.
    """
    values, has_value, limit, has_limit = metric_values(usage, config)
    keep = has_value & has_limit
    rejected = np.flatnonzero(~keep)
    yield step_counts("metric", usage.num_rows, usage.num_rows - len(rejected),
                      rejected=len(rejected))
    if len(rejected):
        no_value = f"usage window has no {metric_name(config)} value"
        reasons = [no_value if not has_value[i] else "usage window has no limit"
                   for i in rejected]
        yield _rejected(usage, rejected, reasons, "usage")
    if keep.any():
        mask = pa.array(keep)
        start = usage.column("start_time").to_numpy(zero_copy_only=False)[keep]
        yield ROWS, pa.table({
            "machine_id": usage.column("machine_id").filter(mask),
            "instance_id": usage.column("instance_id").filter(mask),
            "time": pa.array(floor_to_grid(start, step_us), pa.int64()),
            "usage": pa.array(values[keep], pa.float64()),
            "limit": pa.array(limit[keep], pa.float64()),
        }, schema=SAMPLES)


# --- Reset and shift --------------------------------------------------------------------------

def dictionary_codes(values) -> Tuple[np.ndarray, pa.Array]:
    """(int64[n] codes, distinct values) of a string column: values[i] == distinct[codes[i]]."""
    encoded = pc.dictionary_encode(values)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), encoded.dictionary


def instance_hashes(instance_ids, salt: str) -> np.ndarray:
    """uint64[n]: a stable hash of (salt, instance id) per row, the same on every runner and
    in every process (BLAKE2b of the UTF-8 text, once per distinct id)."""
    codes, distinct = dictionary_codes(instance_ids)
    prefix = f"{salt}\x00".encode()
    hashes = [int.from_bytes(hashlib.blake2b(prefix + value.encode(), digest_size=8).digest(),
                             "little") for value in distinct.to_pylist()]
    return np.array(hashes, dtype=np.uint64)[codes]


def random_shifts(instance_ids, config, step_us: int) -> np.ndarray:
    """int64[n]: each row's instance shift, uniform in [lower_bound, upper_bound] µs by
    (seed, instance id), floored to the grid."""
    lower, upper = config.random_shift.lower_bound, config.random_shift.upper_bound
    span = np.uint64(upper - lower + 1)
    drawn = lower + (instance_hashes(instance_ids, f"shift:{config.seed}") % span).astype(np.int64)
    return floor_to_grid(drawn, step_us)


def reset_and_shift(samples: pa.Table, config, step_us: int) -> pa.Table:
    """`samples` with each instance's times reset to start at 0 (if configured) and shifted.

    With reset_time_to_zero the table must hold every sample of its instances.
    """
    time = samples.column("time").to_numpy(zero_copy_only=False).copy()
    instance_ids = samples.column("instance_id")
    if config.reset_time_to_zero:
        codes, distinct = dictionary_codes(instance_ids)
        first = np.full(len(distinct), np.iinfo(np.int64).max)
        np.minimum.at(first, codes, time)
        time -= first[codes]
    if config.HasField("random_shift"):
        time += random_shifts(instance_ids, config, step_us)
    return samples.set_column(samples.schema.get_field_index("time"), "time",
                              pa.array(time, pa.int64()))


def _split_by_instance(samples: pa.Table, num_shards: int):
    return sharding.split_table(
        samples, sharding.shard_of_strings(samples.column("instance_id"), num_shards))


def _reset_shard(element, config, step_us: int):
    _, tables = element
    return reset_and_shift(sharding.concat(tables, SAMPLES), config, step_us)


class ResetToZeroAndShift(beam.PTransform):
    """SAMPLES tables → SAMPLES tables with each instance's times reset to start at 0 and
    shifted (deterministically). A shift alone is a per-table step (`shift_tagged`)."""

    def __init__(self, config, step_us: int):
        super().__init__()
        self._config = config
        self._step_us = step_us

    def expand(self, samples):
        config, step_us = self._config, self._step_us
        # An instance's first time needs all of its samples: regroup them by instance shard.
        return (samples
                | "ShardByInstance" >> beam.FlatMap(_split_by_instance, config.num_shards)
                | "GroupInstances" >> beam.GroupByKey()
                | "ResetAndShift" >> beam.Map(_reset_shard, config, step_us))


# --- Scheduler --------------------------------------------------------------------------------

def schedule_tagged(samples: pa.Table, config):
    """(tag, value) pairs: samples with the simulated machine_id (OVERCOMMIT_SCHEDULED_USAGE),
    dead letters for samples that cannot be placed, and counts."""
    if config.WhichOneof("scheduler") == "at_random":
        at_random = config.at_random
        machine = (instance_hashes(samples.column("instance_id"), f"scheduler:{at_random.seed}")
                   % np.uint64(at_random.num_machines)).astype(np.int64)
        placed = samples.set_column(samples.schema.get_field_index("machine_id"), "machine_id",
                                    pa.array(machine, pa.int64()))
        rejected = np.zeros(0, dtype=np.int64)
    else:
        has_machine = np.asarray(pc.is_valid(samples.column("machine_id")))
        rejected = np.flatnonzero(~has_machine)
        placed = samples.filter(pa.array(has_machine)) if len(rejected) else samples
    yield step_counts("scheduler", samples.num_rows, placed.num_rows, rejected=len(rejected))
    if len(rejected):
        yield _rejected(samples, rejected, ["sample has no machine_id to schedule it by "
                                            "(scheduler.by_machine_id)"] * len(rejected),
                        "overcommit_scheduled_usage")
    if placed.num_rows:
        yield ROWS, placed.cast(schemas.OVERCOMMIT_SCHEDULED_USAGE)


# --- Per-table steps in one ParDo ------------------------------------------------------------

def shift_tagged(samples: pa.Table, config, step_us: int):
    """(ROWS, samples moved in time): reset_and_shift as a step of a chain."""
    yield ROWS, reset_and_shift(samples, config, step_us)


def chain_tagged(table: pa.Table, steps):
    """(tag, value) pairs of per-table steps run one after another: the ROWS a step yields
    feed the next step, its other pairs (dead letters, counts) pass through; the last step's
    ROWS are the chain's."""
    tables = [table]
    for step in steps:
        produced = []
        for rows in tables:
            for tag, value in step(rows):
                if tag == ROWS:
                    produced.append(value)
                else:
                    yield tag, value
        tables = produced
    for rows in tables:
        yield ROWS, rows


class RunSteps(beam.PTransform):
    """Arrow tables → {rows, dead_letters, counts}: a chain of per-table steps (functions
    table → (tag, value) pairs) in a single ParDo.

    The steps need no grouping, and on the DirectRunner every Beam step costs ~20 ms per
    run whatever it does, so filter, metric, shift and scheduler run as one.
    """

    def __init__(self, steps):
        super().__init__()
        self._steps = list(steps)

    def expand(self, tables):
        return (tables
                | "Steps" >> beam.FlatMap(chain_tagged, self._steps)
                | "Split" >> SplitByTag((ROWS, DEAD_LETTERS, COUNTS)))


# --- Fortune tellers --------------------------------------------------------------------------

class SharedPredictor(PeakPredictor):
    """A predictor that several tellers use: computed once per machine.

    Remembers its output for the last MachineSamples it saw (one machine at a time).
    """

    def __init__(self, predictor: PeakPredictor):
        self.predictor = predictor
        self._samples = None
        self._output = None

    def predict(self, samples: MachineSamples) -> np.ndarray:
        if samples is not self._samples:
            self._output = self.predictor.predict(samples)
            self._samples = samples
        return self._output


class TellerFactory:
    """Builds predictors from PeakPredictorConfig / PeakOracleConfig messages; equal
    configurations give the same SharedPredictor object."""

    def __init__(self, step_s: float):
        self.step_s = step_s
        self._built: Dict[bytes, SharedPredictor] = {}

    def _shared(self, kind: str, config, build) -> SharedPredictor:
        key = kind.encode() + config.SerializeToString(deterministic=True)
        if key not in self._built:
            self._built[key] = SharedPredictor(build())
        return self._built[key]

    def oracle(self, config) -> SharedPredictor:
        return self._shared("oracle", config, lambda: PeakOracle(
            config.horizon_s, config.percentile, config.cap_to_limit, self.step_s))

    def predictor(self, config) -> SharedPredictor:
        return self._shared("predictor", config, lambda: self._build(config))

    def _build(self, config) -> PeakPredictor:
        which = config.WhichOneof("predictor")
        c = getattr(config, which)
        if which == "borg_default":
            return BorgDefaultPredictor(c.phi, c.min_num_samples)
        if which == "rc_like":
            return RcLikePredictor(c.percentile, c.num_history_samples, c.min_num_samples,
                                   c.cap_to_limit)
        if which == "per_machine_percentile":
            return PerMachinePercentilePredictor(c.percentile, c.num_history_samples,
                                                 c.min_num_samples, c.cap_to_limit)
        if which == "n_sigma":
            return NSigmaPredictor(c.n, c.num_history_samples, c.min_num_samples, c.cap_to_limit)
        if which == "task_max":
            return MaxPredictor(c.min_num_samples, c.cap_to_limit)
        if which == "task_avg":
            return AvgPredictor(c.min_num_samples, c.cap_to_limit)
        if which in ("max_of", "avg_of"):
            parts = [self.predictor(inner) for inner in c.predictors]
            return MaxDecorator(parts) if which == "max_of" else AvgDecorator(parts)
        forecaster = dict(num_history_samples=c.num_history_samples,
                          refit_every_steps=c.refit_every_steps,
                          min_fit_samples=c.min_fit_samples, k1=c.k1, k2=c.k2,
                          uncertainty=UNCERTAINTY.Name(c.uncertainty).lower(),
                          min_num_samples=c.min_num_samples, cap_to_limit=c.cap_to_limit)
        if which == "arima":
            orders = [(o.p, o.d, o.q) for o in c.order] or [(1, 1, 1)]
            return ArimaForecaster(orders=orders, **forecaster)
        return GaussianProcessForecaster(pattern_length=c.pattern_length, step_s=self.step_s,
                                         **forecaster)


class FortuneTellers:
    """The configured fortune tellers, in config order, and the oracle they are scored
    against (the first oracle teller; None without one).

    Args:
      tellers: FortuneTeller messages.
      step_s: the simulation's time step (Metric.step_s).
    """

    def __init__(self, tellers, step_s: float):
        factory = TellerFactory(step_s)
        self.names: List[str] = [t.name for t in tellers]
        self.predictors: List[PeakPredictor] = [
            factory.oracle(t.oracle) if t.WhichOneof("teller") == "oracle"
            else factory.predictor(t.predictor) for t in tellers]
        oracles = [t.name for t in tellers if t.WhichOneof("teller") == "oracle"]
        self.scoring_oracle = oracles[0] if oracles else None

    def predict(self, samples: MachineSamples) -> Dict[str, np.ndarray]:
        """{teller name: float64[T]} for one machine."""
        return {name: predictor.predict(samples)
                for name, predictor in zip(self.names, self.predictors)}


class MachineResult(NamedTuple):
    """What the tellers produce for one machine."""

    timeseries: pa.Table
    machine_metrics: pa.Table
    cell_sums: Dict[str, CellSums]


def evaluate_machine(machine_id: int, samples: MachineSamples,
                     tellers: FortuneTellers) -> MachineResult:
    """Runs every teller on one machine and scores it against the scoring oracle."""
    predictions = tellers.predict(samples)
    num_steps = samples.num_steps
    usage, limit = total_usage(samples), total_limit(samples)
    oracle = (predictions[tellers.scoring_oracle] if tellers.scoring_oracle
              else np.full(num_steps, np.nan))
    oracle_name = tellers.scoring_oracle or ""
    names = tellers.names
    teller_of_row = pa.array(np.repeat(np.arange(len(names)), num_steps))
    timeseries = pa.table({
        "predictor": pa.array(names, pa.string()).take(teller_of_row),
        "machine_id": np.full(len(names) * num_steps, machine_id, dtype=np.int64),
        "time": np.tile(samples.times, len(names)),
        "num_tasks": np.tile(np.diff(samples.step_offsets), len(names)),
        "total_usage": np.tile(usage, len(names)),
        "total_limit": np.tile(limit, len(names)),
        "predicted_peak": np.concatenate([predictions[name] for name in names]),
        "oracle": np.tile(oracle, len(names)),
    }, schema=schemas.OVERCOMMIT_TIMESERIES)
    metrics = [machine_metrics(limit, predictions[name], oracle) for name in names]
    machine_table = pa.table({
        "predictor": pa.array(names, pa.string()),
        "oracle": pa.array([oracle_name] * len(names), pa.string()),
        "machine_id": np.full(len(names), machine_id, dtype=np.int64),
        "num_steps": np.full(len(names), num_steps, dtype=np.int64),
        "scored_steps": np.array([m.num_steps for m in metrics], dtype=np.int64),
        "violation_rate": np.array([m.violation_rate for m in metrics]),
        "violation_severity": np.array([m.mean_severity for m in metrics]),
        "savings_ratio": np.array([m.savings_ratio for m in metrics]),
    }, schema=schemas.OVERCOMMIT_MACHINE_METRICS)
    sums = {name: cell_sums(samples.times, limit, predictions[name], oracle) for name in names}
    return MachineResult(timeseries, machine_table, sums)


def build_machine_samples(samples: pa.Table):
    """One machine's OVERCOMMIT_SCHEDULED_USAGE rows → (MachineSamples or None, reasons, rows).

    Rows with invalid values are rejected; duplicate (instance, time) rows merge into one
    sample with the max usage and the max limit (the reference's alignment rule), each merged
    extra row reported. `rows` are the row indices of `samples` that `reasons` refer to.
    """
    usage = samples.column("usage").to_numpy(zero_copy_only=False).astype(np.float64)
    limit = samples.column("limit").to_numpy(zero_copy_only=False).astype(np.float64)
    valid_usage = np.isfinite(usage) & (usage >= 0)
    valid_limit = np.isfinite(limit) & (limit > 0)
    reasons = np.where(~valid_usage, INVALID_USAGE, INVALID_LIMIT)
    bad_rows = np.flatnonzero(~(valid_usage & valid_limit))
    good = np.flatnonzero(valid_usage & valid_limit)
    task = dictionary_codes(samples.column("instance_id"))[0][good]
    time = samples.column("time").to_numpy(zero_copy_only=False)[good]
    order = np.lexsort((time, task))
    task, time, rows = task[order], time[order], good[order]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = (task[1:] != task[:-1]) | (time[1:] != time[:-1])
    starts = np.flatnonzero(first)
    duplicate_rows = rows[~first]
    all_rows = np.concatenate([bad_rows, duplicate_rows])
    all_reasons = [str(r) for r in reasons[bad_rows]] + [DUPLICATE_SAMPLE] * len(duplicate_rows)
    if len(rows) == 0:
        return None, all_reasons, all_rows
    machine = MachineSamples.from_arrays(
        time[starts], task[starts],
        np.maximum.reduceat(usage[rows], starts), np.maximum.reduceat(limit[rows], starts))
    return machine, all_reasons, all_rows


def machine_tagged(element, tellers: FortuneTellers):
    """(machine_id, [tables]) → (tag, value) pairs: timeseries, machine metrics, cell sums per
    teller, dead letters and counts."""
    machine_id, tables = element
    samples = sharding.concat(tables, schemas.OVERCOMMIT_SCHEDULED_USAGE)
    machine, reasons, rows = build_machine_samples(samples)
    yield step_counts("samples", samples.num_rows, samples.num_rows - len(rows),
                      rejected=len(rows))
    if len(rows):
        yield _rejected(samples, rows, reasons, "overcommit_scheduled_usage")
    if machine is None:
        return
    result = evaluate_machine(machine_id, machine, tellers)
    yield TIMESERIES, result.timeseries
    yield MACHINE_METRICS, result.machine_metrics
    for name, sums in result.cell_sums.items():
        yield CELL, (name, sums)


def _split_by_machine(samples: pa.Table):
    return sharding.split_table(samples, samples.column("machine_id").to_numpy())


class RunFortuneTellers(beam.PTransform):
    """OVERCOMMIT_SCHEDULED_USAGE tables → {timeseries, machine metrics, cell sums per teller,
    dead_letters, counts}: the samples grouped once per machine, every teller run on them."""

    def __init__(self, tellers: FortuneTellers):
        super().__init__()
        self._tellers = tellers

    def expand(self, samples):
        return (samples
                | "KeyByMachine" >> beam.FlatMap(_split_by_machine)
                | "GroupByMachine" >> beam.GroupByKey()
                | "RunTellers" >> beam.FlatMap(machine_tagged, self._tellers)
                | "Split" >> SplitByTag((TIMESERIES, MACHINE_METRICS, CELL, DEAD_LETTERS,
                                         COUNTS)))


# --- Cell metrics and summary -----------------------------------------------------------------

class MergeCellSums(beam.CombineFn):
    """CellSums of many machines → the cell's CellSums (summed per time).

    The accumulator is a list of parts merged BATCH at a time: one sort per batch rather
    than one per machine, and bounded memory.
    """

    BATCH = 64

    def create_accumulator(self):
        return []

    def add_input(self, parts, sums):
        parts.append(sums)
        return [merge_cell_sums(parts)] if len(parts) >= self.BATCH else parts

    def merge_accumulators(self, accumulators):
        return [merge_cell_sums([part for parts in accumulators for part in parts])]

    def extract_output(self, parts):
        return merge_cell_sums(parts)


def cell_metrics_table(element, oracle_name: str) -> pa.Table:
    name, sums = element
    n = len(sums.time)
    return pa.table({
        "predictor": pa.array([name] * n, pa.string()),
        "oracle": pa.array([oracle_name] * n, pa.string()),
        "time": sums.time, "num_machines": sums.num_machines,
        "total_limit": sums.total_limit, "predicted_peak": sums.predicted_peak,
        "oracle_peak": sums.oracle, "savings_ratio": cell_savings(sums),
    }, schema=schemas.OVERCOMMIT_CELL_METRICS)


MACHINES = "machines"


def _machine_metric_values(table: pa.Table):
    """(predictor, (MACHINES, (violation_rate, violation_severity, savings_ratio))) per row."""
    columns = [table.column(c).to_pylist() for c in ("predictor",) + MACHINE_METRIC_NAMES]
    for name, *values in zip(*columns):
        yield name, (MACHINES, tuple(values))


def _keyed_cell_table(table: pa.Table):
    return table.column("predictor")[0].as_py(), (CELL, table)


def summary_table(element, oracle_name: str) -> pa.Table:
    """(predictor, [(MACHINES, metric triple) or (CELL, cell table)]) → summary rows."""
    name, values = element
    values = list(values)
    per_machine = np.array([v for kind, v in values if kind == MACHINES],
                           dtype=np.float64).reshape(-1, 3)
    cell = [v for kind, v in values if kind == CELL]
    cell_savings = (np.concatenate([t.column("savings_ratio").to_numpy() for t in cell])
                    if cell else np.zeros(0))
    series = dict(zip(MACHINE_METRIC_NAMES, per_machine.T))
    series[CELL_METRIC_NAME] = cell_savings
    rows = []
    for metric, values in series.items():
        finite = values[np.isfinite(values)]
        quantiles = cdf_quantiles(finite)
        rows.append({"predictor": name, "oracle": oracle_name, "metric": metric,
                     "n": len(finite), "mean": float(finite.mean()) if len(finite) else np.nan,
                     **{f"p{round(q * 100)}": quantiles[q] for q in CDF_QUANTILES}})
    return pa.Table.from_pylist(rows, schema=schemas.OVERCOMMIT_SUMMARY)


# --- The stage --------------------------------------------------------------------------------

class OvercommitStage(beam.PTransform):
    """{"usage": PCollection[pa.Table], ...} → the overcommit tables, "dead_letters".

    Args:
      config: the RunConfig (filter, metric, reset_and_shift, scheduler, fortune_teller and
        the filtered_usage / scheduled_usage LoadOrWrite fields).
    """

    def __init__(self, config):
        super().__init__()
        self._config = config

    @staticmethod
    def usage_columns(config) -> List[str]:
        """The columns of `usage` the stage reads, in USAGE order: the window's identity and
        what the filter and the metric use (all of them when filtered_usage is written, a
        copy of whole rows)."""
        if config.filtered_usage.HasField("output"):
            return schemas.USAGE.names
        used = {"machine_id", "instance_id", "start_time", *filter_columns(config.filter),
                *metric_columns(config.metric)}
        return [name for name in schemas.USAGE.names if name in used]

    def _scheduled_samples(self, tables, dead_letters: list, counts: list):
        """The OVERCOMMIT_SCHEDULED_USAGE tables: filter, metric, reset_and_shift and
        scheduler in paper 004's order, as few Beam steps as the LoadOrWrite copies and a
        reset to time zero (which groups by instance) allow."""
        config = self._config
        pipeline = tables["usage"].pipeline
        if config.scheduled_usage.HasField("input"):
            return pipeline | "LoadScheduledUsage" >> ReadTable(
                config.scheduled_usage.input, schemas.OVERCOMMIT_SCHEDULED_USAGE)
        step_us = config.metric.step_s * US_PER_S

        def run_steps(label, rows, steps):
            results = rows | label >> RunSteps(steps)
            dead_letters.append(results[DEAD_LETTERS])
            counts.append(results[COUNTS])
            return results[ROWS]

        if config.filtered_usage.HasField("input"):
            rows = pipeline | "LoadFilteredUsage" >> ReadTable(config.filtered_usage.input,
                                                                schemas.USAGE)
            steps = []
        else:
            rows, steps = tables["usage"], [functools.partial(filter_tagged,
                                                               config=config.filter)]
            if config.filtered_usage.HasField("output"):
                rows = run_steps("FilterUsage", rows, steps)
                _ = rows | "CopyFilteredUsage" >> WriteTable.to_location(
                    config.filtered_usage.output, schemas.USAGE)
                steps = []
        steps.append(functools.partial(metric_tagged, config=config.metric, step_us=step_us))
        reset = config.reset_and_shift
        if config.HasField("reset_and_shift") and reset.reset_time_to_zero:
            rows = (run_steps("SelectMetric", rows, steps)
                    | "ResetAndShift" >> ResetToZeroAndShift(reset, step_us))
            steps = []
        elif config.HasField("reset_and_shift"):
            steps.append(functools.partial(shift_tagged, config=reset, step_us=step_us))
        steps.append(functools.partial(schedule_tagged, config=config.scheduler))
        scheduled = run_steps("PrepareSamples", rows, steps)
        if config.scheduled_usage.HasField("output"):
            _ = scheduled | "CopyScheduledUsage" >> WriteTable.to_location(
                config.scheduled_usage.output, schemas.OVERCOMMIT_SCHEDULED_USAGE)
        return scheduled

    def expand(self, tables):
        config = self._config
        dead_letters, counts = [], []
        samples = self._scheduled_samples(tables, dead_letters, counts)
        tellers = FortuneTellers(config.fortune_teller, config.metric.step_s)
        oracle_name = tellers.scoring_oracle or ""
        results = samples | "RunFortuneTellers" >> RunFortuneTellers(tellers)
        dead_letters.append(results[DEAD_LETTERS])
        counts.append(results[COUNTS])
        cell = (results[CELL]
                | "CellSums" >> beam.CombinePerKey(MergeCellSums())
                | "CellMetrics" >> beam.Map(cell_metrics_table, oracle_name))
        summary = (
            (results[MACHINE_METRICS] | "MetricValues" >> beam.FlatMap(_machine_metric_values),
             cell | "KeyCellByPredictor" >> beam.Map(_keyed_cell_table))
            | "FlattenSummaryInputs" >> beam.Flatten()
            | "GroupByPredictor" >> beam.GroupByKey()
            | "Summarize" >> beam.Map(summary_table, oracle_name))
        return {
            TIMESERIES: results[TIMESERIES],
            MACHINE_METRICS: results[MACHINE_METRICS],
            CELL_METRICS: cell,
            SUMMARY: summary,
            OVERCOMMIT_COUNTS: (tuple(counts)
                                | "FlattenCounts" >> beam.Flatten()
                                | "SumCounts" >> beam.CombinePerKey(_sum_counts)
                                | "CountsTable" >> beam.Map(counts_table)),
            DEAD_LETTERS: tuple(dead_letters) | "FlattenDeadLetters" >> beam.Flatten(),
        }
