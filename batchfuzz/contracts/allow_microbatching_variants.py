"""Known buggy variants of contract E2, the split-agnostic decision.

``shipped`` variants re-express, in our own code, engine behaviour: the
check vLLM ships since 0.28 (``shipped_allow_microbatching``) and no check
at all (``no_check_allow_microbatching``: every step split, the behaviour
before the fix). The rest are planted mutants, each the exact rule with one
knob turned (plain loops: they are judged, not fast).
"""

from __future__ import annotations

from typing import Any

from batchfuzz.contracts._microbatch import shipped_allow_microbatching, step_lists, unsafe_conflicts
from batchfuzz.reference._step import check_step, plain
from batchfuzz.registry import Variant


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
    c, q, tables, sizes, start = plain(check_step(*args))
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
    return sorted(unsafe_conflicts(check_step(c, q, tables, sizes)))



_SOUND = ("sound_under_adversarial_splits",)



def allow_zeroing_tables(c: Any, q: Any, tables: Any, sizes: Any) -> bool:
    """Clears the caller's block tables, then allows the split (nothing is shared any more)."""
    for t in tables:
        t[...] = 0
    return _allow((c, q, tables, sizes))


VARIANTS = (
    Variant("no_check", "no check at all: every step is split (the engine before the fix)",
            no_check_allow_microbatching, "shipped", _SOUND + ("sound_under_engine_splits",),
            step_lists([1, 0], [1, 1], [[[1, 0], [1, 0]]], [1])),
    Variant("shipped_check", "vLLM's check since 0.28 as docs/contracts.md describes it: readers need q > 1 and c > 0, whole blocks "
            "only, written columns include nulls", shipped_allow_microbatching, "shipped", _SOUND,
            # Realizable (docs/microbatch.md): two identical 3-token prompts; request 1 fills block 1 in this
            # step, request 0 hits it (c == 2), recomputes its last token (q == 1) and is moved to the front as
            # a decode. Shrinking over all steps reaches a smaller, unrealizable one (two requests writing one block).
            step_lists([2, 0], [1, 3], [[[1, 3], [1, 2]]], [2])),
    Variant("first_group_only", "exact rule over KV-cache group 0 only", allow_first_group_only, "mutant", _SOUND,
            step_lists([1, 1], [1, 4], [[[0], [0]], [[1, 0], [0, 1]]], [8, 4])),
    Variant("whole_blocks_only", "exact rule, but a reader's partly computed block is ignored",
            allow_whole_blocks_only, "mutant", _SOUND, step_lists([1, 0], [1, 1], [[[1], [1]]], [2])),
    Variant("order_reversed", "vetoes when the writer comes before the reader: reads and writes of the shared slot confused",
            allow_order_reversed, "mutant", _SOUND, step_lists([1, 0], [1, 1], [[[1, 0], [1, 0]]], [1])),
    Variant("last_computed_missed", "exact rule over computed positions [0, c - 1)", allow_last_computed_missed,
            "mutant", _SOUND, step_lists([1, 0], [1, 1], [[[1, 0], [1, 0]]], [1])),
    Variant("skip_decode_readers", "exact rule, but q == 1 requests are not readers (the shipped reader filter alone)",
            allow_skip_decode_readers, "mutant", _SOUND, step_lists([1, 0], [1, 1], [[[1], [1]]], [2])),
    Variant("floor_written_columns", "written columns [c // B, (c + q) // B): floor for ceil, a partly written last block "
            "missed", allow_floor_written_columns, "mutant", _SOUND, step_lists([1, 0], [1, 1], [[[1], [1]]], [2])),
    Variant("returns_conflicts", "returns the list of unsafe conflicts instead of a bool",
            allow_returns_conflicts, "mutant", ("returns_bool",), step_lists([0, 0], [0, 0], [[[], []]], [1])),
    Variant("zeroes_tables", "clears the caller's block tables in place, then allows every split", allow_zeroing_tables,
            "mutant", ("inputs_unchanged", "sound_under_adversarial_splits"), step_lists([0], [0], [[[1]]], [1])),
)

