"""numpy implementation of contract J, ``tbo_split``: the balanced split
and the cut request found from one cumulative sum (``argmax`` over the
differences, ``searchsorted`` for the half), no Python loop over requests."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference.tbo_split import check_args


def _balanced(cum: np.ndarray, total: int) -> int:
    """First local minimum of |2 * left - N| over i = 1..R-1 (ties move on)."""
    if cum.size < 2:
        return 0
    diff = np.abs(2 * cum[:-1] - total)  # diff[i - 1] for the split at i
    grows = np.flatnonzero(diff[1:] > diff[:-1])
    return int(grows[0] + 1 if grows.size else diff.size)


def tbo_split(forward_mode: Any, seq_lens: Any, threshold: Any) -> tuple[int, int, bool]:
    mode, lens, thr = check_args(forward_mode, seq_lens, threshold)
    if mode == "idle":
        return 0, 0, False
    arr = np.asarray(lens, dtype=np.int64)
    if mode != "extend":
        s = arr.size // 2
        return s, s * (int(arr[0]) if arr.size else 1), False
    cum = np.cumsum(arr)
    total = int(cum[-1]) if cum.size else 0
    b = _balanced(cum, total)
    left = int(cum[b - 1]) if b else 0
    if left < total * thr or left > total * (1 - thr):
        cut = int(np.searchsorted(cum, total // 2, side="right"))
        cut = cut if cut < arr.size else 0
        if (int(cum[cut - 1]) if cut else 0) < total // 2:
            return cut, total // 2, True
    return b, left, False
