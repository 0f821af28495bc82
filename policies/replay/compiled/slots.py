"""Slots of the compiled engine's arrays, shared by its kernels and `CompiledReplay`."""

import numpy as np

BEST_FIT, NILAS, LAVA = 0, 1, 2
NONE = np.iinfo(np.int64).min  # no deadline, no pending timer, no reprediction yet
# LAVA host columns: state (EMPTY 0, OPEN 1, RECYCLING 2 as in policies/lava.py), class,
# deadline, pending timer, residual cut (a VM is residual iff its placement number is at most
# this), residual VMs left.
STATE, CLASS, DEADLINE, TIMER, RESIDUAL_CUT, RESIDUALS = range(6)
EMPTY, OPEN, RECYCLING = 0, 1, 2
# Cursor slots: the engine's scalar state between calls (arrivals handled, positions, counts,
# the last arrival's time, LAVA's placement number and timer count).
(ARRIVAL, EXIT_POS, N_DIRTY, Q_HEAD, Q_TAIL, HEAP_N, PLACEMENTS, FAILED, PREDICTIONS, BATCHES,
 LIVE, TAKEN_OVER, NOW, SEQ, TIMERS_N) = range(15)
CURSOR_SIZE = 15
# Parameter slots.
(TAKEOVER_US, CUT, TAKEOVER_REFRESH, POLICY, REPREDICT, INTERVAL_US, METRICS_US,
 STRICT) = range(8)
