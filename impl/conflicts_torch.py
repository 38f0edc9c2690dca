"""torch implementations of contract E (same code on CPU and CUDA).

Dense over each group's block table: every table cell ``(r, column)`` times
every offset is a position ``p = column * B + offset`` of request ``r``, so
reads (``p < c[r]``, ``q[r] > 0``), writes (``c[r] <= p < c[r] + q[r]``) and
their slot keys (``block * B + offset``) are masks and products over an
``(R, W * B)`` grid: no ragged expansion, no data-dependent shapes and no
host synchronisation in ``allow_microbatching`` until its single result is
read. ``find_conflicts`` returns a set whose size depends on the data, so it
synchronises once per group to size the (read, write) pair list.

Cost: O(R * W * B) per group (the table's own size times the block size).
Inputs are validated on the host by the binder (``bind_*``), from the numpy
arrays the canonical signature takes, before anything moves to the device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from impl.torch_common import to_numpy
from reference.conflicts import check_step

_NO_SLOT = torch.iinfo(torch.int64).max  # sort key of grid cells that are not writes


def _grid(c: torch.Tensor, q: torch.Tensor, table: torch.Tensor, size: int) -> tuple[torch.Tensor, ...]:
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


def _sorted_writes(key: torch.Tensor, writes: torch.Tensor, token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Write cells sorted by (slot key, token); non-writes sort last."""
    flat_key = torch.where(writes, key, torch.full_like(key, _NO_SLOT)).reshape(-1)
    flat_token = token.reshape(-1)
    by_token = torch.sort(flat_token, stable=True).indices
    by_key = torch.sort(flat_key[by_token], stable=True).indices
    order = by_token[by_key]
    return flat_key[order], flat_token[order], order


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
        _, key, reads, writes = _grid(c, q, table, size)
        pos = torch.arange(key.shape[1], device=key.device, dtype=torch.int64)
        token = start[:, None] + pos - c[:, None]
        keys, tokens, _ = _sorted_writes(key, writes, token)
        flat_read = key.reshape(-1)
        idx = torch.searchsorted(keys, flat_read).clamp_(max=keys.shape[0] - 1)
        hit = reads.reshape(-1) & (keys[idx] == flat_read)
        first = start[:, None].expand_as(key).reshape(-1)
        unsafe = unsafe | (hit & (tokens[idx] > first)).any()
    return ~unsafe


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
        block, key, reads, writes = _grid(c, q, table, size)
        req = torch.arange(num_reqs, device=device, dtype=torch.int64)[:, None].expand_as(key).reshape(-1)
        keys, _, order = _sorted_writes(key, writes, torch.zeros_like(key))
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


def _to_device(step: Any, device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor], list[int]]:
    def move(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)

    return (move(step.num_computed_tokens), move(step.num_scheduled_tokens),
            [move(t) for t in step.block_tables], list(step.block_sizes))


def bind_find_conflicts(device: str) -> Callable[..., np.ndarray]:
    """Canonical numpy-in signature -> (K, 4) numpy array, computed on ``device``."""

    def call(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> np.ndarray:
        step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
        return np.asarray(to_numpy(find_conflicts(*_to_device(step, device))))

    return call


def bind_allow_microbatching(device: str) -> Callable[..., bool]:
    """Canonical numpy-in signature -> Python bool, computed on ``device``."""

    def call(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> bool:
        step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
        return bool(allow_microbatching(*_to_device(step, device)))

    return call
