"""numpy implementation of contract B: the dummy batch layout over numpy
buffers (vectorised, no per-request loop)."""

from __future__ import annotations

import numpy as np

from batchfuzz.impl.split_dummy_tokens_numpy import split_dummy_tokens
from batchfuzz.reference.make_dummy import DummyBatch, DummyBuffers, check_dummy_args


def write_layout(num_reqs: int, num_tokens: int, buffers: DummyBuffers, num_scheduled_tokens: np.ndarray) -> DummyBatch:
    """Write the layout of contract B for given per-request counts (already
    validated: ``R`` counts summing to ``N``) into ``buffers``; small outputs use
    ``query_start_loc``'s dtype. ``make_dummy`` calls it with the split of
    contract A; the catalogue's variants call it with a buggy split."""
    r, n = num_reqs, num_tokens
    qsl = buffers.query_start_loc
    dtype = qsl.dtype
    nst = np.asarray(num_scheduled_tokens).astype(dtype)
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


def make_dummy(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Contract B over numpy buffers."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    return write_layout(r, n, buffers, split_dummy_tokens(r, n))
