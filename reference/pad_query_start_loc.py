"""Oracle for contract C: padded ``query_start_loc`` (docs/contracts.md, contract C).

``pad_query_start_loc(nst, P, out=None)`` returns ``q`` of length ``P + 1``:
``q[0] = 0``; ``q[i+1] = q[i] + nst[i]`` for ``i < R``; ``q[j] = sum(nst)`` for
``R < j <= P``. With ``out`` (a persistent buffer of length ``>= P + 1`` holding
stale values) it writes ``out[:P+1]``, leaves ``out[P+1:]`` untouched and
returns ``out[:P+1]``.

Dtype rule (this project's, stated in the contract record): without ``out`` the
result has ``num_scheduled_tokens``'s dtype (int32 or int64; a list of ints
counts as int64); with ``out`` it is ``out``'s dtype, which must be int32 or
int64. ``sum(nst)`` must fit in that dtype (ValueError otherwise), so no
implementation may wrap around silently.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference._args import check_count_array, check_int, check_int_meta


def check_padded_size(num_reqs_padded: Any, num_reqs: int) -> int:
    """``P`` an int with ``P >= R`` (R = len(num_scheduled_tokens)); shared by
    the oracle's checks and the torch form, which knows R from a shape."""
    p = check_int("num_reqs_padded", num_reqs_padded, minimum=0)
    if p < num_reqs:
        raise ValueError(
            f"num_reqs_padded must be >= the number of requests R = len(num_scheduled_tokens) = {num_reqs}, "
            f"got num_reqs_padded={p}"
        )
    return p


def check_pad_counts(num_scheduled_tokens: Any, num_reqs_padded: Any) -> tuple[np.ndarray, int, int, int]:
    """Preconditions on the counts: ``nst`` 1-D int32/int64, entries ``>= 0``;
    ``P`` an int with ``P >= R``. Returns ``(nst, R, P, sum(nst))``, the sum as
    an exact Python int."""
    nst = check_count_array("num_scheduled_tokens", num_scheduled_tokens, minimum=0)
    r = int(nst.shape[0])
    p = check_padded_size(num_reqs_padded, r)
    total = 0
    for v in nst.tolist():
        total += v
    return nst, r, p, total


def check_out_meta(name: str, dtype: Any, shape: tuple[int, ...], num_reqs_padded: int) -> None:
    """Checks on ``out`` that read only its metadata (dtype, shape): shared by
    the numpy path and the capturable torch path, which must not read values."""
    check_int_meta(name, dtype, shape)
    if shape[0] < num_reqs_padded + 1:
        raise ValueError(
            f"{name} has {shape[0]} entries, needs at least num_reqs_padded + 1 = {num_reqs_padded + 1}"
        )


def check_fits(total: int, dtype: Any, where: str) -> None:
    """``sum(nst)`` must be representable in the result dtype."""
    limit = int(np.iinfo(np.dtype(str(dtype).replace("torch.", ""))).max)
    if total > limit:
        raise ValueError(
            f"sum(num_scheduled_tokens) = {total} does not fit in {where} dtype "
            f"{str(dtype).replace('torch.', '')} (max {limit})"
        )


def check_pad_args(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> tuple[np.ndarray, int, int, int, np.dtype]:
    """Every precondition of contract C for numpy callers.

    Returns ``(nst, R, P, total, result_dtype)``. ``out`` must be ``None`` or a
    1-D numpy int32/int64 array with at least ``P + 1`` entries.
    """
    nst, r, p, total = check_pad_counts(num_scheduled_tokens, num_reqs_padded)
    if out is None:
        dtype = nst.dtype if isinstance(num_scheduled_tokens, np.ndarray) else np.dtype(np.int64)
        check_fits(total, dtype, "num_scheduled_tokens's")
        return nst, r, p, total, np.dtype(dtype)
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array or None, got {type(out).__name__}")
    check_out_meta("out", out.dtype, out.shape, p)
    check_fits(total, out.dtype, "out's")
    return nst, r, p, total, out.dtype


def pad_query_start_loc(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """Contract C, entry by entry. Returns ``out[:P+1]`` or a new array."""
    nst, r, p, total, dtype = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
    q = out[: p + 1] if out is not None else np.zeros(p + 1, dtype=dtype)

    # q[0] = 0.
    q[0] = 0
    # q[i+1] = q[i] + nst[i] for i < R (a running sum kept as a Python int).
    running = 0
    for i in range(r):
        running += int(nst[i])
        q[i + 1] = running
    # q[j] = sum(nst) for R < j <= P: padded request slots are empty.
    for j in range(r + 1, p + 1):
        q[j] = total
    return q


def token_ranges(num_scheduled_tokens: Any) -> list[tuple[int, int]]:
    """Which tokens each real request owns: request ``i`` owns the tokens
    ``[sum(nst[:i]), sum(nst[:i+1]))`` of the flattened batch (requests in
    batch order, each request's tokens contiguous). Padded slots own none."""
    nst = check_count_array("num_scheduled_tokens", num_scheduled_tokens, minimum=0)
    ranges = []
    start = 0
    for i in range(nst.shape[0]):
        stop = start + int(nst[i])
        ranges.append((start, stop))
        start = stop
    return ranges
