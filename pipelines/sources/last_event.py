"""The last event time of a trace whose parts are in time order (the Google 2011 parts), from
its last part alone: what `fleetcast validate --check_inputs` compares a split time with."""

import dataclasses
import os
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import csv as pa_csv

from pipelines.sources.parts import of_files

# The trace's "after the end" (2^63 - 1): no event happens then.
AFTER_THE_END = np.iinfo(np.int64).max


@dataclasses.dataclass(frozen=True)
class LastEvent:
    """The latest event time (µs) in a table's last part, and that part's file."""

    time_us: int
    path: str


def _times(path: str) -> np.ndarray:
    """int64 times (µs) of the rows of CSV part `path` whose first field is a whole number
    (others, e.g. malformed rows, are the run's dead letters, not this check's)."""
    options = dict(
        read_options=pa_csv.ReadOptions(autogenerate_column_names=True),
        parse_options=pa_csv.ParseOptions(invalid_row_handler=lambda row: "skip"),
        convert_options=pa_csv.ConvertOptions(include_columns=["f0"],
                                              column_types={"f0": pa.string()}))
    if "://" in path:
        from apache_beam.io.filesystems import FileSystems
        with FileSystems.open(path) as f:  # decompressed by its suffix
            first = pa_csv.read_csv(f, **options)["f0"]
    else:
        first = pa_csv.read_csv(path, **options)["f0"]  # .gz by its suffix
    digits = pc.filter(first, pc.match_substring_regex(first, r"^[0-9]{1,19}$"))
    times = pc.cast(digits, pa.float64()).to_numpy()  # 2^63 - 1 and beyond stay above
    return times[times < float(AFTER_THE_END)].astype(np.int64)


def last_event(paths) -> Optional[LastEvent]:
    """The last event of headerless CSV parts whose first column is the time in µs: the
    largest time below 2^63 - 1 in the highest-numbered part; None without numbered parts
    or a time in the last one (e.g. an empty part)."""
    found = of_files(list(paths))
    if not found.files:
        return None
    path = found.files[max(found.files)][0]
    times = _times(path)
    return LastEvent(int(times.max()), os.path.basename(path)) if len(times) else None
