"""The fallback coder: same encoding as Beam's FastPrimitivesCoder, sizes of Arrow tables
and arrays without encoding them."""

import numpy as np
import pyarrow as pa
from apache_beam import coders as beam_coders
from apache_beam.typehints import typehints

from pipelines import coders


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


def test_size_estimates_do_not_encode_tables_but_encoding_is_unchanged():
    coder = coders.FastPrimitivesWithArrowSizesCoder()
    impl = coder.get_impl()
    element = ((7, "shard"), _table(50_000))
    assert impl.get_estimated_size_and_observables(element) == (
        coders.estimated_size(element), [])
    # Other values are estimated by encoding, as FastPrimitivesCoder does.
    plain = beam_coders.FastPrimitivesCoder().get_impl()
    other = {"a": [1, 2, 3]}
    assert (impl.get_estimated_size_and_observables(other)
            == plain.get_estimated_size_and_observables(other))
    encoded = coder.encode(element)
    assert encoded == beam_coders.FastPrimitivesCoder().encode(element)
    key, table = coder.decode(encoded)
    assert key == (7, "shard") and table.equals(element[1])


def test_register_makes_it_the_coder_of_undeclared_types_once():
    coders.register()
    coders.register()
    assert isinstance(beam_coders.registry.get_coder(typehints.Any),
                      coders.FastPrimitivesWithArrowSizesCoder)
