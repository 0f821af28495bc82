"""Features of an instance for the lifetime models ([Ling25ext] App. A, [Barbalho23] §3.2.2).

`derive_features` turns rows of the canonical `instances` table into named features, each
computed from the instance columns that exist in the table: trace fields used as categories
(priority, scheduling class, collection type, user, logical name, pool, vertical scaling,
scheduler, Azure subscription and VM category), the request shape ("cpu x memory") as a
category, the requests as numbers, the hour of day and day of week of the start, and the
deployment size. Which ones a table yields is decided by its columns, so Google v3 and Azure
instances get different feature sets from the same code.

`FeatureEncoder` fixes that set on training data and turns instances into the float matrix
that LightGBM consumes: a categorical feature becomes an integer code, with categories seen
fewer than `min_category_count` times in training, and unknown categories at prediction
time, mapped to one shared "other" code ([Ling25ext] App. A collapses categories with < 10
examples).
"""

import json
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyarrow as pa

from predictors.lifetime.feature_names import CATEGORICAL, FEATURES

Instances = Union[pd.DataFrame, pa.Table]

# Code 0 of every categorical feature: rare in training, or unseen.
OTHER_CATEGORY = "<other>"
# Category of a null value; it is kept or collapsed like any other category.
NULL_CATEGORY = "<null>"

_DAY_S = 86400.0
_HOUR_S = 3600.0

REASON_NO_FEATURES = "no lifetime feature has a value (every feature column is null)"
# Features that every instance has, since they come from its start time alone.
_START_TIME_FEATURES = ("start_hour_of_day", "start_day_of_week")

# Every instance column some feature is computed from: all of a row that a model reads.
SOURCE_COLUMNS = frozenset(column for _, _, sources in FEATURES for column in sources)
_KIND = {name: kind for name, kind, _ in FEATURES}
_SOURCES = {name: sources for name, _, sources in FEATURES}
# Rows that `FeatureEncoder.transform` converts to pandas at a time (a placement pool's
# millions of rows would otherwise be copied whole, ~0.5 kB each).
TRANSFORM_CHUNK_ROWS = 1 << 18


def instances_frame(instances: Instances,
                    columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """`instances` as a pandas DataFrame (an Arrow table is converted, a frame passed on);
    with `columns`, an Arrow table converts only those of them it has (a pool's rows hold
    ~20 columns, half of them strings, where a model reads a few)."""
    if isinstance(instances, pa.Table):
        if columns is not None:
            instances = instances.select([c for c in instances.column_names if c in columns])
        return instances.to_pandas()
    if isinstance(instances, pd.DataFrame):
        return instances
    raise TypeError(f"instances must be a pandas DataFrame or a pyarrow Table, "
                    f"not {type(instances).__name__}")


def _category_label(value) -> str:
    # Integer-valued numbers print without ".0" so that priority 200 reads the same whether
    # the column arrived as int64 or as float64 with NaN for nulls.
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _category_strings(column: pd.Series) -> np.ndarray:
    """Object array of category labels; nulls become NULL_CATEGORY. Formats uniques only."""
    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    labels = np.array([_category_label(u) for u in uniques] + [NULL_CATEGORY], dtype=object)
    return labels[codes]


def _request_shape(cpu: np.ndarray, memory: np.ndarray) -> np.ndarray:
    pairs = np.column_stack([cpu, memory])
    uniques, inverse = np.unique(pairs, axis=0, return_inverse=True)
    labels = np.array(
        [NULL_CATEGORY if np.isnan(c) or np.isnan(m) else f"{c:.6g}x{m:.6g}" for c, m in uniques],
        dtype=object)
    return labels[inverse.reshape(-1)]


def _numeric(column: pd.Series) -> np.ndarray:
    return pd.to_numeric(column).to_numpy(dtype=np.float64, na_value=np.nan)


def available_features(columns: Sequence[str]) -> List[str]:
    """Names of the features whose source columns are all in `columns`, in FEATURES order."""
    present = set(columns)
    return [name for name, _, sources in FEATURES if set(sources) <= present]


def derive_features(instances: Instances, features: Optional[Sequence[str]] = None,
                    time_origin_s: float = 0.0) -> pd.DataFrame:
    """Raw feature values of every instance, one column per feature.

    Args:
      instances: rows of the canonical `instances` table.
      features: names from FEATURES to derive; None derives every available one.
      time_origin_s: seconds added to trace time (start_time / 1e6) before taking the hour of
        day and the day of week; 0 counts days and hours from the trace start.

    Returns:
      A DataFrame with the same row order: categorical features as strings (nulls are
      NULL_CATEGORY), numeric features as float64 (nulls are NaN).
    """
    frame = instances_frame(instances)
    names = available_features(frame.columns) if features is None else list(features)
    unknown = [name for name in names if name not in _KIND]
    if unknown:
        raise ValueError(f"unknown lifetime features {unknown}; known: {list(_KIND)}")
    missing = sorted({c for name in names for c in _SOURCES[name]} - set(frame.columns))
    if missing:
        raise ValueError(f"instances lack column(s) {missing} needed by lifetime features "
                         f"{[n for n in names if set(_SOURCES[n]) & set(missing)]}")
    derived = {}
    for name in names:
        if name == "request_shape":
            derived[name] = _request_shape(_numeric(frame["cpu_request"]),
                                           _numeric(frame["memory_request"]))
        elif name == "memory_per_cpu":
            cpu = _numeric(frame["cpu_request"])
            with np.errstate(divide="ignore", invalid="ignore"):
                derived[name] = np.where(cpu > 0, _numeric(frame["memory_request"]) / cpu, np.nan)
        elif name in ("start_hour_of_day", "start_day_of_week"):
            start_s = _numeric(frame["start_time"]) / 1e6 + time_origin_s
            derived[name] = (np.floor(np.mod(start_s, _DAY_S) / _HOUR_S)
                             if name == "start_hour_of_day"
                             else np.mod(np.floor(start_s / _DAY_S), 7.0))
        elif _KIND[name] == CATEGORICAL:
            derived[name] = _category_strings(frame[name])
        else:
            derived[name] = _numeric(frame[name])
    return pd.DataFrame(derived, index=frame.index)


def lacks_feature_values(instances: Instances) -> np.ndarray:
    """Bool (n,): every available feature of the instance is null, apart from those of its
    start time, so a model could tell it from no other instance of the same hour (such
    instances are rejected with REASON_NO_FEATURES rather than predicted as "other")."""
    frame = instances_frame(instances)
    names = [n for n in available_features(frame.columns) if n not in _START_TIME_FEATURES]
    derived = derive_features(frame, names)
    lacking = np.ones(len(frame), dtype=bool)
    for name in names:
        values = derived[name].to_numpy()
        lacking &= (values == NULL_CATEGORY) if _KIND[name] == CATEGORICAL else np.isnan(values)
    return lacking


class FeatureEncoder:
    """Encodes instances as a float64 matrix for LightGBM; fit on training instances.

    Fitting keeps the available features that are not entirely null in the training rows.
    A categorical feature's code is 0 for OTHER_CATEGORY (rare in training: fewer than
    `min_category_count` rows; or unseen) and 1..k for the kept categories in sorted order.
    Counts are of the rows given to `fit`, i.e. instances, not uptime-augmented examples, so
    that the threshold does not depend on how many examples each instance becomes.
    """

    def __init__(self, min_category_count: int = 10, features: Optional[Sequence[str]] = None,
                 time_origin_s: float = 0.0):
        """
        Args:
          min_category_count: categories seen in fewer training rows collapse into "other".
          features: candidate feature names (FEATURES); None uses every available one.
          time_origin_s: see `derive_features`.
        """
        if min_category_count < 1:
            raise ValueError(f"min_category_count must be >= 1, got {min_category_count}")
        self.min_category_count = int(min_category_count)
        self.features = None if features is None else list(features)
        self.time_origin_s = float(time_origin_s)
        self.feature_names_: List[str] = []
        self.categories_: Dict[str, List[str]] = {}

    def fit(self, instances: Instances) -> "FeatureEncoder":
        frame = instances_frame(instances)
        candidates = (available_features(frame.columns) if self.features is None
                      else self.features)
        derived = derive_features(frame, candidates, self.time_origin_s)
        self.feature_names_, self.categories_ = [], {}
        for name in candidates:
            values = derived[name]
            if _KIND[name] == CATEGORICAL:
                if (values == NULL_CATEGORY).all():
                    continue
                counts = values.value_counts()
                kept = counts.index[counts.to_numpy() >= self.min_category_count]
                self.categories_[name] = sorted(str(c) for c in kept)
            elif np.isnan(values.to_numpy()).all():
                continue
            self.feature_names_.append(name)
        if not self.feature_names_:
            raise ValueError("no lifetime feature has a non-null value in the training "
                             f"instances (columns: {list(frame.columns)})")
        return self

    @property
    def categorical_indices(self) -> List[int]:
        """Matrix columns holding categorical codes (for LightGBM's categorical_feature)."""
        return [i for i, name in enumerate(self.feature_names_) if _KIND[name] == CATEGORICAL]

    @property
    def source_columns(self) -> List[str]:
        """Instance columns that `transform` needs."""
        return sorted({c for name in self.feature_names_ for c in _SOURCES[name]})

    def transform(self, instances: Instances) -> np.ndarray:
        """Feature matrix, shape (n_instances, len(feature_names_)), float64, C order.

        Raises:
          ValueError: the instances lack a column that a fitted feature is computed from.
        """
        n = len(instances)
        matrix = np.empty((n, len(self.feature_names_)), dtype=np.float64)
        start = 0
        for chunk in self.transform_chunks(instances):
            matrix[start:start + len(chunk)] = chunk
            start += len(chunk)
        return matrix

    def transform_chunks(self, instances: Instances) -> Iterator[np.ndarray]:
        """`transform`'s rows, TRANSFORM_CHUNK_ROWS at a time, in order: float64 (rows,
        len(feature_names_)) each (one empty chunk for no instances). Each row's features
        are its own, so the pandas copies and derived columns stay those of one chunk.

        Raises:
          ValueError: the instances lack a column that a fitted feature is computed from.
        """
        if not self.feature_names_:
            raise ValueError("FeatureEncoder is not fitted")
        columns = (instances.column_names if isinstance(instances, pa.Table)
                   else instances_frame(instances).columns)
        missing = sorted(set(self.source_columns) - set(columns))
        if missing:
            raise ValueError(
                f"instances lack column(s) {missing} that the lifetime feature encoder was fit "
                f"with (features {self.feature_names_})")
        for start in range(0, max(len(instances), 1), TRANSFORM_CHUNK_ROWS):
            chunk = (instances.slice(start, TRANSFORM_CHUNK_ROWS)
                     if isinstance(instances, pa.Table)
                     else instances.iloc[start:start + TRANSFORM_CHUNK_ROWS])
            yield self._encode_frame(instances_frame(chunk, self.source_columns))

    def _encode_frame(self, frame: pd.DataFrame) -> np.ndarray:
        """`transform` of the rows of `frame`."""
        derived = derive_features(frame, self.feature_names_, self.time_origin_s)
        matrix = np.empty((len(frame), len(self.feature_names_)), dtype=np.float64)
        for j, name in enumerate(self.feature_names_):
            if _KIND[name] == CATEGORICAL:
                code_of = {c: i + 1 for i, c in enumerate(self.categories_[name])}
                codes, uniques = pd.factorize(derived[name])
                lookup = np.array([code_of.get(u, 0) for u in uniques], dtype=np.float64)
                matrix[:, j] = lookup[codes]
            else:
                matrix[:, j] = derived[name].to_numpy()
        return matrix

    def fit_transform(self, instances: Instances) -> np.ndarray:
        return self.fit(instances).transform(instances)

    def to_dict(self) -> dict:
        """JSON-serializable state; `from_dict` restores an equal encoder."""
        return {
            "min_category_count": self.min_category_count,
            "features": self.features,
            "time_origin_s": self.time_origin_s,
            "feature_names": self.feature_names_,
            "categories": self.categories_,
        }

    @classmethod
    def from_dict(cls, state: Mapping) -> "FeatureEncoder":
        encoder = cls(state["min_category_count"], state["features"], state["time_origin_s"])
        unknown = [name for name in state["feature_names"] if name not in _KIND]
        if unknown:
            raise ValueError(f"encoder state names unknown lifetime features {unknown}")
        encoder.feature_names_ = list(state["feature_names"])
        encoder.categories_ = {k: list(v) for k, v in state["categories"].items()}
        return encoder

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "FeatureEncoder":
        return cls.from_dict(json.loads(text))
