"""torch implementation of contract E2: the exact microbatching decision
without a host synchronisation (CPU and CUDA, inputs resident on the device): every shape comes from host ints fixed at construction or
passed in (``num_reqs``, ``num_tokens``), none from tensor values.

Same rule as ``allow_microbatching_numpy`` (veto iff some reader's
computed, non-null slot is first written by a token after the reader's first
token), computed for any step, well-formed or not, by one formula (no path
to choose, since choosing would read a value on the host):

1. *earliest write per slot*: every scheduled token ``t`` (global index, the
   ``num_tokens`` of the step) writes slot ``(b, o)`` of its position in
   each group; ``E[slot] = min t`` by one ``scatter_reduce("amin")`` into a
   slot-indexed buffer (``num_blocks * B`` slots per group);
2. *latest of them per block*: ``L[b] = max over b's written slots of E``,
   one ``scatter_reduce("amax")`` into a block-indexed buffer;
3. *whole-block reads*: reader ``r`` (``q > 0``) reads every offset of its
   columns ``[0, c // B)``: unsafe iff ``L[b] > start[r]``, over the dense
   ``(num_reqs, W)`` table, masked;
4. *partial reads*: offsets ``[0, c % B)`` of column ``c // B``: unsafe iff
   a written one has ``E > start[r]``, over a ``(num_reqs, B)`` grid.

All groups are stacked into one set of kernels (one copy of each table into
a combined int64 buffer, block and slot ids offset per group), so that the
launch count does not grow with the number of groups: about 40 kernels a
step. Work is O(num_tokens + num_reqs * sum(W) + num_reqs * sum(B)) element
operations plus filling the ``num_blocks * sum(B)`` slot buffer.

The conflict set, sync-free too, is ``find_conflicts_torch.ExactConflictsTorch``
(a subclass: same combined table, fixed-capacity result).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from batchfuzz.reference._args import check_buffer, check_groups, check_int, describe
from batchfuzz.reference._step import check_step

_BIG = torch.iinfo(torch.int64).max  # "never written" in the slot buffer


class ExactMicrobatchCheckTorch:
    """Exact microbatching check on one device, sync-free; buffers reused.

    ``ExactMicrobatchCheckTorch(max_num_reqs, widths, block_sizes, num_blocks,
    max_num_tokens, device)``; then ``check(num_reqs, c, q, tables)`` with
    ``c``, ``q`` int tensors of at least ``num_reqs`` entries and
    ``tables[g]`` int tensors of shape ``(>= num_reqs, widths[g])`` on
    ``device`` returns a 0-d bool tensor on ``device`` (True: allow). Block ids
    must be in ``[0, num_blocks)`` and ``sum(q[:num_reqs])`` must not exceed
    ``num_tokens`` (default ``max_num_tokens``); values are not checked
    (that would synchronise): outside those bounds the answer is undefined.
    :func:`bind` validates numpy input on the host first.
    """

    def __init__(self, max_num_reqs: int, widths: Sequence[int], block_sizes: Sequence[int], num_blocks: int,
                 max_num_tokens: int, device: str | torch.device = "cpu") -> None:
        self.max_num_reqs = check_int("max_num_reqs", max_num_reqs, minimum=0)
        self.widths, self.block_sizes = check_groups(widths, block_sizes)
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self.max_num_tokens = check_int("max_num_tokens", max_num_tokens, minimum=0)
        self.device = torch.empty(0, device=device).device  # with its index ("cuda" -> "cuda:0"), as tensors report it
        dev, i64 = self.device, torch.int64
        groups = len(self.widths)
        sizes = torch.tensor(self.block_sizes, dtype=i64, device=dev)
        self._sizes = sizes[:, None]  # (G, 1)
        # combined table: group g's columns at [col_base[g], col_base[g] + W_g), then one spare
        # column of zeros that an index into a group without columns is clamped to
        self._col_base = np.cumsum([0, *self.widths]).tolist()
        spare = int(self._col_base[-1])
        self._width = spare + 1
        col_group = torch.repeat_interleave(torch.arange(groups, device=dev), torch.tensor(self.widths, device=dev),
                                            output_size=spare)
        never = torch.full((1,), 1 << 40, dtype=i64, device=dev)  # the spare column is nobody's read or write
        self._col_local = torch.cat([torch.arange(spare, dtype=i64, device=dev)
                                     - torch.tensor(self._col_base[:-1], dtype=i64, device=dev)[col_group], never])
        self._col_size = torch.cat([sizes[col_group], sizes[:1]])  # block size of each combined column
        self._col_block_base = torch.cat([col_group * self.num_blocks, never * 0])  # block ids are offset per group ...
        slot_base = np.cumsum([0] + [self.num_blocks * b for b in self.block_sizes]).tolist()
        self._slot_base = torch.tensor(slot_base[:-1], dtype=i64, device=dev)[:, None]  # ... and slot ids too
        self._group_block_base = torch.arange(groups, dtype=i64, device=dev)[:, None] * self.num_blocks
        self._group_col_base = torch.tensor(self._col_base[:-1], dtype=i64, device=dev)[:, None]
        self._group_last_col = torch.tensor([w - 1 if w else spare - b for w, b in zip(self.widths, self._col_base, strict=False)],
                                            dtype=i64, device=dev)[:, None]  # local index of the last column (or the spare)
        self._offsets_3d = torch.arange(max(self.block_sizes), dtype=i64, device=dev)[None, None, :]  # (1, 1, Bmax)
        # the same per-group constants as rows, for the (row, group) grids of partial reads
        self._sizes_row, self._last_col_row = self._sizes.T.contiguous(), self._group_last_col.T.contiguous()
        self._col_base_row, self._slot_base_row = self._group_col_base.T.contiguous(), self._slot_base.T.contiguous()
        self._tokens = torch.arange(self.max_num_tokens, dtype=i64, device=dev)
        self._table = torch.zeros((self.max_num_reqs, self._width), dtype=i64, device=dev)
        self._earliest = torch.empty(int(slot_base[-1]) + 1, dtype=i64, device=dev)  # last entry: discard slot
        self._latest = torch.empty(groups * self.num_blocks + 1, dtype=i64, device=dev)  # last entry: discard block

    def _inputs(self, num_reqs: Any, c: Any, q: Any, tables: Any, num_tokens: Any) -> tuple[int, int]:
        """Constant-cost checks (shapes, dtypes, devices); returns (n, tokens)."""
        n = check_int("num_reqs", num_reqs, minimum=0, maximum=self.max_num_reqs, maximum_name="max_num_reqs")
        tokens = self.max_num_tokens if num_tokens is None else check_int(
            "num_tokens", num_tokens, minimum=0, maximum=self.max_num_tokens, maximum_name="max_num_tokens")
        for name, t in (("num_computed_tokens", c), ("num_scheduled_tokens", q)):
            check_buffer(name, t, torch.Tensor, ndim=1, rows=n, device=self.device)
        if not isinstance(tables, (list, tuple)) or len(tables) != len(self.widths):
            raise TypeError(f"block_tables must be a list of {len(self.widths)} tables, got {describe(tables)}")
        for g, t in enumerate(tables):
            check_buffer(f"block_tables[{g}]", t, torch.Tensor, ndim=2, rows=n, cols=self.widths[g], device=self.device)
        return n, tokens

    def __call__(self, num_reqs: int, num_computed_tokens: torch.Tensor, num_scheduled_tokens: torch.Tensor,
                 block_tables: Sequence[torch.Tensor], num_tokens: int | None = None) -> torch.Tensor:
        """0-d bool tensor: True iff no split of the step into consecutive
        ubatches reads an unwritten slot (exact, any step)."""
        n, num_tok = self._inputs(num_reqs, num_computed_tokens, num_scheduled_tokens, block_tables, num_tokens)
        if n == 0:
            return torch.ones((), dtype=torch.bool, device=self.device)
        c = num_computed_tokens[:n].to(torch.int64)
        q = num_scheduled_tokens[:n].to(torch.int64)
        table = self._table[:n]
        for g, t in enumerate(block_tables):
            table[:, self._col_base[g]:self._col_base[g + 1]].copy_(t[:n])
        ends = torch.cumsum(q, 0)
        start = ends - q
        active = q > 0
        earliest, latest = self._write_summary(c, q, ends, start, table, num_tok)
        # whole-block reads: combined column j is a read of row r iff its local column < c // B and q > 0
        reads = (self._col_local[None, :] < c[:, None] // self._col_size[None, :]) & active[:, None]
        seen = latest[table + self._col_block_base[None, :]]  # block 0 of a group was never written: -1
        unsafe = (reads & (seen > start[:, None])).any()
        # partial reads: offsets [0, c % B) of local column c // B, per (row, group, offset)
        sizes = self._sizes_row  # (1, G)
        col = torch.minimum(c[:, None] // sizes, self._last_col_row) + self._col_base_row  # (n, G)
        block = torch.gather(table, 1, col)
        slot = self._slot_base_row[:, :, None] + (block * sizes)[:, :, None] + self._offsets_3d
        first = earliest[slot.clamp_(max=earliest.shape[0] - 1)]
        part = (self._offsets_3d < (c[:, None] % sizes)[:, :, None]) & (active[:, None] & (block != 0))[:, :, None]
        unsafe = unsafe | (part & (first != _BIG) & (first > start[:, None, None])).any()
        return ~unsafe

    def _write_summary(self, c: torch.Tensor, q: torch.Tensor, ends: torch.Tensor, start: torch.Tensor,
                       table: torch.Tensor, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Slot buffer of earliest writing tokens, block buffer of the latest of them."""
        n = c.shape[0]
        tok = self._tokens[:num_tokens]
        row = torch.searchsorted(ends, tok, right=True).clamp_(max=n - 1)
        real_token = tok < ends[-1]  # tokens past sum(q) are capacity, not the step's
        pos = c[row] + tok - start[row]  # (T,)
        col = torch.minimum(pos[None, :] // self._sizes, self._group_last_col) + self._group_col_base  # (G, T)
        block = table[row[None, :].expand_as(col), col]  # (G, T)
        written = real_token[None, :] & (block != 0)
        slot = torch.where(written, self._slot_base + block * self._sizes + pos[None, :] % self._sizes,
                           self._earliest.shape[0] - 1)
        earliest = self._earliest.fill_(_BIG)
        earliest.scatter_reduce_(0, slot.reshape(-1), tok[None, :].expand_as(slot).reshape(-1), reduce="amin")
        latest = self._latest.fill_(-1)
        latest.scatter_reduce_(0, torch.where(written, self._group_block_base + block, latest.shape[0] - 1).reshape(-1),
                               earliest[slot].reshape(-1), reduce="amax")
        latest[-1:].fill_(-1)  # the discard entry (a slice fill: an indexed scalar store synchronises on CUDA)
        return earliest, latest


def checker_for(step: Any, device: str | torch.device) -> tuple[ExactMicrobatchCheckTorch, tuple[Any, ...]]:
    top = max((int(t.max(initial=0)) for t in step.block_tables), default=0)
    check = ExactMicrobatchCheckTorch(step.num_reqs, [int(t.shape[1]) for t in step.block_tables], list(step.block_sizes),
                                      top + 1, int(step.num_scheduled_tokens.sum()), device)

    def move(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    return check, (step.num_reqs, move(step.num_computed_tokens), move(step.num_scheduled_tokens),
                   [move(t) for t in step.block_tables])


def bind(device: str) -> Callable[..., bool]:
    """Canonical numpy-in signature -> Python bool, computed on ``device``
    after host validation (``batchfuzz.reference._step.check_step``)."""

    def call(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> bool:
        step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
        check, args = checker_for(step, device)
        return bool(check(*args))

    return call
