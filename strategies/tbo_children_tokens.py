"""Strategies for contract L, the real tokens of the two-batch-overlap children (docs/contracts.md, contract L).

Domains:

- ``spec``: every valid call: ``N`` from 0 to 4096, ``t`` and ``M`` anywhere in ``[0, N]``;
- ``engine``: what SGLang's preparer passes: ``t`` is split from the real
  tokens, so ``t <= M`` (from 0.5.23 ``M`` is the parent's count of real
  tokens; up to 0.5.14 the caller passed the padded count, ``M = N``).

Shrinks towards smaller ``N``, ``M`` and ``t``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope

DOMAINS = ("spec", "engine")


def case_of(split_token_index: int, num_token_non_padded: int, num_tokens: int) -> Case:
    return Case({"split_token_index": split_token_index, "num_token_non_padded": num_token_non_padded, "num_tokens": num_tokens})


@st.composite
def _cases(draw: st.DrawFn, domain: str) -> Case:
    n = draw(st.integers(0, 4096))
    m = draw(st.integers(0, n))
    t = draw(st.integers(0, m if domain == "engine" else n))
    return case_of(t, m, n)


def cases(domain: str) -> st.SearchStrategy[Case]:
    """Cases of ``domain``: ``N``, then ``M``, then ``t``."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    return _cases(domain)


def in_domain(case: Case, domain: str) -> bool:
    t, m, n = (case.args[k] for k in ("split_token_index", "num_token_non_padded", "num_tokens"))
    ok = 0 <= t <= n and 0 <= m <= n
    return ok and (domain != "engine" or t <= m)


def size(case: Case) -> tuple[int, ...]:
    """Smaller ``N``, then ``M``, then ``t``."""
    return (case.args["num_tokens"], case.args["num_token_non_padded"], case.args["split_token_index"])


def reductions(case: Case) -> Iterator[Case]:
    """Lower ``N``, ``M`` or ``t`` by one (staying in ``[0, N]``)."""
    t, m, n = (case.args[k] for k in ("split_token_index", "num_token_non_padded", "num_tokens"))
    if n > max(t, m):
        yield case_of(t, m, n - 1)
    if m > 0:
        yield case_of(t, m - 1, n)
    if t > 0:
        yield case_of(t - 1, m, n)


_SCOPE_BOUNDS = {"small": 8, "ci": 5}


def _scope_all(scope: str) -> list[Case]:
    bound = _SCOPE_BOUNDS[scope]
    out = [case_of(t, m, n) for n in range(bound + 1) for m, t in itertools.product(range(n + 1), repeat=2)]
    return sorted(out, key=size)


SCOPES = {
    "small": ScopeSpec("every N from 0 to 8 with every t and M in [0, N]; in size's order", "spec", len(_scope_all("small"))),
    "ci": ScopeSpec("as small with N up to 5", "spec", len(_scope_all("ci"))),
}


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract L case of ``scope`` (``SCOPES``), smallest first in :func:`size`'s order."""
    yield from _scope_all(check_scope(scope, SCOPES))
