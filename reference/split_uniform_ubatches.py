"""Oracle of contract N, ``split_uniform_ubatches``: the microbatch split of
a uniform speculative-decoding batch, every request ``q`` tokens (the target
token and its drafts), cut on request boundaries (docs/contracts.md,
contract N). The rule is vLLM's new model runner's
(``vllm/v1/worker/gpu/ubatch_utils.py:create_ubatch_slices``, 0.34.0, its
docstring: "a uniform batch of multi-token queries (spec decode
verification) is split on a request boundary instead, so each microbatch
stays a uniform decode"): each of the first ``n - 1`` microbatches takes as
many whole requests as fit in ``Np // n`` tokens, the last takes the rest,
padding included."""

from __future__ import annotations

from typing import Any

from batchfuzz.reference._args import check_int

ARGUMENTS = ("num_reqs", "query_len", "num_tokens_padded", "num_reqs_padded", "num_ubatches")


def check_args(num_reqs: Any, query_len: Any, num_tokens_padded: Any, num_reqs_padded: Any, num_ubatches: Any
               ) -> tuple[int, int, int, int, int]:
    """Validate: ``R >= 1`` requests of ``q >= 2`` tokens, ``n >= 2``
    microbatches, ``Np >= max(R, n) * q`` (the uniform cut exists only when each
    microbatch can hold a whole request) and ``Rp >= R``."""
    r = check_int("num_reqs", num_reqs, minimum=1)
    q = check_int("query_len", query_len, minimum=2)
    n = check_int("num_ubatches", num_ubatches, minimum=2)
    np_ = check_int("num_tokens_padded", num_tokens_padded, minimum=1)
    if np_ < max(r, n) * q:
        raise ValueError(f"num_tokens_padded must be >= max(num_reqs, num_ubatches) * query_len = {max(r, n) * q}, "
                         f"got {np_}")
    rp = check_int("num_reqs_padded", num_reqs_padded, minimum=1)
    if rp < r:
        raise ValueError(f"num_reqs_padded must be >= num_reqs = {r}, got {rp}")
    return r, q, np_, rp, n


def cut_size(query_len: int, num_tokens_padded: int, num_ubatches: int) -> int:
    """The tokens of each microbatch but the last: whole requests within ``Np // n``."""
    return (num_tokens_padded // (query_len * num_ubatches)) * query_len


def owners(num_reqs: int, query_len: int, start: int, stop: int) -> range:
    """The real requests owning a token of ``[start, stop)``."""
    real = num_reqs * query_len
    if start >= min(stop, real):
        return range(0)
    return range(start // query_len, -(-min(stop, real) // query_len))


Slices = list[tuple[tuple[int, int], tuple[int, int]]]


def split_uniform_ubatches(num_reqs: Any, query_len: Any, num_tokens_padded: Any, num_reqs_padded: Any,
                           num_ubatches: Any) -> Slices:
    """The ``n`` slices ``((req_start, req_stop), (tok_start, tok_stop))``: tokens
    ``[k s, (k + 1) s)`` for ``k < n - 1``, the last ``[(n - 1) s, Np)``, with ``s``
    :func:`cut_size`; requests the real owners of those tokens (the last up to
    ``Rp``; one with no real token holds the last request, with no query token)."""
    r, q, np_, rp, n = check_args(num_reqs, query_len, num_tokens_padded, num_reqs_padded, num_ubatches)
    s = cut_size(q, np_, n)
    out: Slices = []
    for k in range(n):
        start, stop = k * s, (k + 1) * s if k < n - 1 else np_
        own = owners(r, q, start, stop)
        first, last = (own.start, own.stop) if own else (r - 1, r)
        out.append(((first, rp if k == n - 1 else last), (start, stop)))
    return out
