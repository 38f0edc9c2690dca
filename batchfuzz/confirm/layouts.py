"""A contract's case, and a target's result on it, as the attention calls an
engine would make: the metadata an attention kernel reads, plus detectors
built into the data.

A :class:`Layout` is a paged KV cache and one or more :class:`Launch` es
(attention calls, run in order). Canary block ids past each row, NaN in
unwritten KV slots and guard rows after the output make a wrong layout show
in the kernel's output; ``confirm`` runs the target's layout and, as the
control, the oracle's, which must come out clean. The detectors and each
contract's layout: docs/confirm.md, "The detectors" and "Per contract".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchfuzz.case import Case

POISON_BLOCK = 1 << 30


@dataclass
class Launch:
    """One attention call: ``cu_seqlens_q`` (``S + 1`` entries, as the target
    laid them out, possibly stale or non-monotone), ``seq_lens`` (``S``, the
    kernel's ``seqused_k``), ``rows`` (the step's query tokens this call owns:
    the q and output rows the kernel may write), ``writes`` (``(block,
    offset)`` KV slots written just before the call), ``requests`` (the
    request index of each of the ``S`` sequences) and ``table_rows`` (the
    block-table row of each sequence)."""

    cu_seqlens_q: np.ndarray
    seq_lens: np.ndarray
    rows: int
    writes: list[tuple[int, int]]
    requests: list[int]
    table_rows: list[int]
    label: str = ""


@dataclass
class Layout:
    """The whole replay of one result (see the module docstring)."""

    contract: str
    what: str
    block_size: int
    block_table: np.ndarray
    capacity: np.ndarray
    canary: np.ndarray
    num_blocks: int
    unwritten: set[tuple[int, int]]
    launches: list[Launch]
    notes: list[str] = field(default_factory=list)

    def with_poison(self) -> Layout:
        """The same layout with every canary column holding an id past the cache."""
        table = self.block_table.copy()
        for row in range(table.shape[0]):
            table[row, self.capacity[row]:] = POISON_BLOCK
        return Layout(self.contract, self.what + " (poison)", self.block_size, table, self.capacity, self.canary,
                      self.num_blocks, set(self.unwritten), self.launches, list(self.notes))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def default_block_size(max_model_len: int) -> int:
    """The largest power of two up to 16 dividing ``max_model_len``."""
    for b in (16, 8, 4, 2):
        if max_model_len % b == 0:
            return b
    return 1


class _Rows:
    """Block-table rows: request ``i`` owns ``capacity[i]`` fresh real blocks,
    then canary columns up to the table's width (each row its own canaries)."""

    def __init__(self, capacity: list[int], needed: list[int]) -> None:
        width = max([c + 1 for c in capacity] + [n + 1 for n in needed], default=1)
        self.table = np.zeros((len(capacity), width), dtype=np.int64)
        self.capacity = np.asarray(capacity, dtype=np.int64)
        next_id = 1  # block 0 is the engine's null block: never a real row entry
        canaries: list[int] = []
        for i, cap in enumerate(capacity):
            for j in range(width):
                self.table[i, j] = next_id
                if j >= cap:
                    canaries.append(next_id)
                next_id += 1
        self.num_blocks = next_id
        self.canary = np.asarray(canaries, dtype=np.int64)


def _fresh_prefills(contract: str, what: str, query_lens: list[int], seq_lens: list[int], qsl: list[int],
                    capacity_blocks: int, block_size: int, rows: int) -> Layout:
    """Fresh prefills (no computed tokens): sequence ``i`` owns table row
    ``i``; its tokens write slots ``0 .. query_lens[i]-1`` of its row (within
    capacity; a write past it has no slot of its own and is not made); every
    other slot of its row stays unwritten."""
    needed = [cdiv(max(int(s), 0), block_size) for s in seq_lens]
    rowsets = _Rows([capacity_blocks] * len(seq_lens), needed)
    writes: list[tuple[int, int]] = []
    for i, q in enumerate(query_lens):
        for p in range(max(0, min(int(q), capacity_blocks * block_size))):
            writes.append((int(rowsets.table[i, p // block_size]), p % block_size))
    launch = Launch(np.asarray(qsl, dtype=np.int64), np.asarray(seq_lens, dtype=np.int64), rows, writes,
                    list(range(len(seq_lens))), list(range(len(seq_lens))), "whole step")
    # Nothing is computed yet: every slot of a real row is unwritten until its token writes it.
    unwritten = {(int(rowsets.table[i, j]), o) for i in range(len(seq_lens)) for j in range(capacity_blocks)
                 for o in range(block_size)}
    return Layout(contract, what, block_size, rowsets.table, rowsets.capacity, rowsets.canary, rowsets.num_blocks,
                  unwritten, [launch])


def split_dummy_tokens_layout(case: Case, result: Any, what: str, block_size: int | None) -> Layout:
    m = int(case.context["max_model_len"])
    b = block_size or default_block_size(m)
    n = [int(v) for v in np.asarray(result).reshape(-1).tolist()]
    qsl = np.concatenate([[0], np.cumsum(n)]).tolist() if n else [0]
    return _fresh_prefills("split_dummy_tokens", what, n, n, qsl, cdiv(m, b), b, int(sum(max(v, 0) for v in n)))


def make_dummy_layout(case: Case, result: Any, what: str, block_size: int | None) -> Layout:
    m = int(case.context["max_model_len"])
    b = block_size or default_block_size(m)
    n_tokens = int(case.args["num_tokens"])
    seq_lens = [int(v) for v in np.asarray(result.seq_lens).tolist()]
    qsl = [int(v) for v in np.asarray(result.query_start_loc).tolist()]
    qlens = [max(qsl[i + 1] - qsl[i], 0) for i in range(len(seq_lens))]
    return _fresh_prefills("make_dummy", what, qlens, seq_lens, qsl, cdiv(m, b), b, n_tokens)


def pad_query_start_loc_layout(case: Case, result: Any, what: str, block_size: int | None) -> Layout:
    nst = [int(v) for v in np.asarray(case.args["num_scheduled_tokens"]).tolist()]
    p = int(case.args["num_reqs_padded"])
    qsl = [int(v) for v in np.asarray(result).reshape(-1).tolist()][: p + 1]
    seq_lens = nst + [0] * (p - len(nst))
    total = sum(nst)
    b = block_size or 16
    capacity = max(cdiv(max(nst + [1]), b), 1)
    qlens = [max(qsl[i + 1] - qsl[i], 0) if i + 1 < len(qsl) else 0 for i in range(p)]
    return _fresh_prefills("pad_query_start_loc", what, qlens, seq_lens, qsl, capacity, b, total)


def _engine_split(q: list[int]) -> list[tuple[int, int]]:
    """Token ranges of the engine's two-ubatch split (contract D's oracle, no padding)."""
    from batchfuzz.reference.split_ubatches import split_ubatches

    total = sum(q)
    slices = split_ubatches(q, total, len(q), 2) if total >= 2 else None
    if slices is None:
        return [(0, total)]
    return [tok for _req, tok in slices]


def microbatch_layout(case: Case, splits: bool, what: str, block_size: int | None, contract: str) -> Layout:
    """Contract E: group 0 of the step (each group is its own attention
    layer; the first is replayed), split in two by the engine's split when
    ``splits``, else as one launch."""
    c = [int(v) for v in np.asarray(case.args["num_computed_tokens"]).tolist()]
    q = [int(v) for v in np.asarray(case.args["num_scheduled_tokens"]).tolist()]
    tables = case.args["block_tables"]
    sizes = [int(v) for v in np.asarray(case.args["block_sizes"]).reshape(-1).tolist()]
    g = 0
    b = sizes[g]
    if block_size not in (None, b):
        raise ValueError(f"block_size: contract E's step fixes the block size of group 0 to {b}, got {block_size}")
    rows = [[int(x) for x in row] for row in np.asarray(tables[g]).tolist()] if len(tables[g]) else []
    width = max((len(r) for r in rows), default=0) + 1
    table = np.zeros((len(rows), width), dtype=np.int64)
    capacity = np.asarray([len(r) for r in rows], dtype=np.int64)
    num_blocks = max([x for r in rows for x in r] + [0]) + 1
    canaries = []
    for i, r in enumerate(rows):
        table[i, : len(r)] = r
        for j in range(len(r), width):
            table[i, j] = num_blocks
            canaries.append(num_blocks)
            num_blocks += 1
    starts = np.concatenate([[0], np.cumsum(q)]).astype(np.int64)
    total = int(starts[-1])

    def slot(i: int, pos: int) -> tuple[int, int]:
        return int(table[i, pos // b]), pos % b

    written_this_step = {slot(i, p) for i in range(len(q)) for p in range(c[i], c[i] + q[i]) if table[i, p // b] != 0}
    ranges = _engine_split(q) if splits else [(0, total)]
    launches = []
    for t0, t1 in ranges:
        reqs, qsl, seq_lens, writes = [], [0], [], []
        for i in range(len(q)):
            lo, hi = max(t0, int(starts[i])), min(t1, int(starts[i + 1]))
            if lo >= hi:
                continue
            reqs.append(i)
            qsl.append(qsl[-1] + hi - lo)
            # the request's tokens up to the end of this ubatch: c + (hi - start)
            seq_lens.append(c[i] + hi - int(starts[i]))
            for p in range(c[i] + lo - int(starts[i]), c[i] + hi - int(starts[i])):
                if table[i, p // b] != 0:
                    writes.append(slot(i, p))
        launches.append(Launch(np.asarray(qsl, dtype=np.int64), np.asarray(seq_lens, dtype=np.int64), t1 - t0, writes,
                               reqs, reqs, f"tokens [{t0}, {t1})"))
    notes = [] if len(sizes) == 1 else [f"group 0 of {len(sizes)} replayed"]
    return Layout(contract, what, b, table, capacity, np.asarray(canaries, dtype=np.int64), num_blocks,
                  written_this_step, launches, notes)


def _allow_layout(case: Case, result: Any, what: str, block_size: int | None) -> Layout:
    return microbatch_layout(case, bool(result), what, block_size, "allow_microbatching")


def _conflicts_layout(case: Case, result: Any, what: str, block_size: int | None) -> Layout:
    # A target that reports no conflict is one the engine would let split.
    return microbatch_layout(case, len(result) == 0, what, block_size, "find_conflicts")


BUILDERS: dict[str, Callable[[Case, Any, str, int | None], Layout]] = {
    "split_dummy_tokens": split_dummy_tokens_layout,
    "make_dummy": make_dummy_layout,
    "pad_query_start_loc": pad_query_start_loc_layout,
    "allow_microbatching": _allow_layout,
    "find_conflicts": _conflicts_layout,
}


def layout(contract: str, case: Case, result: Any, what: str, block_size: int | None = None) -> Layout:
    """The layout of ``result`` (a target's or the oracle's) on ``case``."""
    if contract not in BUILDERS:
        raise ValueError(f"contract: confirm replays {sorted(BUILDERS)} through attention, got {contract!r}")
    return BUILDERS[contract](case, result, what, block_size)
