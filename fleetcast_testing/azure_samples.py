"""The real Azure V1 samples in ../shared/data (beside the checkout; see its README.md): their
paths, and the vmtable as canonical instances."""

import pathlib

import numpy as np
import pandas as pd

from pipelines.sources.azure_v1 import VMTABLE_COLUMNS

AZURE_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"
AZURE_VMTABLE = AZURE_DATA / "azure_v1_vmtable_a.csv.gz"
AZURE_READINGS = AZURE_DATA / "azure_v1_vm_cpu_readings_a.csv.gz"


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
