"""Lines: a table's rows as newline-terminated JSON or CSV text, written by one compiled loop.

A row is a fixed sequence of operations: literal text (field names, brackets, commas), an
integer, a float, or a string. A float column whose values are all whole multiples of
10^-USAGE_DECIMALS (every value the generator writes) is written in fixed point with trailing
zeros dropped ("0.25", "1.0", "0.0000001"), which a correctly rounding reader parses back to
the same float64; any other float column as its shortest round-trip text.
"""

from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from synthetic.constants import USAGE_DECIMALS

_LITERAL, _INT, _OPTIONAL_INT, _FIXED, _TEXT = range(5)
# Bytes at most of an int64 and of a fixed-point float in text.
_INT_BYTES, _FIXED_BYTES = 20, 22 + USAGE_DECIMALS
_FIXED_SCALE = 10 ** USAGE_DECIMALS


def _float_text(values: np.ndarray) -> pa.Array:
    """Shortest round-trip text of float64 values, always with a '.' or an exponent (Arrow
    prints 1.0 as "1", which readers would take for an integer)."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    text = pc.cast(pa.array(values), pa.string())
    if np.any(values == np.trunc(values)):
        bare = pc.invert(pc.match_substring_regex(text, "[.e]"))
        text = pc.if_else(bare, pc.binary_join_element_wise(text, ".0", ""), text)
    return text


def _fixed_point(values: np.ndarray) -> np.ndarray | None:
    """int64 m with values == m / 10^USAGE_DECIMALS exactly (the float nearest that decimal),
    or None if some value is not such a multiple."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = np.rint(values * _FIXED_SCALE)
        if not (np.all(np.abs(scaled) < 2.0 ** 53) and np.all(scaled / _FIXED_SCALE == values)):
            return None
    return scaled.astype(np.int64)


class _Program:
    """The operations of one row, and the columns they read."""

    def __init__(self, n_rows: int):
        self.n_rows = n_rows
        self.ops = []
        self.literals = []
        self.ints, self.fixed, self.texts = [], [], []

    def _literal_index(self, text: str) -> int:
        self.literals.append(text.encode())
        return len(self.literals) - 1

    def text(self, literal: str):
        if self.ops and self.ops[-1][0] == _LITERAL:
            self.literals[self.ops[-1][1]] += literal.encode()
        else:
            self.ops.append((_LITERAL, self._literal_index(literal), 0))

    def integers(self, values: np.ndarray, null_text: str | None = None):
        """Ints; with `null_text`, negative values are written as it."""
        self.ints.append(np.asarray(values, dtype=np.int64))
        kind, null = (_INT, 0) if null_text is None else (_OPTIONAL_INT,
                                                          self._literal_index(null_text))
        self.ops.append((kind, len(self.ints) - 1, null))

    def floats(self, values: np.ndarray):
        fixed = _fixed_point(values)
        if fixed is None:
            self.strings(_float_text(values))
        else:
            self.fixed.append(fixed)
            self.ops.append((_FIXED, len(self.fixed) - 1, 0))

    def strings(self, values: pa.Array):
        self.texts.append(values)
        self.ops.append((_TEXT, len(self.texts) - 1, 0))

    def encoded(self) -> memoryview:
        n = self.n_rows
        literal_bytes = [np.frombuffer(b, dtype=np.uint8) for b in self.literals]
        literal_starts = np.cumsum([0] + [len(b) for b in literal_bytes]).astype(np.int64)
        ints = np.stack(self.ints, axis=1) if self.ints else np.zeros((n, 0), np.int64)
        fixed = np.stack(self.fixed, axis=1) if self.fixed else np.zeros((n, 0), np.int64)
        text_data, text_starts = _text_buffers(self.texts, n)
        per_row = sum(len(b) for b in literal_bytes) + _INT_BYTES * ints.shape[1] + (
            _FIXED_BYTES * fixed.shape[1])
        out = np.empty(n * per_row + len(text_data), dtype=np.uint8)
        size = _encode(np.array(self.ops, dtype=np.int64).reshape(-1, 3),
                       np.concatenate(literal_bytes + [np.zeros(0, np.uint8)]), literal_starts,
                       ints, fixed, text_data, text_starts, out)
        return memoryview(out[:size])


def _text_buffers(texts: list, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes of every string array, (n_rows + 1, n_arrays) start of each row's string
    in them)."""
    data, starts, base = [], [], 0
    for strings in texts:
        strings = strings.cast(pa.string())
        offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32, count=n_rows + 1,
                                offset=strings.offset * 4).astype(np.int64)
        data.append(np.frombuffer(strings.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
                    if offsets[-1] > offsets[0] else np.zeros(0, np.uint8))
        starts.append(offsets - offsets[0] + base)
        base += offsets[-1] - offsets[0]
    if not texts:
        return np.zeros(0, np.uint8), np.zeros((n_rows + 1, 0), np.int64)
    return np.concatenate(data), np.stack(starts, axis=1)


@numba.njit(cache=True, nogil=True)
def _write_digits(out, pos, value):
    """Writes the decimal digits of value >= 0 at out[pos:]; returns the end (unsigned
    arithmetic: several times faster than Python's floor division on signed ints)."""
    ten = np.uint64(10)
    value = np.uint64(value)
    end = pos + 1
    rest = value
    while rest >= ten:
        rest //= ten
        end += 1
    i = end
    while True:
        i -= 1
        out[i] = np.uint8(48 + value % ten)
        value //= ten
        if i == pos:
            return end


@numba.njit(cache=True, nogil=True)
def _write_fixed(out, pos, m):
    """Writes m / 10^USAGE_DECIMALS in fixed point, trailing zeros dropped; returns the end."""
    if m < 0:
        out[pos] = 45  # '-'
        pos += 1
        m = -m
    ten, scale = np.uint64(10), np.uint64(_FIXED_SCALE)
    m = np.uint64(m)
    pos = _write_digits(out, pos, m // scale)
    out[pos] = 46  # '.'
    fraction = m % scale
    if fraction == 0:
        out[pos + 1] = 48
        return pos + 2
    digits = USAGE_DECIMALS
    while fraction % ten == 0:
        fraction //= ten
        digits -= 1
    for i in range(digits, 0, -1):
        out[pos + i] = np.uint8(48 + fraction % ten)
        fraction //= ten
    return pos + 1 + digits


@numba.njit(cache=True, nogil=True)
def _copy(out, pos, source, start, end):
    end_pos = pos + end - start
    out[pos:end_pos] = source[start:end]
    return end_pos


@numba.njit(cache=True, nogil=True)
def _encode(ops, literals, literal_starts, ints, fixed, text_data, text_starts, out):
    """Writes every row's operations (kind, column, null literal) into `out`; returns the
    number of bytes written."""
    pos = 0
    for r in range(ints.shape[0]):
        for o in range(ops.shape[0]):
            kind, index = ops[o, 0], ops[o, 1]
            if kind == _LITERAL:
                pos = _copy(out, pos, literals, literal_starts[index], literal_starts[index + 1])
            elif kind == _FIXED:
                pos = _write_fixed(out, pos, fixed[r, index])
            elif kind == _TEXT:
                pos = _copy(out, pos, text_data, text_starts[r, index], text_starts[r + 1, index])
            else:
                value = ints[r, index]
                if kind == _OPTIONAL_INT and value < 0:
                    null = ops[o, 2]
                    pos = _copy(out, pos, literals, literal_starts[null], literal_starts[null + 1])
                elif value < 0:
                    out[pos] = 45
                    pos = _write_digits(out, pos + 1, -value)
                else:
                    pos = _write_digits(out, pos, value)
    return pos


def _add_value(program: _Program, column, json_format: bool):
    kind, values = column.kind, column.values
    if kind == "int":
        program.integers(values)
    elif kind == "float":
        program.floats(values)
    elif kind == "str":
        # Obfuscated names are base64: nothing to escape in JSON or CSV.
        quote = '"' if json_format else ""
        program.text(quote)
        program.strings(pa.array(values, pa.string()))
        program.text(quote)
    elif kind == "optional_int":
        program.integers(values, null_text="null" if json_format else "")
    elif kind == "null":
        program.text("null" if json_format else "")
    elif kind == "float_list":
        program.text("[" if json_format else '"[')
        for j in range(values.shape[1]):
            if j:
                program.text(",")
            program.floats(values[:, j])
        program.text("]" if json_format else ']"')
    else:
        program.text("[]" if json_format else '"[]"')


def encode_lines(columns: list, file_format: str) -> memoryview:
    """The rows of `columns` (writers.Column) as newline-terminated text: JSON objects with
    nested records, or CSV with dotted names flattened and lists as quoted JSON arrays.
    Needs at least one column with values."""
    n_rows = next(len(c.values) for c in columns if c.values is not None)
    program = _Program(n_rows)
    if file_format == "csv":
        for i, column in enumerate(columns):
            if i:
                program.text(",")
            _add_value(program, column, json_format=False)
        program.text("\n")
        return program.encoded()
    program.text("{")
    open_record = ""
    for i, column in enumerate(columns):
        record, _, field = column.name.rpartition(".")
        if record != open_record:
            if open_record:
                program.text("}")
            if i:
                program.text(",")
            if record:
                program.text(f'"{record}":{{')
            open_record = record
        elif i:
            program.text(",")
        program.text(f'"{field}":')
        _add_value(program, column, json_format=True)
    program.text("}}\n" if open_record else "}\n")
    return program.encoded()
