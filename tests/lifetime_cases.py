"""Hand-made instances of the lifetime stage's tests, with their split and examples by brute
force (tests/test_lifetime_pipeline.py, tests/test_lifetime_sampling.py)."""

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import schemas
from predictors.lifetime.examples import REASON_NEGATIVE_LIFETIME, REASON_ZERO_LIFETIME
from predictors.lifetime.features import REASON_NO_FEATURES

US = 10**6
DAY_S = 86400
CAP_S = DAY_S
TRAIN_FRACTION = 0.6
LIFETIME_CONFIG = f"""
lifetime_model {{
  lifetime_cap_s: {CAP_S} train_fraction: {TRAIN_FRACTION}
  num_trees: 40 learning_rate: 0.2 early_stopping_rounds: 0
  long_lived_threshold_s: 43200 train_lifetime_fractions_model: true
  num_uptime_quantiles: 10 num_shards: 3
}}
output {{ num_shards: 2 }}
"""
BAD = {"zero": REASON_ZERO_LIFETIME, "negative": REASON_NEGATIVE_LIFETIME,
       "featureless": REASON_NO_FEATURES}


def hand_made_instances(n: int = 900, seed: int = 0) -> pd.DataFrame:
    """Instances over 10 days whose job name decides the lifetime: log10 lifetime (s) =
    2.5 + 0.4 · job + N(0, 0.15), job 0..7 (5 minutes to 2 days); still running at day 10 =
    censored. Plus 20 instances running since before the trace (start 0) and two each of
    zero lifetimes, negative lifetimes and instances without any feature value."""
    rng = np.random.default_rng(seed)
    job = rng.integers(0, 8, n)
    start_s = rng.uniform(60, 10 * DAY_S, n)
    end_s = start_s + 10 ** (2.5 + 0.4 * job + rng.normal(0, 0.15, n))
    end_s[end_s > 10 * DAY_S] = np.nan
    before = rng.uniform(600, 3 * DAY_S, 20)
    start_s = np.r_[start_s, np.zeros(20), [DAY_S, 2 * DAY_S, 3 * DAY_S, 4 * DAY_S],
                    [5 * DAY_S, 6 * DAY_S]]
    end_s = np.r_[end_s, np.where(np.arange(20) < 15, before, np.nan),
                  [DAY_S, 2 * DAY_S, 3 * DAY_S - 10, 4 * DAY_S - 10], [6 * DAY_S, 7 * DAY_S]]
    names = ([f"ok{i}" for i in range(n)] + [f"before{i}" for i in range(20)]
             + ["zero0", "zero1", "negative0", "negative1", "featureless0", "featureless1"])
    total = len(names)
    featured = np.arange(total) < total - 2
    frame = pd.DataFrame({
        "instance_id": names,
        "collection_id": np.arange(total),
        "pool": np.where(featured, "cell", None),
        "start_time": np.round(start_s * US).astype(np.int64),
        "end_time": pd.array(np.round(end_s * US), dtype="Int64"),
        "cpu_request": np.where(featured, rng.choice([0.5, 1.0], total), np.nan),
        "memory_request": np.where(featured, rng.choice([1.0, 2.0], total), np.nan),
        "priority": pd.array(np.where(featured, rng.choice([100, 200], total), np.nan),
                             dtype="Int64"),
        "collection_logical_name": np.where(
            featured, [f"job{j}" for j in np.r_[job, rng.integers(0, 8, total - n)]], None),
    })
    frame["end_type"] = np.where(frame["end_time"].isna(), None, "FINISH")
    return frame


def write_instances(frame: pd.DataFrame, directory) -> str:
    os.makedirs(directory, exist_ok=True)
    columns = {f.name: frame[f.name] if f.name in frame else pa.nulls(len(frame), f.type)
               for f in schemas.INSTANCES}
    table = pa.table({name: pa.array(values, type=schemas.INSTANCES.field(name).type)
                      if not isinstance(values, pa.Array) else values
                      for name, values in columns.items()}, schema=schemas.INSTANCES)
    pq.write_table(table, os.path.join(directory, "part-0.parquet"))
    return str(directory)


def expected_split(frame: pd.DataFrame, cap_s: float, train_fraction: float):
    """The split by brute force: (split time, observation end, rows per part, each row with
    the end it has in its part's view)."""
    start = frame["start_time"].to_numpy(np.float64)
    end = frame["end_time"].to_numpy(np.float64, na_value=np.nan)
    first = start[start > 0].min()
    observation_end = np.nanmax(np.r_[start, end])
    split_us = int(first + train_fraction * (observation_end - first))
    bad = frame["instance_id"].str.startswith(tuple(BAD)).to_numpy()
    used = ~bad & (start > 0)
    in_train = used & (start < split_us)
    parts = {
        "train": in_train & (start <= split_us - cap_s * US),
        "train_recent": in_train & (start > split_us - cap_s * US),
        "test": used & (start >= split_us),
        "started_before_trace": ~bad & (start <= 0),
    }
    view_end = np.where(in_train & (end > split_us), np.nan, end)
    return split_us, int(observation_end), parts, view_end


# The default age grid of a 1-day cap.
AGES_S = (0, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 57600)


def reference_examples(frame, parts, view_end, split_us, observation_end, cap_s):
    """(instance_id, split, uptime_s, label, censored) of every example, one loop step per
    (instance, age): an age the instance lives past, with a known label."""
    rows = []
    for part, part_end in (("train", split_us), ("test", observation_end)):
        for i in np.flatnonzero(parts[part]):
            finished = not np.isnan(view_end[i])
            start = frame["start_time"].iloc[i]
            duration_s = ((view_end[i] if finished else part_end) - start) / US
            for age_s in AGES_S:
                remaining_s = duration_s - age_s
                if remaining_s > 0 and (finished or remaining_s >= cap_s):
                    rows.append((frame["instance_id"].iloc[i], part, float(age_s),
                                 np.log10(min(max(remaining_s, 1.0), cap_s)), not finished))
    return pd.DataFrame(rows, columns=["instance_id", "split", "uptime_s",
                                       "log10_remaining_s", "censored"])
