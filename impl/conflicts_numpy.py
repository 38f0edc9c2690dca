"""numpy implementations of contract E: the conflict set and the exact,
split-agnostic ``allow_microbatching``.

Vectorised over requests and positions (a loop over the few KV-cache groups
only). Work and memory are O(sum(c) + sum(q)) per group plus the number of
matched (read, write) pairs:

1. *ragged positions*: the computed positions of readers and the written
   positions of every request, built with one ``repeat`` each;
2. *slot keys*: ``block * B + offset`` identifies a slot inside a group;
3. *join*: writes sorted by slot key, reads located with ``searchsorted``;
   every read meets the contiguous run of writes of its slot.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reference.conflicts import check_step


def _ragged(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ``arange(starts[i], starts[i] + lengths[i])`` and the row ``i`` of each entry."""
    rows = np.repeat(np.arange(lengths.shape[0], dtype=np.int64), lengths)
    offsets = np.cumsum(lengths) - lengths  # exclusive prefix sum
    values = np.arange(rows.shape[0], dtype=np.int64) - offsets[rows] + starts[rows]
    return values, rows


class _Group:
    """Reads and writes of one group, as slot keys."""

    def __init__(self, c: np.ndarray, q: np.ndarray, start: np.ndarray, table: np.ndarray, size: int):
        read_len = np.where(q > 0, c, 0)  # only requests with a token read
        rp, rr = _ragged(np.zeros_like(c), read_len)
        rb = table[rr, rp // size]
        keep = rb != 0  # the null block is never read
        self.read_req, self.read_block = rr[keep], rb[keep]
        self.read_key = rb[keep] * size + rp[keep] % size

        wp, ww = _ragged(c, q)
        wb = table[ww, wp // size]
        keep = wb != 0  # ... nor written
        self.write_req = ww[keep]
        self.write_key = wb[keep] * size + wp[keep] % size
        self.write_token = start[ww[keep]] + (wp[keep] - c[ww[keep]])


def _groups(step: Any) -> list[_Group]:
    c, q = step.num_computed_tokens, step.num_scheduled_tokens
    start = np.cumsum(q) - q
    return [_Group(c, q, start, table, size) for table, size in zip(step.block_tables, step.block_sizes, strict=True)]


def find_conflicts(
    num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any
) -> np.ndarray:
    """The conflict set as a sorted ``(K, 4)`` int64 array of unique rows ``(g, r, w, b)``."""
    step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
    parts = []
    for g, grp in enumerate(_groups(step)):
        order = np.argsort(grp.write_key, kind="stable")
        keys = grp.write_key[order]
        lo = np.searchsorted(keys, grp.read_key, side="left")
        hi = np.searchsorted(keys, grp.read_key, side="right")
        pair_write, pair_read = _ragged(lo, hi - lo)  # every (read, write) on one slot
        reader = grp.read_req[pair_read]
        writer = grp.write_req[order][pair_write]
        other = reader != writer
        rows = np.stack([np.full(int(other.sum()), g, dtype=np.int64), reader[other], writer[other],
                         grp.read_block[pair_read][other]], axis=1)
        parts.append(rows)
    if not parts:
        return np.zeros((0, 4), dtype=np.int64)
    return np.unique(np.concatenate(parts, axis=0).reshape(-1, 4), axis=0)


def allow_microbatching(
    num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any
) -> bool:
    """Exact: veto iff some reader's computed slot is first written by a token
    after the reader's first token (see ``reference.conflicts.allow_microbatching``)."""
    step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
    q = step.num_scheduled_tokens
    start = np.cumsum(q) - q
    for grp in _groups(step):
        if grp.write_key.size == 0 or grp.read_key.size == 0:
            continue
        order = np.lexsort((grp.write_token, grp.write_key))  # by slot, then token
        keys, tokens = grp.write_key[order], grp.write_token[order]
        idx = np.searchsorted(keys, grp.read_key, side="left")  # earliest write of the slot
        found = idx < keys.shape[0]
        idx = np.minimum(idx, keys.shape[0] - 1)
        hit = found & (keys[idx] == grp.read_key)
        if np.any(hit & (tokens[idx] > start[grp.read_req])):
            return False
    return True
