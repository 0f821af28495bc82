"""The compiled engine's numba cache follows its sources (policies/replay/compiled/kernel_cache.py):
a kernel inlining another module's kernel is recompiled when only that module changes."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from policies.replay.compiled import kernel_cache

REPO = pathlib.Path(__file__).resolve().parent.parent

INIT = """\
import pathlib
from policies.replay.compiled import kernel_cache
from kernels.outer import outer
FLUSHED = kernel_cache.flush_if_sources_changed(pathlib.Path(__file__).parent,
                                                kernel_cache.package_kernels(__name__))
"""
OUTER = """\
import numba
from kernels.inner import inner

@numba.njit(cache=True)
def outer(x):
    return inner(x) + 1
"""
INNER = """\
import numba

@numba.njit(cache=True, inline="always")
def inner(x):
    return x * {factor}
"""


def run_outer(root: pathlib.Path) -> tuple:
    """(outer(10), whether the import flushed, cache hits) in a fresh interpreter."""
    script = ("import kernels; from kernels.outer import outer; print(outer(10), "
              "kernels.FLUSHED, sum(outer.stats.cache_hits.values()))")
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{REPO}")
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    return int(out[0]), out[1] == "True", int(out[2])


@pytest.fixture
def package(tmp_path):
    root = tmp_path / "src"
    kernels = root / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "__init__.py").write_text(INIT)
    (kernels / "outer.py").write_text(OUTER)
    (kernels / "inner.py").write_text(INNER.format(factor=2))
    return root


@pytest.mark.slow
def test_a_change_to_an_inlined_kernel_alone_recompiles_its_caller(package):
    assert run_outer(package) == (21, True, 0)
    # Unchanged sources: the cached code is loaded, nothing flushed.
    assert run_outer(package) == (21, False, 1)
    outer_stat = (package / "kernels" / "outer.py").stat()
    (package / "kernels" / "inner.py").write_text(INNER.format(factor=3))
    assert (package / "kernels" / "outer.py").stat().st_mtime == outer_stat.st_mtime
    assert run_outer(package) == (31, True, 0)
    assert run_outer(package) == (31, False, 1)


def test_the_stamp_holds_the_sources_hash(package):
    run_outer(package)
    stamp = package / "kernels" / "__pycache__" / kernel_cache.STAMP_NAME
    assert stamp.read_text() == kernel_cache.sources_hash(package / "kernels")
    before = kernel_cache.sources_hash(package / "kernels")
    (package / "kernels" / "inner.py").write_text(textwrap.dedent(INNER.format(factor=2))
                                                  + "\n# a comment\n")
    assert kernel_cache.sources_hash(package / "kernels") != before
