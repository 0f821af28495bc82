"""The fallback coder: Arrow tables as IPC streams, sizes of tables and arrays without
encoding them, everything else as Beam's FastPrimitivesCoder."""

import numpy as np
import pyarrow as pa
from apache_beam import coders as beam_coders
from apache_beam.typehints import typehints

from pipelines.io import coders


def _table(rows: int) -> pa.Table:
    return pa.table({"machine_id": np.arange(rows, dtype=np.int64),
                     "usage": np.linspace(0, 1, rows)})


def test_estimated_size_of_tables_arrays_and_tuples_of_them():
    table = _table(1000)
    assert coders.estimated_size(table) == 16_000
    assert coders.estimated_size(np.zeros(10)) == 80
    assert coders.estimated_size(("rows", table)) == 1 + 5 + 16_000
    assert coders.estimated_size([(3, None), 2.5]) == 1 + (1 + 9 + 9) + 9
    assert coders.estimated_size({"a": 1}) is None
    assert coders.estimated_size((1, object())) is None


def test_size_estimates_do_not_encode_tables():
    impl = coders.ArrowAwareCoder().get_impl()
    element = ((7, "shard"), _table(50_000))
    assert impl.get_estimated_size_and_observables(element) == (
        coders.estimated_size(element), [])
    # Other values are estimated by encoding them, as FastPrimitivesCoder does.
    other = {"a": [1, 2, 3]}
    assert impl.get_estimated_size_and_observables(other)[0] == len(
        coders.ArrowAwareCoder().encode(other))


def test_tables_round_trip_as_ipc_streams_and_everything_else_as_before():
    coder = coders.ArrowAwareCoder()
    table = _table(1000)
    element = ((7, "shard"), table.slice(10, 5), [np.arange(3), {"x": None}], 2.5)
    key, part, (array, mapping), number = coder.decode(coder.encode(element))
    assert key == (7, "shard") and number == 2.5 and mapping == {"x": None}
    assert part.equals(table.slice(10, 5)) and np.array_equal(array, np.arange(3))
    # A slice is encoded with its own rows only, not its parent's buffers.
    assert len(coder.encode(table.slice(10, 5))) < len(coder.encode(table)) / 10
    assert coder.encode("text") == beam_coders.FastPrimitivesCoder().encode("text")


def test_large_tables_travel_compressed_and_round_trip_exactly():
    coder = coders.ArrowAwareCoder()
    rows = coders.COMPRESS_MIN_BYTES // 8
    repetitive = pa.table({"time": np.tile(np.arange(1000, dtype=np.int64), rows // 1000 + 1)})
    noise = pa.table({"usage": np.random.default_rng(0).random(rows)})
    assert repetitive.nbytes >= coders.COMPRESS_MIN_BYTES
    encoded = coder.encode(("timeseries", repetitive))
    assert len(encoded) < repetitive.nbytes / 10
    assert coder.decode(encoded)[1].equals(repetitive)
    assert coder.decode(coder.encode(noise)).equals(noise)
    # Small tables are not compressed: their IPC body holds the raw values.
    small = _table(100)
    assert np.arange(100, dtype=np.int64).tobytes() in coder.encode(small)


def test_a_decoded_table_re_encodes_to_its_bytes_until_it_is_freed():
    import gc

    coder = coders.ArrowAwareCoder()
    encoded = coder.encode(_table(1000))
    decoded = coder.decode(encoded)
    # A GroupByKey decodes its input and encodes the groups again: no second encoding.
    assert coder.encode(decoded) == encoded
    assert coder.encode(decoded.slice(0, 10)) != encoded
    assert coder.decode(coder.encode(decoded.slice(0, 10))).equals(_table(1000).slice(0, 10))
    key = id(decoded)
    assert key in coders._ENCODED_BY_ID
    del decoded
    gc.collect()
    assert key not in coders._ENCODED_BY_ID


def test_register_makes_it_the_coder_of_undeclared_types_once():
    coders.register()
    coders.register()
    assert isinstance(beam_coders.registry.get_coder(typehints.Any),
                      coders.ArrowAwareCoder)
