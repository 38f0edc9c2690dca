"""Oracle of contract B: the dummy batch layout over persistent buffers
(docs/contracts.md, contract B), and the two types it works on.

``make_dummy(R, N, buffers)`` fills the buffers so that a dummy batch is ``R``
fresh prefills of ``split_dummy_tokens(R, N)`` tokens with zero-length padded
request slots, whatever the buffers held before.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from batchfuzz.reference.split_dummy_tokens import check_split_args, split_dummy_tokens


@dataclass
class DummyBuffers:
    """Persistent per-step buffers of a model runner (contract B).

    ``seq_lens`` has ``max_num_reqs`` entries, ``query_start_loc`` has
    ``max_num_reqs + 1``, ``positions`` and ``input_ids`` have ``max_num_tokens``.
    They may hold any stale values from earlier steps. Each may be int32 or int64.
    """

    seq_lens: Any
    query_start_loc: Any
    positions: Any
    input_ids: Any

    @property
    def max_num_reqs(self) -> int:
        return int(self.seq_lens.shape[0])

    @property
    def max_num_tokens(self) -> int:
        return int(self.positions.shape[0])

    @classmethod
    def zeros(cls, max_num_reqs: int, max_num_tokens: int, dtype: Any = np.int32) -> DummyBuffers:
        return cls(
            seq_lens=np.zeros(max_num_reqs, dtype=dtype),
            query_start_loc=np.zeros(max_num_reqs + 1, dtype=dtype),
            positions=np.zeros(max_num_tokens, dtype=dtype),
            input_ids=np.zeros(max_num_tokens, dtype=dtype),
        )

    def copy(self) -> DummyBuffers:
        return DummyBuffers(**{f.name: getattr(self, f.name).copy() for f in fields(self)})


@dataclass
class DummyBatch:
    """What ``make_dummy`` returns (contract B).

    ``seq_lens`` and ``query_start_loc`` are the whole persistent buffers;
    ``positions`` and ``input_ids`` are their first ``num_tokens`` entries.
    ``max_query_len`` is the longest query the batch's attention metadata is
    built for: an int, or None for "the longest count" (vLLM's convention,
    ``vllm/v1/worker/gpu/input_batch.py:set_dummy_context``).
    """

    num_scheduled_tokens: Any
    seq_lens: Any
    query_start_loc: Any
    positions: Any
    input_ids: Any
    idx_mapping: Any
    logits_indices: Any
    cu_num_logits: Any
    max_query_len: Any = None


DUMMY_BATCH_FIELDS = tuple(f.name for f in fields(DummyBatch) if f.name != "max_query_len")
"""The array fields of a DummyBatch (``max_query_len`` is a bound, not an array)."""


def check_dummy_args(num_reqs: object, num_tokens: object, buffers: object) -> tuple[int, int]:
    """Preconditions of contract B: contract A's plus buffer capacities."""
    if not isinstance(buffers, DummyBuffers):
        raise TypeError(f"buffers must be a DummyBuffers, got {type(buffers).__name__}")
    r, n = check_split_args(num_reqs, num_tokens)
    max_num_reqs = buffers.max_num_reqs
    max_num_tokens = buffers.max_num_tokens
    if r > max_num_reqs:
        raise ValueError(f"num_reqs={r} exceeds the buffers' max_num_reqs={max_num_reqs}")
    if n > max_num_tokens:
        raise ValueError(f"num_tokens={n} exceeds the buffers' max_num_tokens={max_num_tokens}")
    if buffers.query_start_loc.shape[0] != max_num_reqs + 1:
        raise ValueError(
            f"buffers.query_start_loc must have max_num_reqs + 1 = {max_num_reqs + 1} entries, "
            f"got {buffers.query_start_loc.shape[0]}"
        )
    if buffers.input_ids.shape[0] != max_num_tokens:
        raise ValueError(
            f"buffers.input_ids must have max_num_tokens = {max_num_tokens} entries, "
            f"got {buffers.input_ids.shape[0]}"
        )
    return r, n


def make_dummy(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Contract B, written element by element into the (numpy) buffers."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    nst = split_dummy_tokens(r, n)

    # seq_lens: a dummy request is a fresh prefill, so seq_len == query length;
    # padded request slots are zero.
    for i in range(buffers.max_num_reqs):
        buffers.seq_lens[i] = nst[i] if i < r else 0

    # query_start_loc: [0] = 0, [1..R] running sum, [R+1..] = N (empty padded slots).
    buffers.query_start_loc[0] = 0
    running = 0
    for i in range(r):
        running += nst[i]
        buffers.query_start_loc[i + 1] = running
    for j in range(r + 1, buffers.max_num_reqs + 1):
        buffers.query_start_loc[j] = n

    # positions[:N] and input_ids[:N] are zero.
    for t in range(n):
        buffers.positions[t] = 0
        buffers.input_ids[t] = 0

    idx_mapping = [i for i in range(r)]
    logits_indices = [int(buffers.query_start_loc[i + 1]) - 1 for i in range(r)]
    cu_num_logits = [i for i in range(r + 1)]
    # max_query_len: the longest request's count.
    max_query_len = 0
    for i in range(r):
        max_query_len = max(max_query_len, nst[i])
    return DummyBatch(
        num_scheduled_tokens=nst,
        seq_lens=buffers.seq_lens,
        query_start_loc=buffers.query_start_loc,
        positions=buffers.positions[:n],
        input_ids=buffers.input_ids[:n],
        idx_mapping=idx_mapping,
        logits_indices=logits_indices,
        cu_num_logits=cu_num_logits,
        max_query_len=max_query_len,
    )

