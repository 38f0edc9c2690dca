"""Oracle of contract L, ``tbo_children_tokens``: how many real tokens each
two-batch-overlap child holds when the parent is padded (docs/contracts.md,
contract L). The rule is SGLang's
(``TboForwardBatchPreparer.compute_tbo_children_num_token_non_padded_raw``):
child A is tokens ``[0, t)``, child B the rest, and all padding is at the
end, so in child B."""

from __future__ import annotations

from typing import Any

from batchfuzz.reference._args import check_int

ARGUMENTS = ("split_token_index", "num_token_non_padded", "num_tokens")


def check_args(split_token_index: Any, num_token_non_padded: Any, num_tokens: Any) -> tuple[int, int, int]:
    """Validate: ``num_tokens >= 0`` the parent's padded token count, ``split_token_index``
    ``t`` and ``num_token_non_padded`` ``M`` each in ``[0, num_tokens]``."""
    n = check_int("num_tokens", num_tokens, minimum=0)
    t = check_int("split_token_index", split_token_index, minimum=0, maximum=n, maximum_name="num_tokens")
    m = check_int("num_token_non_padded", num_token_non_padded, minimum=0, maximum=n, maximum_name="num_tokens")
    return t, m, n


def tbo_children_tokens(split_token_index: Any, num_token_non_padded: Any, num_tokens: Any) -> tuple[int, int]:
    """``(a, b)``: the real tokens of child A (its first ``min(t, M)``) and of child B (the other ``M - a``)."""
    t, m, _n = check_args(split_token_index, num_token_non_padded, num_tokens)
    a = t if t <= m else m  # the real tokens come first: child A is real up to its size
    return a, m - a
