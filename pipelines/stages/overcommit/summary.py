"""The overcommit stage's cell metrics (per teller, summed over machines per time) and its
summary (CDF quantiles of each per-machine metric and of the cell's savings)."""

import math
from typing import NamedTuple, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa

from pipelines import schemas
from pipelines.stages.overcommit.tellers import CELL
from predictors.peak.overcommit_metrics import (
    CDF_QUANTILES,
    CellSums,
    cdf_quantiles,
    cell_savings,
)

# Summary rows: the per-machine metrics (over machines) and the cell's savings (over time).
MACHINE_METRIC_NAMES = ("violation_rate", "violation_severity", "savings_ratio")
CELL_METRIC_NAME = "cell_savings_ratio"


# --- Cell metrics and summary -----------------------------------------------------------------

# Exact sums: every finite float64 is an integer multiple of 2**-1074 (the smallest
# subnormal); on the finer grid 2**-1126 every value's 53-bit integer mantissa is shifted left,
# never right. Python's integers add those multiples exactly, and int / int is correctly
# rounded, so a sum is the exact sum rounded once, whatever the order of its terms.
_GRID_BITS = 1126
_GRID = 1 << _GRID_BITS


class ExactSums(NamedTuple):
    """Per-time sums of float64 values, kept exact: the finite values' sum as a count of
    2**-1126 (Python ints), and the sum of the non-finite ones (0, ±inf or NaN: the same in
    any order)."""

    numerators: np.ndarray  # object[K]
    special: np.ndarray  # float64[K]

    @classmethod
    def of(cls, values: np.ndarray) -> "ExactSums":
        finite = np.isfinite(values)
        mantissa, exponent = np.frexp(np.where(finite, values, 0.0))
        integer_mantissa = np.ldexp(mantissa, 53).astype(np.int64).astype(object)
        numerators = integer_mantissa << (exponent.astype(np.int64) + _GRID_BITS - 53
                                          ).astype(object)
        return cls(numerators, np.where(finite, 0.0, values))

    @classmethod
    def scattered(cls, parts: Sequence["ExactSums"], index: np.ndarray,
                  size: int) -> "ExactSums":
        """The sums of `parts` (concatenated) added into `size` slots by `index`."""
        numerators, special = np.zeros(size, dtype=object), np.zeros(size)
        np.add.at(numerators, index, np.concatenate([p.numerators for p in parts]))
        with np.errstate(invalid="ignore"):  # inf + -inf: NaN, as in a float sum
            np.add.at(special, index, np.concatenate([p.special for p in parts]))
        return cls(numerators, special)

    def rounded(self) -> np.ndarray:
        """float64[K]: each exact sum rounded to the nearest float64 (ties to even)."""
        return np.where(self.special != 0, self.special,
                        np.array([_rounded(n) for n in self.numerators], dtype=np.float64))


def _rounded(numerator: int) -> float:
    try:
        return numerator / _GRID
    except OverflowError:  # past the largest float64, where a float sum overflows too
        return math.inf if numerator > 0 else -math.inf


class ExactCellSums(NamedTuple):
    """CellSums with exact float sums (`ExactSums`): time int64[K] (sorted), num_machines
    int64[K], total_limit, predicted_peak, oracle."""

    time: np.ndarray
    num_machines: np.ndarray
    total_limit: ExactSums
    predicted_peak: ExactSums
    oracle: ExactSums

    @classmethod
    def of(cls, sums: CellSums) -> "ExactCellSums":
        return cls(sums.time, sums.num_machines,
                   *(ExactSums.of(getattr(sums, f)) for f in _SUMMED_FLOATS))

    @classmethod
    def merged(cls, parts: Sequence["ExactCellSums"]) -> "ExactCellSums":
        """The exact sums per time of the union of the machines of `parts`."""
        if not parts:
            return cls.of(CellSums(np.zeros(0, np.int64), np.zeros(0, np.int64),
                                   *np.zeros((3, 0))))
        time, inverse = np.unique(np.concatenate([p.time for p in parts]),
                                  return_inverse=True)
        num_machines = np.zeros(len(time), np.int64)
        np.add.at(num_machines, inverse, np.concatenate([p.num_machines for p in parts]))
        return cls(time, num_machines, *(
            ExactSums.scattered([getattr(p, f) for p in parts], inverse, len(time))
            for f in _SUMMED_FLOATS))

    def rounded(self) -> CellSums:
        return CellSums(self.time, self.num_machines,
                        *(getattr(self, f).rounded() for f in _SUMMED_FLOATS))


_SUMMED_FLOATS = ("total_limit", "predicted_peak", "oracle")


class MergeCellSums(beam.CombineFn):
    """CellSums of many machines → the cell's CellSums (summed per time).

    Runners add the machines in different orders and groupings, so the sums are kept exact
    (`ExactCellSums`) and rounded once, in `extract_output`: the result has the same bits on
    every runner. The accumulator is a list of parts merged BATCH at a time: one sort per
    batch rather than one per machine, and bounded memory.
    """

    BATCH = 64

    def create_accumulator(self):
        return []

    def add_input(self, parts, sums):
        parts.append(ExactCellSums.of(sums))
        return [ExactCellSums.merged(parts)] if len(parts) >= self.BATCH else parts

    def merge_accumulators(self, accumulators):
        return [ExactCellSums.merged([part for parts in accumulators for part in parts])]

    def extract_output(self, parts):
        return ExactCellSums.merged(parts).rounded()


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


def machine_metric_values(table: pa.Table):
    """(predictor, (MACHINES, (violation_rate, violation_severity, savings_ratio))) per row."""
    columns = [table.column(c).to_pylist() for c in ("predictor",) + MACHINE_METRIC_NAMES]
    for name, *values in zip(*columns):
        yield name, (MACHINES, tuple(values))


def keyed_cell_table(table: pa.Table):
    """(predictor, (CELL, table)) for a teller's cell metrics; nothing for a teller scored at
    no time (NaN everywhere: nothing advertised), whose summary then counts no cell value."""
    if table.num_rows:
        yield table.column("predictor")[0].as_py(), (CELL, table)


def _exact_mean(values: np.ndarray) -> float:
    """The mean of the values with their sum correctly rounded (math.fsum): the values come
    from a GroupByKey, in any order, and a float sum in that order differs in the last bits."""
    return math.fsum(values) / len(values) if len(values) else np.nan


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
                     "n": len(finite), "mean": _exact_mean(finite),
                     **{f"p{round(q * 100)}": quantiles[q] for q in CDF_QUANTILES}})
    return pa.Table.from_pylist(rows, schema=schemas.OVERCOMMIT_SUMMARY)
