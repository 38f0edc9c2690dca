"""Oracle of contract A: the dummy token split (docs/contracts.md, contract A).

``n[i] = N // R + (1 if i >= R - N % R else 0)`` for ``1 <= R <= N``: every
dummy request gets ``N // R`` tokens and the last ``N % R`` requests one more,
so no request gets more than ``ceil(N / R)``.
"""

from __future__ import annotations

from batchfuzz.reference._args import check_int


def check_split_args(num_reqs: object, num_tokens: object) -> tuple[int, int]:
    """Precondition of contract A: ``1 <= R <= N``."""
    r = check_int("num_reqs", num_reqs, minimum=1)
    n = check_int("num_tokens", num_tokens, minimum=1)
    if n < r:
        raise ValueError(
            f"num_tokens must be >= num_reqs (every dummy request needs a token), "
            f"got num_tokens={n} < num_reqs={r}"
        )
    return r, n


def split_dummy_tokens(num_reqs: int, num_tokens: int) -> list[int]:
    """Contract A. Every request gets ``N // R``; the last ``N % R`` get one more."""
    r, n = check_split_args(num_reqs, num_tokens)
    base = n // r
    remainder = n % r
    result = []
    for i in range(r):
        if i >= r - remainder:
            result.append(base + 1)
        else:
            result.append(base)
    return result

