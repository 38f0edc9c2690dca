"""torch implementation of contract E2: the exact decision on the dense slot
grid (``_slot_grid_torch``), with no host synchronisation until its single
result is read. Inputs are validated on the host by :func:`bind`, from the
numpy arrays the canonical signature takes, before anything moves to the
device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from batchfuzz.impl._slot_grid_torch import grid, sorted_writes, step_to_device
from batchfuzz.reference._step import check_step


def allow_microbatching(
    num_computed_tokens: torch.Tensor, num_scheduled_tokens: torch.Tensor,
    block_tables: Sequence[torch.Tensor], block_sizes: Sequence[int],
) -> torch.Tensor:
    """Exact, split-agnostic decision as a 0-d bool tensor on the inputs' device.

    Veto iff some reader's computed, non-null slot is first written by a token
    after the reader's first token. Inputs are valid int64 tensors on one device.
    """
    c, q = num_computed_tokens, num_scheduled_tokens
    start = torch.cumsum(q, 0) - q
    unsafe = torch.zeros((), dtype=torch.bool, device=c.device)
    for table, size in zip(block_tables, block_sizes, strict=True):
        if table.numel() == 0:
            continue
        _, key, reads, writes = grid(c, q, table, size)
        pos = torch.arange(key.shape[1], device=key.device, dtype=torch.int64)
        token = start[:, None] + pos - c[:, None]
        keys, tokens, _ = sorted_writes(key, writes, token)
        flat_read = key.reshape(-1)
        idx = torch.searchsorted(keys, flat_read).clamp_(max=keys.shape[0] - 1)
        hit = reads.reshape(-1) & (keys[idx] == flat_read)
        first = start[:, None].expand_as(key).reshape(-1)
        unsafe = unsafe | (hit & (tokens[idx] > first)).any()
    return ~unsafe



def bind(device: str) -> Callable[..., bool]:
    """Canonical numpy-in signature -> Python bool, computed on ``device``."""

    def call(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> bool:
        step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
        return bool(allow_microbatching(*step_to_device(step, device)))

    return call

