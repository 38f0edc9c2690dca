"""Buggy variants of contracts A and B."""

from __future__ import annotations

import numpy as np
import torch

from impl import dummy_numpy
from reference.dummy import check_dummy_args, check_split_args
from reference.types import DummyBatch, DummyBuffers

# ---------------------------------------------------------------- contract A
# The shipped bug, once per code path that had it (SPEC.md bug 1).


def remainder_to_last_input_batch(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Input-batch builder before the fix: the whole remainder on the last request."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = np.full(r, n // r, dtype=np.int32)
    out[-1] += n % r
    return out


def remainder_to_last_dummy_run(num_reqs: int, num_tokens: int) -> list[int]:
    """Dummy run before the fix (and the v1 model runner as of vLLM 0.33.0)."""
    r, n = check_split_args(num_reqs, num_tokens)
    per_req = [n // r] * r
    per_req[-1] += n % r
    return per_req


def remainder_to_last_lora_hook(num_reqs: int, num_tokens: int) -> torch.Tensor:
    """LoRA capture hook before the fix."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = torch.full((r,), n // r, dtype=torch.int64)
    out[r - 1] = n - (n // r) * (r - 1)
    return out


def remainder_to_last_v1_runner(num_reqs: int, num_tokens: int) -> list[int]:
    """v1 GPU model runner's dummy run: ``[N // R] * R`` then ``[-1] += N % R``."""
    r, n = check_split_args(num_reqs, num_tokens)
    min_tokens = n // r
    nst = [min_tokens] * r
    nst[-1] += n % r
    return nst


# Planted mutants.


def remainder_to_first(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Extras on the first N % R requests instead of the last (wrong end)."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = np.full(r, n // r, dtype=np.int64)
    out[: n % r] += 1
    return out


def drop_remainder(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Forgets the remainder: N // R each, sum falls short."""
    r, n = check_split_args(num_reqs, num_tokens)
    return np.full(r, n // r, dtype=np.int64)


def tail_off_by_one(num_reqs: int, num_tokens: int) -> np.ndarray:
    """``i > R - N % R`` instead of ``>=``: one extra token lost."""
    r, n = check_split_args(num_reqs, num_tokens)
    idx = np.arange(r)
    return (n // r + (idx > r - n % r)).astype(np.int64)


def ceil_then_trim_last(num_reqs: int, num_tokens: int) -> list[int]:
    """Everyone gets ceil(N / R), the last takes what is left (maybe 0 or less)."""
    r, n = check_split_args(num_reqs, num_tokens)
    c = -(-n // r)
    out = [c] * r
    out[-1] = n - c * (r - 1)
    return out


def int16_counts(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Counts kept as int16: wraps once one request has over 32767 tokens."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = np.full(r, n // r, dtype=np.int64)
    out[r - n % r :] += 1
    return out.astype(np.int16)


def uneven_spread(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Extras on every other request from the tail: right total, not sorted."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = np.full(r, n // r, dtype=np.int64)
    rem = n % r
    # positions r-1, r-3, ... then fill the rest from the tail
    order = list(range(r - 1, -1, -2)) + list(range(r - 2, -1, -2))
    for i in order[:rem]:
        out[i] += 1
    return out


# ---------------------------------------------------------------- contract B


def _numpy_layout(r: int, n: int, buffers: DummyBuffers, nst: np.ndarray) -> DummyBatch:
    qsl = buffers.query_start_loc
    nst = nst.astype(qsl.dtype)
    buffers.seq_lens[:r] = nst
    buffers.seq_lens[r:] = 0
    qsl[0] = 0
    np.cumsum(nst, out=qsl[1 : r + 1])
    qsl[r + 1 :] = n
    buffers.positions[:n] = 0
    buffers.input_ids[:n] = 0
    return DummyBatch(nst, buffers.seq_lens, qsl, buffers.positions[:n], buffers.input_ids[:n],
                      np.arange(r), qsl[1 : r + 1] - 1, np.arange(r + 1))


def layout_remainder_to_last(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """make_dummy on top of the shipped remainder-to-last split."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    return _numpy_layout(r, n, buffers, np.asarray(remainder_to_last_dummy_run(r, n)))


def v1_seq_lens_total(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """v1-style dummy run: every request's seq_len is the whole token count."""
    batch = dummy_numpy.make_dummy(num_reqs, num_tokens, buffers)
    buffers.seq_lens[: int(num_reqs)] = int(num_tokens)
    return batch


def qsl_tail_unwritten(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Writes query_start_loc[:R+1] only; the padded tail keeps stale values."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    stale = buffers.query_start_loc[r + 1 :].copy()
    batch = dummy_numpy.make_dummy(r, n, buffers)
    buffers.query_start_loc[r + 1 :] = stale
    return batch


def qsl_tail_zero(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Pads query_start_loc with 0 instead of N: the array drops at R + 1."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    batch = dummy_numpy.make_dummy(r, n, buffers)
    buffers.query_start_loc[r + 1 :] = 0
    return batch


def seq_lens_tail_stale(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Does not zero seq_lens[R:]: padded slots keep an earlier step's lengths."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    stale = buffers.seq_lens[r:].copy()
    batch = dummy_numpy.make_dummy(r, n, buffers)
    buffers.seq_lens[r:] = stale
    return batch


def positions_stale(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Leaves positions[:N] as they were (only input_ids are cleared)."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    stale = buffers.positions[:n].copy()
    batch = dummy_numpy.make_dummy(r, n, buffers)
    buffers.positions[:n] = stale
    return batch


def qsl_exclusive_sum(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Running sum off by one request: query_start_loc[i + 1] = sum(nst[:i])."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    batch = dummy_numpy.make_dummy(r, n, buffers)
    qsl = buffers.query_start_loc
    qsl[1 : r + 1] = np.concatenate([[0], np.cumsum(np.asarray(batch.num_scheduled_tokens))[:-1]])
    return batch


def logits_off_by_one(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """logits_indices = query_start_loc[1:R+1] (one past each request's last token)."""
    batch = dummy_numpy.make_dummy(num_reqs, num_tokens, buffers)
    batch.logits_indices = np.asarray(batch.query_start_loc[1 : int(num_reqs) + 1]).copy()
    return batch


def int16_query_start_loc(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Running sum accumulated in int16: wraps past 32767 tokens."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    batch = dummy_numpy.make_dummy(r, n, buffers)
    nst16 = np.asarray(batch.num_scheduled_tokens).astype(np.int16)
    buffers.query_start_loc[1 : r + 1] = np.cumsum(nst16, dtype=np.int16)
    batch.logits_indices = buffers.query_start_loc[1 : r + 1] - 1
    return batch


def canonical_buffers(max_num_reqs: int, max_num_tokens: int, *, seq_lens: int = 0, positions: int = 0) -> DummyBuffers:
    """A documented minimal counterexample's buffers (``Variant.canonical``):
    int32 (the strategy's first dtype), zeros except where a stale value is
    what exposes the bug (``seq_lens``/``positions`` filled with that value)."""
    b = DummyBuffers.zeros(max_num_reqs, max_num_tokens, np.int32)
    b.seq_lens[:] = seq_lens
    b.positions[:] = positions
    return b
