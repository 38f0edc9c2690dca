"""The vocabulary of contract E (docs/contracts.md, contract E): a step, its
slots, its reads and writes, splits, and well-formedness.

Plain loops over requests, positions and groups, each traceable to a
sentence of the contract:

- A *slot* of group ``g`` is ``(block, offset)``; position ``p`` of request
  ``r`` lives in ``(T_g[r, p // B_g], p % B_g)``. Block 0 is the null block:
  never written, never read.
- *Writes* of the step: positions ``[c[r], c[r] + q[r])`` of every request, in
  every group. *Reads* from the cache: every request with ``q[r] > 0`` reads
  its computed positions ``[0, c[r])``. A request with ``q[r] == 0`` has no
  token in the step, so it reads nothing and is never a reader (our reading
  of the contract; docs/contracts.md says why).
- Tokens are laid out in request order: request ``r`` owns the global token
  indices ``[start[r], start[r] + q[r])`` with ``start[r] = q[0] + ... +
  q[r-1]``; token ``start[r] + i`` is position ``c[r] + i``.
- A *split* is a list of consecutive token ranges ``(tok_start, tok_stop)``
  starting at 0 and covering every real token (the last range may run past
  ``sum(q)`` into padding). ``split_ubatches`` results are accepted too.

Two kinds of step no engine produces make the simulation (the final judge,
``allow_microbatching.simulate``) disagree with the sentence "split, the
violations are exactly the harmful conflicts"; both are defined here so that
strategies and properties can treat them explicitly:

- *self-overlap*: a reader's computed slot that the reader itself writes in
  this step (a block id repeated inside one row);
- *multi-writer*: a slot written by more than one token of the step.

A step with neither is *well-formed*.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from batchfuzz.reference._args import INT_DTYPES, check_count_array, check_int

# The canonical arguments of both contract E targets, in order.
STEP_ARGUMENTS = ("num_computed_tokens", "num_scheduled_tokens", "block_tables", "block_sizes")
Conflict = tuple[int, int, int, int]  # (group, reader, writer, block)
Range = tuple[int, int]


@dataclass
class Step:
    """One scheduler step as contract E sees it (docs/contracts.md, contract E).

    ``num_computed_tokens[r]`` (c) and ``num_scheduled_tokens[r]`` (q) per
    request in batch order; ``block_tables[g]`` is group g's (R, W_g) table;
    ``block_sizes[g]`` its block size. Block id 0 is the null block.
    """

    num_computed_tokens: Any
    num_scheduled_tokens: Any
    block_tables: list[Any]
    block_sizes: list[int]

    @property
    def num_reqs(self) -> int:
        return len(self.num_scheduled_tokens)



def check_table(name: str, value: Any, num_reqs: int) -> np.ndarray:
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
    tables = [check_table(f"block_tables[{g}]", t, num_reqs) for g, t in enumerate(block_tables)]
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


class PlainStep(NamedTuple):
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


def plain(step: Step) -> PlainStep:
    c = [int(v) for v in step.num_computed_tokens.tolist()]
    q = [int(v) for v in step.num_scheduled_tokens.tolist()]
    start = []
    running = 0
    for r in range(len(q)):
        start.append(running)
        running += q[r]
    return PlainStep(c, q, [t.tolist() for t in step.block_tables], list(step.block_sizes), start)


def slot(s: PlainStep, g: int, r: int, p: int) -> tuple[int, int]:
    """Position p of request r lives in slot (T_g[r, p // B_g], p % B_g)."""
    size = s.sizes[g]
    return s.tables[g][r][p // size], p % size


def reads(s: PlainStep) -> Iterable[tuple[int, int, int, int, int]]:
    """``(g, r, p, block, offset)``: computed positions ``p < c[r]`` of requests
    with ``q[r] > 0``, in non-null blocks (the null block is never read)."""
    for g in range(len(s.sizes)):
        for r in range(s.num_reqs):
            if s.q[r] == 0:
                continue
            for p in range(s.c[r]):
                b, o = slot(s, g, r, p)
                if b != 0:
                    yield g, r, p, b, o


def writes(s: PlainStep) -> Iterable[tuple[int, int, int, int, int, int]]:
    """``(g, w, p, block, offset, token)``: positions ``c[w] <= p < c[w] + q[w]``
    in non-null blocks (the null block is never written), with the global
    index of the token that writes them."""
    for g in range(len(s.sizes)):
        for w in range(s.num_reqs):
            for p in range(s.c[w], s.c[w] + s.q[w]):
                b, o = slot(s, g, w, p)
                if b != 0:
                    yield g, w, p, b, o, s.start[w] + (p - s.c[w])


def earliest_write(s: PlainStep) -> dict[tuple[int, int, int], tuple[int, int]]:
    """``(g, block, offset) -> (token, writer)`` of the first token that writes the slot."""
    first: dict[tuple[int, int, int], tuple[int, int]] = {}
    for g, w, _p, b, o, t in writes(s):
        key = (g, b, o)
        if key not in first or t < first[key][0]:
            first[key] = (t, w)
    return first


def writer_tokens(s: PlainStep) -> dict[tuple[int, int, int], dict[int, int]]:
    """``(g, block, offset) -> {writer: its earliest token writing the slot}``."""
    out: dict[tuple[int, int, int], dict[int, int]] = {}
    for g, w, _p, b, o, t in writes(s):
        per = out.setdefault((g, b, o), {})
        if w not in per or t < per[w]:
            per[w] = t
    return out


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


def ubatch_of_tokens(ranges: list[Range], num_tokens: int) -> list[int]:
    ub = [0] * num_tokens
    for k, (ts, te) in enumerate(ranges):
        for t in range(ts, min(te, num_tokens)):
            ub[t] = k
    return ub


def self_overlaps(step: Any) -> set[tuple[int, int, int, int]]:
    """``(g, r, block, offset)``: a reader's computed slot that it also writes."""
    s = plain(as_step(step))
    writers = writer_tokens(s)
    return {(g, r, b, o) for g, r, _p, b, o in reads(s) if r in writers.get((g, b, o), {})}


def multi_written_slots(step: Any) -> set[tuple[int, int, int]]:
    """``(g, block, offset)`` written by more than one token of the step."""
    s = plain(as_step(step))
    count: dict[tuple[int, int, int], int] = {}
    for g, _w, _p, b, o, _t in writes(s):
        count[(g, b, o)] = count.get((g, b, o), 0) + 1
    return {key for key, n in count.items() if n > 1}


def is_well_formed(step: Any) -> bool:
    """No self-overlap and no slot written twice (what a real engine produces)."""
    return not self_overlaps(step) and not multi_written_slots(step)

