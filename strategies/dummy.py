"""Strategies for contracts A (dummy token split) and B (dummy batch layout).

Cases cover the realistic domain of SPEC.md (``num_reqs`` up to 1024,
``num_tokens`` up to 131072, capture-size lists, ``max_model_len``) and its
edges (``R == N``, ``R == 1``, ``N % R`` in ``{0, 1, R - 1}``). Every branch
shrinks towards small ``R`` and ``N`` and a tight ``max_model_len`` (the
smallest with ``N <= R * L``), which is where a bad split shows first.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from batchfuzz.case import Case
from reference.types import DummyBuffers
from strategies.engine import (
    MAX_NUM_BATCHED_TOKENS_COMMON,
    capture_size_lists,
    default_capture_sizes,
    max_num_seqs,
)

MAX_REQS = 1024
MAX_TOKENS = 131072


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@st.composite
def _generic(draw: st.DrawFn) -> tuple[int, int]:
    r = draw(st.integers(1, MAX_REQS))
    n = draw(st.integers(r, min(MAX_TOKENS, r * 64)))
    return r, n


@st.composite
def _edges(draw: st.DrawFn) -> tuple[int, int]:
    r = draw(st.integers(1, MAX_REQS))
    kind = draw(st.sampled_from(["R==N", "R==1", "rem0", "rem1", "remR-1"]))
    if kind == "R==N":
        return r, r
    if kind == "R==1":
        return 1, draw(st.integers(1, MAX_TOKENS))
    q = draw(st.integers(1, max(1, MAX_TOKENS // r - 1)))
    rem = {"rem0": 0, "rem1": min(1, r - 1), "remR-1": r - 1}[kind]
    return r, q * r + rem


@st.composite
def _engine(draw: st.DrawFn) -> tuple[int, int]:
    """A dummy run as engines make one: a capture size or the token budget,
    with ``R = min(N, max_num_seqs)`` (capture and profiling runs)."""
    seqs = draw(max_num_seqs())
    if draw(st.booleans()):
        n = draw(st.sampled_from(draw(capture_size_lists())))
    else:
        n = draw(st.sampled_from(MAX_NUM_BATCHED_TOKENS_COMMON))
    return min(n, seqs), n


def split_args() -> st.SearchStrategy[tuple[int, int]]:
    """``(num_reqs, num_tokens)`` with ``1 <= R <= N``."""
    return st.one_of(_generic(), _edges(), _engine())


@st.composite
def dummy_split_cases(draw: st.DrawFn) -> Case:
    """Contract A cases; context ``max_model_len`` satisfies ``N <= R * L``."""
    r, n = draw(split_args())
    slack = draw(st.one_of(st.just(0), st.integers(0, 4096)))
    return Case({"num_reqs": r, "num_tokens": n}, {"max_model_len": _ceil_div(n, r) + slack})


INT_DTYPES = (np.int32, np.int64)


@st.composite
def stale_array(draw: st.DrawFn, size: int, dtype: type) -> np.ndarray:
    """A persistent buffer's stale contents. Shrinks to zeros (a fresh buffer).

    Patterns: zeros, a constant, a decreasing ramp (breaks monotonicity when
    left in a prefix sum), a larger earlier step's prefix sum, or random values,
    negative ones included.
    """
    kind = draw(st.sampled_from(["zeros", "constant", "decreasing", "larger_step", "random"]))
    info = np.iinfo(dtype)
    if kind == "zeros":
        return np.zeros(size, dtype=dtype)
    if kind == "constant":
        # Non-zero (zeros is its own pattern), shrinking towards 1.
        return np.full(size, draw(st.integers(1, 2**20) | st.integers(-(2**15), -1)), dtype=dtype)
    if kind == "decreasing":
        return np.arange(size, 0, -1, dtype=np.int64).astype(dtype)
    if kind == "larger_step":
        steps = np.full(size, draw(st.integers(1, 64)), dtype=np.int64)
        return np.cumsum(steps).clip(info.min, info.max).astype(dtype)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    return rng.integers(-(2**20), 2**20, size=size).astype(dtype)


@st.composite
def dummy_buffers(draw: st.DrawFn, max_num_reqs: int, max_num_tokens: int) -> DummyBuffers:
    dt = [draw(st.sampled_from(INT_DTYPES)) for _ in range(4)]
    return DummyBuffers(
        seq_lens=draw(stale_array(max_num_reqs, dt[0])),
        query_start_loc=draw(stale_array(max_num_reqs + 1, dt[1])),
        positions=draw(stale_array(max_num_tokens, dt[2])),
        input_ids=draw(stale_array(max_num_tokens, dt[3])),
    )


@st.composite
def _tokens_first(draw: st.DrawFn, max_tokens: int) -> tuple[int, int]:
    """``N`` first (any count, or an engine size: a capture size or a token
    budget), then any ``R <= min(N, 1024)``. ``N`` and ``R`` shrink
    independently (towards 1),
    so a failure that needs a large ``N`` (an int16 running sum) still shrinks
    to ``R == 1``. The remainder edges are contract A's business."""
    engine_sizes = sorted({s for s in default_capture_sizes(2048) + list(MAX_NUM_BATCHED_TOKENS_COMMON) if s <= max_tokens})
    n = draw(st.integers(1, max_tokens) | st.sampled_from(engine_sizes))
    r = draw(st.integers(1, min(n, MAX_REQS)))
    return r, n


@st.composite
def dummy_layout_cases(draw: st.DrawFn, max_tokens: int = 65536) -> Case:
    """Contract B cases: ``(num_reqs, num_tokens, buffers)`` with stale buffers.

    ``(R, N)`` come from ``_tokens_first``.

    Capacities are drawn first (``max_num_reqs >= R``, ``max_num_tokens >= N``),
    then the stale contents. ``N`` stays at or below ``max_tokens`` (65536, a
    common ``max_num_batched_tokens``) so buffers stay cheap to compare.
    """
    r, n = draw(_tokens_first(max_tokens))
    max_num_reqs = r + draw(st.one_of(st.just(0), st.integers(0, 64)))
    max_num_tokens = n + draw(st.one_of(st.just(0), st.integers(0, 256)))
    buffers = draw(dummy_buffers(max_num_reqs, max_num_tokens))
    return Case(
        {"num_reqs": r, "num_tokens": n, "buffers": buffers},
        {"max_model_len": _ceil_div(n, r) + draw(st.one_of(st.just(0), st.integers(0, 64)))},
    )
