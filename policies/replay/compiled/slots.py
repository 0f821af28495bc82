"""Slots of the compiled engine's arrays, shared by its kernels and `CompiledReplay`."""

import numpy as np

BEST_FIT, NILAS, LAVA = 0, 1, 2
NONE = np.iinfo(np.int64).min  # no deadline, no pending timer, no reprediction yet
# LAVA host columns: state (EMPTY 0, OPEN 1, RECYCLING 2 as in policies/lava.py), class,
# deadline, pending timer, residual cut (a VM is residual iff its placement number is at most
# this), residual VMs left.
STATE, CLASS, DEADLINE, TIMER, RESIDUAL_CUT, RESIDUALS = range(6)
EMPTY, OPEN, RECYCLING = 0, 1, 2
# The live-VM table `vms`: a row per VM on a host, in blocks of BLOCK_ROWS rows. A host's
# VMs fill its chain of blocks in order, positions 0 .. occupancy - 1, those new to the exit
# cache (fresh) last; a VM that leaves is replaced by a later one, so that a host's VMs are
# read from a few contiguous blocks rather than from rows all over the trace.
BLOCK_ROWS = 16
# Columns of `vms`: the VM; its remaining lifetime (µs) and curve interval at its last
# look-up; its arrival (µs) and curve row, copied for the look-ups; its predicted exit (µs)
# at arrival; LAVA's placement number.
(VM, REM, COLUMN, ARRIVED, ROW, EXIT, PLACED_SEQ) = range(7)
VM_COLUMNS = 7
# Columns of `hosts`, a row of 64 bytes per host (one cache line, read together by a
# reprediction): the first and last block of the host's chain and its fresh VMs; the exit
# cache's time of its last reprediction (µs), the largest remaining lifetime of its VMs
# then, the time up to which that largest holds (see `block_links`), whether a VM that held
# it left since, and whether the host is due at the next refresh (touched since the last,
# or found due by it). Columns of `block_links`: next and previous block in the chain,
# index in it, host; and its summary: the largest remaining lifetime of its VMs when it was
# last read, and the time up to which that holds (µs): until then no VM's curve passes it,
# and those that had it keep it; read again once past that time, or if a VM that had it
# left since, `CHANGED`. A block's summary leaves out its fresh VMs; that of no VMs is
# (-1, NO_END).
FIRST_BLOCK, LAST_BLOCK, FRESH_N, LAST_PRED, MAX_REM, MAX_REM_VALID, STALE, DUE = range(8)
HOST_COLUMNS = 8
NEXT_BLOCK, PREV_BLOCK, BLOCK_INDEX, BLOCK_HOST, BLOCK_MAX_REM, BLOCK_VALID, CHANGED = range(7)
BLOCK_COLUMNS = 7
NO_END = 1 << 62  # after every time (µs)
# Cursor slots: the engine's scalar state between calls (arrivals handled, positions, hosts
# touched since the last refresh, counts, the last arrival's time, LAVA's placement number
# and timer count, free blocks of `vms`, the admission's window: a VM placed in an earlier
# window than this one is counted by the prediction, its CPU share reserved when it leaves).
(ARRIVAL, EXIT_POS, N_TOUCHED, Q_HEAD, Q_TAIL, HEAP_N, PLACEMENTS, FAILED, PREDICTIONS,
 BATCHES, LIVE, TAKEN_OVER, NOW, SEQ, TIMERS_N, FREE_N, WINDOW) = range(17)
CURSOR_SIZE = 17
# Parameter slots (ADMITS: an admission by predicted peak sets the CPU rooms).
(TAKEOVER_US, CUT, TAKEOVER_REFRESH, POLICY, REPREDICT, INTERVAL_US, METRICS_US,
 STRICT, ADMITS) = range(9)
