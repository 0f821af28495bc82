"""The versions fleetcast's Dask translation (pipelines/dask_runner.py) was written and tested
against: it uses Beam's private names (`apache_beam.runners.common._OutputHandler`, the Dask
runner's `transform_evaluator`) and Dask's graph internals, which any release may change.
setup.py's `dask` and `test` extras ask for the same ranges (a test checks they agree)."""

import importlib.metadata
from typing import Callable, Dict, Optional

from packaging.specifiers import SpecifierSet

from pipelines.io.failures import RunFailed

SUPPORTED: Dict[str, str] = {
    "apache-beam": ">=2.77,<2.78",
    "dask": ">=2026.8,<2026.9",
    "distributed": ">=2026.8,<2026.9",
}


def _installed(package: str) -> Optional[str]:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_versions(installed: Optional[Callable[[str], Optional[str]]] = None) -> None:
    """Raises RunFailed, in one line naming each package's installed version and the
    supported range, unless every package of SUPPORTED is installed within its range
    (`installed(package)`: its version, None if absent; default the environment's)."""
    installed = installed or _installed
    wrong = [(package, installed(package), supported)
             for package, supported in SUPPORTED.items()
             if installed(package) is None
             or installed(package) not in SpecifierSet(supported)]
    if wrong:
        listed = "; ".join(f"{package} {version or 'not installed'} (supported {supported})"
                           for package, version, supported in wrong)
        raise RunFailed(f"the DaskRunner needs the versions its translation was tested on: "
                        f"{listed}; install them with pip install -e \".[dask]\"")
