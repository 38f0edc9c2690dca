"""numpy implementation of contract E1: the conflict set, by the block-level
machinery of the exact decision (``allow_microbatching_numpy.ExactMicrobatchCheck.find_conflicts``):
write records and whole-block reads, slot level only for the few partly
written blocks."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.impl.allow_microbatching_numpy import checker_for
from batchfuzz.reference._step import check_step


def find_conflicts(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> np.ndarray:
    """The conflict set as a sorted ``(K, 4)`` int64 array of unique rows
    ``(g, r, w, b)``; validates like the oracle (``check_step``)."""
    step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
    check = checker_for(step)
    return check.find_conflicts(step.num_reqs, step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables)
