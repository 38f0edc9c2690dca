"""Steps and splits of contract E (shared by the find_conflicts and
allow_microbatching strategies).

Steps are *general* (:func:`general_steps`: random tables, several groups
with different block sizes, null entries, ids repeated across rows, small id
pools so that conflicts are common) or *realizable*
(:func:`realizable_steps`: what a prefix-caching scheduler produces, drawn
through ``batchfuzz.workloads`` from ``batchfuzz.scheduler_model``). General steps are well-formed (no
request reads a slot it writes itself, no slot written twice; see
``batchfuzz.reference._step``) unless ``well_formed=False``.

A case carries, in its context, the splits the properties simulate:

- ``engine_splits``: the engine's token rule (``split_ubatches`` over the
  requests with tokens, ``Np`` = the step's tokens, a capture size or a
  little padding, ``n`` mostly 2), when it does not refuse;
- ``adversarial_splits``: consecutive splits at arbitrary cut points.

Shrinking: shapes are drawn first (groups, block sizes, requests), then
counts, then table cells; every draw shrinks towards fewer requests and
groups, block size 1, small counts, and the null block (cell 0), so a
counterexample keeps only the block ids it needs. Splits shrink towards the
engine rule with ``n = 2`` and a single cut near the start.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from batchfuzz import engine_steps, vllm_scheduler, workloads
from batchfuzz.case import Case
from batchfuzz.reference._args import INT_DTYPES, ceil_div
from batchfuzz.reference._step import STEP_ARGUMENTS, Range, Step, check_step, cuts_to_split, is_well_formed
from batchfuzz.reference.split_ubatches import split_ubatches
from batchfuzz.strategies._engine import default_capture_sizes, pad_to_capture_size
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope, restricted_growth
from batchfuzz.strategies._validate import check_choice, check_integer, check_interval
from batchfuzz.workloads import HypothesisSource

T = TypeVar("T")
BLOCK_SIZES = (1, 2, 4, 3, 8)  # larger ones come with realizable steps
NUM_UBATCHES = (2, 2, 2, 3, 4)  # 2 mostly (dual-batch overlap); 3 and 4 sometimes
CAPTURE_SIZES = default_capture_sizes(512)


# ---------------------------------------------------------------- general steps


def _repair(c: list[int], q: list[int], table: list[list[int]], size: int, next_id: list[int]) -> None:
    """Make one group well-formed in place: walking requests in batch order,
    a written column whose slots are already written (by an earlier request
    or column) or are computed slots of the writer itself gets a fresh block
    id. Readers' computed columns are never changed."""
    written: set[tuple[int, int]] = set()
    for r in range(len(c)):
        own_reads = {(table[r][p // size], p % size) for p in range(c[r]) if table[r][p // size] != 0} if q[r] else set()
        for col in range(c[r] // size, ceil_div(c[r] + q[r], size)):
            b = table[r][col]
            if b == 0:
                continue
            lo, hi = max(c[r], col * size), min(c[r] + q[r], (col + 1) * size)
            slots = {(b, p % size) for p in range(lo, hi)}
            if slots & written or slots & own_reads:
                b = next_id[0]
                next_id[0] += 1
                table[r][col] = b
                slots = {(b, p % size) for p in range(lo, hi)}
            written |= slots


@functools.cache
def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Strategy objects are built once: a fresh one per draw costs validation."""
    return st.integers(lo, hi)


@functools.cache
def _request(sizes: tuple[int, ...], pool: int, max_computed: int, max_scheduled: int
             ) -> st.SearchStrategy[tuple[int, int, list[list[int]]]]:
    """One request: ``c``, ``q`` and its table row in every group (cells up to
    ``ceil((c + q) / B)``). A request's draws are contiguous, so the shrinker
    can delete a request whole."""

    @st.composite
    def request(draw: st.DrawFn) -> tuple[int, int, list[list[int]]]:
        c = draw(_ints(0, max_computed))
        q = draw(_ints(0, max_scheduled))
        cell = _ints(0, pool)
        return c, q, [[draw(cell) for _ in range(ceil_div(c + q, b))] for b in sizes]

    return request()


def _plant(draw: st.DrawFn, c: list[int], q: list[int], tables: list[list[list[int]]], sizes: list[int]) -> None:
    """Plant a likely conflict: a written column of a request ``w`` gets the
    block id of a computed column of a reader ``r`` (either batch order, so
    harmless and harmful ones), when such requests exist."""
    readers = [r for r in range(len(c)) if c[r] > 0 and q[r] > 0]
    if not readers:
        return
    r = readers[draw(_ints(0, len(readers) - 1))]
    writers = [w for w in range(len(c)) if w != r and q[w] > 0]
    if not writers:
        return
    w = writers[draw(_ints(0, len(writers) - 1))]
    g = draw(_ints(0, len(sizes) - 1))
    size = sizes[g]
    # The reader's last computed column (its partly computed block, if any)
    # and the writer's first written column where the offsets overlap are
    # where off-by-ones live: the draws shrink towards them.
    read_col = ceil_div(c[r], size) - 1 - draw(_ints(0, ceil_div(c[r], size) - 1))
    read_extent = min(c[r] - read_col * size, size)  # offsets [0, read_extent) are computed
    cols = [k for k in range(c[w] // size, ceil_div(c[w] + q[w], size)) if max(c[w], k * size) - k * size < read_extent]
    if not cols:
        return
    write_col = cols[draw(_ints(0, len(cols) - 1))]
    block = tables[g][r][read_col] or 1
    tables[g][r][read_col] = tables[g][w][write_col] = block


@st.composite
def _general_steps(
    draw: st.DrawFn, min_reqs: int, max_reqs: int, max_computed: int, max_scheduled: int, max_groups: int, well_formed: bool,
) -> Step:
    num_groups = draw(_ints(1, max_groups))
    sizes = draw(st.lists(st.sampled_from(BLOCK_SIZES), min_size=num_groups, max_size=num_groups))
    pool = draw(_ints(1, 3))
    reqs = draw(st.lists(_request(tuple(sizes), pool, max_computed, max_scheduled), min_size=min_reqs, max_size=max_reqs))
    num_reqs = len(reqs)
    c = [r[0] for r in reqs]
    q = [r[1] for r in reqs]
    tables: list[list[list[int]]] = []
    for g in range(num_groups):
        width = max(len(r[2][g]) for r in reqs) + draw(_ints(0, 1))
        tables.append([r[2][g] + [0] * (width - len(r[2][g])) for r in reqs])
    for _ in range(draw(_ints(0, 3))):
        _plant(draw, c, q, tables, sizes)
    if not draw(st.booleans()):
        # Groups with only null blocks are dropped (a group's cells cannot be
        # deleted by the shrinker, they are spread over the requests' draws);
        # the other branch keeps them, for checks that count nulls.
        live = [g for g in range(num_groups) if any(any(row) for row in tables[g])] or [0]
        sizes, tables = [sizes[g] for g in live], [tables[g] for g in live]
    if well_formed:
        next_id = [pool + 1]
        for table, size in zip(tables, sizes, strict=True):
            _repair(c, q, table, size, next_id)
    dtype = draw(st.sampled_from(INT_DTYPES))
    table_dtype = draw(st.sampled_from(INT_DTYPES))
    return Step(
        num_computed_tokens=np.array(c, dtype=dtype), num_scheduled_tokens=np.array(q, dtype=dtype),
        block_tables=[np.array(t, dtype=table_dtype).reshape(num_reqs, -1) for t in tables], block_sizes=sizes,
    )



def general_steps(*, min_num_reqs: int = 2, max_num_reqs: int = 4, max_computed: int = 8, max_scheduled: int = 4,
                  max_groups: int = 3, well_formed: bool = True) -> st.SearchStrategy[Step]:
    """A step with random block tables.

    Groups (1 to ``max_groups``) get block sizes from ``BLOCK_SIZES``;
    requests (a list of ``min_num_reqs`` to ``max_num_reqs``: one request alone has
    no conflict) get ``c`` in ``[0, max_computed]`` and ``q`` in
    ``[0, max_scheduled]`` (``q == 0`` allowed: such a request reads
    nothing); table cells up to each row's ``ceil((c + q) / B)`` come from a
    small pool ``[0, K]``, ``K <= 3`` (0 the null block; ``K`` small so ids
    repeat across rows); unused columns are 0. Up to three conflicts are
    then planted (``_plant``), so that conflicts, harmful or not, are
    common. Groups whose table holds only null blocks are dropped unless a
    draw keeps them. With ``well_formed`` the tables are finally repaired
    (``_repair``).

    CI sizes: at most ``max_num_reqs * (2 + max_groups * (max_computed +
    max_scheduled))`` cell draws, so that shrinking stays fast; larger steps
    come from the realizable strategy and the benchmark.

    Shrinks towards ``min_num_reqs`` requests with ``c == q == 0``, one group
    of block size 1, int32, and null cells.
    """
    lo = check_integer("min_num_reqs", min_num_reqs, min_value=0)
    hi = check_integer("max_num_reqs", max_num_reqs, min_value=0)
    check_interval("min_num_reqs", lo, "max_num_reqs", hi)
    return _general_steps(lo, hi, check_integer("max_computed", max_computed, min_value=0),
                          check_integer("max_scheduled", max_scheduled, min_value=0),
                          check_integer("max_groups", max_groups, min_value=1), bool(well_formed))


# ---------------------------------------------------------------- realizable steps


@st.composite
def _realizable_steps(draw: st.DrawFn, bounds: dict[str, Any]) -> tuple[Step, dict[str, Any]]:
    return workloads.draw_small_step(HypothesisSource(draw), bounds)


@st.composite
def _engine_steps(draw: st.DrawFn, bounds: dict[str, Any]) -> tuple[Step, dict[str, Any]]:
    return engine_steps.engine_step(engine_steps.draw_workload(HypothesisSource(draw), bounds))


STEP_SOURCES = engine_steps.STEP_SOURCES
# The domain of contract E that each step source feeds (``--steps SOURCE``; engine_steps.steps_domain).
STEP_SOURCE_DOMAINS = {"model": "engine", "engine": "engine-steps"}


def realizable_steps(source: str = "model", **bounds: Any) -> st.SearchStrategy[tuple[Step, dict[str, Any]]]:
    """A contract E step as a prefix-caching scheduler produces it, with its labels.

    ``source="model"`` (default) runs batchfuzz's scheduler model (below);
    ``source="engine"`` runs the installed vLLM's own scheduler
    (``batchfuzz.engine_steps``; bounds ``max_reqs`` [6], ``max_events`` [4],
    ``max_prompt_len`` [24], ``max_output_len`` [4], ``max_steps`` [4]; one
    full-attention group): Hypothesis draws the workload, so a
    counterexample shrinks to the smallest workload (one step, one short
    fresh prompt, block size 2, ample budget, pool and ``max_num_seqs``),
    and ``info["workload"]`` holds it. It raises ``InvalidArgument`` when
    vLLM's scheduler cannot be imported, saying why.

    ``bounds`` (keyword arguments, defaults in brackets) scale the model:
    ``max_reqs`` [12] caps ``max_num_seqs``; ``max_prompt_len`` [128];
    ``max_output_len`` [12]; block sizes in ``[min_block_size,
    max_block_size]`` [1, 32]; up to ``max_groups`` [3] KV groups, sliding
    windows allowed when ``sliding`` [True]; up to ``max_steps`` [5] scheduler
    steps (the last is emitted); token budget up to ``max_token_budget``
    [512]; ``reorder_batch_threshold`` [1], ``reorder`` ["stable"] and
    ``shared_pool`` [drawn]: ``None`` draws them (a drawn threshold may be
    ``1 + drafts``); ``pad_tables`` [True] draws table widths (tight, one
    spare column, or ``cdiv(max_model_len, B)``); ``max_spec_tokens`` [3]
    bounds the draft tokens of speculative decoding (0 turns it off).

    Returns ``(Step, info)``; ``info["labels"]`` lists the scheduler-level
    input classes (see ``batchfuzz.scheduler_model.LABELS``), ``info["reorder_batch_threshold"]`` the
    threshold the batch was ordered with; the rest describes the step
    (``same_step_hits`` as ``(group, reader row, writer row, block)``,
    ``token_ids`` per row, group kinds, windows, ...).

    Shrinks towards one step, one short fresh request, one group of block
    size 2, ample budget, pool and ``max_num_seqs``, tight tables.
    """
    check_choice("source", source, STEP_SOURCES)
    if source == "engine":
        try:
            engine_steps.check_bounds(bounds)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"realizable_steps(source='engine'): {exc}") from None
        why = vllm_scheduler.import_error()
        if why is not None:
            raise InvalidArgument(f"realizable_steps(source='engine'): {why}")
        return _engine_steps(bounds)
    try:
        workloads.check_bounds(bounds)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"realizable_steps: {exc}") from None
    return _realizable_steps(bounds)


def realizable_steps_for_ci() -> st.SearchStrategy[tuple[Step, dict[str, Any]]]:
    """:func:`realizable_steps` at the sizes the test suite and the fuzz job use."""
    return _CI_REALIZABLE


_CI_REALIZABLE = realizable_steps(max_reqs=8, max_prompt_len=48, max_output_len=6, max_block_size=16, max_steps=4)


@functools.cache
def contract_e_steps(raw: bool, realizable_only: bool = False) -> st.SearchStrategy[tuple[Step, dict[str, Any]]]:
    """General steps (well-formed; ``raw`` adds unrepaired ones) and realizable
    steps, or realizable steps only, as ``(step, info)`` with
    ``info["source"]`` and ``info["labels"]``."""
    realizable = realizable_steps_for_ci().map(
        lambda si: (si[0], {"source": "realizable", "labels": list(si[1].get("labels", []))}))
    if realizable_only:
        return realizable
    general = general_steps().map(lambda s: (s, {"source": "general", "labels": []}))
    branches = [general, general]  # well-formed random steps: the most informative and the cheapest
    if raw:
        branches.append(general_steps(well_formed=False).map(lambda s: (s, {"source": "raw", "labels": []})))
    branches.append(realizable)
    return st.one_of(*branches)


# ---------------------------------------------------------------- splits


_PADDING = ("none", "capture size", "a little")


def engine_split(draw: st.DrawFn, num_scheduled_tokens: list[int]) -> list[Range] | None:
    """The engine's rule over the requests with tokens; None when it refuses.
    Shrinks towards ``n = 2`` and no padding."""
    nst = [x for x in num_scheduled_tokens if x > 0]
    total = sum(nst)
    n = draw(st.sampled_from(NUM_UBATCHES))
    padding = draw(st.sampled_from(_PADDING))
    if total < 2 or total < n:
        return None
    if padding == "capture size":
        padded = pad_to_capture_size(total, CAPTURE_SIZES) or total
    elif padding == "a little":
        padded = total + draw(_ints(1, 8))
    else:
        padded = total
    split = split_ubatches(nst, padded, len(nst) + draw(_ints(0, 2)), n)
    return None if split is None else [rng for _, rng in split]


def adversarial_split(draw: st.DrawFn, num_tokens: int) -> list[Range] | None:
    """Consecutive ubatches at 1 to 3 arbitrary cut points in ``(0, num_tokens)``."""
    if num_tokens < 2:
        return None
    cuts = draw(st.lists(_ints(1, num_tokens - 1), min_size=1, max_size=3, unique=True))
    return cuts_to_split(cuts, num_tokens)


def step_case(draw: st.DrawFn, step: Step, info: dict[str, Any]) -> Case:
    """A contract E case: the step's canonical arguments, its splits, source and
    labels (and, for a step from the engine's scheduler, the workload that made it)."""
    q = [int(v) for v in np.asarray(step.num_scheduled_tokens).tolist()]
    engine = [s for s in (engine_split(draw, q),) if s is not None]
    adversarial = [s for s in (adversarial_split(draw, sum(q)),) if s is not None]
    return Case(
        {"num_computed_tokens": step.num_computed_tokens, "num_scheduled_tokens": step.num_scheduled_tokens,
         "block_tables": list(step.block_tables), "block_sizes": [int(b) for b in step.block_sizes]},
        {"engine_splits": engine, "adversarial_splits": adversarial, "source": info["source"],
         "labels": info["labels"], **({"workload": info["workload"]} if "workload" in info else {})},
    )



@st.composite
def step_cases(draw: st.DrawFn, raw: bool, realizable_only: bool) -> Case:
    """Contract E cases from :func:`contract_e_steps`."""
    step, info = draw(contract_e_steps(raw, realizable_only))
    return step_case(draw, step, info)


# ---------------------------------------------------------------- order and reductions


def step_size(case: Case) -> tuple[int, ...]:
    """The order of contract E cases: by ``R``, the tokens (``sum(c) + sum(q)``),
    ``G``, the block sizes' sum, the table cells, the non-null cells, then the
    block ids' sum."""
    a = case.args
    c = np.asarray(a["num_computed_tokens"], dtype=np.int64)
    q = np.asarray(a["num_scheduled_tokens"], dtype=np.int64)
    tables = [np.asarray(t, dtype=np.int64) for t in a["block_tables"]]
    return (int(c.size), int(c.sum() + q.sum()), len(tables), int(sum(a["block_sizes"])), sum(t.size for t in tables),
            sum(int((t != 0).sum()) for t in tables), sum(int(t.sum()) for t in tables))


def _lcm(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out = out * v // np.gcd(out, v)
    return int(out)


def _refined(table: np.ndarray, size: int, smaller: int) -> np.ndarray:
    """``table`` of block size ``size`` re-expressed with block size
    ``smaller`` (a divisor): every column becomes ``size // smaller`` columns,
    part ``k`` of block ``b`` a block of its own. Slot ``(b, k * smaller + o)``
    becomes ``(id(b, k), o)``, one to one, so every equality of slots (and so
    every conflict and every violation) is kept; the null block stays null."""
    parts = size // smaller
    ids: dict[tuple[int, int], int] = {}
    out = np.zeros((table.shape[0], table.shape[1] * parts), dtype=table.dtype)
    for r in range(table.shape[0]):
        for col in range(table.shape[1]):
            b = int(table[r, col])
            for k in range(parts):
                if b != 0:
                    out[r, col * parts + k] = ids.setdefault((b, k), len(ids) + 1)
    return out


def _coarse_relaid(table: np.ndarray, size: int, smaller: int, c: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``table`` of block size ``size`` laid out again for block size
    ``smaller``, which does not divide it (a candidate, not an equivalent
    step: a property run decides whether it still fails): the new block of
    each row's positions ``j * smaller ...`` takes the id of the old block
    holding position ``j * smaller``, the first time that old block is met in
    the row, a fresh id after (a row never holds one block twice)."""
    need = c.astype(np.int64) + q.astype(np.int64)
    width = int(max((ceil_div(int(x), smaller) for x in need), default=0))
    fresh = int(table.max(initial=0)) + 1
    out = np.zeros((table.shape[0], width), dtype=table.dtype)
    for r in range(table.shape[0]):
        seen: set[int] = set()
        for j in range(width):
            col = j * smaller // size
            block = int(table[r, col]) if col < table.shape[1] else 0
            if block and block in seen:
                block, fresh = fresh, fresh + 1
            seen.add(block)
            out[r, j] = block
    return out


def _engine_rule(q: np.ndarray) -> list[list[Range]]:
    """The engine's token split of a step (over the requests with tokens,
    ``n = 2``, no padding), as a list of one split, or none where it refuses."""
    nst = [int(x) for x in np.asarray(q).tolist() if x > 0]
    total = sum(nst)
    split = split_ubatches(nst, total, len(nst), 2) if total >= 2 else None
    return [] if split is None else [[rng for _, rng in split]]


@dataclass(frozen=True)
class _Parts:
    """The four arguments of a step (a reduction's input and each of its outputs)."""

    c: np.ndarray
    q: np.ndarray
    tables: list[np.ndarray]
    sizes: list[int]


def _step_case(case: Case, parts: _Parts) -> Case:
    """``parts`` as a case with ``case``'s context. The splits are kept where
    they still cut inside the step; where no engine split is left, the
    engine's rule on the smaller step (n = 2, no padding), as the scopes do."""
    total = int(np.asarray(parts.q, dtype=np.int64).sum())
    ctx = dict(case.context)
    for key in ("engine_splits", "adversarial_splits"):
        ctx[key] = [s for s in ctx.get(key, []) if all(ts < total for ts, _ in s[1:])]
    if case.context.get("engine_splits") and not ctx["engine_splits"]:
        ctx["engine_splits"] = _engine_rule(parts.q)
    return Case({"num_computed_tokens": parts.c, "num_scheduled_tokens": parts.q, "block_tables": parts.tables,
                 "block_sizes": parts.sizes}, ctx)


def _deleted_requests(s: _Parts) -> Iterator[_Parts]:
    for r in range(s.c.size):
        yield _Parts(np.delete(s.c, r), np.delete(s.q, r), [np.delete(t, r, axis=0) for t in s.tables], s.sizes)


def _dropped_groups(s: _Parts) -> Iterator[_Parts]:
    if len(s.sizes) > 1:
        for g in range(len(s.sizes)):
            yield _Parts(s.c.copy(), s.q.copy(), [t for k, t in enumerate(s.tables) if k != g],
                         [b for k, b in enumerate(s.sizes) if k != g])


def _shifted_prefixes(s: _Parts) -> Iterator[_Parts]:
    """A request's first whole block of tokens (in every group) dropped:
    computed ones, or (with nothing computed) scheduled ones, keeping at
    least one; its leading table columns shift out, so every other slot
    keeps its block and offset."""
    shift = _lcm(s.sizes)
    for r in range(s.c.size):
        if s.c[r] >= shift or (s.c[r] == 0 and s.q[r] > shift):
            shifted = []
            for t, b in zip(s.tables, s.sizes, strict=True):
                t2 = t.copy()
                cols = shift // b
                t2[r, : t.shape[1] - cols] = t[r, cols:]
                t2[r, t.shape[1] - cols:] = 0
                shifted.append(t2)
            c2, q2 = s.c.copy(), s.q.copy()
            if s.c[r] >= shift:
                c2[r] -= shift
            else:
                q2[r] -= shift
            yield _Parts(c2, q2, shifted, s.sizes)


def _fewer_tokens(s: _Parts) -> Iterator[_Parts]:
    """A computed or a scheduled token fewer."""
    for r in range(s.c.size):
        for counts in (s.c, s.q):
            if counts[r] > 0:
                smaller = counts.copy()
                smaller[r] -= 1
                yield _Parts(smaller, s.q.copy(), [t.copy() for t in s.tables], s.sizes) if counts is s.c else \
                    _Parts(s.c.copy(), smaller, [t.copy() for t in s.tables], s.sizes)


def _smaller_blocks(s: _Parts) -> Iterator[_Parts]:
    """A group's block size refined to a divisor (:func:`_refined`: the same
    slots, smaller blocks), then lowered to a non-divisor
    (:func:`_coarse_relaid`: a candidate the property run judges)."""
    for g, b in enumerate(s.sizes):
        for d in (d for d in range(1, b) if b % d == 0):
            yield _Parts(s.c.copy(), s.q.copy(), [_refined(t2, b, d) if k == g else t2.copy() for k, t2 in enumerate(s.tables)],
                         [d if k == g else b2 for k, b2 in enumerate(s.sizes)])
    for g, b in enumerate(s.sizes):
        for b2 in (d for d in range(2, b) if b % d):
            yield _Parts(s.c.copy(), s.q.copy(), [_coarse_relaid(t2, b, b2, s.c, s.q) if k == g else t2.copy()
                                                  for k, t2 in enumerate(s.tables)],
                         [b2 if k == g else b3 for k, b3 in enumerate(s.sizes)])


def _renumbered(s: _Parts) -> Iterator[_Parts]:
    """Block ids renumbered ``1, 2, ...`` in order of first appearance."""
    renumber: dict[int, int] = {}
    for t in s.tables:
        for block in t.reshape(-1).tolist():
            if block != 0 and block not in renumber:
                renumber[block] = len(renumber) + 1
    if any(k != v for k, v in renumber.items()):
        yield _Parts(s.c.copy(), s.q.copy(), [np.vectorize(lambda x: renumber.get(int(x), 0), otypes=[t.dtype])(t)
                                              if t.size else t.copy() for t in s.tables], s.sizes)


def _fewer_cells(s: _Parts) -> Iterator[_Parts]:
    """Unused table columns removed, then one table cell cleared."""
    need = s.c.astype(np.int64) + s.q.astype(np.int64)
    for g, (t, b) in enumerate(zip(s.tables, s.sizes, strict=True)):
        width = int(max((ceil_div(int(x), b) for x in need), default=0))
        if t.shape[1] > width:
            yield _Parts(s.c.copy(), s.q.copy(), [t2[:, :width].copy() if k == g else t2.copy()
                                                  for k, t2 in enumerate(s.tables)], s.sizes)
    for g, t in enumerate(s.tables):
        for r, col in zip(*np.nonzero(t), strict=True):
            cleared = [t2.copy() for t2 in s.tables]
            cleared[g][r, col] = 0
            yield _Parts(s.c.copy(), s.q.copy(), cleared, s.sizes)


# In the order step_reductions tries them: whole requests and groups first, single cells last.
_STEP_REDUCTIONS = (_deleted_requests, _dropped_groups, _shifted_prefixes, _fewer_tokens, _smaller_blocks, _renumbered,
                    _fewer_cells)


def step_reductions(case: Case) -> Iterator[Case]:
    """Smaller cases built from ``case`` (``batchfuzz.reduce``), each kind in
    :data:`_STEP_REDUCTIONS`: a request deleted; a KV group dropped; a
    request's first whole block shifted out; a token fewer; smaller blocks;
    block ids renumbered; table columns and cells cleared. The case's splits
    are kept where they still cut inside the step (:func:`_step_case`)."""
    a = case.args
    c = np.asarray(a["num_computed_tokens"]).copy()
    q = np.asarray(a["num_scheduled_tokens"]).copy()
    sizes = [int(b) for b in a["block_sizes"]]
    tables = [np.asarray(t).copy() for t in a["block_tables"]]
    if any(t.ndim != 2 for t in tables):
        return
    step = _Parts(c, q, tables, sizes)
    for kind in _STEP_REDUCTIONS:
        for parts in kind(step):
            yield _step_case(case, parts)


# ---------------------------------------------------------------- the two contracts' cases and domains

ENGINE_STEPS = "engine-steps"
ENGINE_STEPS_DESCRIPTION = (
    "the steps the installed vLLM's own scheduler produces (prefix caching on, one full-attention group), laid out by "
    "its runner's InputBatch; drawn as workloads, shrunk as workloads (docs/engine-steps.md); `check --steps engine`")
DOMAINS = ("spec", "engine", ENGINE_STEPS)


@functools.cache
def _engine_step_cases() -> st.SearchStrategy[Case]:
    steps = realizable_steps(source="engine").map(
        lambda si: (si[0], {"source": "vllm scheduler", "labels": list(si[1]["labels"]), "workload": si[1]["workload"]}))

    @st.composite
    def cases(draw: st.DrawFn) -> Case:
        step, info = draw(steps)
        return step_case(draw, step, info)

    return cases()


def contract_cases(domain: str = "spec", *, ill_formed: bool) -> st.SearchStrategy[Case]:
    """Contract E cases of ``domain``: ``spec`` draws general steps (unrepaired
    ones too with ``ill_formed``) and realizable steps, ``engine`` realizable
    steps only (the scheduler model's), ``engine-steps`` the steps the
    installed vLLM's own scheduler produces (``realizable_steps(source="engine")``;
    InvalidArgument, saying why, where vLLM cannot be imported)."""
    check_choice("domain", domain, DOMAINS)
    if domain == ENGINE_STEPS:
        return _engine_step_cases()
    return step_cases(raw=ill_formed, realizable_only=domain == "engine")


def contract_in_domain(case: Case, domain: str, *, ill_formed: bool) -> bool:
    """A valid step; well-formed too, unless ``ill_formed`` and ``domain`` is
    ``spec`` (realizable steps are well-formed; well-formedness is the part of
    realizability a predicate can check)."""
    try:
        step = check_step(*(case.args[k] for k in STEP_ARGUMENTS))
    except (TypeError, ValueError, KeyError):
        return False
    return (ill_formed and domain == "spec") or is_well_formed(step)



# ---------------------------------------------------------------- bounded-exhaustive scopes

SCOPE_BLOCK_SIZES = (1, 2)
SCOPE_MAX_IDS = 4


# (max requests, max sum(c) + sum(q), max groups, max table cells in all, max block id) of each scope.
_SCOPE_BOUNDS = {"small": (3, 4, 2, 4, SCOPE_MAX_IDS), "pairs": (2, 4, 2, 4, 1), "ci": (2, 3, 2, 2, 2)}


def scope_specs(ill_formed: bool) -> dict[str, ScopeSpec]:
    """The scopes of a contract E record (``ill_formed``: the conflict set's,
    whose spec domain keeps ill-formed steps; otherwise well-formed steps only)."""
    which = "every valid step" if ill_formed else "every well-formed step"
    counts = {"small": 10484, "pairs": 2702, "ci": 376} if ill_formed else {"small": 9174, "pairs": 2261, "ci": 367}
    return {
        "small": ScopeSpec(
            f"{which} with 1 <= R <= 3 requests, sum(c) + sum(q) <= 4 tokens, 1 or 2 KV groups of block size 1 or 2, each "
            "table of the tightest width (a table no token needs may have one column), at most 4 table cells in all, "
            "every cell the null block or a block id 1..4, up to renaming the ids (ids in order of first appearance); "
            "int32; splits: the engine's rule (n = 2, no padding), every two-ubatch cut, and one token per ubatch; in "
            "the order of the contract's size: R, tokens, groups, block sizes, cells, non-null cells, ids",
            "spec", counts["small"]),
        "pairs": ScopeSpec(f"as small with R <= 2 and a single block id (every cell null or block 1) ({which})", "spec",
                           counts["pairs"]),
        "ci": ScopeSpec(f"as small with R <= 2, sum(c) + sum(q) <= 3, at most 2 table cells and block ids 1..2 ({which})",
                        "spec", counts["ci"]),
    }


def _scope_case(c: tuple[int, ...], q: tuple[int, ...], tables: list[np.ndarray], sizes: tuple[int, ...]) -> Case:
    """A scope's step with its splits: the engine's token rule over the
    requests with tokens (``n = 2``, no padding) unless it refuses, every
    two-ubatch cut, and one token per ubatch."""
    total = sum(q)
    adversarial = [cuts_to_split([k], total) for k in range(1, total)]
    if total >= 3:
        adversarial.append(cuts_to_split(range(1, total), total))
    return Case(
        {"num_computed_tokens": np.array(c, dtype=np.int32), "num_scheduled_tokens": np.array(q, dtype=np.int32),
         "block_tables": tables, "block_sizes": list(sizes)},
        {"engine_splits": _engine_rule(np.array(q)), "adversarial_splits": adversarial,
         "source": "exhaustive", "labels": []})


def scope_cases(scope: str = "small", *, ill_formed: bool) -> Iterator[Case]:
    """Every contract E case of ``scope`` (:func:`scope_specs`), smallest first
    in :func:`step_size`'s order. Steps are grouped by (R, tokens, groups, sum
    of block sizes), the order's leading terms, and sorted by the rest inside
    each group."""
    check_scope(scope, scope_specs(ill_formed))
    max_reqs, max_tokens, max_groups, max_cells, max_ids = _SCOPE_BOUNDS[scope]
    for r in range(1, max_reqs + 1):
        for tokens in range(max_tokens + 1):
            counts = [(cq[0::2], cq[1::2]) for cq in itertools.product(range(tokens + 1), repeat=2 * r) if sum(cq) == tokens]
            for g in range(1, max_groups + 1):
                block_sizes = list(itertools.product(SCOPE_BLOCK_SIZES, repeat=g))
                for size_sum in sorted({sum(b) for b in block_sizes}):
                    group: list[tuple[tuple[int, ...], Case]] = []
                    for sizes in (b for b in block_sizes if sum(b) == size_sum):
                        for c, q in counts:
                            tight = [max(ceil_div(c[k] + q[k], b) for k in range(r)) for b in sizes]
                            # A table no token needs a column of may still have one (cells nobody reads).
                            for widths in itertools.product(*[(w,) if w else (0, 1) for w in tight]):
                                if r * sum(widths) > max_cells:
                                    continue
                                for fill in restricted_growth(r * sum(widths), max_ids):
                                    tables, at = [], 0
                                    for w in widths:
                                        tables.append(np.array(fill[at: at + r * w], dtype=np.int32).reshape(r, w))
                                        at += r * w
                                    case = _scope_case(c, q, tables, sizes)
                                    if ill_formed or is_well_formed(step_of_case(case)):
                                        group.append((step_size(case), case))
                    group.sort(key=lambda sc: sc[0])
                    yield from (case for _, case in group)


def step_of_case(case: Case) -> Step:
    return Step(*(case.args[k] for k in STEP_ARGUMENTS))
