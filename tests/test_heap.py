"""pipelines/heap.py: with the threshold fixed, the memory of freed arrays goes back to the
system although small live objects sit between them (glibc, Linux); a threshold the
environment sets is left alone."""

import os
import platform
import subprocess
import sys

import pytest

from pipelines import heap

# Frees one large array (which raises glibc's threshold when not fixed), then makes 200 arrays
# of 2 MB with a small live object after each, frees the arrays, prints RssAnon in MB.
RETAINED = """
import gc, sys
import numpy as np
from pipelines import heap
if sys.argv[1] == "fixed":
    assert heap.map_large_blocks()
np.ones(1 << 18).sum()
arrays, small = [], []
for _ in range(200):
    arrays.append(np.ones(1 << 18))
    small.append(bytes(600))
del arrays
gc.collect()
anon_kb = next(int(line.split()[1]) for line in open("/proc/self/status")
               if line.startswith("RssAnon:"))
print(anon_kb // 1024)
"""


def retained_mb(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != heap.ENV}
    out = subprocess.run([sys.executable, "-c", RETAINED, mode], env=env, check=True,
                         capture_output=True, text=True, cwd=os.path.dirname(heap.__file__)
                         + "/..")
    return int(out.stdout)


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="glibc's heap")
def test_freed_arrays_go_back_to_the_system_with_the_threshold_fixed():
    assert retained_mb("default") > 300  # 200 x 2 MB kept by the heap
    assert retained_mb("fixed") < retained_mb("default") - 300


def test_a_threshold_set_in_the_environment_is_left_alone(monkeypatch):
    monkeypatch.setenv(heap.ENV, "4194304")
    assert not heap.map_large_blocks()
    assert os.environ[heap.ENV] == "4194304"
