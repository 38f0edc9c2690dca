"""numpy implementation of contract E2: the exact, split-agnostic decision.

Reads and writes as slot keys (``_slot_keys_numpy``); for every read, the
earliest token that writes its slot (writes sorted by slot, then token;
``searchsorted``); veto iff that token comes after the reader's first token.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.impl._slot_keys_numpy import group_slots
from batchfuzz.reference._step import check_step


def allow_microbatching(
    num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any
) -> bool:
    """Exact: veto iff some reader's computed slot is first written by a token
    after the reader's first token (see ``batchfuzz.reference.allow_microbatching.allow_microbatching``)."""
    step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
    q = step.num_scheduled_tokens
    start = np.cumsum(q) - q
    for grp in group_slots(step):
        if grp.write_key.size == 0 or grp.read_key.size == 0:
            continue
        order = np.lexsort((grp.write_token, grp.write_key))  # by slot, then token
        keys, tokens = grp.write_key[order], grp.write_token[order]
        idx = np.searchsorted(keys, grp.read_key, side="left")  # earliest write of the slot
        found = idx < keys.shape[0]
        idx = np.minimum(idx, keys.shape[0] - 1)
        hit = found & (keys[idx] == grp.read_key)
        if np.any(hit & (tokens[idx] > start[grp.read_req])):
            return False
    return True

