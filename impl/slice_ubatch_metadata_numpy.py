"""numpy implementation of contract F (per-microbatch attention metadata): no
loop over requests or tokens, one pass of array operations per microbatch."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference.slice_ubatch_metadata import UbatchMetadata, check_slice_args


def slice_ubatch_metadata(num_scheduled_tokens: Any, num_computed_tokens: Any, positions: Any, block_table: Any,
                          num_tokens_padded: int, num_reqs_padded: int, ubatch_slices: Any) -> list[UbatchMetadata]:
    """Contract F; int64 arrays."""
    step = check_slice_args(num_scheduled_tokens, num_computed_tokens, positions, block_table,
                            num_tokens_padded, num_reqs_padded, ubatch_slices)
    pad = step.num_reqs_padded - step.num_reqs
    nst = np.asarray(step.nst, dtype=np.int64)
    qsl = np.zeros(step.num_reqs_padded + 1, dtype=np.int64)
    np.cumsum(nst, out=qsl[1: step.num_reqs + 1])
    qsl[step.num_reqs + 1:] = qsl[step.num_reqs]
    computed = np.concatenate([np.asarray(step.computed, dtype=np.int64), np.zeros(pad, dtype=np.int64)])
    seq = computed + np.diff(qsl)
    pos = np.asarray(step.positions, dtype=np.int64)
    table = np.asarray(step.block_table, dtype=np.int64).reshape(step.num_reqs_padded, -1)
    out = []
    for (rs, re), (ts, te) in step.slices:
        begin, end = qsl[rs:re], qsl[rs + 1: re + 1]
        # Rebased onto the microbatch and clamped to it: a straddler keeps the part it owns.
        local = np.clip(qsl[rs: re + 1] - ts, 0, te - ts)
        before = np.clip(np.minimum(end, ts) - begin, 0, None)
        after = np.clip(end - np.maximum(begin, te), 0, None)
        lens = np.diff(local)
        out.append(UbatchMetadata(query_start_loc=local, seq_lens=seq[rs:re] - after,
                                  num_computed_tokens=computed[rs:re] + before, positions=pos[ts:te].copy(),
                                  block_table=table[rs:re].copy(), max_query_len=int(lens.max())))
    return out
