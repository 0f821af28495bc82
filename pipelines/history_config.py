"""The customer history's config (CustomerHistoryConfig): the instance columns each history
key is read from, and its checks by field path. No Beam: validation reads this module,
pipelines/history.py adds the columns."""

from typing import List, Tuple

from predictors.lifetime.history import HISTORY_KEYS

CUSTOMER, LOGICAL_NAME = HISTORY_KEYS
# The customer's column when the config names none: the first of these a row has.
CUSTOMER_COLUMNS = ("user", "subscription_id")
LOGICAL_NAME_COLUMN = "collection_logical_name"


def customer_columns(config) -> Tuple[str, ...]:
    """The instance columns that name the customer, coalesced in order."""
    return (config.customer_column,) if config.customer_column else CUSTOMER_COLUMNS


def history_keys(config) -> List[Tuple[str, Tuple[str, ...]]]:
    """(key, the instance columns it is read from, coalesced) for each configured key."""
    keys = [(CUSTOMER, customer_columns(config))]
    if config.logical_name:
        keys.append((LOGICAL_NAME, (LOGICAL_NAME_COLUMN,)))
    return keys


def validate_config(check, config, field: str = "customer_history"):
    """Checks a CustomerHistoryConfig (configs/checks.py Checker)."""
    check.require(not config.customer_column or config.customer_column in CUSTOMER_COLUMNS,
                  f"{field}.customer_column", f"must be one of {', '.join(CUSTOMER_COLUMNS)} "
                  f"(or unset: the first a row has), got {config.customer_column!r}")
    check.duration(config, "lookback_s", field, allow_zero=True)
    check.duration(config, "long_lived_threshold_s", field)
    check.positive(config, "num_shards", field)
    check.trace_time(config, "trace_start_us", field)
