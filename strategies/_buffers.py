"""Stale contents of persistent buffers (shared by contracts B and C)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from batchfuzz.reference._args import INT_DTYPES
from batchfuzz.strategies._validate import check_choice, check_integer

PATTERNS = ("zeros", "constant", "decreasing", "larger_step", "random")


@st.composite
def _stale(draw: st.DrawFn, size: int, dtype: np.dtype, non_negative: bool) -> np.ndarray:
    kind = draw(st.sampled_from(PATTERNS))
    info = np.iinfo(dtype)
    if kind == "zeros":
        return np.zeros(size, dtype=dtype)
    if kind == "constant":
        # Non-zero (zeros is its own pattern), shrinking towards 1.
        value = draw(st.integers(1, 2**20) if non_negative else st.integers(1, 2**20) | st.integers(-(2**15), -1))
        return np.full(size, value, dtype=dtype)
    if kind == "decreasing":
        return np.arange(size, 0, -1, dtype=np.int64).astype(dtype)
    if kind == "larger_step":
        steps = np.full(size, draw(st.integers(1, 64)), dtype=np.int64)
        return np.cumsum(steps).clip(info.min, info.max).astype(dtype)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return rng.integers(0 if non_negative else -(2**20), 2**20, size=size).astype(dtype)


def stale_arrays(size: int, dtype: Any = np.int32, *, non_negative: bool = False) -> st.SearchStrategy[np.ndarray]:
    """What a persistent buffer of ``size`` entries may hold from earlier steps.

    Patterns: zeros (a fresh buffer), a non-zero constant, a decreasing ramp
    (breaks monotonicity when left in a prefix sum), a larger earlier step's
    prefix sum, or random values. With ``non_negative`` every value is
    ``>= 0`` (what an engine writes into lengths, offsets, positions and token
    ids); otherwise negative values appear too.

    Shrinks towards zeros (a fresh buffer).
    """
    size = check_integer("size", size, min_value=0)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise InvalidArgument(f"dtype must be a numpy dtype, got {dtype!r}") from None
    check_choice("dtype", dt, INT_DTYPES)
    return _stale(size, dt, bool(non_negative))
