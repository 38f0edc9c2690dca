"""numpy implementation of contract N, ``split_uniform_ubatches``: the cut
points as a vector of whole-request multiples, request ranges by
``np.searchsorted`` over the real requests' token offsets."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference.split_uniform_ubatches import Slices, check_args


def split_uniform_ubatches(num_reqs: Any, query_len: Any, num_tokens_padded: Any, num_reqs_padded: Any,
                           num_ubatches: Any) -> Slices:
    r, q, np_, rp, n = check_args(num_reqs, query_len, num_tokens_padded, num_reqs_padded, num_ubatches)
    bounds = np.append(np.arange(n) * (np_ // (q * n)) * q, np_)
    starts = np.arange(r + 1) * q  # the real requests' token offsets
    out: Slices = []
    for k in range(n):
        a, b = int(bounds[k]), int(bounds[k + 1])
        lo = int(np.searchsorted(starts, a, side="right")) - 1
        hi = int(np.searchsorted(starts, min(b, r * q), side="left"))
        if a >= min(b, r * q):
            lo, hi = r - 1, r
        out.append(((lo, rp if k == n - 1 else hi), (a, b)))
    return out
