"""Shared test helpers: running a config in-process and reading its Parquet outputs."""

import glob
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import config as run_config
from pipelines import run as run_pipeline
from pipelines import schemas


def run_text_config(text: str, output_dir, beam_args=("--runner=DirectRunner",)):
    """Parses, validates and runs a text config; returns {table name: DataFrame}."""
    config = run_config.parse_config(text)
    problems = run_config.validate(config)
    assert problems == [], problems
    _, tables = run_pipeline.run(config, str(output_dir), list(beam_args))
    return {name: read_table(os.path.join(output_dir, name)) for name in tables}


def run_on_loaded_tables(root, rows_by_table: dict, stages_text: str, name: str):
    """Writes each canonical table's rows ({table name: [row dicts]}) as a Parquet input under
    `root`, runs `stages_text` on them with the tables loaded (LoadOrWrite input) and returns
    ({table name: DataFrame}, output directory)."""
    loads = []
    for table, rows in rows_by_table.items():
        directory = os.path.join(str(root), f"in_{table}")
        os.makedirs(directory)
        pq.write_table(pa.Table.from_pylist(rows, schema=schemas.CANONICAL[table]),
                       os.path.join(directory, "part-0.parquet"))
        loads.append(f'{table} {{ input {{ parquet: "{directory}" }} }}')
    output_dir = os.path.join(str(root), "out")
    text = f'name: "{name}"\n' + "\n".join(loads) + "\n" + stages_text
    return run_text_config(text, output_dir), output_dir


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
