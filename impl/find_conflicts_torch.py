"""torch implementation of contract E1: the conflict set on the device, by the
machinery of ``allow_microbatching_torch.ExactMicrobatchCheckTorch`` (its
size depends on the data, so it synchronises once to size the result)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from batchfuzz.impl.allow_microbatching_torch import checker_for
from batchfuzz.reference._step import check_step


def bind(device: str) -> Callable[..., np.ndarray]:
    """Canonical numpy-in signature -> sorted unique ``(K, 4)`` numpy rows, on ``device``."""

    def call(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> np.ndarray:
        step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
        check, args = checker_for(step, device)
        return check.find_conflicts(*args).cpu().numpy()

    return call
