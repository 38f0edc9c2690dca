"""Known buggy variants of contract L, the real tokens of the two-batch-overlap
children: mutants of the padding split (padding shared between the children,
child B's count not clamped, child A given the split index whatever the real
count, the two counts swapped, the padded count taken for the real one), each the oracle's rule with one knob turned."""

from __future__ import annotations

from typing import Any

from batchfuzz.reference.tbo_children_tokens import check_args
from batchfuzz.registry import Variant


def padding_shared(split_token_index: Any, num_token_non_padded: Any, num_tokens: Any) -> tuple[int, int]:
    """Half the padding at the end of child A: child A's real count drops by it."""
    t, m, n = check_args(split_token_index, num_token_non_padded, num_tokens)
    a = max(0, min(t, m) - (n - m) // 2)
    return a, m - a


def second_unclamped(split_token_index: Any, num_token_non_padded: Any, num_tokens: Any) -> tuple[int, int]:
    """Child B's count ``M - t`` without the clamp at 0."""
    t, m, _n = check_args(split_token_index, num_token_non_padded, num_tokens)
    return min(t, m), m - t


def first_is_split_index(split_token_index: Any, num_token_non_padded: Any, num_tokens: Any) -> tuple[int, int]:
    """Child A's count is ``t`` even when fewer real tokens exist."""
    t, m, _n = check_args(split_token_index, num_token_non_padded, num_tokens)
    return t, max(0, m - t)


def counts_swapped(split_token_index: Any, num_token_non_padded: Any, num_tokens: Any) -> tuple[int, int]:
    """The two children's counts in the wrong order."""
    t, m, _n = check_args(split_token_index, num_token_non_padded, num_tokens)
    return max(0, m - t), min(t, m)


def padded_count_as_real(split_token_index: Any, num_token_non_padded: Any, num_tokens: Any) -> tuple[int, int]:
    """The padded count ``N`` taken for the real one (what SGLang's caller passed up to 0.5.14)."""
    t, _m, n = check_args(split_token_index, num_token_non_padded, num_tokens)
    return min(t, n), n - min(t, n)


def _args(t: int, m: int, n: int) -> dict[str, Any]:
    return {"split_token_index": t, "num_token_non_padded": m, "num_tokens": n}


VARIANTS = (
    Variant("padding_shared", "half the padding in child A", padding_shared, "mutant",
            ("padding_in_second_child", "matches_oracle"), _args(1, 1, 3)),
    Variant("second_unclamped", "child B's count M - t not clamped at 0", second_unclamped, "mutant",
            ("counts_fit_children", "matches_oracle"), _args(1, 0, 1)),
    Variant("first_is_split_index", "child A's count t whatever M", first_is_split_index, "mutant",
            ("real_tokens_conserved", "matches_oracle"), _args(1, 0, 1)),
    Variant("padded_count_as_real", "the padded count N split as if it were real", padded_count_as_real, "mutant",
            ("real_tokens_conserved", "matches_oracle"), _args(0, 0, 1)),
    Variant("counts_swapped", "the children's counts swapped", counts_swapped, "mutant",
            ("padding_in_second_child", "matches_oracle"), _args(0, 1, 1)),
)
