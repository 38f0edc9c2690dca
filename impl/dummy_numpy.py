"""numpy implementations of contracts A and B (vectorised, no per-request loop)."""

from __future__ import annotations

import numpy as np

from reference.dummy import check_dummy_args, check_split_args
from reference.types import DummyBatch, DummyBuffers


def split_dummy_tokens(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Contract A; int64 result of length ``num_reqs``."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = np.full(r, n // r, dtype=np.int64)
    out[r - n % r :] += 1
    return out


def make_dummy(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Contract B over numpy buffers. Small outputs use query_start_loc's dtype."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    qsl = buffers.query_start_loc
    dtype = qsl.dtype
    nst = split_dummy_tokens(r, n).astype(dtype)

    buffers.seq_lens[:r] = nst
    buffers.seq_lens[r:] = 0
    qsl[0] = 0
    np.cumsum(nst, out=qsl[1 : r + 1])
    qsl[r + 1 :] = n
    buffers.positions[:n] = 0
    buffers.input_ids[:n] = 0
    return DummyBatch(
        num_scheduled_tokens=nst,
        seq_lens=buffers.seq_lens,
        query_start_loc=qsl,
        positions=buffers.positions[:n],
        input_ids=buffers.input_ids[:n],
        idx_mapping=np.arange(r, dtype=dtype),
        logits_indices=qsl[1 : r + 1] - 1,
        cu_num_logits=np.arange(r + 1, dtype=dtype),
    )
