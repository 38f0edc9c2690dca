"""Oracle of contract E1: the conflict set (docs/contracts.md, contract E,
"Definitions"), and the conflicts that are harmful under a split.

Plain loops over the reads and writes of ``batchfuzz.reference._step``.
"""

from __future__ import annotations

from typing import Any

from batchfuzz.reference._step import Conflict, as_step, check_split, check_step, plain, reads, ubatch_of_tokens, writer_tokens


def find_conflicts(
    num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any
) -> set[Conflict]:
    """The conflict set: every ``(g, r, w, b)``, ``w != r``, ``b != 0``, such that
    a computed position of reader ``r`` and a position written by ``w`` map to
    the same slot of ``b`` in group ``g``."""
    s = plain(check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes))
    writers = writer_tokens(s)
    out: set[Conflict] = set()
    for g, r, _p, b, o in reads(s):
        for w in writers.get((g, b, o), {}):
            if w != r:
                out.add((g, r, w, b))
    return out


def harmful_conflicts(step: Any, split: Any) -> set[Conflict]:
    """Conflicts whose reader's earliest ubatch comes before the ubatch of the
    writer's token that writes the shared slot (its earliest such token)."""
    s = plain(as_step(step))
    ranges = check_split(split, s.num_tokens)
    ub = ubatch_of_tokens(ranges, s.num_tokens)
    writers = writer_tokens(s)
    out: set[Conflict] = set()
    for g, r, _p, b, o in reads(s):
        first_ub = ub[s.start[r]]  # readers have q[r] > 0, so a first token
        for w, t in writers.get((g, b, o), {}).items():
            if w != r and first_ub < ub[t]:
                out.add((g, r, w, b))
    return out

