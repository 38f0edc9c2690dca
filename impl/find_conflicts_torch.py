"""torch implementation of contract E1: the conflict set on the device, with no
host synchronisation (CPU and CUDA, inputs resident on the device).

The set's size depends on the data, and reading a size on the host is a
synchronisation, so every shape here is fixed by host ints: ``num_reqs``,
``num_tokens`` and the capacity ``max_pairs`` chosen at construction. The
result is a fixed-size :class:`DeviceConflicts`: ``(max_pairs, 4)`` rows, of
which the first ``num_conflicts`` (a 0-d tensor) are the sorted unique
conflicts ``(g, r, w, b)`` and the rest ``-1``, and ``num_pairs``, the number of
candidate pairs; the rows are the whole set iff ``num_pairs <= max_pairs`` (``overflow``
says when not; :func:`bind` then retries with room for all of them).

Method, every group at once (the combined table of
``allow_microbatching_torch.ExactMicrobatchCheckTorch``, block ids offset by
``g * num_blocks``), exact on any step:

1. *write records*: a scheduled token that writes the first slot a row writes
   in a block (its position is the row's first, ``c``, or at offset 0) stands
   for that record: block, writer row and first written offset. The ``G x
   num_tokens`` candidates are sorted by block (``torch.sort``), non-records
   last;
2. *reads*: every cell of the combined table read by a row with ``q > 0``:
   whole blocks (columns below ``c // B``, every offset) and the partly
   computed block (column ``c // B``, offsets below ``c % B``); per cell the
   range of records of its block, by two ``searchsorted`` calls;
3. *pairs*: the cells' record ranges, concatenated (a ``cumsum``), are
   enumerated at ``max_pairs`` fixed positions (a ``searchsorted`` of the
   positions into the cumulative counts: ``repeat_interleave`` without the
   data-dependent size); a pair is a conflict iff reader and writer differ and
   the record's first offset is below the cell's read limit;
4. *set*: conflicts as bit-packed int64 keys ``(g * n + r, w, b)``, the rest
   a sentinel; one sort, adjacent duplicates dropped, compaction by a
   ``cumsum`` and a scatter, unpacking.

Work: O(num_reqs * sum(W)) for the cells (two binary searches each into the
``G * num_tokens`` records), O(G * num_tokens) to sort the records,
O(max_pairs) for the pairs: about 50 kernels a step, whatever the group count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from batchfuzz.impl.allow_microbatching_torch import ExactMicrobatchCheckTorch
from batchfuzz.reference._args import check_int
from batchfuzz.reference._step import check_step

_BIG = torch.iinfo(torch.int64).max  # sentinel key: not a record, not a conflict
DEFAULT_MAX_PAIRS = 1 << 16


class DeviceConflicts(NamedTuple):
    """A conflict set on the device, of fixed shape.

    ``rows``: ``(max_pairs, 4)`` int64, the first ``num_conflicts`` rows the
    sorted unique conflicts ``(g, r, w, b)``, the others ``-1``;
    ``num_conflicts``: 0-d int64; ``num_pairs``: 0-d int64, the candidate pairs
    (reader-writer pairs sharing a block, own ones included), complete iff
    ``num_pairs <= max_pairs``.
    """

    rows: torch.Tensor
    num_conflicts: torch.Tensor
    num_pairs: torch.Tensor

    @property
    def overflow(self) -> torch.Tensor:
        """0-d bool: some pairs did not fit, so ``rows`` may miss conflicts."""
        return self.num_pairs > self.rows.shape[0]

    def to_numpy(self) -> np.ndarray:
        """The conflicts as a ``(num_conflicts, 4)`` int64 numpy array (synchronises);
        RuntimeError when they did not fit."""
        pairs, count = int(self.num_pairs), int(self.num_conflicts)
        if pairs > self.rows.shape[0]:
            raise RuntimeError(f"the step has {pairs} candidate pairs, over max_pairs ({self.rows.shape[0]}): "
                               f"the conflict set is incomplete")
        return self.rows[:count].cpu().numpy()


class ExactConflictsTorch(ExactMicrobatchCheckTorch):
    """The exact decision (inherited ``__call__``) and the conflict set, on one
    device, without host synchronisation; buffers reused.

    ``ExactConflictsTorch(max_num_reqs, widths, block_sizes, num_blocks,
    max_num_tokens, device, max_pairs=65536)``; then
    ``finder.find_conflicts(num_reqs, c, q, tables, num_tokens=None)`` with the
    arguments of the decision returns a :class:`DeviceConflicts`. The same
    bounds as the decision apply (ids in ``[0, num_blocks)``, ``sum(q) <=
    num_tokens``; values are not checked); ``max_pairs`` bounds the pairs, an
    own partial read counting as one: about ``num_reqs * groups`` plus the
    cross-request hits on a realizable step.
    """

    def __init__(self, max_num_reqs: int, widths: Sequence[int], block_sizes: Sequence[int], num_blocks: int,
                 max_num_tokens: int, device: str | torch.device = "cpu", max_pairs: int = DEFAULT_MAX_PAIRS) -> None:
        super().__init__(max_num_reqs, widths, block_sizes, num_blocks, max_num_tokens, device)
        self.max_pairs = check_int("max_pairs", max_pairs, minimum=1)
        groups = len(self.widths)
        self._bits_req = max(self.max_num_reqs - 1, 1).bit_length()
        self._bits_block = max(self.num_blocks - 1, 1).bit_length()
        self._shift_reader = self._bits_req + self._bits_block
        if max(groups * self.max_num_reqs - 1, 1).bit_length() + self._shift_reader > 62:
            raise ValueError(f"max_num_reqs ({max_num_reqs}), num_blocks ({num_blocks}) and {groups} groups do not fit "
                             f"one int64 key per conflict")
        dev, i64 = self.device, torch.int64
        self._col_group = torch.div(self._col_block_base, self.num_blocks, rounding_mode="floor")  # spare column: 0
        self._pair_index = torch.arange(self.max_pairs, dtype=i64, device=dev)
        self._keys_out = torch.empty(self.max_pairs + 1, dtype=i64, device=dev)  # last entry: discard slot

    def find_conflicts(self, num_reqs: int, num_computed_tokens: torch.Tensor, num_scheduled_tokens: torch.Tensor,
                       block_tables: Sequence[torch.Tensor], num_tokens: int | None = None) -> DeviceConflicts:
        """The conflict set (module docstring), with no host synchronisation."""
        n, num_tok = self._inputs(num_reqs, num_computed_tokens, num_scheduled_tokens, block_tables, num_tokens)
        dev, i64 = self.device, torch.int64
        if n == 0 or num_tok == 0:
            empty = torch.zeros((), dtype=i64, device=dev)
            return DeviceConflicts(torch.full((self.max_pairs, 4), -1, dtype=i64, device=dev), empty, empty.clone())
        c = num_computed_tokens[:n].to(i64)
        q = num_scheduled_tokens[:n].to(i64)
        table = self._table[:n]
        for g, t in enumerate(block_tables):
            table[:, self._col_base[g]:self._col_base[g + 1]].copy_(t[:n])
        rec_key, rec_writer, rec_lo = self._records(c, q, table, num_tok)
        # reads: cells of rows with a token, whole blocks (limit B) and the partly computed block (limit c % B)
        size, local = self._col_size[None, :], self._col_local[None, :]
        first = c[:, None] // size
        limit = torch.where(local < first, size, torch.where(local == first, c[:, None] % size, 0))
        limit = torch.where((q > 0)[:, None] & (table != 0), limit, 0).reshape(-1)
        cell_key = (table + self._col_block_base[None, :]).reshape(-1)
        lo = torch.searchsorted(rec_key, cell_key)
        count = torch.where(limit > 0, torch.searchsorted(rec_key, cell_key, right=True) - lo, 0)
        ends = torch.cumsum(count, 0)
        pairs = ends[-1]
        # pair k: cell = the one whose range holds k, record = its range's start + k's rank in it
        k = self._pair_index
        cell = torch.searchsorted(ends, k, right=True).clamp_(max=ends.shape[0] - 1)
        rec = (lo[cell] + k - (ends[cell] - count[cell])).clamp_(0, rec_key.shape[0] - 1)
        reader = torch.div(cell, self._width, rounding_mode="floor")
        writer = rec_writer[rec]
        keep = (k < pairs) & (reader != writer) & (rec_lo[rec] < limit[cell])
        group = self._col_group[cell % self._width]
        key = ((group * n + reader) << self._shift_reader) | (writer << self._bits_block) | table.reshape(-1)[cell]
        key = torch.sort(torch.where(keep, key, _BIG)).values
        unique = key != _BIG
        unique[1:] &= key[1:] != key[:-1]
        dest = torch.where(unique, torch.cumsum(unique, 0) - 1, self.max_pairs)
        out = self._keys_out.fill_(_BIG).scatter_(0, dest, key)[: self.max_pairs]
        group_row = out >> self._shift_reader
        rows = torch.stack([torch.div(group_row, n, rounding_mode="floor"), group_row % n,
                            (out >> self._bits_block) & ((1 << self._bits_req) - 1), out & ((1 << self._bits_block) - 1)], dim=1)
        return DeviceConflicts(torch.where((out != _BIG)[:, None], rows, -1), unique.sum(), pairs)

    def _records(self, c: torch.Tensor, q: torch.Tensor, table: torch.Tensor,
                 num_tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Write records sorted by block key (non-records last, as the
        sentinel): ``(key, writer row, first written offset)``."""
        n = c.shape[0]
        ends = torch.cumsum(q, 0)
        tok = self._tokens[:num_tokens]
        row = torch.searchsorted(ends, tok, right=True).clamp_(max=n - 1)
        pos = c[row] + tok - (ends - q)[row]  # (T,)
        col = torch.minimum(pos[None, :] // self._sizes, self._group_last_col) + self._group_col_base  # (G, T)
        block = table[row[None, :].expand_as(col), col]
        offset = pos[None, :] % self._sizes
        starts = (tok < ends[-1])[None, :] & (block != 0) & ((offset == 0) | (pos == c[row])[None, :])
        key, order = torch.sort(torch.where(starts, block + self._group_block_base, _BIG).reshape(-1))
        return key, row[order % num_tokens], offset.reshape(-1)[order]


def checker_for(step: Any, device: str | torch.device,
                max_pairs: int = DEFAULT_MAX_PAIRS) -> tuple[ExactConflictsTorch, tuple[Any, ...]]:
    """An ``ExactConflictsTorch`` sized to one validated step, and the step's
    arguments on ``device``."""
    top = max((int(t.max(initial=0)) for t in step.block_tables), default=0)
    finder = ExactConflictsTorch(step.num_reqs, [int(t.shape[1]) for t in step.block_tables], list(step.block_sizes),
                                 top + 1, int(step.num_scheduled_tokens.sum()), device, max_pairs)

    def move(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    return finder, (step.num_reqs, move(step.num_computed_tokens), move(step.num_scheduled_tokens),
                    [move(t) for t in step.block_tables])


def bind(device: str) -> Callable[..., np.ndarray]:
    """Canonical numpy-in signature -> sorted unique ``(K, 4)`` numpy rows,
    computed on ``device`` after host validation; when the pairs overflow the
    first capacity (small, so that the retry is exercised), once more with
    room for all of them."""

    def call(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> np.ndarray:
        step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
        finder, args = checker_for(step, device, max_pairs=64)
        found = finder.find_conflicts(*args)
        pairs = int(found.num_pairs)
        if pairs > finder.max_pairs:
            finder, args = checker_for(step, device, max_pairs=pairs)
            found = finder.find_conflicts(*args)
        return found.to_numpy()

    return call
