"""The dense slot grid of a contract E step in torch (shared by
``find_conflicts_torch`` and ``allow_microbatching_torch``; same code on CPU
and CUDA).

Every table cell ``(r, column)`` times every offset is a position
``p = column * B + offset`` of request ``r``, so reads (``p < c[r]``,
``q[r] > 0``), writes (``c[r] <= p < c[r] + q[r]``) and their slot keys
(``block * B + offset``) are masks and products over an ``(R, W * B)`` grid:
no ragged expansion, no data-dependent shapes. Cost: O(R * W * B) per group.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_NO_SLOT = torch.iinfo(torch.int64).max  # sort key of grid cells that are not writes


def grid(c: torch.Tensor, q: torch.Tensor, table: torch.Tensor, size: int) -> tuple[torch.Tensor, ...]:
    """Slot keys and read/write masks of one group over the (R, W * B) grid."""
    width = table.shape[1]
    pos = torch.arange(width * size, device=table.device, dtype=torch.int64)
    block = table[:, pos // size]  # (R, W*B)
    key = block * size + pos % size
    cc, qq = c[:, None], q[:, None]
    real = block != 0  # the null block is never read nor written
    reads = (pos < cc) & (qq > 0) & real
    writes = (pos >= cc) & (pos < cc + qq) & real
    return block, key, reads, writes


def sorted_writes(key: torch.Tensor, writes: torch.Tensor, token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Write cells sorted by (slot key, token); non-writes sort last."""
    flat_key = torch.where(writes, key, torch.full_like(key, _NO_SLOT)).reshape(-1)
    flat_token = token.reshape(-1)
    by_token = torch.sort(flat_token, stable=True).indices
    by_key = torch.sort(flat_key[by_token], stable=True).indices
    order = by_token[by_key]
    return flat_key[order], flat_token[order], order


def step_to_device(step: Any, device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor], list[int]]:
    def move(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)

    return (move(step.num_computed_tokens), move(step.num_scheduled_tokens),
            [move(t) for t in step.block_tables], list(step.block_sizes))

