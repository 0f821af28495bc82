"""Tests of predictors/lifetime/features.py."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines import schemas
from pipelines.stages.placement.pools import MODEL_COLUMNS
from predictors.lifetime import features
from predictors.lifetime.features import (
    NULL_CATEGORY,
    OTHER_CATEGORY,
    FeatureEncoder,
    available_features,
    derive_features,
    instances_frame,
    lacks_feature_values,
)


def _instances(**columns) -> pd.DataFrame:
    n = len(next(iter(columns.values())))
    base = {"instance_id": [f"i{i}" for i in range(n)], "start_time": np.zeros(n, np.int64),
            "end_time": np.full(n, 10**9, np.int64)}
    return pd.DataFrame({**base, **columns})


def test_rare_categories_collapse_into_other_and_unknown_maps_to_other():
    users = ["a"] * 12 + ["b"] * 10 + ["c"] * 9
    encoder = FeatureEncoder(min_category_count=10, features=["user"]).fit(
        _instances(user=users))
    assert encoder.categories_ == {"user": ["a", "b"]}
    codes = encoder.transform(_instances(user=["a", "b", "c", "never-seen", None]))
    # 0 is "other": rare in training (c), unseen, and null (absent from training).
    np.testing.assert_array_equal(codes[:, 0], [1, 2, 0, 0, 0])


def test_null_is_a_category_and_integral_floats_read_as_integers():
    # A nullable int column that arrived as float64 with NaN (pandas' default for Arrow).
    priorities = [200.0] * 10 + [np.nan] * 10 + [0.0] * 3
    encoder = FeatureEncoder(min_category_count=10, features=["priority"]).fit(
        _instances(priority=priorities))
    assert encoder.categories_["priority"] == sorted(["200", NULL_CATEGORY])
    as_ints = _instances(priority=pd.array([200, None, 0], dtype="Int64"))
    code_of = {c: i + 1 for i, c in enumerate(encoder.categories_["priority"])}
    np.testing.assert_array_equal(encoder.transform(as_ints)[:, 0],
                                  [code_of["200"], code_of[NULL_CATEGORY], 0])
    assert OTHER_CATEGORY not in encoder.categories_["priority"]


def test_derived_time_and_request_features_exact():
    start_s = np.array([2 * 86400 + 5 * 3600 + 1800, 6 * 86400 + 23 * 3600 + 3599, -3600])
    frame = _instances(cpu_request=[2.0, 0.5, np.nan], memory_request=[3.5, 0.25, 1.0])
    frame["start_time"] = (start_s * 10**6).astype(np.int64)
    derived = derive_features(frame)
    np.testing.assert_array_equal(derived["start_hour_of_day"], [5, 23, 23])
    np.testing.assert_array_equal(derived["start_day_of_week"], [2, 6, 6])
    assert list(derived["request_shape"]) == ["2x3.5", "0.5x0.25", NULL_CATEGORY]
    np.testing.assert_array_equal(derived["memory_per_cpu"], [1.75, 0.5, np.nan])
    shifted = derive_features(frame, ["start_day_of_week"], time_origin_s=3 * 86400)
    np.testing.assert_array_equal(shifted["start_day_of_week"], [5, 2, 2])


def test_feature_set_follows_the_columns_present_and_drops_all_null_ones():
    azure_like = _instances(cpu_request=[1.0] * 20, memory_request=[2.0] * 20,
                            deployment_size=[3] * 20, pool=["azure"] * 20,
                            subscription_id=[None] * 20, vm_category=[None] * 20)
    assert "priority" not in available_features(azure_like.columns)
    encoder = FeatureEncoder().fit(azure_like)
    assert encoder.feature_names_ == [
        "pool", "request_shape", "cpu_request", "memory_request", "memory_per_cpu",
        "start_hour_of_day", "start_day_of_week", "deployment_size"]
    assert [encoder.feature_names_[i] for i in encoder.categorical_indices] == [
        "pool", "request_shape"]


def test_json_round_trip_and_arrow_input_give_identical_matrices():
    rng = np.random.default_rng(1)
    n = 200
    frame = _instances(user=rng.choice(["u1", "u2", "u3", "rare"], n, p=[.4, .3, .28, .02]),
                       priority=rng.choice([0, 100, 200], n),
                       cpu_request=rng.choice([0.1, 0.25], n),
                       memory_request=rng.choice([0.1, 0.5], n))
    frame["start_time"] = rng.integers(0, 10**12, n)
    encoder = FeatureEncoder().fit(frame)
    restored = FeatureEncoder.from_json(encoder.to_json())
    expected = encoder.transform(frame)
    np.testing.assert_array_equal(restored.transform(frame), expected)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    assert set(table.column_names) <= set(schemas.INSTANCES.names)
    np.testing.assert_array_equal(encoder.transform(table), expected)


class _Unconvertible(pa.ExtensionType):
    """An Arrow column that fails the test if converted to pandas."""

    def __init__(self):
        super().__init__(pa.int64(), "fleetcast.test.unconvertible")

    def __arrow_ext_serialize__(self):
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls()

    def to_pandas_dtype(self):
        raise AssertionError("a column the encoder does not read was converted to pandas")


def test_transform_of_arrow_rows_converts_only_the_columns_it_reads():
    # Rows may hold columns the encoder does not read.
    frame = _instances(user=["a", "b"] * 10, cpu_request=[1.0, 2.0] * 10)
    encoder = FeatureEncoder(features=["user", "cpu_request"]).fit(frame)
    table = pa.Table.from_pandas(frame, preserve_index=False).append_column(
        "unread", pa.ExtensionArray.from_storage(_Unconvertible(), pa.array(range(20))))
    np.testing.assert_array_equal(encoder.transform(table), encoder.transform(frame))
    assert list(instances_frame(table, ["user", "absent"]).columns) == ["user"]


def test_a_pools_model_columns_hold_every_column_a_feature_reads():
    # A placement pool keeps only MODEL_COLUMNS of its instance rows for the models' features.
    assert features.SOURCE_COLUMNS == set(MODEL_COLUMNS) <= set(schemas.INSTANCES.names)
    rng = np.random.default_rng(5)
    n = 60

    def values(field):
        if pa.types.is_string(field.type):
            return pa.array(rng.choice(["a", "b", "c"], n))
        if pa.types.is_floating(field.type):
            return pa.array(rng.choice([0.25, 0.5, 1.0], n))
        return pa.array(rng.integers(0, 3, n) * 10**10, field.type)

    table = pa.table({field.name: values(field) for field in schemas.INSTANCES},
                     schema=schemas.INSTANCES)
    encoder = FeatureEncoder(min_category_count=1).fit(table)
    assert len(encoder.feature_names_) == len(features.FEATURES)
    np.testing.assert_array_equal(encoder.transform(table.select(MODEL_COLUMNS)),
                                  encoder.transform(table))


def test_transform_in_chunks_equals_transform_at_once(monkeypatch):
    rng = np.random.default_rng(3)
    n = 101
    frame = _instances(user=rng.choice(["u1", "u2", "rare"], n, p=[.5, .45, .05]),
                       priority=rng.choice([0, 200], n),
                       cpu_request=rng.choice([0.1, 0.25, np.nan], n),
                       memory_request=rng.choice([0.1, 0.5], n))
    frame["start_time"] = rng.integers(0, 10**12, n)
    encoder = FeatureEncoder().fit(frame)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    at_once = encoder.transform(frame)
    monkeypatch.setattr(features, "TRANSFORM_CHUNK_ROWS", 7)
    np.testing.assert_array_equal(encoder.transform(frame), at_once)
    np.testing.assert_array_equal(encoder.transform(table), at_once)
    assert encoder.transform(table.slice(0, 0)).shape == (0, len(encoder.feature_names_))


def test_transform_names_the_missing_column():
    encoder = FeatureEncoder(min_category_count=1).fit(
        _instances(user=["a", "b"], collection_logical_name=["x", "y"]))
    with pytest.raises(ValueError, match=r"lack column\(s\) \['collection_logical_name'\]"):
        encoder.transform(_instances(user=["a"]))


def test_instances_lack_features_only_when_every_non_time_feature_is_null():
    frame = _instances(cpu_request=[1.0, np.nan, np.nan, np.nan],
                       memory_request=[np.nan, np.nan, 2.0, np.nan],
                       user=[None, None, None, "u"])
    # Row 1 has only its start time (hour and day), which every instance has.
    np.testing.assert_array_equal(lacks_feature_values(frame), [False, True, False, False])
