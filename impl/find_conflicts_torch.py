"""torch implementation of contract E1: the conflict set on the dense slot
grid (``_slot_grid_torch``). The set's size depends on the data, so it
synchronises once per group to size the (read, write) pair list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from batchfuzz._host import to_host
from batchfuzz.impl._slot_grid_torch import grid, sorted_writes, step_to_device
from batchfuzz.reference._step import check_step


def find_conflicts(
    num_computed_tokens: torch.Tensor, num_scheduled_tokens: torch.Tensor,
    block_tables: Sequence[torch.Tensor], block_sizes: Sequence[int],
) -> torch.Tensor:
    """The conflict set as a ``(K, 4)`` int64 tensor of unique rows ``(g, r, w, b)``."""
    c, q = num_computed_tokens, num_scheduled_tokens
    device = c.device
    num_reqs = c.shape[0]
    parts = [torch.zeros((0, 4), dtype=torch.int64, device=device)]
    for g, (table, size) in enumerate(zip(block_tables, block_sizes, strict=True)):
        if table.numel() == 0:
            continue
        block, key, reads, writes = grid(c, q, table, size)
        req = torch.arange(num_reqs, device=device, dtype=torch.int64)[:, None].expand_as(key).reshape(-1)
        keys, _, order = sorted_writes(key, writes, torch.zeros_like(key))
        flat_read = key.reshape(-1)
        lo = torch.searchsorted(keys, flat_read, side="left")
        hi = torch.searchsorted(keys, flat_read, side="right")
        count = torch.where(reads.reshape(-1), hi - lo, torch.zeros_like(lo))
        total = int(count.sum())  # the one synchronisation: the pair list's size
        read_idx = torch.repeat_interleave(torch.arange(count.shape[0], device=device), count, output_size=total)
        offset_in_run = torch.arange(total, device=device) - (torch.cumsum(count, 0) - count)[read_idx]
        write_idx = order[lo[read_idx] + offset_in_run]
        reader, writer = req[read_idx], req[write_idx]
        other = reader != writer
        rows = torch.stack([torch.full_like(reader, g), reader, writer, block.reshape(-1)[read_idx]], dim=1)[other]
        parts.append(rows)
    return torch.unique(torch.cat(parts, dim=0), dim=0)



def bind(device: str) -> Callable[..., np.ndarray]:
    """Canonical numpy-in signature -> (K, 4) numpy array, computed on ``device``."""

    def call(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> np.ndarray:
        step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
        return np.asarray(to_host(find_conflicts(*step_to_device(step, device))))

    return call

