"""numpy implementation of contract E1: the conflict set.

Reads and writes as slot keys (``_slot_keys_numpy``), then a join: writes
sorted by slot key, reads located with ``searchsorted``; every read meets the
contiguous run of writes of its slot. O(sum(c) + sum(q)) per group plus the
number of matched (read, write) pairs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.impl._slot_keys_numpy import group_slots, ragged
from batchfuzz.reference._step import check_step


def find_conflicts(
    num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any
) -> np.ndarray:
    """The conflict set as a sorted ``(K, 4)`` int64 array of unique rows ``(g, r, w, b)``."""
    step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
    parts = []
    for g, grp in enumerate(group_slots(step)):
        order = np.argsort(grp.write_key, kind="stable")
        keys = grp.write_key[order]
        lo = np.searchsorted(keys, grp.read_key, side="left")
        hi = np.searchsorted(keys, grp.read_key, side="right")
        pair_write, pair_read = ragged(lo, hi - lo)  # every (read, write) on one slot
        reader = grp.read_req[pair_read]
        writer = grp.write_req[order][pair_write]
        other = reader != writer
        rows = np.stack([np.full(int(other.sum()), g, dtype=np.int64), reader[other], writer[other],
                         grp.read_block[pair_read][other]], axis=1)
        parts.append(rows)
    if not parts:
        return np.zeros((0, 4), dtype=np.int64)
    return np.unique(np.concatenate(parts, axis=0).reshape(-1, 4), axis=0)

