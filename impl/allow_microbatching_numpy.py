"""numpy implementation of contract E2: the exact microbatching decision, block
by block, at the cost of the engine's shipped check (host arrays: where the
engine decides), and the engine-ready class :class:`ExactMicrobatchCheck`,
a drop-in for the engine's check (docs/exact-microbatching.md).

The rule is ``batchfuzz.reference.allow_microbatching``: veto iff some reader
(a request with ``q > 0``) has a computed, non-null slot whose earliest write
in this step comes from a token after the reader's first token. This module
decides it without expanding positions.

Vocabulary, per KV-cache group of block size ``B``:

- *write record*: one per (row ``w`` with ``q_w > 0``, column ``j`` in
  ``[c_w // B, ceil((c_w + q_w) / B))``) whose block id is not 0. It writes
  the offsets ``[max(c_w - j*B, 0), min(c_w + q_w - j*B, B))`` of the block,
  offset ``o`` by the step's token ``start_w + j*B + o - c_w``; its *last
  token* is the one writing its last offset.
- *whole-block read*: row ``r`` with ``q_r > 0`` reads every offset of the
  blocks in its columns ``[0, c_r // B)``; its *partial read* is the first
  ``c_r % B`` offsets of column ``c_r // B``, a block it also writes.

Fast path, precondition **U** (one write record per block): in the group, no
non-null block id has two write records. Then every written slot has exactly
one writing token, and:

- a whole-block read of block ``b`` by ``r`` is unsafe iff the last token of
  ``b``'s record comes after ``r``'s first token (the record's tokens rise
  with the offset, and every offset is read);
- a partial read is never unsafe: the only record of that block is ``r``'s
  own, which writes the offsets after the ones ``r`` reads.

So the decision is a scatter of ``last token + 1`` into a block-indexed mark
array and one gather of it over the readers' whole-block prefixes, compared
with ``start_r + 1``. U is checked at run time at O(records) cost (scatter,
gather back, compare: a block with two records shows a value that is not its
own). It holds on every step a prefix-caching scheduler makes: a block being
written belongs to the request that allocated it, and another request holds
it only as a cache hit inside its computed prefix, which it does not write
(property ``test_u_holds_on_realizable_steps``).

General path, any step (taken per group when U fails): earliest writing token
per written slot (slot level, only the O(sum q) written slots), the largest
of them per block, compared over the same whole-block gather; partial reads
compared slot by slot (at most ``B - 1`` slots per reader).

Cost per group: O(records + whole-block read entries), i.e. the blocks the
step writes plus ``sum(c_r // B)`` over readers, one vectorised pass; the
scratch buffers of ``ExactMicrobatchCheck`` are reused across calls. The
shipped check reads the written columns of every row through a dense
``rows x max span`` grid and loops over its readers in Python; see
docs/exact-microbatching.md for the measured comparison.

The table structure a prefix cache gives (only blocks that become full in the
step are shared, a shared block sits at one column in every row holding it,
equal blocks at a column mean equal prefixes before it) is *not* relied on:
on an arbitrary table any reader entry may hold any written block, so an
exact decision must look at every entry once, which is what this one does;
checking those facts at run time would cost that same pass.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from batchfuzz.reference._args import check_buffer, check_groups, check_int, describe
from batchfuzz.reference._step import check_step

FAST, GENERAL, SKIPPED = "fast", "general", "skipped"


class _Buffers:
    """Named scratch arrays that grow to the largest size asked for and are
    then reused; ``"arange"`` holds ``0, 1, 2, ...``."""

    def __init__(self) -> None:
        self._arrays: dict[tuple[str, np.dtype], np.ndarray] = {}

    def get(self, name: str, size: int, dtype: Any) -> np.ndarray:
        key = (name, np.dtype(dtype))
        arr = self._arrays.get(key)
        if arr is None or arr.shape[0] < size:
            grown = max(size, 2 * (0 if arr is None else arr.shape[0]), 64)
            arr = np.arange(grown, dtype=key[1]) if name == "arange" else np.empty(grown, dtype=key[1])
            self._arrays[key] = arr
        return arr[:size]


class _Requests:
    """Per-request int64 views of one call (``c``, ``q``, ``end = c + q``, first
    token ``start``), shared by the groups."""

    def __init__(self, buf: _Buffers, num_reqs: int, c: np.ndarray, q: np.ndarray) -> None:
        self.n = num_reqs
        self.c = buf.get("c", num_reqs, np.int64)
        self.q = buf.get("q", num_reqs, np.int64)
        np.copyto(self.c, c[:num_reqs], casting="unsafe")
        np.copyto(self.q, q[:num_reqs], casting="unsafe")
        self.end = self.c + self.q
        self.start = np.cumsum(self.q)
        self.num_tokens = int(self.start[-1]) if num_reqs else 0
        self.start -= self.q
        self.active = self.q > 0  # rows with a token: the only readers
        self.rows = buf.get("arange", num_reqs, np.int64)


class _Group:
    """One group's write records and whole-block read entries of one call.

    Records (``rec_row``, ``rec_index`` into the flat table, ``rec_block``)
    come in row order; so do the whole-block read entries (``read_block``:
    the cells' block ids; row ``r``'s entries end at ``read_ends[r]``).
    """

    def __init__(self, buf: _Buffers, req: _Requests, table: np.ndarray, size: int) -> None:
        width = table.shape[1]
        self.size, self.width = size, width
        self.flat = table.reshape(-1)  # rows >= n of the persistent table are never indexed
        self.first = req.c // size  # first written column = number of whole computed blocks
        # -- write records: columns [c // B, ceil((c + q) / B)) of rows with a token
        span = (req.end + (size - 1)) // size
        span -= self.first
        span *= req.active
        rows = np.repeat(req.rows, span)
        index = _ragged_arange(buf, span, np.cumsum(span), req.rows * width + self.first)
        block = np.take(self.flat, index)
        real = block != 0  # the null block is never written
        if not real.all():
            rows, index, block = rows[real], index[real], block[real]
        self.rec_row, self.rec_index, self.rec_block = rows, index, block
        # -- whole-block reads: columns [0, c // B) of rows with a token, as flat indices
        lens = self.first * req.active
        self.read_ends = np.cumsum(lens)
        index = _ragged_arange(buf, lens, self.read_ends, req.rows * width)
        self.read_block = np.take(self.flat, index, out=buf.get("read_block", index.shape[0], table.dtype))

    def rec_col(self) -> np.ndarray:
        """Each record's column."""
        return self.rec_index - self.rec_row * self.width

    def rec_last_plus_one(self, req: _Requests) -> np.ndarray:
        """1 + the token writing each record's last offset (position ``p`` of
        row ``r`` is written by token ``start[r] + p - c[r]``)."""
        last = np.minimum((self.rec_col() + 1) * self.size, req.end[self.rec_row])  # one past its last position
        last += (req.start - req.c)[self.rec_row]
        return last

    def read_rows(self, entries: np.ndarray) -> np.ndarray:
        """The row of each whole-block read entry (by its index in ``read_block``)."""
        return np.searchsorted(self.read_ends, entries, side="right")

    def rec_first_offset(self, req: _Requests) -> np.ndarray:
        """Each record's first written offset inside its block."""
        return np.maximum(req.c[self.rec_row] - self.rec_col() * self.size, 0)


def _nonzero(a: np.ndarray) -> np.ndarray:
    """Indices of the non-zero entries of a 1-D int array. Through a boolean
    mask: ``np.flatnonzero`` on an int array is about ten times slower than on
    a bool one (numpy 2.x, measured on the bench's gathered marks)."""
    return np.flatnonzero(a != 0)


def _ragged_arange(buf: _Buffers, lens: np.ndarray, ends: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Concatenated ``base[r] + arange(lens[r])`` over rows ``r`` (``ends = cumsum(lens)``)."""
    total = int(ends[-1]) if ends.size else 0
    out = np.repeat(base - (ends - lens), lens)
    out += buf.get("arange", total, np.int64)
    return out


class ExactMicrobatchCheck:
    """Engine-ready exact microbatching check with reusable scratch buffers.

    A drop-in for the engine's ``_allow_microbatching``: built once per model
    runner, called once per step with the runner's own host arrays::

        check = ExactMicrobatchCheck(max_num_reqs, widths, block_sizes, num_blocks)
        allow = check(num_reqs, num_computed_tokens_cpu, num_scheduled_tokens_np, tables)

    - ``widths[g]`` and ``block_sizes[g]``: group ``g``'s persistent table
      width and block size; ``num_blocks``: block ids are in ``[0, num_blocks)``
      (the KV cache's block count; id 0 is the null block).
    - ``num_computed_tokens`` and ``num_scheduled_tokens``: int arrays with at
      least ``num_reqs`` entries (batch order; the first ``num_reqs`` are used).
    - ``tables[g]``: int32 or int64, C-contiguous, shape
      ``(rows >= num_reqs, widths[g])``; rows past ``num_reqs`` are ignored.

    Shapes, dtypes and counts are checked (constant cost); values are not
    (like the engine's check): negative counts or ids, or a row needing more
    columns than it has, give an undefined answer. An id ``>= num_blocks``
    raises ValueError. Use ``allow_microbatching`` for validated input.

    ``last_paths`` names, per group, the path the last call took (``"fast"``,
    ``"general"``, or ``"skipped"`` after an earlier group's veto);
    ``path_counts`` counts them over all calls.
    """

    def __init__(self, max_num_reqs: int, widths: Sequence[int], block_sizes: Sequence[int], num_blocks: int) -> None:
        self.max_num_reqs = check_int("max_num_reqs", max_num_reqs, minimum=0)
        self.widths, self.block_sizes = check_groups(widths, block_sizes)
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self._layout = _KeyLayout(self.max_num_reqs, self.num_blocks, len(self.widths))
        # block -> a positive value while one group is checked, else 0: for the decision a record's last
        # token + 1, for find_conflicts ``writer << bits_block | block``
        self._mark = np.zeros(self.num_blocks, dtype=self._layout.mark_dtype)
        self._buf = _Buffers()
        self.last_paths: tuple[str, ...] = ()
        self.path_counts: Counter[str] = Counter()

    # ---------------------------------------------------------------- input

    def _inputs(self, num_reqs: Any, c: Any, q: Any, tables: Any) -> tuple[_Requests, list[np.ndarray]]:
        n = check_int("num_reqs", num_reqs, minimum=0, maximum=self.max_num_reqs, maximum_name="max_num_reqs")
        for name, arr in (("num_computed_tokens", c), ("num_scheduled_tokens", q)):
            check_buffer(name, arr, np.ndarray, ndim=1, rows=n)
        if not isinstance(tables, (list, tuple)) or len(tables) != len(self.widths):
            raise TypeError(f"block_tables must be a list of {len(self.widths)} tables, got {describe(tables)}")
        for g, t in enumerate(tables):
            check_buffer(f"block_tables[{g}]", t, np.ndarray, ndim=2, rows=n, cols=self.widths[g])
            if not t.flags.c_contiguous:
                raise ValueError(f"block_tables[{g}] must be C-contiguous (the engine's tables are)")
        return _Requests(self._buf, n, c, q), list(tables)

    def _groups(self, req: _Requests, tables: list[np.ndarray]) -> Iterator[tuple[int, _Group]]:
        for g, (table, size) in enumerate(zip(tables, self.block_sizes, strict=True)):
            yield g, _Group(self._buf, req, table, size)

    @contextmanager
    def _marking(self, tables: list[np.ndarray], paths: list[str]) -> Iterator[None]:
        """Around one call: keep the mark array clean whatever happens; record paths."""
        try:
            yield
        except BaseException:
            self._mark.fill(0)
            raise
        finally:
            paths += [SKIPPED] * (len(tables) - len(paths))
            self.last_paths = tuple(paths)
            self.path_counts.update(paths)

    def _marks_at(self, blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``mark[blocks]``, with an id past ``num_blocks`` reported as a ValueError."""
        try:
            return np.take(self._mark, blocks, out=out)
        except IndexError:
            raise ValueError(f"block_tables hold block id {int(blocks.max())}, but num_blocks is {self.num_blocks}") from None

    def _one_writer_per_block(self, grp: _Group, values: np.ndarray) -> bool:
        """Scatter ``values`` (> 0, one per record) at the record blocks; True
        iff every record reads its own value back, i.e. no block has two
        records with different values. The decision gives every record its own
        value (the check is precondition U); ``find_conflicts`` gives the
        records of one row one value per block (the check is U', one writing
        row per block). On False the marks are cleared again."""
        try:
            self._mark[grp.rec_block] = values
        except IndexError:
            raise ValueError(f"block_tables hold block id {int(grp.rec_block.max())}, but num_blocks is "
                             f"{self.num_blocks}") from None
        if (self._mark[grp.rec_block] == values).all():
            return True
        self._mark[grp.rec_block] = 0
        return False

    # ---------------------------------------------------------------- decision

    def __call__(self, num_reqs: int, num_computed_tokens: np.ndarray, num_scheduled_tokens: np.ndarray,
                 block_tables: Sequence[np.ndarray]) -> bool:
        """True iff no split of the step into consecutive ubatches reads an
        unwritten slot (exact; equals ``batchfuzz.reference.allow_microbatching``)."""
        req, tables = self._inputs(num_reqs, num_computed_tokens, num_scheduled_tokens, block_tables)
        paths: list[str] = []
        with self._marking(tables, paths):
            for _g, grp in self._groups(req, tables):
                if self._one_writer_per_block(grp, grp.rec_last_plus_one(req)):
                    paths.append(FAST)
                    unsafe = self._unsafe_whole_reads(req, grp, grp.rec_block)
                else:
                    paths.append(GENERAL)
                    unsafe = self._general_unsafe(req, grp)
                if unsafe:
                    return False
        return True

    def _unsafe_whole_reads(self, req: _Requests, grp: _Group, marked: np.ndarray) -> bool:
        """With the mark array holding ``latest earliest-write token + 1`` at
        the blocks ``marked``: does a whole-block read see a block written
        after the reader's first token? Clears the marks."""
        marks = self._marks_at(grp.read_block, self._buf.get("read_mark", grp.read_block.shape[0], self._mark.dtype))
        self._mark[marked] = 0
        hits = _nonzero(marks)
        return bool(hits.size) and bool(np.any(marks[hits] > req.start[grp.read_rows(hits)] + 1))

    def _general_unsafe(self, req: _Requests, grp: _Group) -> bool:
        """Exact on any step: slot-level earliest writes, block-level whole reads."""
        keys, earliest = _earliest_writes(req, grp)
        if keys.size == 0:
            return False  # nothing written: nothing read too early
        block = keys // grp.size
        starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
        blocks = block[starts]
        self._mark[blocks] = np.maximum.reduceat(earliest, starts) + 1
        if self._unsafe_whole_reads(req, grp, blocks):
            return True
        # partial reads: rows with a token and c % B != 0 read offsets [0, c % B) of column c // B
        rows = np.flatnonzero(req.active & (req.c % grp.size != 0))
        lens = req.c[rows] % grp.size
        owner = np.repeat(np.arange(rows.shape[0]), lens)
        offset = np.arange(owner.shape[0]) - (np.cumsum(lens) - lens)[owner]
        part_block = np.take(grp.flat, rows * grp.width + grp.first[rows]).astype(np.int64)
        slot = part_block[owner] * grp.size + offset
        at = np.minimum(np.searchsorted(keys, slot), keys.shape[0] - 1)
        written = (keys[at] == slot) & (part_block[owner] != 0)
        return bool(np.any(written & (earliest[at] > req.start[rows[owner]])))

    # ---------------------------------------------------------------- conflict set

    def find_conflicts(self, num_reqs: int, num_computed_tokens: np.ndarray, num_scheduled_tokens: np.ndarray,
                       block_tables: Sequence[np.ndarray]) -> np.ndarray:
        """The conflict set (``batchfuzz.reference.find_conflicts``) as a sorted
        ``(K, 4)`` int64 array of unique rows ``(g, r, w, b)``.

        Fast path per group, precondition U' (one writing row per block; U
        implies it): a whole-block read of a written block conflicts with its
        one writer, every offset being read; a partial read meets only the
        reader's own writes. The mark array holds ``writer << bits_block |
        block`` at each written block, so one gather over the whole-block
        reads yields each conflict's ``(w, b)`` bits. General path: a join
        of read cells with each block's records."""
        req, tables = self._inputs(num_reqs, num_computed_tokens, num_scheduled_tokens, block_tables)
        lay = self._layout
        keys: list[np.ndarray] = []
        paths: list[str] = []
        with self._marking(tables, paths):
            for g, grp in self._groups(req, tables):
                values = grp.rec_row << lay.bits_block
                values |= grp.rec_block
                if self._one_writer_per_block(grp, values):
                    paths.append(FAST)
                    reader, writer_block = self._fast_pairs(grp)
                else:
                    paths.append(GENERAL)
                    reader, writer, block = _general_pairs(req, grp)
                    writer_block = writer << lay.bits_block
                    writer_block |= block
                keys.append(lay.keys(g, reader, writer_block))
        return lay.rows(keys)

    def _fast_pairs(self, grp: _Group) -> tuple[np.ndarray, np.ndarray]:
        """Under U' (the mark array holding ``writer << bits_block | block`` at
        the written blocks): ``(reader, writer << bits_block | block)`` for
        every whole-block read of a written block. Clears the marks."""
        marks = self._marks_at(grp.read_block, self._buf.get("read_mark", grp.read_block.shape[0], self._mark.dtype))
        self._mark[grp.rec_block] = 0
        hits = _nonzero(marks)
        return grp.read_rows(hits), marks[hits].astype(np.int64, copy=False)


class _KeyLayout:
    """Bit fields of one int64 sort key per conflict, ``g | r | w | b`` from
    the most significant end, sized by ``max_num_reqs``, ``num_blocks`` and
    the number of groups; the mark array's dtype (``w | b`` must fit)."""

    def __init__(self, max_num_reqs: int, num_blocks: int, num_groups: int) -> None:
        self.bits_req = max(max_num_reqs - 1, 1).bit_length()
        self.bits_block = max(num_blocks - 1, 1).bit_length()
        self.bits_group = max(num_groups - 1, 1).bit_length()
        if self.bits_req + self.bits_block > 62:
            raise ValueError(f"max_num_reqs ({max_num_reqs}) and num_blocks ({num_blocks}) need more than 62 bits together")
        self.shift_reader = self.bits_req + self.bits_block
        self.shift_group = self.shift_reader + self.bits_req
        self.packed = self.shift_group + self.bits_group <= 63  # else rows are sorted as rows
        self.mark_dtype = np.dtype(np.int32 if self.shift_reader <= 31 else np.int64)

    def keys(self, g: int, reader: np.ndarray, writer_block: np.ndarray) -> np.ndarray:
        """Group ``g``'s conflicts as keys (or, when they do not fit one int64,
        as ``(K, 4)`` rows), dropping ``r == w``."""
        own = (writer_block >> self.bits_block) == reader
        if own.any():  # a row holding a block it writes among the blocks it reads (ill-formed): no conflict
            reader, writer_block = reader[~own], writer_block[~own]
        if not self.packed:
            return np.stack([np.full(reader.shape[0], g, dtype=np.int64), reader, writer_block >> self.bits_block,
                             writer_block & ((1 << self.bits_block) - 1)], axis=1)
        key = reader << self.shift_reader
        key |= writer_block
        if g:
            key |= g << self.shift_group
        return key

    def rows(self, keys: list[np.ndarray]) -> np.ndarray:
        """The sorted unique ``(K, 4)`` int64 rows of the groups' keys (a sort
        of the keys, ``np.unique`` on rows being far slower); each group's
        keys come presorted by reader, and the stable sort (a merge of runs)
        uses that."""
        if not self.packed:
            rows = np.concatenate([np.zeros((0, 4), dtype=np.int64), *keys])
            rows = rows[np.lexsort(rows.T[::-1])]
            return rows[np.r_[True, np.any(rows[1:] != rows[:-1], axis=1)]] if rows.shape[0] else rows
        key = np.concatenate(keys) if len(keys) > 1 else keys[0]
        key.sort(kind="stable")
        if key.size > 1:
            keep = np.empty(key.shape[0], dtype=bool)
            keep[0] = True
            np.not_equal(key[1:], key[:-1], out=keep[1:])
            if not keep.all():
                key = key[keep]
        mask_req, mask_block = (1 << self.bits_req) - 1, (1 << self.bits_block) - 1
        out = np.empty((key.shape[0], 4), dtype=np.int64)
        out[:, 0] = key >> self.shift_group
        out[:, 1] = (key >> self.shift_reader) & mask_req
        out[:, 2] = (key >> self.bits_block) & mask_req
        out[:, 3] = key & mask_block
        return out


def _earliest_writes(req: _Requests, grp: _Group) -> tuple[np.ndarray, np.ndarray]:
    """Sorted slot keys ``block * B + offset`` of the step's non-null writes, and
    the earliest token writing each (tokens are ``0 .. num_tokens - 1`` in order)."""
    token = np.arange(req.num_tokens, dtype=np.int64)
    row = np.repeat(np.arange(req.n, dtype=np.int64), req.q)
    pos = req.c[row] + token - req.start[row]
    block = np.take(grp.flat, row * grp.width + pos // grp.size).astype(np.int64)
    real = block != 0
    key = block[real] * grp.size + pos[real] % grp.size
    token = token[real]
    order = np.argsort(key, kind="stable")  # tokens ascend within a key: the first is the earliest
    key, token = key[order], token[order]
    first = np.r_[True, key[1:] != key[:-1]] if key.size else np.zeros(0, dtype=bool)
    return key[first], token[first]


def _general_pairs(req: _Requests, grp: _Group) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(reader, writer, block) for every read entry meeting a record of its
    block: whole-block reads meet every record; a partial read of ``L``
    offsets meets the records whose first offset is below ``L``."""
    order = np.argsort(grp.rec_block, kind="stable")
    rb, rw, rlo = grp.rec_block[order], grp.rec_row[order], grp.rec_first_offset(req)[order]
    # read entries: whole blocks (every offset) and partial blocks (offsets below c % B)
    entries = _nonzero(grp.read_block)
    part = np.flatnonzero(req.active & (req.c % grp.size != 0))
    reader = np.concatenate([grp.read_rows(entries), part])
    block = np.concatenate([grp.read_block[entries].astype(np.int64),
                            np.take(grp.flat, part * grp.width + grp.first[part]).astype(np.int64)])
    limit = np.concatenate([np.full(entries.shape[0], grp.size, dtype=np.int64), req.c[part] % grp.size])
    lo, hi = np.searchsorted(rb, block, side="left"), np.searchsorted(rb, block, side="right")
    pair_read = np.repeat(np.arange(block.shape[0]), hi - lo)
    pair_rec = np.arange(pair_read.shape[0]) - (np.cumsum(hi - lo) - (hi - lo))[pair_read] + lo[pair_read]
    meets = rlo[pair_rec] < limit[pair_read]
    return reader[pair_read][meets], rw[pair_rec][meets], block[pair_read][meets]


def checker_for(step: Any) -> ExactMicrobatchCheck:
    """An ``ExactMicrobatchCheck`` sized to one validated step."""
    top = max((int(t.max(initial=0)) for t in step.block_tables), default=0)
    return ExactMicrobatchCheck(step.num_reqs, [int(t.shape[1]) for t in step.block_tables], list(step.block_sizes), top + 1)


def allow_microbatching(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> bool:
    """Exact, split-agnostic decision with the canonical signature of contract E.

    Validates like the oracle (``batchfuzz.reference._step.check_step``: a clear
    TypeError/ValueError naming the argument), then runs
    ``ExactMicrobatchCheck`` with buffers sized to this step.
    """
    step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
    check = checker_for(step)
    return check(step.num_reqs, step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables)
