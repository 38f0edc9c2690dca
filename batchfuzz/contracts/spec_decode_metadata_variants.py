"""Known buggy variants of contract H, speculative-decoding metadata: mutants
modelled on the engine's history of these index buffers (stale padded
entries, buffers sized for the wrong count) and on the usual slips of a
batched arange (off by one, zero counts, bonus and target offsets)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.impl.spec_decode_metadata_numpy import calc_from, cumsum_and_arange, spec_decode_metadata
from batchfuzz.reference.spec_decode_metadata import SpecDecodeIndices, check_spec_args
from batchfuzz.registry import Variant


def _arange_from_one(counts: np.ndarray, arange_out: np.ndarray) -> np.ndarray:
    """Each count's arange runs 1 .. n instead of 0 .. n - 1."""
    cu = cumsum_and_arange(counts, arange_out)
    arange_out[: int(cu[-1])] += 1
    return cu


def _resets(counts: np.ndarray, arange_out: np.ndarray) -> np.ndarray:
    """The arange as a running sum of ones reset at each count's start: two
    starts at one place when a count is zero, and one reset is lost."""
    cu = np.cumsum(counts, dtype=np.int64)
    total = int(cu[-1])
    steps = np.ones(total, dtype=np.int64)
    if total:
        steps[0] = 0
        starts = (cu - counts)[1:]
        inside = starts < total
        steps[starts[inside]] = 1 - counts[:-1][inside]
    arange_out[:total] = np.cumsum(steps)
    return cu


def _int16(counts: np.ndarray, arange_out: np.ndarray) -> np.ndarray:
    """Running sums kept as int16: they wrap once a step samples 32768 positions."""
    cu = cumsum_and_arange(counts, arange_out)
    return cu.astype(np.int16)


def _fields(m: SpecDecodeIndices, **changes: Any) -> SpecDecodeIndices:
    values = {k: getattr(m, k) for k in SpecDecodeIndices.__dataclass_fields__}
    values.update(changes)
    return SpecDecodeIndices(**values)


def bonus_without_minus_one(num_draft_tokens: Any, num_scheduled_tokens: Any) -> SpecDecodeIndices:
    """Bonus indices = cumulative sampled counts (one past each request's last logit)."""
    m = spec_decode_metadata(num_draft_tokens, num_scheduled_tokens)
    return _fields(m, bonus_logits_indices=list(m.cu_num_sampled_tokens))


def target_in_token_space(num_draft_tokens: Any, num_scheduled_tokens: Any) -> SpecDecodeIndices:
    """Target indices offset by each request's first token position instead
    of its first logit: token positions where logits indices are meant."""
    d, q = check_spec_args(num_draft_tokens, num_scheduled_tokens)
    m = spec_decode_metadata(d, q)
    starts = np.cumsum(q) - np.asarray(q)
    firsts = np.asarray(m.cu_num_sampled_tokens) - np.asarray(d) - 1
    shift = np.repeat(starts - firsts, d)
    return _fields(m, target_logits_indices=(np.asarray(m.target_logits_indices, dtype=np.int64) + shift).tolist())


def exclusive_draft_cumsum(num_draft_tokens: Any, num_scheduled_tokens: Any) -> SpecDecodeIndices:
    """cu_num_draft_tokens as exclusive sums (each request's start, not its end)."""
    d, q = check_spec_args(num_draft_tokens, num_scheduled_tokens)
    m = spec_decode_metadata(d, q)
    return _fields(m, cu_num_draft_tokens=(np.asarray(m.cu_num_draft_tokens) - np.asarray(d)).tolist())


def stale_padded_targets(num_draft_tokens: Any, num_scheduled_tokens: Any) -> SpecDecodeIndices:
    """Target indices read from a persistent buffer padded to ``R * max(d)``
    entries (a uniform step's size): the entries past this step's drafts hold
    what an earlier step left there (its own indices, ``0, 1, 2, ...``)."""
    d, q = check_spec_args(num_draft_tokens, num_scheduled_tokens)
    m = spec_decode_metadata(d, q)
    padded = len(d) * max(d)
    buffer = np.arange(max(padded, 1), dtype=np.int64)  # the earlier step's indices
    buffer[: len(m.target_logits_indices)] = m.target_logits_indices
    return _fields(m, target_logits_indices=buffer[:padded].tolist())


def logits_sized_for_drafts(num_draft_tokens: Any, num_scheduled_tokens: Any) -> SpecDecodeIndices:
    """The logits-index buffer sized for ``sum(d) + 1`` entries rather than
    ``sum(d + 1)``: the last requests' positions are cut off."""
    d, q = check_spec_args(num_draft_tokens, num_scheduled_tokens)
    m = spec_decode_metadata(d, q)
    return _fields(m, logits_indices=m.logits_indices[: sum(d) + 1])


def draft_positions_at_targets(num_draft_tokens: Any, num_scheduled_tokens: Any) -> SpecDecodeIndices:
    """Draft tokens read at the target positions, not the positions after them."""
    m = spec_decode_metadata(num_draft_tokens, num_scheduled_tokens)
    return _fields(m, draft_token_positions=[m.logits_indices[t] for t in m.target_logits_indices])


arange_from_one = calc_from(_arange_from_one)
arange_from_one.__doc__ = _arange_from_one.__doc__
arange_with_resets = calc_from(_resets)
arange_with_resets.__doc__ = _resets.__doc__
int16_cumsum = calc_from(_int16)
int16_cumsum.__doc__ = _int16.__doc__


def _step(d: list[int], q: list[int]) -> dict[str, list[int]]:
    return {"num_draft_tokens": d, "num_scheduled_tokens": q}


VARIANTS = (
    Variant("stale_padded_targets", "target indices padded to R * max(d) from a buffer an earlier step filled "
            "(modelled on stale padded index buffers)", stale_padded_targets, "mutant",
            ("target_and_bonus_partition", "matches_oracle"), _step([0, 1], [1, 2])),
    Variant("logits_sized_for_drafts", "logits-index buffer sized for sum(d) + 1, not sum(d + 1) (modelled on buffers "
            "sized for a count the step can exceed)", logits_sized_for_drafts, "mutant",
            ("logits_are_last_positions", "target_and_bonus_partition", "matches_oracle"), _step([0, 0], [1, 1])),
    Variant("arange_from_one", "each batched arange runs 1 .. n (off by one)", arange_from_one, "mutant",
            ("logits_are_last_positions", "matches_oracle"), _step([0], [1])),
    Variant("arange_with_resets", "the batched arange as a running sum reset at each start: wrong after a zero count",
            arange_with_resets, "mutant", ("target_and_bonus_partition", "matches_oracle"), _step([0, 1], [1, 2])),
    Variant("bonus_without_minus_one", "bonus indices one past each request's last logit", bonus_without_minus_one,
            "mutant", ("bonus_is_last_token", "target_and_bonus_partition"), _step([0], [1])),
    Variant("target_in_token_space", "target indices offset by token positions instead of logits",
            target_in_token_space, "mutant", ("target_and_bonus_partition", "matches_oracle"), _step([0, 1], [2, 2])),
    Variant("exclusive_draft_cumsum", "cu_num_draft_tokens as exclusive sums", exclusive_draft_cumsum, "mutant",
            ("cumulative_counts",), _step([1], [2])),
    Variant("int16_cumsum", "running sums as int16: wrap past 32767 sampled positions", int16_cumsum, "mutant",
            ("cumulative_counts", "matches_oracle"), _step([32767], [32768])),
    Variant("draft_positions_at_targets", "draft tokens read at the target positions, not after them",
            draft_positions_at_targets, "mutant", ("draft_token_positions",), _step([1], [2])),
)
