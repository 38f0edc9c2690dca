"""numpy implementation of contract D (ubatch split): no loop over tokens or requests."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference.split_ubatches import UbatchSlice, check_ubatch_args


def split_ubatches(
    num_scheduled_tokens: Any, num_tokens_padded: int, num_reqs_padded: int, num_ubatches: int
) -> list[UbatchSlice] | None:
    """Contract D; slices as Python ints, or None when the split is refused."""
    nst, padded_tokens, padded_reqs, n = check_ubatch_args(
        num_scheduled_tokens, num_tokens_padded, num_reqs_padded, num_ubatches
    )
    cu = np.cumsum(np.asarray(nst, dtype=np.int64))
    total = int(cu[-1])
    size = padded_tokens // n
    if size * (n - 1) >= total:
        return None
    tok_start = np.arange(n, dtype=np.int64) * size
    tok_stop = tok_start + size
    tok_stop[-1] = padded_tokens
    # The owner of token t is the number of requests that end at or before t.
    req_start = np.searchsorted(cu, tok_start, side="right")
    last_real = np.minimum(tok_stop, total) - 1
    req_stop = np.searchsorted(cu, last_real, side="right") + 1
    req_stop[-1] = padded_reqs
    return [((int(a), int(b)), (int(c), int(d))) for a, b, c, d in zip(req_start, req_stop, tok_start, tok_stop, strict=True)]
