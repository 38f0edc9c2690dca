"""Known buggy variants of contract D, the ubatch split: the split before the
engine had its empty-last-ubatch refusal, and planted mutants (plain loops:
they are judged, not fast)."""

from __future__ import annotations

from typing import Any

from batchfuzz.reference.split_ubatches import UbatchSlice, check_ubatch_args, token_owners
from batchfuzz.registry import Variant


def _split(nst: list[int], padded: int, padded_reqs: int, n: int, size: int, *, refuse: bool = True,
           strict: bool = False, absorb_reqs: bool = True, absorb_tokens: bool = True,
           disjoint_reqs: bool = False) -> list[UbatchSlice] | None:
    total = sum(nst)
    empty_last = size * (n - 1) > total if strict else size * (n - 1) >= total
    if refuse and empty_last:
        return None
    owner = token_owners(nst)
    out: list[UbatchSlice] = []
    for k in range(n):
        ts = k * size
        te = (k + 1) * size if k < n - 1 else (padded if absorb_tokens else total)
        real = [owner[t] for t in range(ts, min(te, total))]
        rs = real[0] if real else len(nst)
        re = real[-1] + 1 if real else len(nst)
        if disjoint_reqs and out and rs < out[-1][0][1]:
            rs = out[-1][0][1]  # the straddling request stays with the earlier ubatch only
        if k == n - 1 and absorb_reqs:
            re = padded_reqs
        out.append(((rs, re), (ts, te)))
    return out


def split_no_refusal(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """Splits even when the last ubatch holds no real token (the refusal left out)."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, p // k, refuse=False)


def split_refusal_for_two(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """Refuses as if there were two ubatches whatever ``n`` (``(Np // 2) >= sum(nst)``): right for
    dual-batch overlap only."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    if p // 2 >= sum(counts):
        return None
    return _split(counts, p, rp, k, p // k, refuse=False)


def split_in_halves(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """Two ubatches whatever ``n``: cut once, at ``Np // 2``."""
    counts, p, rp, _ = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, 2, p // 2)


def split_refusal_strict(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """Refuses only when ``(Np // n) * (n - 1) > sum(nst)``: ``>`` for ``>=``."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, p // k, strict=True)


def split_ceil_size(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """Ubatch size ``ceil(Np / n)`` instead of ``Np // n``."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, -(-p // k))


def split_on_real_tokens(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """Split points from the real token count ``sum(nst) // n`` instead of ``Np // n``."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, max(1, sum(counts) // k))


def split_padded_reqs_dropped(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """The last ubatch stops at the last real request: padded requests absorbed by none."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, p // k, absorb_reqs=False)


def split_padding_dropped(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """The last ubatch stops at ``sum(nst)``: padded tokens absorbed by none."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, p // k, absorb_tokens=False)


def split_straddler_once(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """A straddling request is kept in the earlier ubatch only (disjoint request ranges)."""
    counts, p, rp, k = check_ubatch_args(nst, padded, padded_reqs, n)
    return _split(counts, p, rp, k, p // k, disjoint_reqs=True)



def _canon(nst: list[int], padded: int, padded_reqs: int, n: int) -> dict[str, Any]:
    """A canonical counterexample with a plain list (the catalogue then leaves the dtype free)."""
    return {"num_scheduled_tokens": nst, "num_tokens_padded": padded, "num_reqs_padded": padded_reqs, "num_ubatches": n}



def split_zeroes_counts(nst: Any, padded: int, padded_reqs: int, n: int) -> list[UbatchSlice] | None:
    """The right split, but the caller's counts are zeroed afterwards."""
    from batchfuzz.reference.split_ubatches import split_ubatches

    out = split_ubatches(nst, padded, padded_reqs, n)
    nst[:] = 0
    return out


VARIANTS = (
    Variant("no_refusal", "the ubatch split without the empty-last-ubatch refusal (shipped before the refusal existed)",
            split_no_refusal, "shipped", ("refusal_rule", "last_ubatch_has_real_token", "matches_oracle"), _canon([1], 2, 1, 2)),
    Variant("refusal_strict", "refuses only when (Np // n) * (n - 1) > sum(nst): > for >=",
            split_refusal_strict, "mutant", ("refusal_rule", "last_ubatch_has_real_token", "matches_oracle"), _canon([1], 2, 1, 2)),
    Variant("ceil_size", "ubatch size ceil(Np / n) instead of Np // n",
            split_ceil_size, "mutant", ("equal_sizes", "matches_oracle"), _canon([3], 3, 1, 2)),
    Variant("split_on_real_tokens", "split points from sum(nst) // n, ignoring the padding",
            split_on_real_tokens, "mutant", ("equal_sizes", "matches_oracle"), _canon([3], 4, 1, 2)),
    Variant("padded_requests_dropped", "the last ubatch stops at the last real request instead of Rp",
            split_padded_reqs_dropped, "mutant", ("request_ranges_exact", "matches_oracle"), _canon([2], 2, 2, 2)),
    Variant("padding_dropped", "the last ubatch stops at sum(nst) instead of Np",
            split_padding_dropped, "mutant", ("tokens_partition_padded", "matches_oracle"), _canon([3], 4, 1, 2)),
    Variant("straddler_once", "a straddling request is listed in the earlier ubatch only",
            split_straddler_once, "mutant",
            ("straddlers_in_both", "request_ranges_exact", "per_request_token_counts", "matches_oracle"), _canon([2], 2, 1, 2)),
    Variant("refusal_for_two", "refuses as if n were 2 ((Np // 2) >= sum(nst)), whatever num_ubatches",
            split_refusal_for_two, "mutant", ("refusal_rule", "last_ubatch_has_real_token", "matches_oracle"), _canon([2], 3, 1, 3)),
    Variant("in_halves", "two ubatches whatever num_ubatches (one cut at Np // 2)", split_in_halves, "mutant",
            ("equal_sizes", "matches_oracle"), _canon([3], 3, 1, 3)),
    Variant("zeroes_counts", "right split, but zeroes the caller's num_scheduled_tokens in place", split_zeroes_counts, "mutant",
            ("inputs_unchanged",), _canon([1], 2, 1, 2)),
)

