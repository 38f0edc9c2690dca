"""Known buggy variants of contract N, the request-boundary split of a
uniform speculative-decoding batch: the token midpoint (contract D's cut),
the whole-request share rounded up, the last microbatch stopping at the
real tokens, request ranges one short, and the real requests shared out
instead of the padded tokens; each the oracle's rule with one knob turned."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from batchfuzz.reference.split_uniform_ubatches import Slices, check_args, owners
from batchfuzz.registry import Variant


def _slices(r: int, q: int, rp: int, bounds: list[int], short: int = 0) -> Slices:
    """The slices of token ``bounds``, requests as the oracle's (``short`` fewer at each stop but the last's)."""
    n = len(bounds) - 1
    out: Slices = []
    for k in range(n):
        own = owners(r, q, bounds[k], bounds[k + 1])
        first, last = (own.start, own.stop - short) if own else (r - 1, r)
        out.append(((first, rp if k == n - 1 else last), (bounds[k], bounds[k + 1])))
    return out


def _cut(args: tuple[Any, ...], size: Callable[[int, int, int, int], int],
         end: Callable[[int, int, int], int] | None = None, short: int = 0) -> Slices:
    r, q, np_, rp, n = check_args(*args)
    s = size(r, q, np_, n)
    return _slices(r, q, rp, [k * s for k in range(n)] + [np_ if end is None else end(r, q, np_)], short)


def token_midpoint(*args: Any) -> Slices:
    """Cut at ``Np // n`` whatever the query length (contract D's rule)."""
    return _cut(args, size=lambda r, q, np_, n: np_ // n)


def share_rounded_up(*args: Any) -> Slices:
    """Each microbatch's share of whole requests rounded up, not down."""
    return _cut(args, size=lambda r, q, np_, n: -(-np_ // (q * n)) * q)


def last_stops_at_real(*args: Any) -> Slices:
    """The last microbatch ends at the real tokens, dropping the padding."""
    return _cut(args, size=lambda r, q, np_, n: (np_ // (q * n)) * q, end=lambda r, q, np_: max(r * q, np_ - q))


def requests_one_short(*args: Any) -> Slices:
    """Every microbatch but the last stops one request early."""
    return _cut(args, size=lambda r, q, np_, n: (np_ // (q * n)) * q, short=1)


def real_requests_shared(*args: Any) -> Slices:
    """The real requests shared out (``R // n`` each), not the padded tokens."""
    return _cut(args, size=lambda r, q, np_, n: (r // n) * q)


def _args(r: int, q: int, np_: int, rp: int, n: int) -> dict[str, Any]:
    return {"num_reqs": r, "query_len": q, "num_tokens_padded": np_, "num_reqs_padded": rp, "num_ubatches": n}


VARIANTS = (
    Variant("token_midpoint", "cut at Np // n, inside a request", token_midpoint, "mutant",
            ("cuts_on_request_boundaries", "matches_oracle"), _args(1, 2, 6, 1, 2)),
    Variant("share_rounded_up", "whole-request share rounded up", share_rounded_up, "mutant",
            ("equal_whole_request_shares", "matches_oracle"), _args(1, 2, 5, 1, 2)),
    Variant("last_stops_at_real", "the last microbatch drops the padding", last_stops_at_real, "mutant",
            ("tokens_partition_padded", "matches_oracle"), _args(1, 2, 4, 1, 2)),
    Variant("requests_one_short", "request ranges stop one request early", requests_one_short, "mutant",
            ("request_ranges_hold_owners",), _args(1, 2, 4, 1, 2)),
    Variant("real_requests_shared", "R // n real requests each, not Np // n tokens", real_requests_shared, "mutant",
            ("first_ubatch_has_real_token", "matches_oracle"), _args(1, 2, 4, 1, 2)),
)
