"""Known buggy variants of contract B, the dummy batch layout: shipped
behaviours and planted mutants, each on top of the numpy layout of
``batchfuzz.impl.make_dummy_numpy``."""

from __future__ import annotations

import numpy as np

from batchfuzz.contracts.split_dummy_tokens_variants import remainder_to_last_dummy_run
from batchfuzz.impl import make_dummy_numpy
from batchfuzz.impl.make_dummy_numpy import write_layout
from batchfuzz.reference.make_dummy import DummyBatch, DummyBuffers, check_dummy_args
from batchfuzz.registry import Variant


def layout_remainder_to_last(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """make_dummy on top of the shipped remainder-to-last split."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    return write_layout(r, n, buffers, np.asarray(remainder_to_last_dummy_run(r, n)))


def v1_seq_lens_total(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """v1-style dummy run: every request's seq_len is the whole token count."""
    batch = make_dummy_numpy.make_dummy(num_reqs, num_tokens, buffers)
    buffers.seq_lens[: int(num_reqs)] = int(num_tokens)
    return batch


def qsl_tail_unwritten(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Writes query_start_loc[:R+1] only; the padded tail keeps stale values."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    stale = buffers.query_start_loc[r + 1 :].copy()
    batch = make_dummy_numpy.make_dummy(r, n, buffers)
    buffers.query_start_loc[r + 1 :] = stale
    return batch


def qsl_tail_zero(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Pads query_start_loc with 0 instead of N: the array drops at R + 1."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    batch = make_dummy_numpy.make_dummy(r, n, buffers)
    buffers.query_start_loc[r + 1 :] = 0
    return batch


def seq_lens_tail_stale(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Does not zero seq_lens[R:]: padded slots keep an earlier step's lengths."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    stale = buffers.seq_lens[r:].copy()
    batch = make_dummy_numpy.make_dummy(r, n, buffers)
    buffers.seq_lens[r:] = stale
    return batch


def positions_stale(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Leaves positions[:N] as they were (only input_ids are cleared)."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    stale = buffers.positions[:n].copy()
    batch = make_dummy_numpy.make_dummy(r, n, buffers)
    buffers.positions[:n] = stale
    return batch


def qsl_exclusive_sum(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Running sum off by one request: query_start_loc[i + 1] = sum(nst[:i])."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    batch = make_dummy_numpy.make_dummy(r, n, buffers)
    qsl = buffers.query_start_loc
    qsl[1 : r + 1] = np.concatenate([[0], np.cumsum(np.asarray(batch.num_scheduled_tokens))[:-1]])
    return batch


def logits_off_by_one(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """logits_indices = query_start_loc[1:R+1] (one past each request's last token)."""
    batch = make_dummy_numpy.make_dummy(num_reqs, num_tokens, buffers)
    batch.logits_indices = np.asarray(batch.query_start_loc[1 : int(num_reqs) + 1]).copy()
    return batch


def int16_query_start_loc(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Running sum accumulated in int16: wraps past 32767 tokens."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    batch = make_dummy_numpy.make_dummy(r, n, buffers)
    nst16 = np.asarray(batch.num_scheduled_tokens).astype(np.int16)
    buffers.query_start_loc[1 : r + 1] = np.cumsum(nst16, dtype=np.int16)
    batch.logits_indices = buffers.query_start_loc[1 : r + 1] - 1
    return batch


def max_query_len_floor(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Promises max_query_len = N // R: short by one wherever a request got an extra token."""
    batch = make_dummy_numpy.make_dummy(num_reqs, num_tokens, buffers)
    batch.max_query_len = int(num_tokens) // int(num_reqs)
    return batch


def max_query_len_capacity(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Promises max_query_len = the buffers' token capacity, more than the step has."""
    batch = make_dummy_numpy.make_dummy(num_reqs, num_tokens, buffers)
    batch.max_query_len = buffers.max_num_tokens
    return batch


def canonical_buffers(max_num_reqs: int, max_num_tokens: int, *, seq_lens: int = 0, positions: int = 0) -> DummyBuffers:
    """A documented minimal counterexample's buffers (``Variant.canonical``):
    int32 (the strategy's first dtype), zeros except where a stale value is
    what exposes the bug (``seq_lens``/``positions`` filled with that value)."""
    b = DummyBuffers.zeros(max_num_reqs, max_num_tokens, np.int32)
    b.seq_lens[:] = seq_lens
    b.positions[:] = positions
    return b



# Canonical forms are complete: (R, N) and the buffers the strategy shrinks to
# (int32, capacity R or R + 1 where a padded slot is needed, zeros unless a
# stale value is what exposes the bug).
_B = canonical_buffers


def _stale_padded_seq_len() -> DummyBuffers:
    """One padded request slot whose stale seq_len is 1. Shrinking ends on the
    strategy's "decreasing" stale pattern, ``seq_lens == [2, 1]``: slot 0 is
    overwritten by the call, the stale 1 in padded slot 1 is the bug."""
    b = _B(2, 1)
    b.seq_lens[:] = [2, 1]
    return b


_SMALL = {"num_reqs": 3, "num_tokens": 5, "buffers": _B(3, 5)}


_ONE = {"num_reqs": 1, "num_tokens": 1, "buffers": _B(1, 1)}


_ONE_PADDED = {"num_reqs": 1, "num_tokens": 1, "buffers": _B(2, 1)}


VARIANTS = (
    Variant("remainder_to_last", "make_dummy on the shipped remainder-to-last split (shipped)", layout_remainder_to_last,
            "shipped", ("num_scheduled_tokens_is_split", "seq_lens_within_max_model_len", "matches_oracle"), _SMALL),
    Variant("v1_seq_lens_total", "v1 dummy run: every seq_len is the whole token count, past max_model_len (shipped)",
            v1_seq_lens_total, "shipped", ("seq_lens_layout", "seq_lens_within_max_model_len", "matches_oracle"),
            {"num_reqs": 2, "num_tokens": 2, "buffers": _B(2, 2)}),
    Variant("qsl_tail_unwritten", "query_start_loc padding left unwritten in the reused buffer (shipped)",
            qsl_tail_unwritten, "shipped", ("query_start_loc_layout", "query_start_loc_non_decreasing",
                                                  "independent_of_stale_buffers", "matches_oracle"),
            _ONE_PADDED),
    Variant("qsl_tail_zero", "pads query_start_loc with 0 instead of N", qsl_tail_zero, "mutant",
            ("query_start_loc_non_decreasing", "query_start_loc_layout", "matches_oracle"), _ONE_PADDED),
    Variant("seq_lens_tail_stale", "seq_lens[R:] not zeroed: padded slots keep old lengths", seq_lens_tail_stale, "mutant",
            ("seq_lens_layout", "independent_of_stale_buffers", "matches_oracle"),
            {"num_reqs": 1, "num_tokens": 1, "buffers": _stale_padded_seq_len()}),
    Variant("positions_stale", "positions[:N] not cleared", positions_stale, "mutant",
            ("positions_and_input_ids_zero", "matches_oracle"),
            {"num_reqs": 1, "num_tokens": 1, "buffers": _B(1, 1, positions=1)}),
    Variant("qsl_exclusive_sum", "running sum shifted by one request (exclusive instead of inclusive)", qsl_exclusive_sum,
            "mutant", ("query_start_loc_diff", "query_start_loc_layout", "matches_oracle"), _ONE),
    Variant("logits_off_by_one", "logits_indices point one past each request's last token", logits_off_by_one, "mutant",
            ("index_arrays", "matches_oracle"), _ONE),
    Variant("int16_query_start_loc", "running sum accumulated in int16: wraps past 32767 tokens", int16_query_start_loc,
            "mutant", ("query_start_loc_layout", "matches_oracle"), {"num_reqs": 1, "num_tokens": 32768, "buffers": _B(1, 32768)}),
    Variant("max_query_len_floor", "promises max_query_len = N // R, below the request that got an extra token",
            max_query_len_floor, "mutant", ("max_query_len_covers_batch",),
            {"num_reqs": 2, "num_tokens": 3, "buffers": _B(2, 3)}),
    Variant("max_query_len_capacity", "promises max_query_len = the token capacity, more than the step's N tokens",
            max_query_len_capacity, "mutant", ("max_query_len_covers_batch",),
            {"num_reqs": 1, "num_tokens": 1, "buffers": _B(1, 2)}),
)

