"""The compiled engine's live-VM table (see `slots`): rows by host position, a row for a
placed VM, and the removal of one that keeps each host's fresh VMs last."""

import numba

from policies.replay.compiled.curves import valid_until
from policies.replay.compiled.slots import (
    BLOCK_HOST,
    BLOCK_INDEX,
    BLOCK_MAX_REM,
    BLOCK_ROWS,
    BLOCK_VALID,
    CHANGED,
    FIRST_BLOCK,
    FREE_N,
    FRESH_N,
    LAST_BLOCK,
    NEXT_BLOCK,
    NO_END,
    PREV_BLOCK,
    REM,
    VM,
)


@numba.njit(cache=True, inline="always", _nrt=False)
def row_at(h, pos, occupancy, hosts, block_links):
    """The row of host h's VM at position `pos` (of `occupancy`), walking back from the last
    block: the positions asked for are near the end."""
    if pos < BLOCK_ROWS:
        return hosts[h, FIRST_BLOCK] * BLOCK_ROWS + pos
    b = hosts[h, LAST_BLOCK]
    for _ in range((occupancy - 1) // BLOCK_ROWS - pos // BLOCK_ROWS):
        b = block_links[b, PREV_BLOCK]
    return b * BLOCK_ROWS + pos % BLOCK_ROWS


@numba.njit(cache=True, inline="always", _nrt=False)
def position(row, block_links):
    """The position on its host of the VM in `row`."""
    return block_links[row // BLOCK_ROWS, BLOCK_INDEX] * BLOCK_ROWS + row % BLOCK_ROWS


@numba.njit(cache=True, inline="always", _nrt=False)
def host_of_row(row, block_links):
    return block_links[row // BLOCK_ROWS, BLOCK_HOST]


@numba.njit(cache=True, inline="always", _nrt=False)
def add_row(h, occupancy, cursor, hosts, block_links, free_blocks):
    """The row of a fresh VM placed on host h at position `occupancy` (its VMs before it),
    in a new block when the last one is full. Fresh VMs are outside their block's summary."""
    if occupancy % BLOCK_ROWS == 0:
        cursor[FREE_N] -= 1
        b = free_blocks[cursor[FREE_N]]
        last = hosts[h, LAST_BLOCK]
        block_links[b, NEXT_BLOCK] = -1
        block_links[b, PREV_BLOCK] = last
        block_links[b, BLOCK_INDEX] = occupancy // BLOCK_ROWS
        block_links[b, BLOCK_HOST] = h
        block_links[b, BLOCK_MAX_REM] = -1  # the summary of no VMs
        block_links[b, BLOCK_VALID] = NO_END
        block_links[b, CHANGED] = 0
        if last >= 0:
            block_links[last, NEXT_BLOCK] = b
        else:
            hosts[h, FIRST_BLOCK] = b
        hosts[h, LAST_BLOCK] = b
    hosts[h, FRESH_N] += 1
    return hosts[h, LAST_BLOCK] * BLOCK_ROWS + occupancy % BLOCK_ROWS


@numba.njit(cache=True, inline="always", _nrt=False)
def drop_row(h, row, occupancy, cursor, vms, slot_of, hosts, block_links, free_blocks,
             cell_us, end_us):
    """Removes the VM in `row` from host h (`occupancy` VMs with it): the last VM of its kind
    (fresh or not) takes its row, and the last fresh VM the place a non-fresh one leaves; an
    emptied last block is freed. Only a settled VM that leaves a block or joins one changes
    the block's summary."""
    last = occupancy - 1
    last_row = hosts[h, LAST_BLOCK] * BLOCK_ROWS + last % BLOCK_ROWS
    settled = occupancy - hosts[h, FRESH_N]
    if position(row, block_links) < settled:
        leave_summary(row, vms, block_links)
        settled_row = row_at(h, settled - 1, occupancy, hosts, block_links)
        if settled_row != row:
            leave_summary(settled_row, vms, block_links)
            move_row(settled_row, row, vms, slot_of)
            join_summary(row, vms, block_links, cell_us, end_us)
        move_row(last_row, settled_row, vms, slot_of)
    else:
        move_row(last_row, row, vms, slot_of)
        hosts[h, FRESH_N] -= 1
    if last % BLOCK_ROWS == 0:
        b = hosts[h, LAST_BLOCK]
        before = block_links[b, PREV_BLOCK]
        hosts[h, LAST_BLOCK] = before
        if before >= 0:
            block_links[before, NEXT_BLOCK] = -1
        else:
            hosts[h, FIRST_BLOCK] = -1
        free_blocks[cursor[FREE_N]] = b
        cursor[FREE_N] += 1


@numba.njit(cache=True, inline="always", _nrt=False)
def move_row(source, target, vms, slot_of):
    if source != target:
        for c in range(vms.shape[0]):
            vms[c, target] = vms[c, source]
        slot_of[vms[VM, target]] = target


@numba.njit(cache=True, inline="always", _nrt=False)
def leave_summary(row, vms, block_links):
    """The settled VM in `row` leaves its block: the block is read again if the VM had its
    largest remaining lifetime."""
    b = row // BLOCK_ROWS
    if vms[REM, row] == block_links[b, BLOCK_MAX_REM]:
        block_links[b, CHANGED] = 1


@numba.njit(cache=True, inline="always", _nrt=False)
def join_summary(row, vms, block_links, cell_us, end_us):
    """The settled VM in `row` joins its block: the block's summary holds no longer than
    the VM's curve stays at most its largest remaining lifetime (read again at once if the
    VM is over it)."""
    b = row // BLOCK_ROWS
    block_links[b, BLOCK_VALID] = min(
        block_links[b, BLOCK_VALID],
        valid_until(row, block_links[b, BLOCK_MAX_REM], vms, cell_us, end_us))
