"""The overcommit stage's cell metrics (per teller, summed over machines per time) and its
summary (CDF quantiles of each per-machine metric and of the cell's savings)."""


import apache_beam as beam
import numpy as np
import pyarrow as pa

from pipelines import schemas
from pipelines.stages.overcommit.tellers import CELL
from predictors.peak.overcommit_metrics import (
    CDF_QUANTILES,
    cdf_quantiles,
    cell_savings,
    merge_cell_sums,
)

# Summary rows: the per-machine metrics (over machines) and the cell's savings (over time).
MACHINE_METRIC_NAMES = ("violation_rate", "violation_severity", "savings_ratio")
CELL_METRIC_NAME = "cell_savings_ratio"


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


def machine_metric_values(table: pa.Table):
    """(predictor, (MACHINES, (violation_rate, violation_severity, savings_ratio))) per row."""
    columns = [table.column(c).to_pylist() for c in ("predictor",) + MACHINE_METRIC_NAMES]
    for name, *values in zip(*columns):
        yield name, (MACHINES, tuple(values))


def keyed_cell_table(table: pa.Table):
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
