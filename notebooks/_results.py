"""The results directory the notebooks read, and its tables, shared by the notebooks.

Jupyter starts a notebook's kernel in the notebook's folder (notebooks/), while the getting
started page (docs/getting-started.md) runs the notebooks from the repository root with a
path relative to it (`FLEETCAST_RESULTS=results/demo`). A relative path is therefore looked
up in the kernel's working directory first, then in the repository root (this folder's
parent).
"""

import os
import pathlib

import pandas as pd
import pyarrow.parquet as pq

from pipelines.io import manifests

DEFAULT = "results/demo"
REPO = pathlib.Path(__file__).resolve().parent.parent


def results_dir(path=None):
    """The existing results directory `path` (default `$FLEETCAST_RESULTS`, else
    `results/demo`) as an absolute Path; raises FileNotFoundError naming every place tried,
    and RunFailed naming the directory when it holds no successful run (its manifest)."""
    path = pathlib.Path(path or os.environ.get("FLEETCAST_RESULTS") or DEFAULT).expanduser()
    tried = [path] if path.is_absolute() else [pathlib.Path.cwd() / path, REPO / path]
    for candidate in tried:
        if candidate.is_dir():
            manifests.require(str(candidate.resolve()))
            return candidate.resolve()
    raise FileNotFoundError(
        f"results directory {str(path)!r} not found (tried {' and '.join(map(str, tried))}); "
        "run a config first, e.g. `fleetcast run configs/demo.textproto --output_dir "
        "results/demo`, and set FLEETCAST_RESULTS to its output directory")


def read_table(results, name: str) -> pd.DataFrame:
    """Table `name` of the run in `results` as one DataFrame: exactly the files its manifest
    lists, each checked to be there and unchanged (RunFailed naming a missing one);
    LookupError when the run wrote no such table."""
    manifest = manifests.require(str(results))
    if name not in manifest["tables"]:
        raise LookupError(f"{results}: the run wrote no {name} table (it wrote "
                          f"{', '.join(sorted(manifest['tables']))}): run a config with its "
                          "stage")
    files = manifests.table_files(str(results), manifest, name)
    return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)
