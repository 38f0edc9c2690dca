"""Known buggy variants of contract E1, the conflict set: planted mutants of
the kinds such code gets wrong, each the plain-loop conflict set with one
knob turned (they are judged, not fast)."""

from __future__ import annotations

from typing import Any

from batchfuzz.contracts._microbatch import step_lists
from batchfuzz.reference._step import Conflict, check_step, plain
from batchfuzz.registry import Variant


def _conflicts(args: tuple[Any, ...], *, groups: int | None = None, read_stop: Any = None, write_stop: Any = None,
               idle_readers: bool = False, with_self: bool = False, with_null: bool = False,
               block_level: bool = False, swap_roles: bool = False) -> set[Conflict]:
    """The conflict set with one knob turned (each mutant turns one)."""
    c, q, tables, sizes, _ = plain(check_step(*args))
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




def conflicts_zeroing_tables(c: Any, q: Any, tables: Any, sizes: Any) -> set[Conflict]:
    """Clears the caller's block tables, then reports the conflicts of what is left (none)."""
    for t in tables:
        t[...] = 0
    return _conflicts((c, q, tables, sizes))


VARIANTS = (
    Variant("first_group_only", "looks at KV-cache group 0 only", conflicts_first_group_only, "mutant",
            ("no_missing_conflicts", "matches_oracle", "harmful_match_simulation"),
            step_lists([0, 1], [1, 1], [[[0], [0]], [[1], [1]]], [2, 2])),
    Variant("block_level", "a shared block counts, whatever the offsets (block-level instead of slot-level)",
            conflicts_block_level, "mutant", ("no_spurious_conflicts", "matches_oracle"),
            step_lists([1, 2], [1, 1], [[[1], [1]]], [4])),
    Variant("with_self", "keeps w == r (a request reading a slot it writes itself)", conflicts_with_self, "mutant",
            ("tuples_in_range", "no_spurious_conflicts", "matches_oracle"), step_lists([0, 1], [0, 1], [[[0, 0], [1, 1]]], [1])),
    Variant("roles_swapped", "reports (g, writer, reader, b): reads and writes of the shared slot confused",
            conflicts_roles_swapped, "mutant", ("no_spurious_conflicts", "matches_oracle", "harmful_match_simulation"),
            step_lists([0, 1], [1, 1], [[[1], [1]]], [2])),
    Variant("null_block_counted", "treats the null block 0 as a real block", conflicts_with_null, "mutant",
            ("tuples_in_range", "no_spurious_conflicts", "matches_oracle"), step_lists([0, 1], [1, 1], [[[0], [0]]], [2])),
    Variant("idle_readers", "counts requests with no scheduled token (q == 0) as readers", conflicts_idle_readers,
            "mutant", ("no_spurious_conflicts", "matches_oracle"), step_lists([0, 1], [1, 0], [[[1], [1]]], [1])),
    Variant("last_computed_missed", "reads computed positions [0, c - 1): the last one is missed",
            conflicts_last_computed_missed, "mutant", ("no_missing_conflicts", "matches_oracle"),
            step_lists([0, 1], [1, 1], [[[1, 0], [1, 0]]], [1])),
    Variant("last_written_missed", "writes positions [c, c + q - 1): the last scheduled token's write is missed",
            conflicts_last_written_missed, "mutant", ("no_missing_conflicts", "matches_oracle"),
            step_lists([0, 1], [1, 1], [[[1, 0], [1, 0]]], [1])),
    Variant("zeroes_tables", "clears the caller's block tables in place, then finds no conflict", conflicts_zeroing_tables,
            "mutant", ("inputs_unchanged", "matches_oracle", "no_missing_conflicts"), step_lists([0], [0], [[[1]]], [1])),
)

