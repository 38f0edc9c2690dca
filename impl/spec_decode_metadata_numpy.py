"""numpy implementation of contract H, speculative-decoding metadata
(docs/contracts.md, contract H), built on one part: the batched arange.

:func:`calc_from` composes the metadata from a ``cumsum_and_arange(counts,
arange_out) -> cumulative counts`` part (ours by default, or the engine's
``GPUModelRunner._get_cumsum_and_arange`` in a binding).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from batchfuzz.reference.spec_decode_metadata import SpecDecodeIndices, check_spec_args

CumsumArange = Callable[[np.ndarray, np.ndarray], np.ndarray]


def cumsum_and_arange(counts: np.ndarray, arange_out: np.ndarray) -> np.ndarray:
    """Running sums of ``counts``; ``arange_out[:sum]`` gets the concatenated aranges."""
    cu = np.cumsum(counts, dtype=np.int64)
    total = int(cu[-1]) if cu.size else 0
    starts = np.repeat(cu - counts, counts)
    arange_out[:total] = np.arange(total, dtype=np.int64) - starts
    return cu


def calc_from(part: CumsumArange = cumsum_and_arange) -> Callable[..., SpecDecodeIndices]:
    """Contract H's target with the batched arange ``part``."""

    def spec_decode_metadata(num_draft_tokens: Any, num_scheduled_tokens: Any) -> SpecDecodeIndices:
        d_list, q_list = check_spec_args(num_draft_tokens, num_scheduled_tokens)
        d, q = np.asarray(d_list, dtype=np.int64), np.asarray(q_list, dtype=np.int64)
        sampled = d + 1
        scratch = np.empty(int(q.sum()) + 1, dtype=np.int64)  # sum(d + 1) <= sum(q)
        cu_sampled = np.asarray(part(sampled, scratch), dtype=np.int64)
        ends = np.cumsum(q)
        logits = np.repeat(ends - sampled, sampled) + scratch[: int(cu_sampled[-1])]
        bonus = cu_sampled - 1
        cu_draft = np.asarray(part(d, scratch), dtype=np.int64)
        target = np.repeat(cu_sampled - sampled, d) + scratch[: int(cu_draft[-1])]
        positions = logits[target + 1]
        return SpecDecodeIndices(logits.tolist(), target.tolist(), bonus.tolist(), cu_draft.tolist(), cu_sampled.tolist(),
                                 positions.tolist())

    return spec_decode_metadata


spec_decode_metadata = calc_from()
