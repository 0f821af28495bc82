"""Compares two fleetcast results directories, table by table and file by file.

    python scripts/compare_results.py DIR_A DIR_B [--ignore NAME ...] [--strict]

A results directory holds one Parquet dataset directory per table (DIR/<table>/*.parquet) and
possibly model files (DIR/models/<model>/...) and a synthetic trace
(DIR/synthetic_trace/<table>/*.json.gz). For every table in either directory: the same schema
(field names, types, nullability; Parquet metadata aside) and the same rows as a multiset (all
files of the table read, rows sorted by every column, list columns by their text; exact
equality, NaN equal to NaN); a table of more than 256 MB of files, which would not fit in
memory twice (a cell-day's usage), by its schema, its row count and the sum of DuckDB's hash
of every row instead (order-free; the line says so). Other files under models/ and
synthetic_trace/: the same bytes.

Prints one line per table and per file directory (e.g. models/uptime): `identical`, or what
differs (row counts, schema, the first differing row in sorted order and the largest absolute
difference per numeric column, the files that differ). A run records its own directory in
places (the `path` column of lifetime_models): where only that differs, or a file differs only
in compression headers or zip entry dates, the line says `differs (metadata)`. Files at the
top level (the notebooks' figures) are not compared.

--ignore (after the two directories) skips tables, file directories, or all below one
("models"). Exit status: 0 when everything is identical or differs only in metadata
(--strict: only when identical), 1 when anything else differs, 2 on bad arguments.
"""

import argparse
import gzip
import io
import math
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

FILE_ROOTS = ("models", "synthetic_trace")
IDENTICAL, METADATA = "identical", "differs (metadata)"


def list_contents(root: str):
    """({table name: Parquet files}, {file directory relative to root: file names})."""
    tables, files = {}, {}
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not os.path.isdir(path):
            continue
        if name in FILE_ROOTS:
            for directory, _, names in os.walk(path):
                if names:
                    files[os.path.relpath(directory, root)] = sorted(names)
        else:
            tables[name] = sorted(os.path.join(path, f) for f in os.listdir(path)
                                  if f.endswith(".parquet"))
    return tables, files


def read_table(files) -> pa.Table:
    """All files of a table as one table (schema metadata dropped)."""
    return pa.concat_tables([pq.read_table(f) for f in files]).replace_schema_metadata(None)


def replace_dir(table: pa.Table, root: str) -> pa.Table:
    """String columns with the results directory's own path replaced by `<DIR>`."""
    for i, field in enumerate(table.schema):
        if pa.types.is_string(field.type):
            column = table.column(i)
            for form in {os.path.abspath(root), os.path.realpath(root)}:
                column = pc.replace_substring(column, form, "<DIR>")
            table = table.set_column(i, field, column)
    return table


def sort_rows(table: pa.Table) -> pa.Table:
    """Rows in a canonical order: by every column, nested ones by their Python text."""
    keys = {}
    for field in table.schema:
        column = table.column(field.name)
        if pa.types.is_dictionary(field.type):
            column = column.cast(field.type.value_type)
        if pa.types.is_nested(column.type):
            column = pa.array([repr(v) for v in column.to_pylist()], pa.string())
        if not pa.types.is_null(column.type):
            keys[f"k{len(keys)}"] = column
    if not keys or table.num_rows == 0:
        return table
    order = pc.sort_indices(pa.table(keys), sort_keys=[(k, "ascending") for k in keys])
    return table.take(order)


def same_value(a, b) -> bool:
    """Exact equality of Python values, NaN equal to NaN (also inside lists and structs)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def differing_rows(a: pa.ChunkedArray, b: pa.ChunkedArray) -> np.ndarray:
    """Boolean mask of the rows where two equally long columns differ (NaN equal to NaN)."""
    if a.equals(b):
        return np.zeros(len(a), dtype=bool)
    if pa.types.is_nested(a.type):
        return np.array([not same_value(x, y) for x, y in zip(a.to_pylist(), b.to_pylist())])
    same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(a.is_null(), b.is_null()))
    if pa.types.is_floating(a.type):
        same = pc.or_(same, pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
    return ~np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)


def max_abs_difference(a: pa.ChunkedArray, b: pa.ChunkedArray) -> float:
    """The largest |a - b| over rows (inf where only one side is NaN or null)."""
    x, y = (c.to_numpy(zero_copy_only=False).astype(float) for c in (a, b))
    both_nan = np.isnan(x) & np.isnan(y)
    difference = np.where(both_nan, 0.0, np.abs(x - y))
    return float(np.max(np.where(np.isnan(difference), np.inf, difference), initial=0.0))


def shorten(text: str, width: int = 200) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def describe_row_differences(a: pa.Table, b: pa.Table) -> str:
    """'' if two tables with equal schemas hold the same rows; otherwise what differs."""
    if a.num_rows != b.num_rows:
        return f"row count {a.num_rows} vs {b.num_rows}"
    a, b = sort_rows(a), sort_rows(b)
    masks = {name: differing_rows(a.column(name), b.column(name)) for name in a.column_names}
    differing = np.logical_or.reduce(list(masks.values())) if masks else np.zeros(0, bool)
    if not differing.any():
        return ""
    row = int(np.argmax(differing))
    columns = [name for name, mask in masks.items() if mask.any()]
    numeric = [name for name in columns if pa.types.is_integer(a.schema.field(name).type)
               or pa.types.is_floating(a.schema.field(name).type)]
    row_a, row_b = a.slice(row, 1).to_pylist()[0], b.slice(row, 1).to_pylist()[0]
    values = ", ".join(f"{name} {row_a[name]!r} vs {row_b[name]!r}"
                       for name in columns if masks[name][row])
    text = (f"{int(differing.sum())} of {a.num_rows} rows differ in {', '.join(columns)}; "
            f"first at sorted row {row}: {values} (row in A: {shorten(repr(row_a))})")
    if numeric:
        text += "; max abs difference: " + ", ".join(
            f"{name} {max_abs_difference(a.column(name), b.column(name)):.6g}"
            for name in numeric)
    return text


def describe_schema_difference(a: pa.Schema, b: pa.Schema) -> str:
    """'' if two schemas are equal (metadata aside); otherwise the fields that differ."""
    if a.equals(b, check_metadata=False):
        return ""
    fields_a, fields_b = ({f.name: f for f in s} for s in (a, b))
    parts = [f"only in A: {n}" for n in fields_a if n not in fields_b]
    parts += [f"only in B: {n}" for n in fields_b if n not in fields_a]
    parts += [f"{n}: {fields_a[n].type}{'' if fields_a[n].nullable else ' not null'} vs "
              f"{fields_b[n].type}{'' if fields_b[n].nullable else ' not null'}"
              for n in fields_a if n in fields_b and not fields_a[n].equals(fields_b[n])]
    if not parts and a.names != b.names:
        parts = [f"column order {a.names} vs {b.names}"]
    return "schema differs: " + "; ".join(parts)


# A table whose files are larger is compared by its rows' hashes (`compare_by_hashes`).
HASHED_TABLE_BYTES = 256 << 20


def compare_by_hashes(files_a, files_b) -> str:
    """The report of a large table: its schema, its row count and the sum of DuckDB's hash of
    each row (an order-free digest), read in DuckDB without holding the table."""
    import duckdb
    schemas = [pq.read_schema(files[0]).remove_metadata() for files in (files_a, files_b)]
    schema = describe_schema_difference(*schemas)
    if schema:
        return schema
    with duckdb.connect() as connection:
        connection.execute("SET enable_progress_bar = false")
        digests = [connection.execute(
            "SELECT count(*), sum(hash(t)::HUGEINT) FROM read_parquet($files) t",
            {"files": list(files)}).fetchone() for files in (files_a, files_b)]
    if digests[0] == digests[1]:
        return IDENTICAL
    if digests[0][0] != digests[1][0]:
        return f"{digests[0][0]:,} rows vs {digests[1][0]:,}"
    return f"rows differ ({digests[0][0]:,} each; compared by the sums of their hashes)"


def compare_table(files_a, files_b, dir_a: str, dir_b: str) -> str:
    """The report of one table present in both directories."""
    if not files_a or not files_b:
        return IDENTICAL if files_a == files_b else (
            f"no Parquet files in {'A' if not files_a else 'B'}")
    if max(sum(map(os.path.getsize, files)) for files in (files_a, files_b)) \
            > HASHED_TABLE_BYTES:
        return compare_by_hashes(files_a, files_b)
    try:
        a, b = read_table(files_a), read_table(files_b)
    except (pa.ArrowInvalid, OSError) as error:
        return f"unreadable: {error}"
    schema = describe_schema_difference(a.schema, b.schema)
    if schema:
        return schema
    if not describe_row_differences(a, b):
        return IDENTICAL
    rows = describe_row_differences(replace_dir(a, dir_a), replace_dir(b, dir_b))
    return rows or f"{METADATA}: only the results directory's own path"


def normalized_content(path: str, root: str) -> bytes:
    """A file's content without metadata: gzip members decompressed (no header time or name),
    .npz arrays without zip entry dates, the results directory's own path as <DIR>."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        elif path.endswith(".npz"):
            with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
                data = b"".join(name.encode() + arrays[name].dtype.str.encode()
                                + repr(arrays[name].shape).encode() + arrays[name].tobytes()
                                for name in sorted(arrays.files))
    except (OSError, EOFError, ValueError):
        pass  # not what its name says: compared as it is
    for form in {os.path.abspath(root), os.path.realpath(root)}:
        data = data.replace(form.encode(), b"<DIR>")
    return data


def compare_files(directory: str, names_a, names_b, dir_a: str, dir_b: str) -> str:
    """The report of one directory of non-Parquet files present in both results."""
    parts = [f"only in A: {n}" for n in names_a if n not in names_b]
    parts += [f"only in B: {n}" for n in names_b if n not in names_a]
    metadata_only = []
    for name in (n for n in names_a if n in names_b):
        path_a, path_b = (os.path.join(d, directory, name) for d in (dir_a, dir_b))
        with open(path_a, "rb") as fa, open(path_b, "rb") as fb:
            if fa.read() == fb.read():
                continue
        if normalized_content(path_a, dir_a) == normalized_content(path_b, dir_b):
            metadata_only.append(name)
        else:
            parts.append(f"{name} differs")
    if parts:
        return "; ".join(parts)
    return f"{METADATA}: {', '.join(metadata_only)}" if metadata_only else IDENTICAL


def ignored(name: str, ignore) -> bool:
    """Whether `name` (a table or file directory) is, or lies below, an ignored name."""
    return any(name == i or name.startswith(i.rstrip("/") + "/") for i in ignore)


def compare(dir_a: str, dir_b: str, ignore=()) -> dict:
    """{table or file directory: report line} for everything in either directory."""
    (tables_a, files_a), (tables_b, files_b) = list_contents(dir_a), list_contents(dir_b)
    reports = {}
    for kind, (in_a, in_b) in (("table", (tables_a, tables_b)), ("files", (files_a, files_b))):
        for name in sorted(set(in_a) | set(in_b)):
            if ignored(name, ignore):
                continue
            if name not in in_a or name not in in_b:
                reports[name] = f"only in {'A' if name in in_a else 'B'}"
            elif kind == "table":
                reports[name] = compare_table(in_a[name], in_b[name], dir_a, dir_b)
            else:
                reports[name] = compare_files(name, in_a[name], in_b[name], dir_a, dir_b)
    return reports


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 2)[2])
    parser.add_argument("dir_a")
    parser.add_argument("dir_b")
    parser.add_argument("--ignore", nargs="+", action="extend", default=[], metavar="NAME",
                        help="a table, a file directory (models/uptime) or a root (models)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 also where only metadata differs")
    args = parser.parse_args(argv)
    for directory in (args.dir_a, args.dir_b):
        if not os.path.isdir(directory):
            parser.error(f"not a directory: {directory}")
    reports = compare(args.dir_a, args.dir_b, args.ignore)
    width = max((len(name) for name in reports), default=0)
    for name, report in reports.items():
        print(f"{name:<{width}}  {report}")
    accepted = {IDENTICAL} if args.strict else {IDENTICAL, METADATA}
    return 0 if all(r.split(":")[0] in accepted for r in reports.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
