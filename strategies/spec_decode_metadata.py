"""Strategies for contract H, speculative-decoding metadata (docs/contracts.md, contract H).

Domains:

- ``spec``: any ``R >= 1`` requests with ``d[i] >= 0`` drafts and
  ``q[i] >= 1 + d[i]`` scheduled tokens, drawn from three shapes:
  ``generic`` (``R`` up to 16, up to 8 drafts, up to 4 tokens more),
  ``zeros`` (most requests without drafts) and ``large`` (up to 512 requests
  with up to 64 drafts, or one or two requests with up to 40000, past the
  int16 limit);
- ``engine``: the steps the runner builds the metadata for: a request
  decoding schedules its token and ``0 .. k`` drafts (``q = 1 + d``, ``k``
  in ``1 .. 8``); a request prefilling has no drafts and schedules a chunk
  of up to 64 tokens; up to 256 requests.

Everything shrinks towards one request without drafts and one token.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope
from batchfuzz.strategies._validate import check_choice

DOMAINS = ("spec", "engine")


def _case(d: list[int], q: list[int]) -> Case:
    return Case({"num_draft_tokens": d, "num_scheduled_tokens": q})


@st.composite
def _rows(draw: st.DrawFn, max_reqs: int, max_drafts: int, max_extra: int, zero_weight: int) -> Case:
    r = draw(st.integers(1, max_reqs))
    drafts = st.one_of(*([st.just(0)] * zero_weight), st.integers(0, max_drafts))
    d = draw(st.lists(drafts, min_size=r, max_size=r))
    extra = draw(st.lists(st.integers(0, max_extra), min_size=r, max_size=r))
    return _case(d, [1 + n + e for n, e in zip(d, extra, strict=True)])


def _spec() -> st.SearchStrategy[Case]:
    return st.one_of(_rows(16, 8, 4, 0), _rows(16, 8, 4, 3), _rows(512, 64, 4, 0), _rows(2, 40000, 2, 0))


@st.composite
def _engine(draw: st.DrawFn) -> Case:
    k = draw(st.integers(1, 8))
    r = draw(st.integers(1, 256))
    d, q = [], []
    for _ in range(r):
        if draw(st.integers(0, 3)) == 0:  # a prefill chunk: no drafts
            d.append(0)
            q.append(draw(st.integers(1, 64)))
        else:
            n = draw(st.integers(0, k))
            d.append(n)
            q.append(1 + n)
    return _case(d, q)


def cases(domain: str = "spec") -> st.SearchStrategy[Case]:
    """Contract H cases of ``domain``; shrink towards one request with no
    drafts and one scheduled token."""
    check_choice("domain", domain, DOMAINS)
    return _spec() if domain == "spec" else _engine()


def in_domain(case: Case, domain: str) -> bool:
    """Whether ``case`` lies in ``domain`` (``engine``: each request a decode
    with ``q = 1 + d``, ``d <= 8``, or a draft-free chunk of at most 64; at
    most 256 requests)."""
    d, q = case.args["num_draft_tokens"], case.args["num_scheduled_tokens"]
    if not (len(d) == len(q) >= 1 and all(n >= 0 and t >= 1 + n for n, t in zip(d, q, strict=True))):
        return False
    if domain == "spec":
        return True
    return len(d) <= 256 and all((t == 1 + n and n <= 8) or (n == 0 and t <= 64) for n, t in zip(d, q, strict=True))


def size(case: Case) -> tuple[int, ...]:
    """The order of contract H cases: by ``R``, then the scheduled tokens, then the drafts."""
    d, q = case.args["num_draft_tokens"], case.args["num_scheduled_tokens"]
    return (len(d), sum(q), sum(d))


def reductions(case: Case) -> Iterator[Case]:
    """Smaller cases built from ``case``: a request deleted, its drafts set
    to none or one fewer, its scheduled tokens to the least (``1 + d``) or
    one fewer, every count halved."""
    d, q = list(case.args["num_draft_tokens"]), list(case.args["num_scheduled_tokens"])
    for i in range(len(d)):
        if len(d) > 1:
            yield _case(d[:i] + d[i + 1:], q[:i] + q[i + 1:])
    for i in range(len(d)):
        for n in (0, d[i] - 1):
            if 0 <= n < d[i]:
                yield _case(d[:i] + [n] + d[i + 1:], q[:i] + [q[i] - (d[i] - n)] + q[i + 1:])
        for t in (1 + d[i], q[i] - 1):
            if 1 + d[i] <= t < q[i]:
                yield _case(d, q[:i] + [t] + q[i + 1:])
    halves = [n // 2 for n in d]
    if halves != d:
        yield _case(halves, [t - (n - h) for t, n, h in zip(q, d, halves, strict=True)])


# ---------------------------------------------------------------- bounded-exhaustive scopes

INT16_EDGE = range(32766, 32769)  # 1 + d around the int16 limit 32767

SCOPES = {
    "small": ScopeSpec("every step of 1 <= R <= 3 requests with d[i] in 0..2 and 1 + d[i] <= q[i] <= 3; in size order",
                       "spec", 258),
    "ci": ScopeSpec("every step of 1 <= R <= 2 requests with d[i] in 0..2 and 1 + d[i] <= q[i] <= 3; in size order",
                    "spec", 42),
    "int16_edge": ScopeSpec("one request with 32766 <= d <= 32768 drafts and q = 1 + d (a running sum past the int16 "
                            "limit 32767); in size order", "spec", 3),
}


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract H case of ``scope`` (``SCOPES``), smallest first in :func:`size`'s order."""
    check_scope(scope, SCOPES)
    if scope == "int16_edge":
        yield from (_case([n], [1 + n]) for n in INT16_EDGE)
        return
    rows = [(n, t) for n in range(3) for t in range(1 + n, 4)]
    out = [_case([x[0] for x in chosen], [x[1] for x in chosen])
           for r in range(1, (3 if scope == "small" else 2) + 1) for chosen in itertools.product(rows, repeat=r)]
    out.sort(key=size)
    yield from out
