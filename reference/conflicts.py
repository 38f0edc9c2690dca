"""Oracles for contract E: microbatch conflicts (SPEC.md, contract E).

Everything here is plain loops over requests, positions and groups, each line
traceable to a sentence of SPEC.md. Vocabulary:

- A *slot* of group ``g`` is ``(block, offset)``; position ``p`` of request
  ``r`` lives in ``(T_g[r, p // B_g], p % B_g)``. Block 0 is the null block:
  never written, never read.
- *Writes* of the step: positions ``[c[r], c[r] + q[r])`` of every request, in
  every group. *Reads* from the cache: every request with ``q[r] > 0`` reads
  its computed positions ``[0, c[r])``. A request with ``q[r] == 0`` has no
  token in the step, so it reads nothing and is never a reader (this is how
  we read SPEC's "reader"; see docs/microbatch.md).
- Tokens are laid out in request order: request ``r`` owns the global token
  indices ``[start[r], start[r] + q[r])`` with ``start[r] = q[0] + ... +
  q[r-1]``; token ``start[r] + i`` is position ``c[r] + i``.
- A *split* is a list of consecutive token ranges ``(tok_start, tok_stop)``
  starting at 0 and covering every real token (the last range may run past
  ``sum(q)`` into padding). ``split_ubatches`` results are accepted too.

The simulation (``simulate``) is the final judge. Two kinds of step make it
disagree with SPEC's sentence "split, the violations are exactly the harmful
conflicts"; both are impossible in a real engine and are named here so that
strategies and properties can treat them explicitly:

- *self-overlap*: a reader's computed slot that the reader itself writes in
  this step (a block id repeated inside one row). The simulation reports a
  violation that is no conflict (conflicts need ``w != r``).
- *multi-writer*: a slot written by more than one token of the step. The
  earliest write makes the slot valid, so a later writer's harmful conflict
  can have no violation.

A step with neither is *well-formed*; on well-formed steps the SPEC sentence
holds exactly (tested by properties, not assumed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from reference.args import INT_DTYPES, check_count_array, check_int
from reference.types import Step

Conflict = tuple[int, int, int, int]  # (group, reader, writer, block)
Range = tuple[int, int]


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


# ---------------------------------------------------------------- validation


def _check_table(name: str, value: Any, num_reqs: int) -> np.ndarray:
    if isinstance(value, np.ndarray):
        arr = value
    elif isinstance(value, (list, tuple)):
        try:
            arr = np.asarray(value)
        except ValueError:
            raise ValueError(f"{name} must be a rectangular (requests x columns) table, got {value!r:.80}") from None
        if arr.size and arr.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold ints, got {value!r:.80}")
        arr = arr.astype(np.int64) if arr.size else np.zeros((num_reqs, 0), dtype=np.int64)
    else:
        raise TypeError(f"{name} must be a 2-D numpy integer array, got {type(value).__name__}")
    if arr.dtype not in INT_DTYPES:
        raise TypeError(f"{name} must have dtype int32 or int64, got {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (requests x columns), got shape {arr.shape}")
    if arr.shape[0] != num_reqs:
        raise ValueError(f"{name} must have one row per request ({num_reqs}), got {arr.shape[0]} rows")
    if arr.size and int(arr.min()) < 0:
        r, col = (int(i) for i in np.argwhere(arr < 0)[0])
        raise ValueError(f"{name}[{r}, {col}] must be a block id >= 0, got {int(arr[r, col])}")
    return arr.astype(np.int64)


def check_step(
    num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any
) -> Step:
    """Validate a step (canonical arguments of contract E) and return it with
    int64 numpy arrays and Python-int block sizes.

    Raises TypeError/ValueError naming the argument and the value: counts are
    1-D int arrays ``>= 0`` of one length ``R``; ``G >= 1`` groups with block
    sizes ``>= 1`` and one ``(R, W_g)`` table each, with block ids ``>= 0`` and
    columns for every row's ``c + q`` positions.
    """
    c = check_count_array("num_computed_tokens", num_computed_tokens, minimum=0).astype(np.int64)
    q = check_count_array("num_scheduled_tokens", num_scheduled_tokens, minimum=0).astype(np.int64)
    if c.shape != q.shape:
        raise ValueError(
            f"num_computed_tokens and num_scheduled_tokens must have one entry per request, "
            f"got lengths {c.shape[0]} and {q.shape[0]}"
        )
    if isinstance(block_sizes, np.ndarray):
        if block_sizes.dtype.kind not in "iu" or block_sizes.ndim != 1:
            raise TypeError(f"block_sizes must be a list of ints, got array of dtype {block_sizes.dtype} shape {block_sizes.shape}")
        block_sizes = block_sizes.tolist()
    if not isinstance(block_sizes, (list, tuple)):
        raise TypeError(f"block_sizes must be a list of ints, got {type(block_sizes).__name__}")
    sizes = [check_int(f"block_sizes[{g}]", b, minimum=1) for g, b in enumerate(block_sizes)]
    if not sizes:
        raise ValueError("block_sizes must name at least one KV-cache group, got []")
    if not isinstance(block_tables, (list, tuple)):
        raise TypeError(f"block_tables must be a list of 2-D arrays (one per group), got {type(block_tables).__name__}")
    if len(block_tables) != len(sizes):
        raise ValueError(
            f"block_tables must have one table per group (len(block_sizes) = {len(sizes)}), got {len(block_tables)}"
        )
    num_reqs = int(c.shape[0])
    tables = [_check_table(f"block_tables[{g}]", t, num_reqs) for g, t in enumerate(block_tables)]
    need = c + q
    for g, (table, size) in enumerate(zip(tables, sizes, strict=True)):
        width = int(table.shape[1])
        short = need > width * size
        if short.any():
            r = int(np.argmax(short))
            raise ValueError(
                f"block_tables[{g}] has {width} columns of block size {size} ({width * size} positions), but request {r} "
                f"needs c + q = {int(c[r])} + {int(q[r])} = {int(need[r])} positions"
            )
    return Step(num_computed_tokens=c, num_scheduled_tokens=q, block_tables=tables, block_sizes=sizes)


def as_step(step: Any) -> Step:
    """Validate a ``Step`` (or a 4-tuple of canonical arguments)."""
    if isinstance(step, Step):
        return check_step(step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables, step.block_sizes)
    if isinstance(step, (tuple, list)) and len(step) == 4:
        return check_step(*step)
    raise TypeError(f"step must be a Step, got {type(step).__name__}")


class _Plain(NamedTuple):
    c: list[int]
    q: list[int]
    tables: list[list[list[int]]]
    sizes: list[int]
    start: list[int]  # first global token index of each request

    @property
    def num_reqs(self) -> int:
        return len(self.c)

    @property
    def num_tokens(self) -> int:
        return sum(self.q)


def _plain(step: Step) -> _Plain:
    c = [int(v) for v in step.num_computed_tokens.tolist()]
    q = [int(v) for v in step.num_scheduled_tokens.tolist()]
    start = []
    running = 0
    for r in range(len(q)):
        start.append(running)
        running += q[r]
    return _Plain(c, q, [t.tolist() for t in step.block_tables], list(step.block_sizes), start)


def _slot(s: _Plain, g: int, r: int, p: int) -> tuple[int, int]:
    """SPEC: position p of request r lives in slot (T_g[r, p // B_g], p % B_g)."""
    size = s.sizes[g]
    return s.tables[g][r][p // size], p % size


def _reads(s: _Plain) -> Iterable[tuple[int, int, int, int, int]]:
    """``(g, r, p, block, offset)``: computed positions ``p < c[r]`` of requests
    with ``q[r] > 0``, in non-null blocks (the null block is never read)."""
    for g in range(len(s.sizes)):
        for r in range(s.num_reqs):
            if s.q[r] == 0:
                continue
            for p in range(s.c[r]):
                b, o = _slot(s, g, r, p)
                if b != 0:
                    yield g, r, p, b, o


def _writes(s: _Plain) -> Iterable[tuple[int, int, int, int, int, int]]:
    """``(g, w, p, block, offset, token)``: positions ``c[w] <= p < c[w] + q[w]``
    in non-null blocks (the null block is never written), with the global
    index of the token that writes them."""
    for g in range(len(s.sizes)):
        for w in range(s.num_reqs):
            for p in range(s.c[w], s.c[w] + s.q[w]):
                b, o = _slot(s, g, w, p)
                if b != 0:
                    yield g, w, p, b, o, s.start[w] + (p - s.c[w])


def _earliest_write(s: _Plain) -> dict[tuple[int, int, int], tuple[int, int]]:
    """``(g, block, offset) -> (token, writer)`` of the first token that writes the slot."""
    first: dict[tuple[int, int, int], tuple[int, int]] = {}
    for g, w, _p, b, o, t in _writes(s):
        key = (g, b, o)
        if key not in first or t < first[key][0]:
            first[key] = (t, w)
    return first


def _writer_tokens(s: _Plain) -> dict[tuple[int, int, int], dict[int, int]]:
    """``(g, block, offset) -> {writer: its earliest token writing the slot}``."""
    out: dict[tuple[int, int, int], dict[int, int]] = {}
    for g, w, _p, b, o, t in _writes(s):
        per = out.setdefault((g, b, o), {})
        if w not in per or t < per[w]:
            per[w] = t
    return out


# ---------------------------------------------------------------- splits


def check_split(split: Any, num_tokens: int) -> list[Range]:
    """A split as consecutive token ranges ``[(0, e0), (e0, e1), ...]`` covering
    ``[0, num_tokens)`` (the last may end past it: padding). Accepts
    ``split_ubatches`` output (``((rs, re), (ts, te))`` per ubatch)."""
    if not isinstance(split, (list, tuple)) or len(split) == 0:
        raise ValueError(f"split must be a non-empty list of (tok_start, tok_stop) ranges, got {split!r:.80}")
    ranges: list[Range] = []
    for k, item in enumerate(split):
        if isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], (list, tuple)):
            item = item[1]  # ((req_start, req_stop), (tok_start, tok_stop))
        if not (isinstance(item, (list, tuple)) and len(item) == 2):
            raise ValueError(f"split[{k}] must be a (tok_start, tok_stop) pair, got {item!r}")
        ts = check_int(f"split[{k}] tok_start", item[0], minimum=0)
        te = check_int(f"split[{k}] tok_stop", item[1], minimum=0)
        expected = ranges[-1][1] if ranges else 0
        if ts != expected or te < ts:
            raise ValueError(f"split[{k}] = ({ts}, {te}) must start at {expected} and not end before it starts")
        ranges.append((ts, te))
    if ranges[-1][1] < num_tokens:
        raise ValueError(f"split ends at token {ranges[-1][1]} but the step has {num_tokens} tokens")
    return ranges


def cuts_to_split(cuts: Iterable[int], num_tokens: int) -> list[Range]:
    """Consecutive ranges from sorted cut points inside ``(0, num_tokens)``."""
    points = [0, *sorted(set(int(x) for x in cuts)), num_tokens]
    return [(points[k], points[k + 1]) for k in range(len(points) - 1)]


def _ubatch_of_tokens(ranges: list[Range], num_tokens: int) -> list[int]:
    ub = [0] * num_tokens
    for k, (ts, te) in enumerate(ranges):
        for t in range(ts, min(te, num_tokens)):
            ub[t] = k
    return ub


# ---------------------------------------------------------------- definitions


def find_conflicts(
    num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any
) -> set[Conflict]:
    """The conflict set: every ``(g, r, w, b)``, ``w != r``, ``b != 0``, such that
    a computed position of reader ``r`` and a position written by ``w`` map to
    the same slot of ``b`` in group ``g``."""
    s = _plain(check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes))
    writers = _writer_tokens(s)
    out: set[Conflict] = set()
    for g, r, _p, b, o in _reads(s):
        for w in writers.get((g, b, o), {}):
            if w != r:
                out.add((g, r, w, b))
    return out


def simulate(step: Any, split: Any) -> list[Violation]:
    """Run the step ubatch by ubatch on a model KV cache; return every violation.

    SPEC.md: before the step, the slots of all computed positions are written,
    except those that some request writes in this step. Within a ubatch, first
    all of its writes, then every token's reads (its request's computed slots
    and its own earlier positions). A read of an unwritten slot is a violation.

    Reads are evaluated once per (ubatch, request): the cache does not change
    during a ubatch's read phase, and the union of a request's tokens' reads
    in the ubatch is its computed positions plus its own positions before its
    last token there. Each (ubatch, group, reader, position) is reported once.
    """
    s = _plain(as_step(step))
    total = s.num_tokens
    ranges = check_split(split, total)
    first = _earliest_write(s)

    written: set[tuple[int, int, int]] = set()
    for g in range(len(s.sizes)):
        for r in range(s.num_reqs):
            for p in range(s.c[r]):
                b, o = _slot(s, g, r, p)
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
                b, o = _slot(s, g, w, p)
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
                    b, o = _slot(s, g, r, p)
                    if b != 0 and (g, b, o) not in written:
                        violations.append(Violation(k, g, r, p, b, o, first[(g, b, o)][1]))
    return violations


def harmful_conflicts(step: Any, split: Any) -> set[Conflict]:
    """Conflicts whose reader's earliest ubatch comes before the ubatch of the
    writer's token that writes the shared slot (its earliest such token)."""
    s = _plain(as_step(step))
    ranges = check_split(split, s.num_tokens)
    ub = _ubatch_of_tokens(ranges, s.num_tokens)
    writers = _writer_tokens(s)
    out: set[Conflict] = set()
    for g, r, _p, b, o in _reads(s):
        first_ub = ub[s.start[r]]  # readers have q[r] > 0, so a first token
        for w, t in writers.get((g, b, o), {}).items():
            if w != r and first_ub < ub[t]:
                out.add((g, r, w, b))
    return out


def allow_split(step: Any, split: Any) -> bool:
    """True when the split has no harmful conflict (SPEC.md, decisions)."""
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
    s = _plain(check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes))
    first = _earliest_write(s)
    for g, r, _p, b, o in _reads(s):
        hit = first.get((g, b, o))
        if hit is not None and hit[0] > s.start[r]:
            return False
    return True


def unsafe_conflicts(step: Any) -> set[Conflict]:
    """Conflicts with the reader's first token strictly before the writer's
    token that writes the shared slot (the split-agnostic harm condition)."""
    s = _plain(as_step(step))
    writers = _writer_tokens(s)
    out: set[Conflict] = set()
    for g, r, _p, b, o in _reads(s):
        for w, t in writers.get((g, b, o), {}).items():
            if w != r and s.start[r] < t:
                out.add((g, r, w, b))
    return out


def witness_splits(step: Any) -> list[list[Range]]:
    """Two-ubatch splits cutting right after each reader's first token.

    If any consecutive split has a violation, one of these has (see
    ``allow_microbatching``); properties use them as extra adversarial splits.
    """
    s = _plain(as_step(step))
    total = s.num_tokens
    cuts = sorted({s.start[r] + 1 for r in range(s.num_reqs) if s.q[r] > 0 and s.start[r] + 1 < total})
    return [cuts_to_split([cut], total) for cut in cuts]


# ---------------------------------------------------------------- ill-formed steps


def self_overlaps(step: Any) -> set[tuple[int, int, int, int]]:
    """``(g, r, block, offset)``: a reader's computed slot that it also writes."""
    s = _plain(as_step(step))
    writers = _writer_tokens(s)
    return {(g, r, b, o) for g, r, _p, b, o in _reads(s) if r in writers.get((g, b, o), {})}


def multi_written_slots(step: Any) -> set[tuple[int, int, int]]:
    """``(g, block, offset)`` written by more than one token of the step."""
    s = _plain(as_step(step))
    count: dict[tuple[int, int, int], int] = {}
    for g, _w, _p, b, o, _t in _writes(s):
        count[(g, b, o)] = count.get((g, b, o), 0) + 1
    return {key for key, n in count.items() if n > 1}


def is_well_formed(step: Any) -> bool:
    """No self-overlap and no slot written twice (what a real engine produces)."""
    return not self_overlaps(step) and not multi_written_slots(step)


# ---------------------------------------------------------------- data parallel


def dp_allow(
    rank_allows: Sequence[bool], rank_num_tokens: Sequence[int], num_tokens_padded: int, num_ubatches: int = 2
) -> bool:
    """Data-parallel decision (SPEC.md): split only if every rank allows it and
    the last ubatch is non-empty on the rank with the fewest tokens.

    Every rank splits the same padded token count ``num_tokens_padded`` at the
    same points, so the rank with the fewest real tokens decides refusal.
    """
    if not isinstance(rank_allows, (list, tuple)) or not isinstance(rank_num_tokens, (list, tuple)):
        raise TypeError("rank_allows and rank_num_tokens must be lists (one entry per rank)")
    if len(rank_allows) == 0 or len(rank_allows) != len(rank_num_tokens):
        raise ValueError(
            f"rank_allows and rank_num_tokens must have one entry per rank (at least one), "
            f"got lengths {len(rank_allows)} and {len(rank_num_tokens)}"
        )
    for i, a in enumerate(rank_allows):
        if not isinstance(a, (bool, np.bool_)):
            raise TypeError(f"rank_allows[{i}] must be a bool, got {type(a).__name__} {a!r}")
    tokens = [check_int(f"rank_num_tokens[{i}]", n, minimum=0) for i, n in enumerate(rank_num_tokens)]
    padded = check_int("num_tokens_padded", num_tokens_padded, minimum=1)
    n = check_int("num_ubatches", num_ubatches, minimum=2)
    if padded < max(tokens):
        raise ValueError(f"num_tokens_padded must be >= every rank's token count, got {padded} < {max(tokens)}")
    every_rank_allows = True
    for a in rank_allows:
        if not a:
            every_rank_allows = False  # one veto and no rank splits
    fewest = min(tokens)
    last_ubatch_has_a_token = (padded // n) * (n - 1) < fewest
    return every_rank_allows and last_ubatch_has_a_token


def dp_decide(rank_steps: Sequence[Any], num_tokens_padded: int, num_ubatches: int = 2) -> bool:
    """``dp_allow`` with each rank's allowance from the exact ``allow_microbatching``."""
    steps = [as_step(st) for st in rank_steps]
    allows = [
        allow_microbatching(st.num_computed_tokens, st.num_scheduled_tokens, st.block_tables, st.block_sizes)
        for st in steps
    ]
    tokens = [int(st.num_scheduled_tokens.sum()) for st in steps]
    return dp_allow(allows, tokens, num_tokens_padded, num_ubatches)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def harmful_among(step: Any, split: Any, conflicts: Iterable[Conflict]) -> set[Conflict]:
    """The members of ``conflicts`` that are harmful under ``split``.

    For each tuple the shared slots are found from the step itself (a tuple
    with none, i.e. no conflict at all, is never harmful), so a property can
    judge a target's conflict set against the simulation.
    """
    s = _plain(as_step(step))
    ranges = check_split(split, s.num_tokens)
    ub = _ubatch_of_tokens(ranges, s.num_tokens)
    writers = _writer_tokens(s)
    reads: set[tuple[int, int, int, int]] = {(g, r, b, o) for g, r, _p, b, o in _reads(s)}
    out: set[Conflict] = set()
    for g, r, w, b in conflicts:
        if w == r or not (0 <= r < s.num_reqs) or s.q[r] == 0:
            continue
        first_ub = ub[s.start[r]]
        for o in range(s.sizes[g] if 0 <= g < len(s.sizes) else 0):
            t = writers.get((g, b, o), {}).get(w)
            if t is not None and (g, r, b, o) in reads and first_ub < ub[t]:
                out.add((g, r, w, b))
                break
    return out
