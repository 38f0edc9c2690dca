"""numpy implementation of contract O, ``capture_grid``: the oracle's grid
built as arrays (the unit's powers of two by ``np.left_shift``, the wanted
sizes rounded up to the unit, kept where they fit the cap, ``np.unique``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference.capture_grid import CEILING, check_args, decode_tokens, unit


def capture_grid(max_num_seqs: Any, max_num_batched_tokens: Any, decode_query_len: Any, tp_size: Any,
                 sequence_parallel: Any) -> list[int]:
    s, b, q, t, sp = check_args(max_num_seqs, max_num_batched_tokens, decode_query_len, tp_size, sequence_parallel)
    u = unit(t, sp)
    cap = min(b, CEILING) // u * u
    powers = u * np.left_shift(1, np.arange(12, dtype=np.int64))  # u * 2**11 > CEILING for any u >= 1
    wanted = -(-np.array([decode_tokens(s, b, q), b, cap], dtype=np.int64) // u) * u
    grid = np.concatenate([powers, wanted])
    return [int(x) for x in np.unique(grid[(grid >= 1) & (grid <= cap)])]
