"""Engine configuration: CUDA-graph capture sizes, ``max_num_seqs``, token budgets.

The realistic domain of docs/contracts.md: capture sizes are commonly
``[1, 2, 4]`` then multiples of 8 up to 512, or larger lists;
``max_num_seqs`` 128 to 1024; ``max_num_batched_tokens`` 2048 to 65536,
sometimes more.
"""

from __future__ import annotations

import bisect

from hypothesis import strategies as st

from batchfuzz.strategies._validate import check_integer

MAX_NUM_SEQS_COMMON = (128, 256, 512, 1024)
MAX_NUM_BATCHED_TOKENS_COMMON = (2048, 4096, 8192, 16384, 32768, 65536, 131072)


def default_capture_sizes(max_capture_size: int = 512) -> list[int]:
    """``[1, 2, 4]`` then every multiple of 8 up to ``max_capture_size``."""
    return [s for s in (1, 2, 4) if s <= max_capture_size] + list(range(8, max_capture_size + 1, 8))


def pad_to_capture_size(num_tokens: int, capture_sizes: list[int]) -> int | None:
    """The smallest capture size >= ``num_tokens``; None when the step runs eagerly."""
    sizes = sorted(capture_sizes)
    i = bisect.bisect_left(sizes, num_tokens)
    return sizes[i] if i < len(sizes) else None


_CAPTURE_SIZES = st.one_of(
    st.sampled_from([512, 256, 1024, 2048]).map(default_capture_sizes),
    # Coarser lists: powers of two, or multiples of 16 past 256.
    st.just([1, 2, 4, 8, 16, 32, 64, 128, 256, 512]),
    st.integers(1, 64).map(lambda k: [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 256 + 16 * k + 1, 16))),
)


def capture_sizes() -> st.SearchStrategy[list[int]]:
    """Sorted lists of CUDA-graph capture sizes as engines configure them: the
    default list up to 512, 256, 1024 or 2048; powers of two up to 512; the
    default list up to 248 then multiples of 16.

    Shrinks towards the default list up to 512.
    """
    return _CAPTURE_SIZES


def max_num_seqs(max_value: int = 1024) -> st.SearchStrategy[int]:
    """A request capacity ``max_num_seqs`` in ``[1, max_value]``: any value, or
    a common one (128, 256, 512, 1024) where it is at most ``max_value``.

    Shrinks towards 1.
    """
    max_value = check_integer("max_value", max_value, min_value=1)
    common = [s for s in MAX_NUM_SEQS_COMMON if s <= max_value]
    anything = st.integers(1, max_value)
    return st.one_of(anything, st.sampled_from(common)) if common else anything
