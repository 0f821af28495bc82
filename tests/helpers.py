"""Shared test helpers: running a config in-process and reading its Parquet outputs."""

import glob
import os

import pandas as pd
import pyarrow.parquet as pq

from pipelines import config as run_config
from pipelines import run as run_pipeline


def run_text_config(text: str, output_dir, beam_args=("--runner=DirectRunner",)):
    """Parses, validates and runs a text config; returns {table name: DataFrame}."""
    config = run_config.parse_config(text)
    problems = run_config.validate(config)
    assert problems == [], problems
    _, tables = run_pipeline.run(config, str(output_dir), list(beam_args))
    return {name: read_table(os.path.join(output_dir, name)) for name in tables}


def read_table(table_dir) -> pd.DataFrame:
    """A Parquet dataset directory written by fleetcast as one DataFrame."""
    files = sorted(glob.glob(os.path.join(table_dir, "*.parquet")))
    assert files, f"no Parquet files in {table_dir}"
    return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)


def sorted_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in a canonical order (runners may write rows in any order)."""
    if frame.empty:
        return frame.reset_index(drop=True)
    keys = [c for c in frame.columns
            if not frame[c].map(lambda v: isinstance(v, (list, tuple)) or hasattr(v, "shape"))
            .any()]
    return frame.sort_values(keys, na_position="first").reset_index(drop=True)
