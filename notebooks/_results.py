"""The results directory the notebooks read, shared by the three notebooks.

Jupyter starts a notebook's kernel in the notebook's folder (notebooks/), while the README
runs the notebooks from the repository root with a path relative to it
(`FLEETCAST_RESULTS=results/demo`). A relative path is therefore looked up in the kernel's
working directory first, then in the repository root (this folder's parent).
"""

import os
import pathlib

from pipelines.io.publish import require_manifest

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
            require_manifest(str(candidate.resolve()))
            return candidate.resolve()
    raise FileNotFoundError(
        f"results directory {str(path)!r} not found (tried {' and '.join(map(str, tried))}); "
        "run a config first, e.g. `fleetcast run configs/demo.textproto --output_dir "
        "results/demo`, and set FLEETCAST_RESULTS to its output directory")
