"""Engine configuration: CUDA-graph capture sizes, max_num_seqs, token budgets.

SPEC.md: capture sizes are commonly ``[1, 2, 4]`` then multiples of 8 up to
512, or larger lists; ``max_num_seqs`` 128 to 1024; ``max_num_batched_tokens``
2048 to 65536, sometimes more.
"""

from __future__ import annotations

import bisect

from hypothesis import strategies as st

MAX_NUM_SEQS_COMMON = (128, 256, 512, 1024)
MAX_NUM_BATCHED_TOKENS_COMMON = (2048, 4096, 8192, 16384, 32768, 65536, 131072)


def default_capture_sizes(max_capture_size: int = 512) -> list[int]:
    """``[1, 2, 4]`` then every multiple of 8 up to ``max_capture_size``."""
    return [s for s in (1, 2, 4) if s <= max_capture_size] + list(range(8, max_capture_size + 1, 8))


def capture_size_lists() -> st.SearchStrategy[list[int]]:
    """Capture-size lists engines use; shrinks towards the default 512 list."""
    return st.one_of(
        st.sampled_from([512, 256, 1024, 2048]).map(default_capture_sizes),
        # Coarser lists: powers of two, or multiples of 16 past 256.
        st.just([1, 2, 4, 8, 16, 32, 64, 128, 256, 512]),
        st.integers(1, 64).map(lambda k: [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 256 + 16 * k + 1, 16))),
    )


def pad_to_capture_size(num_tokens: int, capture_sizes: list[int]) -> int | None:
    """The smallest capture size >= ``num_tokens``; None when the step runs eagerly."""
    sizes = sorted(capture_sizes)
    i = bisect.bisect_left(sizes, num_tokens)
    return sizes[i] if i < len(sizes) else None


def max_num_seqs() -> st.SearchStrategy[int]:
    """A request capacity; shrinks towards small values."""
    return st.one_of(st.integers(1, 1024), st.sampled_from(MAX_NUM_SEQS_COMMON))
