"""Oracle of contract E2: the split-agnostic decision ``allow_microbatching``
(docs/contracts.md, contract E, "Decisions"), and the ground truth it answers
to: the slot-level simulation of a step run ubatch by ubatch.

Plain loops over the reads and writes of ``batchfuzz.reference._step``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from batchfuzz.reference._step import as_step, check_split, check_step, earliest_write, plain, reads, slot
from batchfuzz.reference.find_conflicts import harmful_conflicts


class Violation(NamedTuple):
    """A read of an unwritten slot found by the simulation.

    ``writer`` is the request whose token writes the slot first in the step (a
    later ubatch); it equals ``reader`` only for a self-overlap.
    """

    ubatch: int
    group: int
    reader: int
    position: int
    block: int
    offset: int
    writer: int


def simulate(step: Any, split: Any) -> list[Violation]:
    """Run the step ubatch by ubatch on a model KV cache; return every violation.

    docs/contracts.md: before the step, the slots of all computed positions are written,
    except those that some request writes in this step. Within a ubatch, first
    all of its writes, then every token's reads (its request's computed slots
    and its own earlier positions). A read of an unwritten slot is a violation.

    Reads are evaluated once per (ubatch, request): the cache does not change
    during a ubatch's read phase, and the union of a request's tokens' reads
    in the ubatch is its computed positions plus its own positions before its
    last token there. Each (ubatch, group, reader, position) is reported once.
    """
    s = plain(as_step(step))
    total = s.num_tokens
    ranges = check_split(split, total)
    first = earliest_write(s)

    written: set[tuple[int, int, int]] = set()
    for g in range(len(s.sizes)):
        for r in range(s.num_reqs):
            for p in range(s.c[r]):
                b, o = slot(s, g, r, p)
                if b != 0 and (g, b, o) not in first:
                    written.add((g, b, o))

    owner: list[tuple[int, int]] = []  # token -> (request, position)
    for r in range(s.num_reqs):
        for i in range(s.q[r]):
            owner.append((r, s.c[r] + i))

    violations: list[Violation] = []
    for k, (ts, te) in enumerate(ranges):
        tokens = range(ts, min(te, total))
        # 1. every write of the ubatch
        for t in tokens:
            w, p = owner[t]
            for g in range(len(s.sizes)):
                b, o = slot(s, g, w, p)
                if b != 0:
                    written.add((g, b, o))
        # 2. every read: request r reads positions [0, last position it runs here)
        last_pos: dict[int, int] = {}
        for t in tokens:
            r, p = owner[t]
            last_pos[r] = p
        for r, p_last in last_pos.items():
            for p in range(p_last):
                for g in range(len(s.sizes)):
                    b, o = slot(s, g, r, p)
                    if b != 0 and (g, b, o) not in written:
                        violations.append(Violation(k, g, r, p, b, o, first[(g, b, o)][1]))
    return violations


def allow_split(step: Any, split: Any) -> bool:
    """True when the split has no harmful conflict (docs/contracts.md, "Decisions")."""
    return not harmful_conflicts(step, split)


def allow_microbatching(
    num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any
) -> bool:
    """Exact and split-agnostic: True iff no split of the step's tokens into
    consecutive ubatches has a violation in the simulation.

    A split puts reader ``r``'s first token (global index ``start[r]``) and the
    earliest token writing one of its computed slots (index ``t``) in
    different ubatches, the reader's first, exactly when ``start[r] < t`` and
    a cut falls in ``(start[r], t]``; any such cut shows the violation (the
    slot is unwritten when ``r`` first reads it). So: veto iff some reader's
    computed, non-null slot is first written by a token after the reader's
    first token. On well-formed steps this is "some conflict has its reader's
    first token before the writer's token", i.e. "some request reads a slot
    that a later request in batch order writes" (properties check both).
    """
    s = plain(check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes))
    first = earliest_write(s)
    for g, r, _p, b, o in reads(s):
        hit = first.get((g, b, o))
        if hit is not None and hit[0] > s.start[r]:
            return False
    return True

