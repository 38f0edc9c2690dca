"""Oracles for contracts A (dummy token split) and B (dummy batch layout).

SPEC.md, contract A: ``n[i] = N // R + (1 if i >= R - N % R else 0)`` for
``1 <= R <= N``. Contract B: ``make_dummy`` fills persistent buffers so that a
dummy batch is a set of fresh prefills with zero-length padded slots.
"""

from __future__ import annotations

from reference.args import check_int
from reference.types import DummyBatch, DummyBuffers


def check_split_args(num_reqs: object, num_tokens: object) -> tuple[int, int]:
    """Precondition of contract A: ``1 <= R <= N``."""
    r = check_int("num_reqs", num_reqs, minimum=1)
    n = check_int("num_tokens", num_tokens, minimum=1)
    if n < r:
        raise ValueError(
            f"num_tokens must be >= num_reqs (every dummy request needs a token), "
            f"got num_tokens={n} < num_reqs={r}"
        )
    return r, n


def split_dummy_tokens(num_reqs: int, num_tokens: int) -> list[int]:
    """Contract A. Every request gets ``N // R``; the last ``N % R`` get one more."""
    r, n = check_split_args(num_reqs, num_tokens)
    base = n // r
    remainder = n % r
    result = []
    for i in range(r):
        if i >= r - remainder:
            result.append(base + 1)
        else:
            result.append(base)
    return result


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
    return DummyBatch(
        num_scheduled_tokens=nst,
        seq_lens=buffers.seq_lens,
        query_start_loc=buffers.query_start_loc,
        positions=buffers.positions[:n],
        input_ids=buffers.input_ids[:n],
        idx_mapping=idx_mapping,
        logits_indices=logits_indices,
        cu_num_logits=cu_num_logits,
    )
