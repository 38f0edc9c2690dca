"""Oracle of contract H: speculative-decoding metadata (docs/contracts.md, contract H).

For each request ``i`` of a step, with ``q[i]`` scheduled tokens of which
the last ``d[i]`` are draft tokens, the sampler reads logits at the last
``1 + d[i]`` positions of the request: ``d[i]`` target positions (each
verifies the draft token after it) and one bonus position (the request's
last token). All indices are written as concatenated ``arange``s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchfuzz.reference._args import check_count_array


@dataclass(frozen=True)
class SpecDecodeIndices:
    """``logits_indices``: token positions whose logits are computed, request
    by request; ``target_logits_indices`` and ``bonus_logits_indices``:
    indices into those logits; ``cu_num_draft_tokens`` and
    ``cu_num_sampled_tokens``: running sums of ``d`` and ``d + 1``;
    ``draft_token_positions``: the token position of every draft token."""

    logits_indices: list[int]
    target_logits_indices: list[int]
    bonus_logits_indices: list[int]
    cu_num_draft_tokens: list[int]
    cu_num_sampled_tokens: list[int]
    draft_token_positions: list[int]


def check_spec_args(num_draft_tokens: Any, num_scheduled_tokens: Any) -> tuple[list[int], list[int]]:
    """Preconditions of contract H: ``R >= 1`` requests, ``d[i] >= 0`` and
    ``q[i] >= 1 + d[i]`` (a request schedules its drafts after at least one token)."""
    d = check_count_array("num_draft_tokens", num_draft_tokens)
    q = check_count_array("num_scheduled_tokens", num_scheduled_tokens, minimum=1)
    if d.size == 0:
        raise ValueError("num_draft_tokens must have at least one request, got 0")
    if q.size != d.size:
        raise ValueError(f"num_draft_tokens and num_scheduled_tokens must have one entry per request, got {d.size} and {q.size}")
    for i in range(d.size):
        if q[i] < 1 + d[i]:
            raise ValueError(f"num_scheduled_tokens[{i}] must be >= 1 + num_draft_tokens[{i}] = {1 + int(d[i])}, got {int(q[i])}")
    return [int(v) for v in d], [int(v) for v in q]


def cumsum_and_arange(counts: list[int]) -> tuple[list[int], list[int]]:
    """The running sums of ``counts`` and the concatenation of ``arange(n)``
    for each count ``n`` (zeros contribute nothing)."""
    cu: list[int] = []
    ar: list[int] = []
    total = 0
    for n in counts:
        total += n
        cu.append(total)
        for j in range(n):
            ar.append(j)
    return cu, ar


def spec_decode_metadata(num_draft_tokens: Any, num_scheduled_tokens: Any) -> SpecDecodeIndices:
    """Contract H, request by request."""
    d, q = check_spec_args(num_draft_tokens, num_scheduled_tokens)
    logits: list[int] = []
    target: list[int] = []
    bonus: list[int] = []
    positions: list[int] = []
    end = 0
    for i in range(len(d)):
        end += q[i]  # one past the request's last token
        first = len(logits)  # index of the request's first logit
        for j in range(d[i] + 1):
            logits.append(end - 1 - d[i] + j)
        for j in range(d[i]):
            target.append(first + j)
            positions.append(end - d[i] + j)
        bonus.append(first + d[i])
    cu_draft, _ = cumsum_and_arange(d)
    cu_sampled, _ = cumsum_and_arange([n + 1 for n in d])
    return SpecDecodeIndices(logits, target, bonus, cu_draft, cu_sampled, positions)
