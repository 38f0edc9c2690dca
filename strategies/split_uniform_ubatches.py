"""Strategies for contract N, the request-boundary split of a uniform
speculative-decoding batch (docs/contracts.md, contract N).

Domains:

- ``spec``: every valid call: ``R`` 1 to 64 requests of ``q`` 2 to 8 tokens,
  ``n`` mostly 2, sometimes 3 or 4, ``Np`` from ``max(R, n) * q`` up with any
  padding, ``Rp >= R``;
- ``engine``: what vLLM's new runner gives: ``Np`` a multiple of ``q`` (every
  data-parallel rank's uniform batch is ``q`` tokens per request, padded
  requests included) and ``Rp`` either ``Np // q`` (a FULL decode graph pads
  the requests) or ``R`` (an eager step).

Shrinks towards fewer requests, shorter queries, two microbatches and less
padding.
"""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope

DOMAINS = ("spec", "engine")
ARGUMENTS = ("num_reqs", "query_len", "num_tokens_padded", "num_reqs_padded", "num_ubatches")


def case_of(num_reqs: int, query_len: int, num_tokens_padded: int, num_reqs_padded: int, num_ubatches: int) -> Case:
    return Case(dict(zip(ARGUMENTS, (num_reqs, query_len, num_tokens_padded, num_reqs_padded, num_ubatches), strict=True)))


@st.composite
def _cases(draw: st.DrawFn, domain: str) -> Case:
    r = draw(st.integers(1, 64))
    q = draw(st.integers(2, 8))
    n = draw(st.one_of(st.just(2), st.integers(3, 4)))
    least = max(r, n) * q
    if domain == "engine":
        np_ = least + q * draw(st.integers(0, 64))
        rp = draw(st.sampled_from([np_ // q, r]))
    else:
        np_ = least + draw(st.integers(0, 512))
        rp = r + draw(st.integers(0, 64))
    return case_of(r, q, np_, rp, n)


def cases(domain: str) -> st.SearchStrategy[Case]:
    """Cases of ``domain``: ``R``, ``q``, ``n``, then the padding."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    return _cases(domain)


def in_domain(case: Case, domain: str) -> bool:
    r, q, np_, rp, n = (case.args[k] for k in ARGUMENTS)
    ok = r >= 1 and q >= 2 and n >= 2 and np_ >= max(r, n) * q and rp >= r
    return ok and (domain != "engine" or (np_ % q == 0 and rp in (r, np_ // q)))


def size(case: Case) -> tuple[int, ...]:
    """Fewer requests, shorter queries, fewer microbatches, less padding."""
    r, q, np_, rp, n = (case.args[k] for k in ARGUMENTS)
    return (r, q, n, np_, rp)


def reductions(case: Case) -> Iterator[Case]:
    """One request, one token of each query, one microbatch or some padding fewer (staying valid)."""
    r, q, np_, rp, n = (case.args[k] for k in ARGUMENTS)
    candidates = [(r - 1, q, np_, rp, n), (r, q - 1, np_, rp, n), (r, q, np_, rp, n - 1), (r, q, np_ - 1, rp, n),
                  (r, q, np_, rp - 1, n)]
    for cr, cq, cn_p, crp, cn in candidates:
        if cr >= 1 and cq >= 2 and cn >= 2 and cn_p >= max(cr, cn) * cq and crp >= cr:
            yield case_of(cr, cq, cn_p, crp, cn)


_SCOPE_BOUNDS = {"small": (4, 4, 3, 6), "ci": (3, 3, 3, 3)}  # most requests, q, n, and padding tokens


def _scope_all(scope: str) -> list[Case]:
    most_r, most_q, most_n, pad = _SCOPE_BOUNDS[scope]
    out = [case_of(r, q, max(r, n) * q + extra, rp, n)
           for r in range(1, most_r + 1) for q in range(2, most_q + 1) for n in range(2, most_n + 1)
           for extra in range(pad + 1) for rp in (r, r + 1)]
    return sorted(out, key=size)


SCOPES = {
    "small": ScopeSpec("R 1 to 4, q 2 to 4, n 2 or 3, 0 to 6 padding tokens, Rp R or R + 1; in size's order", "spec",
                       len(_scope_all("small"))),
    "ci": ScopeSpec("as small with R and q up to 3 and up to 3 padding tokens", "spec", len(_scope_all("ci"))),
}


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract N case of ``scope`` (``SCOPES``), smallest first in :func:`size`'s order."""
    yield from _scope_all(check_scope(scope, SCOPES))
