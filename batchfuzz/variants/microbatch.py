"""Buggy variants of contracts D (ubatch split) and E (microbatch conflicts).

``shipped`` variants re-express, in our own code, engine behaviour that
SPEC.md describes: the check vLLM ships since 0.28 (``shipped_allow_microbatching``)
and no check at all (``no_check_allow_microbatching``: every step split, the
behaviour before the fix). The rest are planted mutants of the kinds such
code gets wrong. Mutants are written as plain loops: they are judged, not fast.
"""

from __future__ import annotations

from typing import Any

from reference.conflicts import Conflict, check_step
from reference.ubatch import UbatchSlice, check_ubatch_args, token_owners

# ---------------------------------------------------------------- contract D


def _split(nst: list[int], padded: int, padded_reqs: int, n: int, size: int, *, refuse: bool = True,
           strict: bool = False, absorb_reqs: bool = True, absorb_tokens: bool = True,
           disjoint_reqs: bool = False) -> list[UbatchSlice] | None:
    total = sum(nst)
    empty_last = size * (n - 1) > total if strict else size * (n - 1) >= total
    if refuse and empty_last:
        return None
    owner = token_owners(nst)
    out: list[UbatchSlice] = []
    for k in range(n):
        ts = k * size
        te = (k + 1) * size if k < n - 1 else (padded if absorb_tokens else total)
        real = [owner[t] for t in range(ts, min(te, total))]
        rs = real[0] if real else len(nst)
        re = real[-1] + 1 if real else len(nst)
        if disjoint_reqs and out and rs < out[-1][0][1]:
            rs = out[-1][0][1]  # the straddling request stays with the earlier ubatch only
        if k == n - 1 and absorb_reqs:
            re = padded_reqs
        out.append(((rs, re), (ts, te)))
    return out


def split_no_refusal(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """Splits even when the last ubatch holds no real token (the refusal left out)."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, p // k, refuse=False)


def split_refusal_strict(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """Refuses only when ``(Np // n) * (n - 1) > sum(nst)``: ``>`` for ``>=``."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, p // k, strict=True)


def split_ceil_size(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """Ubatch size ``ceil(Np / n)`` instead of ``Np // n``."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, -(-p // k))


def split_on_real_tokens(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """Split points from the real token count ``sum(nst) // n`` instead of ``Np // n``."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, max(1, sum(counts) // k))


def split_padded_reqs_dropped(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """The last ubatch stops at the last real request: padded requests absorbed by none."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, p // k, absorb_reqs=False)


def split_padding_dropped(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """The last ubatch stops at ``sum(nst)``: padded tokens absorbed by none."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, p // k, absorb_tokens=False)


def split_straddler_once(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """A straddling request is kept in the earlier ubatch only (disjoint request ranges)."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, p // k, disjoint_reqs=True)


# ---------------------------------------------------------------- contract E: shared plain loops


def _step(args: tuple[Any, ...]) -> tuple[list[int], list[int], list[list[list[int]]], list[int], list[int]]:
    s = check_step(*args)
    c = [int(v) for v in s.num_computed_tokens.tolist()]
    q = [int(v) for v in s.num_scheduled_tokens.tolist()]
    start, run = [], 0
    for x in q:
        start.append(run)
        run += x
    return c, q, [t.tolist() for t in s.block_tables], list(s.block_sizes), start


def _conflicts(args: tuple[Any, ...], *, groups: int | None = None, read_stop: Any = None, write_stop: Any = None,
               idle_readers: bool = False, with_self: bool = False, with_null: bool = False,
               block_level: bool = False, swap_roles: bool = False) -> set[Conflict]:
    """The conflict set with one knob turned (each mutant turns one)."""
    c, q, tables, sizes, _ = _step(args)
    read_stop = read_stop or (lambda cr, qr: cr)
    write_stop = write_stop or (lambda cr, qr: cr + qr)
    out: set[Conflict] = set()
    for g in range(len(sizes) if groups is None else min(groups, len(sizes))):
        size, table = sizes[g], tables[g]

        def slot(r: int, p: int, size: int = size, table: list[list[int]] = table) -> tuple[int, int]:
            return table[r][p // size], (0 if block_level else p % size)

        writers: dict[tuple[int, int], set[int]] = {}
        for w in range(len(c)):
            for p in range(c[w], write_stop(c[w], q[w])):
                b, o = slot(w, p)
                if b != 0 or with_null:
                    writers.setdefault((b, o), set()).add(w)
        for r in range(len(c)):
            if q[r] == 0 and not idle_readers:
                continue
            for p in range(max(0, read_stop(c[r], q[r]))):
                b, o = slot(r, p)
                if b == 0 and not with_null:
                    continue
                for w in writers.get((b, o), set()):
                    if w != r or with_self:
                        out.add((g, w, r, b) if swap_roles else (g, r, w, b))
    return out


def conflicts_first_group_only(c: Any, q: Any, tables: Any, sizes: Any) -> set[Conflict]:
    """Looks at KV-cache group 0 only."""
    return _conflicts((c, q, tables, sizes), groups=1)


def conflicts_block_level(c: Any, q: Any, tables: Any, sizes: Any) -> set[Conflict]:
    """Shares a block instead of a slot: a computed and a written position in one block conflict."""
    return _conflicts((c, q, tables, sizes), block_level=True)


def conflicts_with_self(c: Any, q: Any, tables: Any, sizes: Any) -> set[Conflict]:
    """Keeps ``w == r`` (a request reading a slot it writes itself)."""
    return _conflicts((c, q, tables, sizes), with_self=True)


def conflicts_roles_swapped(c: Any, q: Any, tables: Any, sizes: Any) -> set[Conflict]:
    """Reports ``(g, writer, reader, b)``: reads and writes of the shared slot confused."""
    return _conflicts((c, q, tables, sizes), swap_roles=True)


def conflicts_with_null(c: Any, q: Any, tables: Any, sizes: Any) -> set[Conflict]:
    """Treats the null block 0 as a real block."""
    return _conflicts((c, q, tables, sizes), with_null=True)


def conflicts_idle_readers(c: Any, q: Any, tables: Any, sizes: Any) -> set[Conflict]:
    """Counts requests with no scheduled token (``q == 0``) as readers."""
    return _conflicts((c, q, tables, sizes), idle_readers=True)


def conflicts_last_computed_missed(c: Any, q: Any, tables: Any, sizes: Any) -> set[Conflict]:
    """Reads computed positions ``[0, c - 1)``: the last computed position is missed."""
    return _conflicts((c, q, tables, sizes), read_stop=lambda cr, qr: cr - 1)


def conflicts_last_written_missed(c: Any, q: Any, tables: Any, sizes: Any) -> set[Conflict]:
    """Writes positions ``[c, c + q - 1)``: the last scheduled token's write is missed."""
    return _conflicts((c, q, tables, sizes), write_stop=lambda cr, qr: cr + qr - 1)


# ---------------------------------------------------------------- contract E: decisions


def shipped_allow_microbatching(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any,
                                block_sizes: Any, reorder_batch_threshold: int = 1) -> bool:
    """The engine's shipped check (vLLM since 0.28), as SPEC.md describes it.

    Readers are the requests with ``q > reorder_batch_threshold`` and ``c > 0``;
    a reader reads only its whole blocks, columns ``[0, c // B)``; written are
    the columns ``[c // B, ceil((c + q) / B))`` of every request, null entries
    included; the split is vetoed when a reader's whole block is in its
    group's written set, in any group.
    """
    c, q, tables, sizes, _ = _step((num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes))
    for g, size in enumerate(sizes):
        table = tables[g]
        written: set[int] = set()
        for r in range(len(c)):
            for col in range(c[r] // size, -(-(c[r] + q[r]) // size)):
                written.add(table[r][col])
        for r in range(len(c)):
            if q[r] > reorder_batch_threshold and c[r] > 0:
                for col in range(c[r] // size):
                    if table[r][col] in written:
                        return False
    return True


def no_check_allow_microbatching(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any,
                                 block_sizes: Any) -> bool:
    """No check at all: every step may be split (the engine before the fix)."""
    check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
    return True


def _allow(args: tuple[Any, ...], *, groups: int | None = None, whole_blocks: bool = False,
           reversed_order: bool = False, read_stop: Any = None, min_reader_q: int = 1,
           write_cols: Any = None) -> bool:
    """The exact rule with one knob turned: veto iff a reader's computed slot
    is first written by a token after the reader's first token."""
    c, q, tables, sizes, start = _step(args)
    read_stop = read_stop or (lambda cr, size: cr)
    for g in range(len(sizes) if groups is None else min(groups, len(sizes))):
        size, table = sizes[g], tables[g]
        first: dict[tuple[int, int], int] = {}
        for w in range(len(c)):
            for p in range(c[w], c[w] + q[w]):
                if write_cols is not None and not write_cols(c[w], q[w], size, p // size):
                    continue
                b = table[w][p // size]
                t = start[w] + p - c[w]
                if b != 0 and ((b, p % size) not in first or t < first[(b, p % size)]):
                    first[(b, p % size)] = t
        for r in range(len(c)):
            if q[r] < min_reader_q:
                continue
            stop = (c[r] // size) * size if whole_blocks else read_stop(c[r], size)
            for p in range(max(0, stop)):
                b = table[r][p // size]
                hit = first.get((b, p % size))
                if b == 0 or hit is None:
                    continue
                if (hit < start[r]) if reversed_order else (hit > start[r]):
                    return False
    return True


def allow_first_group_only(c: Any, q: Any, tables: Any, sizes: Any) -> bool:
    """Exact rule over KV-cache group 0 only."""
    return _allow((c, q, tables, sizes), groups=1)


def allow_whole_blocks_only(c: Any, q: Any, tables: Any, sizes: Any) -> bool:
    """Exact rule, but a reader reads only its whole blocks (its partly computed block is ignored)."""
    return _allow((c, q, tables, sizes), whole_blocks=True)


def allow_order_reversed(c: Any, q: Any, tables: Any, sizes: Any) -> bool:
    """Vetoes when the writer comes *before* the reader: reads and writes of the shared slot confused."""
    return _allow((c, q, tables, sizes), reversed_order=True)


def allow_last_computed_missed(c: Any, q: Any, tables: Any, sizes: Any) -> bool:
    """Exact rule over computed positions ``[0, c - 1)``: the last computed position is missed."""
    return _allow((c, q, tables, sizes), read_stop=lambda cr, size: cr - 1)


def allow_skip_decode_readers(c: Any, q: Any, tables: Any, sizes: Any) -> bool:
    """Exact rule, but requests with ``q == 1`` are not readers (the shipped reader filter alone)."""
    return _allow((c, q, tables, sizes), min_reader_q=2)


def allow_floor_written_columns(c: Any, q: Any, tables: Any, sizes: Any) -> bool:
    """Written columns ``[c // B, (c + q) // B)``: floor for ceil, a partly written last block missed."""
    return _allow((c, q, tables, sizes), write_cols=lambda cr, qr, size, col: cr // size <= col < (cr + qr) // size)


def allow_returns_conflicts(c: Any, q: Any, tables: Any, sizes: Any) -> Any:
    """Returns the list of unsafe conflicts (empty when safe) instead of a bool."""
    from reference.conflicts import unsafe_conflicts

    return sorted(unsafe_conflicts(check_step(c, q, tables, sizes)))
