"""Reads and writes of a contract E step as slot keys, vectorised in numpy
(shared by ``find_conflicts_numpy`` and ``allow_microbatching_numpy``).

Work and memory are O(sum(c) + sum(q)) per group:

1. *ragged positions*: the computed positions of readers and the written
   positions of every request, built with one ``repeat`` each;
2. *slot keys*: ``block * B + offset`` identifies a slot inside a group.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def ragged(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ``arange(starts[i], starts[i] + lengths[i])`` and the row ``i`` of each entry."""
    rows = np.repeat(np.arange(lengths.shape[0], dtype=np.int64), lengths)
    offsets = np.cumsum(lengths) - lengths  # exclusive prefix sum
    values = np.arange(rows.shape[0], dtype=np.int64) - offsets[rows] + starts[rows]
    return values, rows


class GroupSlots:
    """Reads and writes of one group, as slot keys."""

    def __init__(self, c: np.ndarray, q: np.ndarray, start: np.ndarray, table: np.ndarray, size: int):
        read_len = np.where(q > 0, c, 0)  # only requests with a token read
        rp, rr = ragged(np.zeros_like(c), read_len)
        rb = table[rr, rp // size]
        keep = rb != 0  # the null block is never read
        self.read_req, self.read_block = rr[keep], rb[keep]
        self.read_key = rb[keep] * size + rp[keep] % size

        wp, ww = ragged(c, q)
        wb = table[ww, wp // size]
        keep = wb != 0  # ... nor written
        self.write_req = ww[keep]
        self.write_key = wb[keep] * size + wp[keep] % size
        self.write_token = start[ww[keep]] + (wp[keep] - c[ww[keep]])


def group_slots(step: Any) -> list[GroupSlots]:
    c, q = step.num_computed_tokens, step.num_scheduled_tokens
    start = np.cumsum(q) - q
    return [GroupSlots(c, q, start, table, size) for table, size in zip(step.block_tables, step.block_sizes, strict=True)]

