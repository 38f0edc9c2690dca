"""Strategies for contract C: padded ``query_start_loc`` (docs/contracts.md, contract C).

A step is ``(num_scheduled_tokens, num_reqs_padded)`` written into a
persistent buffer of request capacity ``max_num_reqs``. Steps come from how
engines pad under full CUDA graphs:

- ``small``: generic small steps (zero-token requests allowed), ``P`` drawn
  from ``{R, R + 1, max_num_reqs, anything in between}``;
- edges: ``P == R``, ``P == R + 1``, ``P == max_num_reqs``, ``R == 0``, at
  engine-sized capacities;
- ``long_prefill``: one chunk filling a 16384..131072-token budget (past
  int16) beside a few decodes;
- ``mixed``: token count padded to a capture size ``T``, requests padded to
  ``min(T, max_num_seqs)``; ``eager`` (``P == R``) past the largest size;
- ``uniform_decode`` with ``q`` tokens per request: requests padded to
  ``min(T // q, max_num_seqs)``;
- ``dummy_run``: ``split_dummy_tokens(R, N)``, ``R = min(N, max_num_seqs)``,
  ``N`` a capture size.

Domains:

- ``spec``: every kind above; the stale buffer holds anything (negative
  values, a non-zero ``[0]``) and may have a tail past ``P + 1``;
- ``engine``: what an engine's callers produce: the ``mixed``,
  ``uniform_decode`` and ``dummy_run`` kinds (``R >= 1``, every request with
  a token, padding from the real rules), into a buffer of exactly
  ``max_num_reqs + 1`` entries that started zeroed and that only earlier
  engine steps have written (``engine_buffer``), so ``out[0] == 0``.

Shrinking: branches are chosen by an index that shrinks to 0, the generic
small branch, so a counterexample shrinks towards few requests with few
tokens, ``P == R``, small capacities, int32, a zero stale buffer (a fresh one)
and an empty step history; a bug that needs a long prefill shrinks to one
request of 32768 tokens. Long batches use a seeded generator or a constant
(shrinks towards seed 0) instead of long Hypothesis lists, and strategies are
built once at import, which keeps an example to about a millisecond of
generation.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.reference._args import INT_DTYPES
from batchfuzz.reference.pad_query_start_loc import pad_query_start_loc
from batchfuzz.reference.split_dummy_tokens import split_dummy_tokens
from batchfuzz.strategies._buffers import stale_arrays
from batchfuzz.strategies._engine import MAX_NUM_BATCHED_TOKENS_COMMON, capture_sizes, max_num_seqs, pad_to_capture_size
from batchfuzz.strategies._exhaustive import ScopeSpec, binary_words, check_scope, compositions
from batchfuzz.strategies._validate import check_choice, check_integer, check_subset

# Tokens per request in a uniform-decode batch: 1 + num_speculative_tokens.
UNIFORM_DECODE_QUERY_LENS = (1, 2, 3, 4, 5, 8)
LONG_PREFILL_BUDGETS = (32768, 65536, 131072, 16384)
_LIST_LIMIT = 24  # up to this many requests, counts are a Hypothesis list

_CAPTURE_SIZES = capture_sizes()
_MAX_NUM_SEQS = max_num_seqs()
_BUDGETS = st.sampled_from(MAX_NUM_BATCHED_TOKENS_COMMON)
_QUERY_LENS = st.sampled_from(UNIFORM_DECODE_QUERY_LENS)
_LONG_BUDGETS = st.sampled_from(LONG_PREFILL_BUDGETS)
_DTYPES = st.sampled_from(INT_DTYPES)

# (max_num_reqs, num_scheduled_tokens, num_reqs_padded, kind)
Drawn = tuple[int, list[int], int, str]


def padded_num_reqs(draw: st.DrawFn, num_reqs: int, max_num_reqs: int) -> int:
    """``P`` in ``[R, max_num_reqs]``: ``R``, ``R + 1``, ``max_num_reqs`` or any;
    shrinks towards ``P == R``."""
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return num_reqs
    if choice == 1:
        return min(num_reqs + 1, max_num_reqs)
    if choice == 2:
        return max_num_reqs
    return draw(st.integers(num_reqs, max_num_reqs))


def counts(draw: st.DrawFn, num_reqs: int, low: int, high: int) -> list[int]:
    """``num_reqs`` counts in ``[low, high]``. A Hypothesis list for short
    batches (shrinks entry by entry towards ``low``); for long ones a constant
    or a seeded generator (shrinks towards the constant ``low``)."""
    if num_reqs <= _LIST_LIMIT:
        return draw(st.lists(st.integers(low, high), min_size=num_reqs, max_size=num_reqs))
    if not draw(st.booleans()):
        return [draw(st.integers(low, high))] * num_reqs
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return [int(v) for v in rng.integers(low, high + 1, size=num_reqs)]


def _capacity(draw: st.DrawFn, max_num_reqs: int | None, small: bool = False) -> int:
    if max_num_reqs is not None:
        return max_num_reqs
    if small or not draw(st.booleans()):
        return draw(st.integers(1, 64))
    return draw(_MAX_NUM_SEQS)


def _num_reqs(draw: st.DrawFn, limit: int) -> int:
    """``R`` in ``[1, limit]``; a full batch (``R == limit``) one time in four."""
    return limit if draw(st.integers(0, 3)) == 3 else draw(st.integers(1, limit))


def small_step(draw: st.DrawFn, max_num_reqs: int | None = None) -> Drawn:
    """Generic small steps, zero-token requests allowed. Shrinks to ``R = P = 0``."""
    cap = draw(st.integers(0, 12)) if max_num_reqs is None else max_num_reqs
    r = draw(st.integers(0, min(cap, 12)))
    nst = counts(draw, r, 0, 64)
    return cap, nst, padded_num_reqs(draw, r, cap), "small"


def edge_step(draw: st.DrawFn, max_num_reqs: int | None = None) -> Drawn:
    """``P == R``, ``P == R + 1``, ``P == max_num_reqs`` and ``R == 0`` at
    engine-sized capacities. Totals stay <= 8192: large sums come from the
    long-prefill branch, which shrinks better."""
    cap = _capacity(draw, max_num_reqs)
    kind = ("P==R", "P==R+1", "P==max_num_reqs", "R==0")[draw(st.integers(0, 3))]
    if kind == "R==0" or (kind == "P==R+1" and cap == 0):
        return cap, [], padded_num_reqs(draw, 0, cap), "R==0"
    r = draw(st.integers(0, cap - 1 if kind == "P==R+1" else cap))
    nst = counts(draw, r, 0, max(1, 8192 // max(r, 1)))
    p = {"P==R": r, "P==R+1": r + 1, "P==max_num_reqs": cap}[kind]
    return cap, nst, p, kind


def long_prefill_step(draw: st.DrawFn, max_num_reqs: int | None = None) -> Drawn:
    """A chunked prefill filling a large token budget beside a few decodes.
    Larger than any capture size, so engines run it eagerly; ``P`` is still
    drawn from ``[R, max_num_reqs]`` to mix big sums with padding. The chunk
    shrinks to a short one, or to 32768 tokens where only a long one fails."""
    cap = _capacity(draw, max_num_reqs, small=True)
    if cap == 0:
        return cap, [], 0, "R==0"
    r = draw(st.integers(1, min(cap, 8)))
    # Long three times in four; the index shrinks to 0, a short chunk.
    budget = draw(st.integers(r, 64)) if draw(st.integers(0, 3)) == 0 else draw(_LONG_BUDGETS)
    nst = [1] * r
    nst[draw(st.integers(0, r - 1))] = budget - (r - 1)
    return cap, nst, padded_num_reqs(draw, r, cap), "long_prefill"


def mixed_step(draw: st.DrawFn, max_num_reqs: int | None = None) -> Drawn:
    """A mixed batch under full CUDA graphs: ``T`` = the smallest capture size
    ``>= sum(nst)``, ``P = min(T, max_num_seqs)``; eager (``P = R``) when the
    step is larger than every capture size."""
    cap = _capacity(draw, max_num_reqs)
    if cap == 0:
        return cap, [], 0, "R==0"
    sizes = draw(_CAPTURE_SIZES)
    # Half the steps fit the largest capture size (padded), half may not (eager).
    budget = min(draw(_BUDGETS), max(sizes)) if not draw(st.booleans()) else draw(_BUDGETS)
    r = _num_reqs(draw, min(cap, budget))
    shape = draw(st.integers(0, 2))
    if shape == 2:  # spread over every request
        nst = counts(draw, r, 1, max(1, budget // r))
    else:  # decodes and one prefill chunk (shape 0: filling the budget)
        nst = [1] * r
        longest = budget - (r - 1)
        nst[draw(st.integers(0, r - 1))] = longest if shape == 0 else draw(st.integers(1, longest))
    padded_tokens = pad_to_capture_size(sum(nst), sizes)
    if padded_tokens is None:
        return cap, nst, r, "eager"
    return cap, nst, min(padded_tokens, cap), "mixed"


def uniform_decode_step(draw: st.DrawFn, max_num_reqs: int | None = None) -> Drawn:
    """Uniform decode, ``q`` tokens per request (``q = 1 + num_spec_tokens``):
    ``T`` = capture size ``>= R * q``, ``P = min(T // q, max_num_seqs)``."""
    cap = _capacity(draw, max_num_reqs)
    sizes = draw(_CAPTURE_SIZES)
    q = draw(_QUERY_LENS)
    max_r = min(cap, max(sizes) // q)
    if max_r < 1:
        return cap, [], padded_num_reqs(draw, 0, cap), "R==0"
    r = _num_reqs(draw, max_r)
    padded_tokens = pad_to_capture_size(r * q, sizes)
    if padded_tokens is None:  # not reached: r * q <= max(sizes)
        return cap, [q] * r, r, "eager"
    return cap, [q] * r, min(padded_tokens // q, cap), "uniform_decode"


def dummy_run_step(draw: st.DrawFn, max_num_reqs: int | None = None) -> Drawn:
    """A dummy run (capture, profiling, an idle data-parallel rank):
    ``N`` a capture size (or 1), ``R = min(N, max_num_seqs)``, counts from
    contract A, ``P = R`` or the capacity."""
    cap = _capacity(draw, max_num_reqs)
    if cap == 0:
        return cap, [], 0, "R==0"
    sizes = draw(_CAPTURE_SIZES)
    n = 1 if not draw(st.booleans()) else sizes[draw(st.integers(0, len(sizes) - 1))]
    r = min(n, cap)
    return cap, split_dummy_tokens(r, n), (r if not draw(st.booleans()) else cap), "dummy_run"


STEP_KINDS: dict[str, Callable[[st.DrawFn, int | None], Drawn]] = {
    "small": small_step, "edge": edge_step, "long_prefill": long_prefill_step, "mixed": mixed_step,
    "uniform_decode": uniform_decode_step, "dummy_run": dummy_run_step,
}
# The steps an engine's callers produce: padding from the real rules, R >= 1
# and every request with a token (a step with no request does not run).
ENGINE_KINDS = ("mixed", "uniform_decode", "dummy_run")
DOMAINS = {"spec": tuple(STEP_KINDS), "engine": ENGINE_KINDS}


def draw_step(draw: st.DrawFn, max_num_reqs: int | None = None, kinds: tuple[str, ...] = tuple(STEP_KINDS)) -> Drawn:
    """One step from the ``kinds`` given (the index shrinks to the first)."""
    return STEP_KINDS[kinds[draw(st.integers(0, len(kinds) - 1))]](draw, max_num_reqs)


@st.composite
def _padded_steps(draw: st.DrawFn, max_num_reqs: int | None, kinds: tuple[str, ...]) -> Drawn:
    return draw_step(draw, max_num_reqs, kinds)


def padded_steps(*, max_num_reqs: int | None = None, kinds: tuple[str, ...] = tuple(STEP_KINDS)
                 ) -> st.SearchStrategy[Drawn]:
    """``(max_num_reqs, num_scheduled_tokens, num_reqs_padded, kind)``: a step
    padded for full CUDA graphs, ``R <= P <= max_num_reqs``, from the
    ``kinds`` given (see the module docstring; ``ENGINE_KINDS`` are the steps
    an engine produces). With ``max_num_reqs`` the step fits a buffer of that
    capacity; otherwise the capacity is drawn too.

    Shrinks towards the first kind's smallest step (for the default kinds,
    ``R == P == 0``).
    """
    cap = None if max_num_reqs is None else check_integer("max_num_reqs", max_num_reqs, min_value=0)
    return _padded_steps(cap, check_subset("kinds", kinds, STEP_KINDS))


def history_step(draw: st.DrawFn, max_num_reqs: int, dtype: type, kinds: tuple[str, ...]) -> tuple[np.ndarray, int]:
    """An earlier step written into the same buffer. Shrinks towards one small
    step padded to the whole buffer (``P == max_num_reqs``), which leaves its
    total in every slot."""
    if kinds == DOMAINS["spec"] and not draw(st.booleans()):
        _, nst, _, _ = small_step(draw, max_num_reqs)
        return np.asarray(nst, dtype=dtype), max_num_reqs
    _, nst, p, _ = draw_step(draw, max_num_reqs, kinds)
    return np.asarray(nst, dtype=dtype), p


def engine_buffer(draw: st.DrawFn, size: int, dtype: type) -> np.ndarray:
    """A persistent buffer as the engine leaves it: zeros at start-up, then up
    to three earlier engine steps, each a real step (its padding fills the
    whole tail, as the engine's input preparation does) or a dummy run
    (written up to its own ``P + 1``), written correctly. So ``[0] == 0`` and
    no entry is negative. Shrinks towards a fresh, zeroed buffer."""
    buf: np.ndarray = np.zeros(size, dtype=dtype)
    for _ in range(draw(st.integers(0, 3))):
        _, nst, p, kind = draw_step(draw, size - 1, ENGINE_KINDS)
        whole = kind != "dummy_run" or draw(st.booleans())
        pad_query_start_loc(np.asarray(nst, dtype=np.int64), size - 1 if whole else p, buf)
    return buf


@st.composite
def _cases(draw: st.DrawFn, domain: str) -> Case:
    kinds = DOMAINS[domain]
    cap, nst_list, p, kind = draw_step(draw, None, kinds)
    dtype = draw(_DTYPES)
    out_dtype = dtype if not draw(st.booleans()) else draw(_DTYPES)
    if domain == "engine":
        size = cap + 1  # the engine's buffer holds max_num_reqs + 1 entries
        out = engine_buffer(draw, size, out_dtype)
    else:
        size = cap + 1 + (draw(st.integers(1, 8)) if draw(st.booleans()) else 0)
        out = draw(stale_arrays(size, out_dtype))
    history = [history_step(draw, size - 1, dtype, kinds) for _ in range(draw(st.integers(0, 3)))]
    return Case(
        {"num_scheduled_tokens": np.asarray(nst_list, dtype=dtype), "num_reqs_padded": p},
        {"max_num_reqs": cap, "out": out, "history": history, "kind": kind},
    )


def cases(domain: str = "spec") -> st.SearchStrategy[Case]:
    """Contract C cases of ``domain``.

    ``args``: ``num_scheduled_tokens`` (int32 or int64 array) and
    ``num_reqs_padded``. ``context``: ``max_num_reqs``; ``out``, a stale
    persistent buffer of ``max_num_reqs + 1`` entries (a few more in the spec
    domain; dtype int32 or int64, not always nst's); ``history``, up to three
    earlier steps ``(nst, P)`` run on that buffer before this one; ``kind``,
    the step's source. Shrinks as the module docstring says.
    """
    return _cases(check_choice("domain", domain, DOMAINS))


def in_domain(case: Case, domain: str) -> bool:
    """The precondition (``P >= R``, entries ``>= 0``, ``out`` large enough);
    in the engine domain also ``R >= 1``, every entry ``>= 1``, ``out[0] == 0``
    and no negative entry in ``out``, for this step and every step of the
    history."""
    nst = np.asarray(case.args["num_scheduled_tokens"])
    p = case.args["num_reqs_padded"]
    out = case.context.get("out")
    steps = [(nst, p), *[(np.asarray(h), hp) for h, hp in case.context.get("history", [])]]
    if any(hp < len(h) or (h < 0).any() or (out is not None and out.size < hp + 1) for h, hp in steps):
        return False
    if domain != "engine":
        return True
    return all(len(h) >= 1 and (h >= 1).all() for h, _ in steps) and (out is None or (int(out[0]) == 0 and int(out.min()) >= 0))


@st.composite
def dummy_runs(draw: st.DrawFn, max_num_reqs: int) -> Drawn:
    """:func:`dummy_run_step` for a buffer of capacity ``max_num_reqs``."""
    return dummy_run_step(draw, max_num_reqs)


@st.composite
def smaller_steps(draw: st.DrawFn, num_reqs: int, num_reqs_padded: int) -> tuple[list[int], int]:
    """A step after a larger one: ``R' <= R``, ``R' <= P' <= P``, few tokens
    each. This is where padded slots meet the larger step's leftovers.
    Shrinks towards ``R' = P' = 0``."""
    r = draw(st.integers(0, num_reqs))
    return counts(draw, r, 0, 64), padded_num_reqs(draw, r, max(r, num_reqs_padded))


def size(case: Case) -> tuple[int, ...]:
    """The order of contract C cases: by ``R``, ``P``, the number of earlier
    steps, ``sum(nst)``, then the buffer (its length, the sum of magnitudes of
    its stale values) and the earlier steps' sizes."""
    nst = np.asarray(case.args["num_scheduled_tokens"], dtype=np.int64)
    out = case.context.get("out")
    history = case.context.get("history", [])
    return (int(nst.size), int(case.args["num_reqs_padded"]), len(history), int(nst.sum()),
            0 if out is None else int(out.size), 0 if out is None else int(np.abs(out.astype(np.int64)).sum()),
            sum(len(h) + hp + int(np.asarray(h, dtype=np.int64).sum()) for h, hp in history))


def reductions(case: Case) -> Iterator[Case]:
    """Smaller cases built from ``case`` (``batchfuzz.reduce``): an earlier step
    dropped, a request deleted, ``P`` lowered, a count lowered, the buffer
    shortened, cleared or an entry of it cleared."""
    nst = np.asarray(case.args["num_scheduled_tokens"])
    p = int(case.args["num_reqs_padded"])
    ctx = case.context
    out = ctx["out"]
    history = list(ctx.get("history", []))

    def make(nst2: np.ndarray, p2: int, out2: np.ndarray = out, history2: list[Any] = history) -> Case:
        cap = min(int(ctx.get("max_num_reqs", out2.size - 1)), out2.size - 1)
        return Case({"num_scheduled_tokens": nst2, "num_reqs_padded": p2},
                    {**ctx, "out": out2.copy(), "history": [(np.asarray(h).copy(), hp) for h, hp in history2],
                     "max_num_reqs": max(cap, p2)})

    for k in range(len(history)):
        yield make(nst.copy(), p, history2=history[:k] + history[k + 1:])
    for i in range(nst.size):
        rest = np.delete(nst, i)
        yield make(rest, max(rest.size, p - 1))
        yield make(rest, p)
        # A request fewer can hide the bug its tokens made visible: with no
        # tokens left, a padded slot left unwritten or a slot past P + 1
        # overwritten holds 0 over a fresh 0. The same step over a buffer
        # whose slots past the real ones hold 1 is still smaller (R comes
        # first in the order); the 1s are cleared again one by one where
        # they are not needed.
        tail = out[rest.size + 1:]
        if tail.size and not tail.all():
            marked = out.copy()
            marked[rest.size + 1:][tail == 0] = 1
            yield make(rest, p, marked)
    if p > nst.size:
        yield make(nst.copy(), p - 1)
        yield make(nst.copy(), nst.size)
    for i in range(nst.size):
        for value in (0, 1, int(nst[i]) // 2, int(nst[i]) - 1):
            if 0 <= value < int(nst[i]):
                smaller = nst.copy()
                smaller[i] = value
                yield make(smaller, p)
    needed = max([p, *(hp for _, hp in history)]) + 1
    if out.size > needed:
        yield make(nst.copy(), p, out[:needed])
        yield make(nst.copy(), p, out[:-1])
    if out.any():
        yield make(nst.copy(), p, np.zeros_like(out))
        for i in np.flatnonzero(out)[:8]:
            cleared = out.copy()
            cleared[i] = 0
            yield make(nst.copy(), p, cleared)


# ---------------------------------------------------------------- bounded-exhaustive scopes

# The stale letter: larger than every total of the small scopes (at most
# 2 * 3), so a slot a target leaves unwritten differs from every right value
# in some case (0, the other letter, is a fresh buffer's value).
STALE = 7
INT16_COUNTS = (1, 16384, 32767, 32768)  # single counts and pairs reaching past the int16 limit 32767

SCOPES = {
    "small": ScopeSpec("every nst of R <= 2 entries in 0..3, every R <= P <= R + 3, into every stale int32 buffer of "
                       "P + 1 or P + 2 entries (max_num_reqs = P or P + 1) over the letters {0, 7}; nst int32, no earlier "
                       "steps (the stale buffer stands for them); in the order R, P, sum(nst), the buffer's length, then "
                       "its number of 7s", "spec", 6570),
    "ci": ScopeSpec("as small with R <= 1 and P <= R + 2", "spec", 378),
    "int16_edge": ScopeSpec("every nst of 1 <= R <= 2 entries from {1, 16384, 32767, 32768} (a running sum past the int16 "
                            "limit), every R <= P <= R + 1, into a fresh int32 buffer of P + 1 entries; in the order R, P, "
                            "then sum(nst)", "spec", 40),
}


def _case(nst: tuple[int, ...], p: int, out: np.ndarray) -> Case:
    return Case({"num_scheduled_tokens": np.array(nst, dtype=np.int32), "num_reqs_padded": p},
                {"max_num_reqs": out.size - 1, "out": out, "history": [], "kind": "exhaustive"})


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract C case of ``scope`` (``SCOPES``), smallest first in
    :func:`size`'s order: ``R``, ``P``, ``sum(nst)``, the buffer's length,
    then the magnitude of its stale values (no case has earlier steps)."""
    check_scope(scope, SCOPES)
    if scope == "int16_edge":
        for r in (1, 2):
            for p in (r, r + 1):
                for nst in sorted(itertools.product(INT16_COUNTS, repeat=r), key=sum):
                    yield _case(nst, p, np.zeros(p + 1, dtype=np.int32))
        return
    max_reqs, max_pad = (2, 3) if scope == "small" else (1, 2)
    for r in range(max_reqs + 1):
        for p in range(r, r + max_pad + 1):
            for total in range(3 * r + 1):
                for length in (p + 1, p + 2):
                    for word in binary_words(length, STALE):
                        # Counts of one sum are equal in the order: innermost.
                        for nst in compositions(total, r, 0, 3):
                            yield _case(nst, p, np.array(word, dtype=np.int32))
