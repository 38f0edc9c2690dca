"""numpy implementation of contract C: padded ``query_start_loc``.

Vectorised: one ``cumsum`` into ``q[1:R+1]`` and one slice fill for the padded
slots. The padded slots are written on every call, so the result never depends
on what a reused ``out`` buffer held before (the shipped bug).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference.pad_query_start_loc import check_pad_args


def pad_query_start_loc(num_scheduled_tokens: Any, num_reqs_padded: Any, out: np.ndarray | None = None) -> np.ndarray:
    """Contract C. Returns ``out[:P+1]`` (a view) or a new array of nst's dtype."""
    nst, r, p, total, dtype = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
    q = out[: p + 1] if out is not None else np.empty(p + 1, dtype=dtype)
    q[0] = 0
    # Accumulate in the result dtype: check_pad_args guarantees the total fits.
    np.cumsum(nst, dtype=dtype, out=q[1 : r + 1])
    q[r + 1 :] = total
    return q
