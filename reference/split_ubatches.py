"""Oracle for contract D: the token-based ubatch split (docs/contracts.md, contract D).

``split_ubatches(nst, Np, Rp, n)`` cuts a step's padded token sequence
``[0, Np)`` into ``n`` ubatches at ``k * (Np // n)``, ``k = 1 .. n-1``; the last
ubatch absorbs every padded token and padded request. The split is refused
(``None``) when the last ubatch would hold no real token. Each ubatch's request
range is exactly the requests owning at least one of its real tokens, so a
request whose tokens cross a split point (it *straddles*) belongs to both
neighbouring ubatches.

Written as plain loops over tokens, line by line from the contract.
"""

from __future__ import annotations

from typing import Any

from batchfuzz.reference._args import check_count_array, check_int

UbatchSlice = tuple[tuple[int, int], tuple[int, int]]


def check_ubatch_args(
    num_scheduled_tokens: Any, num_tokens_padded: Any, num_reqs_padded: Any, num_ubatches: Any
) -> tuple[list[int], int, int, int]:
    """Preconditions of contract D; returns ``(nst as a list, Np, Rp, n)``.

    ``nst`` has length ``R >= 1`` and entries ``>= 1``; ``Np >= sum(nst)``;
    ``Np >= n``; ``Rp >= R``; ``n >= 2``.
    """
    nst_arr = check_count_array("num_scheduled_tokens", num_scheduled_tokens, minimum=1)
    padded_tokens = check_int("num_tokens_padded", num_tokens_padded, minimum=1)
    padded_reqs = check_int("num_reqs_padded", num_reqs_padded, minimum=1)
    n = check_int("num_ubatches", num_ubatches, minimum=2)
    nst = [int(v) for v in nst_arr.tolist()]
    if len(nst) == 0:
        raise ValueError("num_scheduled_tokens must hold at least one request, got []")
    total = sum(nst)
    if padded_tokens < total:
        raise ValueError(
            f"num_tokens_padded must be >= sum(num_scheduled_tokens), got num_tokens_padded={padded_tokens} < {total}"
        )
    if padded_tokens < n:
        raise ValueError(
            f"num_tokens_padded must be >= num_ubatches (engines only split steps of at least n tokens), "
            f"got num_tokens_padded={padded_tokens} < num_ubatches={n}"
        )
    if padded_reqs < len(nst):
        raise ValueError(
            f"num_reqs_padded must be >= the number of requests, got num_reqs_padded={padded_reqs} < {len(nst)}"
        )
    return nst, padded_tokens, padded_reqs, n


def refuses(total_tokens: int, num_tokens_padded: int, num_ubatches: int) -> bool:
    """Refused when ``(Np // n) * (n - 1) >= sum(nst)`` (empty last ubatch)."""
    return (num_tokens_padded // num_ubatches) * (num_ubatches - 1) >= total_tokens


def token_owners(num_scheduled_tokens: list[int]) -> list[int]:
    """``owner[t]``: the request of real token ``t`` (tokens in request order)."""
    owner: list[int] = []
    for r, count in enumerate(num_scheduled_tokens):
        for _ in range(count):
            owner.append(r)
    return owner


def split_ubatches(
    num_scheduled_tokens: Any, num_tokens_padded: int, num_reqs_padded: int, num_ubatches: int
) -> list[UbatchSlice] | None:
    """Contract D. A list of ``n`` slices ``((req_start, req_stop), (tok_start, tok_stop))``, or None."""
    nst, padded_tokens, padded_reqs, n = check_ubatch_args(
        num_scheduled_tokens, num_tokens_padded, num_reqs_padded, num_ubatches
    )
    total = sum(nst)
    # Refusal: the last ubatch would hold no real token.
    if refuses(total, padded_tokens, n):
        return None
    size = padded_tokens // n
    owner = token_owners(nst)
    slices: list[UbatchSlice] = []
    for k in range(n):
        # Ubatch k < n-1 covers [k*s, (k+1)*s); the last covers [(n-1)*s, Np).
        tok_start = k * size
        tok_stop = (k + 1) * size if k < n - 1 else padded_tokens
        # Its requests: exactly the owners of its real tokens (never empty: the
        # first n-1 ubatches hold only real tokens, the last holds at least one).
        owners = [owner[t] for t in range(tok_start, min(tok_stop, total))]
        req_start = owners[0]
        req_stop = owners[-1] + 1
        if k == n - 1:
            # The last ubatch absorbs every padded request.
            req_stop = padded_reqs
        slices.append(((req_start, req_stop), (tok_start, tok_stop)))
    return slices
