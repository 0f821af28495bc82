"""The fortune tellers of the overcommit stage: every configured oracle and predictor run on
one machine's samples (grouped once per machine), and scored against the first oracle.

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
- A plug-in predictor's output is checked (`CheckedPredictor`): a bad one fails the run naming
  the teller, the machine, the plug-in's class path and the value.
"""

from typing import Dict, List, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa

from configs.registry import PluginFailed
from pipelines import progress, schemas
from pipelines.io import sharding, spill
from pipelines.io.dead_letters import COUNTS, DEAD_LETTERS, EXCLUSIONS, SplitByTag, left_out
from pipelines.io.failures import RunFailed
from pipelines.stages.overcommit.steps import SOURCE, step_counts
from predictors.peak.machine_samples import MachineSamples
from predictors.peak.overcommit_metrics import (
    CellSums,
    cell_sums,
    machine_metrics,
    total_limit,
    total_usage,
)
from predictors.peak.peak_oracle import PeakOracle
from predictors.peak.peak_predictor import PeakPredictor
from predictors.peak.registry import build_predictor

TIMESERIES = "overcommit_timeseries"
MACHINE_METRICS = "overcommit_machine_metrics"
CELL = "cell"
# Dead-letter reasons of the per-machine samples step.
INVALID_USAGE = "usage is negative or not finite"
INVALID_LIMIT = "limit is not > 0 (or not finite): a task without a limit cannot be overcommitted"
# An exclusion, not a dead letter: the rows are merged, and a task rescheduled within a step
# onto the same machine gives two such samples.
DUPLICATE_SAMPLE = ("two samples of an instance in one step on one machine (a reschedule "
                    "within the step, or a repeated row): merged into one (max usage, max "
                    "limit)")
_MACHINES_LOG = progress.Throttle()  # a progress line now and then, per worker process


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
    """Builds predictors from PeakPredictorConfig / PeakOracleConfig messages (through the
    peak-predictor registry); equal configurations give the same SharedPredictor object.

    It is the registry builders' context: `step_s` and `predictor(config)` for inner
    predictors."""

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
        return build_predictor(config, self)


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

    def predict(self, samples: MachineSamples,
                machine_id: Optional[int] = None) -> Dict[str, np.ndarray]:
        """{teller name: float64[T]} for one machine; a plug-in's failure raises RunFailed
        naming the teller (and `machine_id`, if given)."""
        predictions = {}
        for name, predictor in zip(self.names, self.predictors):
            try:
                predictions[name] = predictor.predict(samples)
            except PluginFailed as e:
                machine = "" if machine_id is None else f" on machine {machine_id}"
                raise RunFailed(f"fortune teller {name!r}{machine}: {e}") from None
        return predictions


class MachineResult(NamedTuple):
    """What the tellers produce for one machine."""

    timeseries: pa.Table
    machine_metrics: pa.Table
    cell_sums: Dict[str, CellSums]


def evaluate_machine(machine_id: int, samples: MachineSamples,
                     tellers: FortuneTellers) -> MachineResult:
    """Runs every teller on one machine and scores it against the scoring oracle."""
    predictions = tellers.predict(samples, machine_id)
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
    # Tasks in instance-id order, not arrival order: a machine's per-step sums then add in
    # the same order whatever order Beam delivers its rows in.
    task = sharding.sorted_codes(samples.column("instance_id"))[good]
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


# Machines are grouped into this many shards: a shard's outputs cross the sink's grouping as
# a few large tables (spilled to files), not one small table per machine, and a shard of a
# 12k-machine cell-month (~12 machines' samples) fits in a worker's memory.
MACHINE_SHARDS = 1024


def machine_tagged(element, tellers: FortuneTellers):
    """(machine_id, [tables]) → (tag, value) pairs: timeseries, machine metrics, cell sums per
    teller, dead letters and counts."""
    machine_id, tables = element
    samples = sharding.concat(map(spill.load, tables), schemas.OVERCOMMIT_SCHEDULED_USAGE)
    machine, reasons, rows = build_machine_samples(samples)
    merged = sum(reason == DUPLICATE_SAMPLE for reason in reasons)
    yield step_counts("samples", samples.num_rows, samples.num_rows - len(rows),
                      filtered=merged, rejected=len(rows) - merged)
    if len(rows):
        yield from left_out(SOURCE, "overcommit_scheduled_usage", samples.take(pa.array(rows)),
                            reasons, frozenset((DUPLICATE_SAMPLE,)))
    if machine is None:
        return
    result = evaluate_machine(machine_id, machine, tellers)
    progress.count("overcommit.machines_scored")
    progress.count("overcommit.samples_scored", machine.num_samples)
    if _MACHINES_LOG.ready():
        progress.report("overcommit: machine %d scored by %d fortune tellers (%d samples)",
                          machine_id, len(tellers.names), machine.num_samples)
    yield TIMESERIES, result.timeseries
    yield MACHINE_METRICS, result.machine_metrics
    for name, sums in result.cell_sums.items():
        yield CELL, (name, sums)


def shard_tagged(element, tellers: FortuneTellers):
    """(machine shard, [tables]) → `machine_tagged`'s pairs for each machine of the shard in
    machine_id order, its timeseries and machine metrics as one table each."""
    _, tables = element
    samples = sharding.concat(map(spill.load, tables), schemas.OVERCOMMIT_SCHEDULED_USAGE)
    gathered = {TIMESERIES: [], MACHINE_METRICS: []}
    for machine_id, rows in sharding.split_by_key(samples, "machine_id"):
        for tag, value in machine_tagged((machine_id, [rows]), tellers):
            if tag in gathered:
                gathered[tag].append(value)
            else:
                yield tag, value
    for tag, values in gathered.items():
        if values:
            yield tag, pa.concat_tables(values)


def _machine_shard_pieces(samples: pa.Table, spill_to: Optional[spill.SpillTo]):
    """(machine shard, its rows of `samples`) pairs; a large table's pieces as Spilled
    references to one file of the run."""
    shards = sharding.shard_of_ints(samples.column("machine_id").to_numpy(), MACHINE_SHARDS)
    return spill.split_spilled(samples, shards, spill_to)


class RunFortuneTellers(beam.PTransform):
    """OVERCOMMIT_SCHEDULED_USAGE tables → {timeseries, machine metrics, cell sums per teller,
    dead_letters, counts}: the samples grouped once into shards of machines, every teller run
    on each machine of a shard."""

    def __init__(self, tellers: FortuneTellers):
        super().__init__()
        self._tellers = tellers

    def expand(self, samples):
        # Every sample crosses this grouping: through files of the run (pipelines/io/spill.py).
        return (samples
                | "KeyByMachineShard" >> beam.FlatMap(_machine_shard_pieces, spill.spill_to())
                | "GroupByMachineShard" >> beam.GroupByKey()
                | "RunTellers" >> beam.FlatMap(shard_tagged, self._tellers)
                | "Split" >> SplitByTag((TIMESERIES, MACHINE_METRICS, CELL, DEAD_LETTERS,
                                         EXCLUSIONS, COUNTS)))
