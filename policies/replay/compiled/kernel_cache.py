"""Keeps numba's on-disk cache of the compiled engine's kernels in step with their sources.

numba keys a cached kernel by its own file's time stamp only, so a kernel that calls (and
inlines) a kernel of another module, or reads another module's constants, keeps the old code
when only that other module changes (numba's documentation, "Cache Notes"): a `git pull` that
touches `nilas.py` alone would leave `run_until` deciding with the old `select`. A hash of the
package's sources, kept in the cache's directory, flushes every kernel's cache entries (numba's
own `flush`, which empties the index) whenever any source changed.
"""

import hashlib
import os
import pathlib
import sys
from typing import Iterable

import numba

STAMP_NAME = "fleetcast-kernel-sources.sha256"


def sources_hash(package_dir: pathlib.Path) -> str:
    """SHA-256 of the package's Python sources (names and contents) and numba's version."""
    digest = hashlib.sha256(numba.__version__.encode())
    for path in sorted(package_dir.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def flush_if_sources_changed(package_dir: pathlib.Path, kernels: Iterable) -> bool:
    """Flushes the cache entries of `kernels` (numba dispatchers with `cache=True`, defined
    in `package_dir`) unless the stamp beside them holds the current sources' hash, then
    writes it; returns whether it flushed. A cache directory that cannot be written holds
    no entries of this package to go stale."""
    kernels = list(kernels)
    cache_dir = kernels[0].stats.cache_path
    current = sources_hash(package_dir)
    stamp = pathlib.Path(cache_dir) / STAMP_NAME
    try:
        if stamp.read_text() == current:
            return False
    except OSError:
        pass
    if os.path.isdir(cache_dir):
        for kernel in kernels:
            try:
                kernel._cache.flush()  # an empty index: the data files are no longer read
            except OSError:
                pass
    try:
        os.makedirs(cache_dir, exist_ok=True)
        temporary = stamp.with_name(f"{STAMP_NAME}.{os.getpid()}")
        temporary.write_text(current)
        os.replace(temporary, stamp)  # atomic: concurrent workers read all or nothing
    except OSError:
        pass
    return True


def package_kernels(package: str) -> list:
    """The numba dispatchers defined in the package's modules imported so far."""
    modules = [module for name, module in list(sys.modules.items())
               if name.startswith(package + ".")]
    return [value for module in modules for value in vars(module).values()
            if isinstance(value, numba.core.registry.CPUDispatcher)
            and value.py_func.__module__ == module.__name__]
