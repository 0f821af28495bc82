"""The lifetime features by name: each one's kind and the instance columns it is computed
from (features.py computes them). No pandas: config validation reads this module."""

from typing import Tuple

from predictors.lifetime.history import HISTORY_KEYS, HISTORY_STATISTICS, history_column

CATEGORICAL = "categorical"
NUMERIC = "numeric"

# The history features, named as their instance columns (predictors/lifetime/history.py).
HISTORY_FEATURES = tuple(history_column(key, statistic) for key in HISTORY_KEYS
                         for statistic in HISTORY_STATISTICS)
# Every feature the encoder knows, in matrix column order: (name, kind, source columns).
FEATURES: Tuple[Tuple[str, str, Tuple[str, ...]], ...] = (
    ("pool", CATEGORICAL, ("pool",)),
    ("priority", CATEGORICAL, ("priority",)),
    ("scheduling_class", CATEGORICAL, ("scheduling_class",)),
    ("collection_type", CATEGORICAL, ("collection_type",)),
    ("user", CATEGORICAL, ("user",)),
    ("collection_logical_name", CATEGORICAL, ("collection_logical_name",)),
    ("vertical_scaling", CATEGORICAL, ("vertical_scaling",)),
    ("scheduler", CATEGORICAL, ("scheduler",)),
    ("subscription_id", CATEGORICAL, ("subscription_id",)),
    ("vm_category", CATEGORICAL, ("vm_category",)),
    ("request_shape", CATEGORICAL, ("cpu_request", "memory_request")),
    ("cpu_request", NUMERIC, ("cpu_request",)),
    ("memory_request", NUMERIC, ("memory_request",)),
    ("memory_per_cpu", NUMERIC, ("cpu_request", "memory_request")),
    ("start_hour_of_day", NUMERIC, ("start_time",)),
    ("start_day_of_week", NUMERIC, ("start_time",)),
    ("deployment_size", NUMERIC, ("deployment_size",)),
    # The customer's and the logical name's history at arrival, each its own column
    # (pipelines/history.py; [Barbalho23] §3.2.2, App. B.1).
    *((name, NUMERIC, (name,)) for name in HISTORY_FEATURES),
)
