"""Shared test helpers: running a config in-process, reading its Parquet outputs, and the
real Azure V1 samples in ../shared/data (see its README.md). Fixtures over these are in
conftest.py; the plain functions and constants here also serve module-level code and scripts."""

import glob
import gzip
import hashlib
import json
import os
import pathlib

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import cli, schemas
from pipelines import config as run_config
from pipelines import run as run_pipeline
from pipelines.io.manifests import STATE_DIR
from pipelines.sources.azure_v1 import VMTABLE_COLUMNS

REPO = pathlib.Path(__file__).resolve().parent.parent
AZURE_DATA = REPO.parent / "shared" / "data"
AZURE_VMTABLE = AZURE_DATA / "azure_v1_vmtable_a.csv.gz"
AZURE_READINGS = AZURE_DATA / "azure_v1_vm_cpu_readings_a.csv.gz"


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


def assert_tables_equal(got: dict, expected: dict, names, **kwargs) -> None:
    """Each named table of two runs holds the same rows, in any order (`kwargs` go to
    pandas.testing.assert_frame_equal)."""
    for name in names:
        pd.testing.assert_frame_equal(sorted_frame(got[name]), sorted_frame(expected[name]),
                                      obj=name, **kwargs)


def write_gz_lines(path, lines) -> None:
    """A gzipped text file holding `lines`, each ended by a newline."""
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


def require_sample(path: pathlib.Path) -> pathlib.Path:
    """`path` if that Azure sample exists; otherwise skips the calling test."""
    if not path.exists():
        pytest.skip(f"Azure sample not found at {path} (../shared/data)")
    return path


def read_vmtable(path=AZURE_VMTABLE, **read_csv_kwargs) -> pd.DataFrame:
    """The Azure V1 vmtable CSV (no header) with its column names."""
    return pd.read_csv(path, header=None, names=list(VMTABLE_COLUMNS), **read_csv_kwargs)


def load_azure_instances(path=AZURE_VMTABLE) -> pd.DataFrame:
    """The vmtable as canonical instances, the shape the Azure V1 source produces."""
    raw = read_vmtable(path)
    instances = pd.DataFrame({
        "instance_id": raw["vmid"].astype(str),
        "start_time": np.round(raw["vmcreated"].to_numpy() * 1e6).astype(np.int64),
        "end_time": pd.array(np.round(raw["vmdeleted"].to_numpy() * 1e6), dtype="Int64"),
        "end_type": np.where(raw["vmdeleted"].isna(), None, "DELETED"),
        "cpu_request": raw["vmcorecount"].astype(np.float64),
        "memory_request": raw["vmmemory"].astype(np.float64),
        "pool": "azure",
        "subscription_id": None,
        "deployment_id": raw["deploymentid"].astype(str),
        "vm_category": None,
    })
    instances["deployment_size"] = instances.groupby("deployment_id")["instance_id"] \
        .transform("size").astype(np.int64)
    return instances


def write_manifest(root) -> dict:
    """Writes a successful run manifest (pipelines/io/publish.py) for the Parquet table
    directories already under `root`, as `fleetcast run` publishes one; returns it."""
    root = pathlib.Path(root)
    tables = {d.name: {"files": sorted(f"{d.name}/{f.name}" for f in d.glob("*.parquet"))}
              for d in sorted(root.iterdir()) if d.is_dir() and any(d.glob("*.parquet"))}
    for table in tables.values():
        table["rows"] = sum(pq.ParquetFile(root / f).metadata.num_rows for f in table["files"])
    manifest = {"fleetcast_manifest": 2, "success": True, "tables": tables,
                "files": {f: (root / f).stat().st_size
                          for t in tables.values() for f in t["files"]}, "outside": {}}
    (root / "fleetcast_manifest.json").write_text(json.dumps(manifest))
    return manifest


# A tiny Azure V1 trace and config for the integrity tests of publication and manifests.
READINGS = "".join(f"{300 * t},vm{v},1.0,{10 + t % 7}.0,{5 + v}.0\n"
                   for v in range(3) for t in range(40))
VMTABLE = "vm0,s,d,0,12000,50,10,40,Interactive,2,4\nvm1,s,d,0,,50,10,40,Delay-insensitive,4,8\n"
OVERCOMMIT = ('overcommit { metric { avg_cpu: true } scheduler { at_random { num_machines: 1 '
              'seed: 0 } } fortune_teller { name: "oracle" oracle { horizon_s: 3600 } } }')


def tiny_config(tmp_path, name="tiny", extra="", readings=READINGS):
    """A config of an Azure V1 trace of 2 VMs (120 readings) written under `tmp_path`, with
    `extra` config text; its path."""
    (tmp_path / "readings.csv").write_text(readings)
    (tmp_path / "vmtable.csv").write_text(VMTABLE)
    path = tmp_path / f"{name}.textproto"
    path.write_text(f'name: "{name}"\nazure_v1 {{ vmtable: "{tmp_path}/vmtable.csv" '
                    f'vm_cpu_readings: "{tmp_path}/readings.csv" }}\n{extra}')
    return path


def run_cli(config, output_dir, *args):
    """`fleetcast run CONFIG --output_dir OUTPUT_DIR -q ARGS...` in this process; its exit
    code."""
    return cli.main(["run", str(config), "--output_dir", str(output_dir), "-q", *args])


def snapshot(root):
    """{relative path: sha256} of every file under `root` but fleetcast's state dir."""
    files = {}
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d != STATE_DIR]
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as handle:
                files[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    return files
