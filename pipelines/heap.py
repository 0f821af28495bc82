"""glibc's heap in fleetcast's processes: blocks of 1 MB and more mapped on their own, so a
freed array goes back to the system.

glibc maps an allocation above its mmap threshold (128 kB at start) on its own, but raises the
threshold to the size of each such block freed (up to 32 MB). From then on a process's arrays
come from its heap, and a heap that holds live small objects between freed arrays keeps their
memory. A DirectRunner worker kept the memory of its largest stage (the canonical tables'
collection shards, whose size grows with the trace at a fixed `num_shards`) through every later
stage, so its peak was that plus the next stage's. A fixed threshold (setting it turns the
raising off) keeps large arrays out of the heap; performance.md has the measurements.
"""

import ctypes
import ctypes.util
import os

MMAP_THRESHOLD_BYTES = 1 << 20
ENV = "MALLOC_MMAP_THRESHOLD_"
_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


def map_large_blocks() -> bool:
    """Fixes the threshold at MMAP_THRESHOLD_BYTES in this process (mallopt) and, through the
    environment, in the processes it starts (the DirectRunner's workers, `synth`'s), unless
    the environment sets it already (glibc then applied that value at start). Returns whether
    this process's threshold was set: False where the C library has no mallopt."""
    if ENV in os.environ:
        return False
    os.environ[ENV] = str(MMAP_THRESHOLD_BYTES)
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl without mallopt)
        return False
    return mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
