"""Strategies for contract B, the dummy batch layout (docs/contracts.md, contract B).

A case is ``(num_reqs, num_tokens, buffers)`` with persistent buffers of
capacity ``max_num_reqs >= R`` and ``max_num_tokens >= N`` holding stale
values. Capacities are drawn first, then the stale contents.

Domains:

- ``spec``: any stale values, negative ones included;
- ``engine``: stale values an engine writes (lengths, offsets, positions and
  token ids are never negative; ``query_start_loc[0]`` is 0, the only value
  any writer of the buffer puts there).

Shrinks towards one request of one token, buffers of exactly that capacity,
int32, and zeros (fresh buffers).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np
from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.reference._args import INT_DTYPES, ceil_div
from batchfuzz.reference.make_dummy import DummyBuffers
from batchfuzz.strategies._buffers import stale_arrays
from batchfuzz.strategies._engine import MAX_NUM_BATCHED_TOKENS_COMMON, default_capture_sizes
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope
from batchfuzz.strategies._validate import check_choice, check_integer

MAX_NUM_REQS = 1024
MAX_NUM_TOKENS = 65536  # a common max_num_batched_tokens; keeps buffers cheap to compare


@st.composite
def _buffers(draw: st.DrawFn, max_num_reqs: int, max_num_tokens: int, non_negative: bool) -> DummyBuffers:
    dt = [draw(st.sampled_from(INT_DTYPES)) for _ in range(4)]
    return DummyBuffers(
        seq_lens=draw(stale_arrays(max_num_reqs, dt[0], non_negative=non_negative)),
        query_start_loc=draw(stale_arrays(max_num_reqs + 1, dt[1], non_negative=non_negative)),
        positions=draw(stale_arrays(max_num_tokens, dt[2], non_negative=non_negative)),
        input_ids=draw(stale_arrays(max_num_tokens, dt[3], non_negative=non_negative)),
    )


def dummy_buffers(max_num_reqs: int, max_num_tokens: int, *, non_negative: bool = False) -> st.SearchStrategy[DummyBuffers]:
    """``DummyBuffers`` of the given capacities, each buffer int32 or int64,
    holding stale values (see ``stale_arrays``; ``non_negative`` as there).

    Shrinks towards int32 buffers of zeros.
    """
    reqs = check_integer("max_num_reqs", max_num_reqs, min_value=0)
    tokens = check_integer("max_num_tokens", max_num_tokens, min_value=0)
    return _buffers(reqs, tokens, bool(non_negative))


@st.composite
def _tokens_first(draw: st.DrawFn, max_tokens: int) -> tuple[int, int]:
    """``N`` first (any count, or an engine size: a capture size or a token
    budget), then any ``R <= min(N, 1024)``: ``N`` and ``R`` shrink
    independently (towards 1), so a failure that needs a large ``N`` (an
    int16 running sum) still shrinks to ``R == 1``. The remainder edges are
    contract A's business."""
    engine_sizes = sorted({s for s in default_capture_sizes(2048) + list(MAX_NUM_BATCHED_TOKENS_COMMON) if s <= max_tokens})
    n = draw(st.integers(1, max_tokens) | st.sampled_from(engine_sizes))
    r = draw(st.integers(1, min(n, MAX_NUM_REQS)))
    return r, n


DOMAINS = ("spec", "engine")


@st.composite
def _cases(draw: st.DrawFn, domain: str) -> Case:
    r, n = draw(_tokens_first(MAX_NUM_TOKENS))
    max_num_reqs = r + draw(st.one_of(st.just(0), st.integers(0, 64)))
    max_num_tokens = n + draw(st.one_of(st.just(0), st.integers(0, 256)))
    buffers = draw(dummy_buffers(max_num_reqs, max_num_tokens, non_negative=domain == "engine"))
    if domain == "engine":
        buffers.query_start_loc[0] = 0
    return Case(
        {"num_reqs": r, "num_tokens": n, "buffers": buffers},
        {"max_model_len": ceil_div(n, r) + draw(st.one_of(st.just(0), st.integers(0, 64)))},
    )


def cases(domain: str = "spec") -> st.SearchStrategy[Case]:
    """Contract B cases of ``domain``; the context holds a ``max_model_len``
    with ``N <= R * max_model_len``. Shrinks as the module says."""
    return _cases(check_choice("domain", domain, DOMAINS))


def in_domain(case: Case, domain: str) -> bool:
    """The precondition (``1 <= R <= N``, buffers large enough); in the engine
    domain also no negative stale value and ``query_start_loc[0] == 0``."""
    a = case.args
    b = a["buffers"]
    r, n = a["num_reqs"], a["num_tokens"]
    ok = isinstance(b, DummyBuffers) and 1 <= r <= n and r <= b.max_num_reqs and n <= b.max_num_tokens
    if ok and domain == "engine":
        ok = all(int(getattr(b, name).min(initial=0)) >= 0 for name in ("seq_lens", "query_start_loc", "positions", "input_ids"))
        ok = ok and int(b.query_start_loc[0]) == 0
    return ok


_BUFFER_FIELDS = ("seq_lens", "query_start_loc", "positions", "input_ids")


def size(case: Case) -> tuple[int, ...]:
    """The order of contract B cases: by ``R``, ``N``, the capacities, then the
    stale values (the sum of their magnitudes)."""
    a = case.args
    b = a["buffers"]
    stale = sum(int(np.abs(getattr(b, f).astype(np.int64)).sum()) for f in _BUFFER_FIELDS)
    return (a["num_reqs"], a["num_tokens"], b.max_num_reqs, b.max_num_tokens, stale)


def reductions(case: Case) -> Iterator[Case]:
    """Smaller cases built from ``case`` (``batchfuzz.reduce``): a request or
    token fewer, the buffers cut to the least capacity or a slot shorter, a
    buffer cleared, a stale entry cleared."""
    r, n, b = case.args["num_reqs"], case.args["num_tokens"], case.args["buffers"]

    def make(r2: int, n2: int, buffers: DummyBuffers) -> Case:
        return Case({"num_reqs": r2, "num_tokens": n2, "buffers": buffers},
                    {**case.context, "max_model_len": ceil_div(n2, r2) if r2 >= 1 else 1})

    for r2, n2 in ((r - 1, n), (r, n - 1), (r, n - r), (r - 1, n - 1)):
        if 1 <= r2 <= n2:
            yield make(r2, n2, b.copy())
    # Capacities: straight to the least (R or N), then one slot fewer (a
    # slot at a time alone would take hundreds of steps from a capacity of
    # hundreds, past reduce.MAX_STEPS).
    for reqs in sorted({r, b.max_num_reqs - 1}):
        if b.max_num_reqs > reqs >= r:
            yield make(r, n, DummyBuffers(b.seq_lens[:reqs].copy(), b.query_start_loc[:reqs + 1].copy(), b.positions.copy(),
                                          b.input_ids.copy()))
    for toks in sorted({n, b.max_num_tokens - 1}):
        if b.max_num_tokens > toks >= n:
            yield make(r, n, DummyBuffers(b.seq_lens.copy(), b.query_start_loc.copy(), b.positions[:toks].copy(),
                                          b.input_ids[:toks].copy()))
    for f in _BUFFER_FIELDS:
        values = getattr(b, f)
        if values.any():
            cleared = b.copy()
            getattr(cleared, f)[:] = 0
            yield make(r, n, cleared)
            for i in np.flatnonzero(values)[:8]:
                one = b.copy()
                getattr(one, f)[i] = 0
                yield make(r, n, one)


# ---------------------------------------------------------------- bounded-exhaustive scopes

# Stale contents a scope fills each buffer with, in increasing magnitude:
# a fresh buffer; -1 everywhere (spec domain only: no engine writes a
# negative length, offset, position or token id); a decreasing ramp
# len, ..., 1 (non-zero in every slot and not monotone).
STALE_FILLS: dict[str, Callable[[int], np.ndarray]] = {
    "zeros": lambda n: np.zeros(n, dtype=np.int32),
    "minus_one": lambda n: np.full(n, -1, dtype=np.int32),
    "ramp": lambda n: np.arange(n, 0, -1, dtype=np.int32),
}
INT16_EDGE = range(32766, 32771)  # N around the int16 limit 32767

SCOPES = {
    "small": ScopeSpec("every 1 <= R <= N <= 5; request capacity R or R + 1 and token capacity N or N + 1; each of the four "
                       "int32 buffers independently zeros, -1 everywhere or a decreasing ramp len..1 (81 fillings); the "
                       "tightest max_model_len; in the order R, N, capacities, then the stale values' magnitude", "spec", 4860),
    "ci": ScopeSpec("every 1 <= R <= N <= 3; capacities as in small; each buffer zeros or a decreasing ramp (16 fillings)",
                    "spec", 384),
    "int16_edge": ScopeSpec("every 1 <= R <= 2 with 32766 <= N <= 32770 (a running sum past the int16 limit 32767), in fresh "
                            "int32 buffers of exactly that capacity; in the order R, then N", "spec", 10),
}


def _filled(fills: tuple[str, ...], max_num_reqs: int, max_num_tokens: int) -> DummyBuffers:
    sizes = (max_num_reqs, max_num_reqs + 1, max_num_tokens, max_num_tokens)
    return DummyBuffers(*(STALE_FILLS[f](n) for f, n in zip(fills, sizes, strict=True)))


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract B case of ``scope`` (``SCOPES``), smallest first in
    :func:`size`'s order: ``R``, ``N``, the request capacity, the token
    capacity, then the fillings sorted by the magnitude of their stale values."""
    check_scope(scope, SCOPES)
    if scope == "int16_edge":
        for r in (1, 2):
            for n in INT16_EDGE:
                yield Case({"num_reqs": r, "num_tokens": n, "buffers": _filled(("zeros",) * 4, r, n)},
                           {"max_model_len": ceil_div(n, r)})
        return
    top = 5 if scope == "small" else 3
    fills = tuple(STALE_FILLS) if scope == "small" else ("zeros", "ramp")
    for r in range(1, top + 1):
        for n in range(r, top + 1):
            for max_num_reqs in (r, r + 1):
                for max_num_tokens in (n, n + 1):
                    filled = [_filled(choice, max_num_reqs, max_num_tokens) for choice in itertools.product(fills, repeat=4)]
                    filled.sort(key=lambda b: sum(int(np.abs(getattr(b, f).astype(np.int64)).sum()) for f in _BUFFER_FIELDS))
                    for buffers in filled:
                        yield Case({"num_reqs": r, "num_tokens": n, "buffers": buffers}, {"max_model_len": ceil_div(n, r)})
