"""numpy implementation of contract L, ``tbo_children_tokens``: the real
tokens of each child as the sizes of ``[0, t)`` and ``[t, N)`` intersected
with ``[0, M)``, by ``np.clip``."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference.tbo_children_tokens import check_args


def tbo_children_tokens(split_token_index: Any, num_token_non_padded: Any, num_tokens: Any) -> tuple[int, int]:
    t, m, n = check_args(split_token_index, num_token_non_padded, num_tokens)
    ends = np.clip(np.array([t, n]), 0, m)  # where each child's real tokens end
    return int(ends[0]), int(ends[1] - ends[0])
