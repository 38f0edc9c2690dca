"""Strategies for contract G, batch order and decode/prefill classification
(docs/contracts.md, contract G).

Domains:

- ``spec``: any ``1 <= R <= 8`` requests with ``c >= 0``, ``q >= 1``,
  ``p >= 1`` up to 8 (a request's chunk may run past its prompt), zero to
  three KV-cache groups each asking for a threshold in ``1 .. 4`` or for no
  reordering, ``k`` in ``0 .. 3``; drawn as any such step, or one that
  schedules one count for every request, or a speculative step (``k >= 1``,
  ``1 + k`` tokens for every request done prefilling) whose groups all run
  speculative rows as decodes, or a hybrid one (thresholds ``1`` and
  ``1 + k``);
- ``engine``: the steps a scheduler makes: a request still prefilling
  schedules a chunk of at most what is left of its prompt (``1 <= q <= p -
  c``); a request done prefilling schedules its token plus at most ``k``
  drafts (``1 <= q <= 1 + k``; in half the steps all ``k``); one to three groups whose backends ask for 1
  (no speculative rows as decodes), ``1 + k`` (speculative rows as decodes),
  a small-prefill threshold (``max(128, 1 + k)``) or no reordering.

Everything shrinks towards one request with nothing computed, one group of
threshold 1, no speculative tokens.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope
from batchfuzz.strategies._validate import check_choice

DOMAINS = ("spec", "engine")
MAX_REQS = 8
MAX_COUNT = 8


def _case(c: list[int], q: list[int], p: list[int], thresholds: list[int | None], k: int) -> Case:
    return Case({"num_computed_tokens": c, "num_scheduled_tokens": q, "num_prompt_tokens": p,
                 "thresholds": thresholds, "num_speculative_tokens": k})


@st.composite
def _spec(draw: st.DrawFn) -> Case:
    shape = draw(st.sampled_from(["any", "uniform", "speculative", "hybrid"]))
    speculative = shape in ("speculative", "hybrid")
    r = draw(st.integers(1, MAX_REQS))
    k = max(draw(st.integers(0, 3)), 1 if speculative else 0)
    c = draw(st.lists(st.integers(0, MAX_COUNT), min_size=r, max_size=r))
    p = draw(st.lists(st.integers(1, MAX_COUNT), min_size=r, max_size=r))
    q = draw(st.lists(st.integers(1, MAX_COUNT), min_size=r, max_size=r))
    if shape == "uniform":  # every request schedules as many tokens as the first
        q = [q[0]] * r
    elif speculative:  # every request done prefilling schedules its token and k drafts
        q = [1 + k if ci >= pi else qi for ci, qi, pi in zip(c, q, p, strict=True)]
    if shape == "speculative":  # every group asking runs the speculative rows as decodes
        thresholds = draw(st.lists(st.sampled_from([1 + k, 2 + k, None]), min_size=1, max_size=3))
    elif shape == "hybrid":  # one group that does, one that does not
        thresholds = [1, 1 + k] if draw(st.booleans()) else [1 + k, 1]
    else:
        asks = st.one_of(st.sampled_from([1, 1 + k]), st.integers(1, 4), st.none())
        thresholds = draw(st.lists(asks, min_size=0, max_size=3))
    return _case(c, q, p, thresholds, k)


@st.composite
def _engine(draw: st.DrawFn) -> Case:
    k = draw(st.integers(0, 4))
    r = draw(st.integers(1, MAX_REQS))
    uniform = draw(st.booleans())  # every request done prefilling schedules all k drafts
    c, q, p = [], [], []
    for _ in range(r):
        prompt = draw(st.integers(1, 16))
        if draw(st.booleans()):  # still prefilling: a chunk of what is left of the prompt
            done = draw(st.integers(0, prompt - 1))
            c.append(done)
            q.append(draw(st.integers(1, prompt - done)))
        else:  # done prefilling: one token plus up to k drafts
            c.append(draw(st.integers(prompt, prompt + 16)))
            q.append(1 + k if uniform else draw(st.integers(1, 1 + k)))
        p.append(prompt)
    asks = st.sampled_from([1, 1 + k, max(128, 1 + k), None])
    thresholds = draw(st.lists(asks, min_size=1, max_size=3))
    return _case(c, q, p, thresholds, k)


def cases(domain: str = "spec") -> st.SearchStrategy[Case]:
    """Contract G cases of ``domain``; shrink towards one request with nothing
    computed, one group asking for threshold 1, ``k = 0``."""
    check_choice("domain", domain, DOMAINS)
    return _spec() if domain == "spec" else _engine()


def _rows(case: Case) -> Iterator[tuple[int, int, int]]:
    a = case.args
    return zip(a["num_computed_tokens"], a["num_scheduled_tokens"], a["num_prompt_tokens"], strict=True)


def in_domain(case: Case, domain: str) -> bool:
    """Whether ``case`` lies in ``domain`` (``engine``: every row a prefill
    chunk within its prompt or a decode with at most ``k`` drafts; one to
    three groups)."""
    a = case.args
    r, k, thresholds = len(a["num_computed_tokens"]), a["num_speculative_tokens"], a["thresholds"]
    if not (r >= 1 and len(a["num_scheduled_tokens"]) == r == len(a["num_prompt_tokens"]) and k >= 0):
        return False
    if not all(c >= 0 and q >= 1 and p >= 1 for c, q, p in _rows(case)):
        return False
    if not all(b is None or b >= 1 for b in thresholds):
        return False
    if domain == "spec":
        return True
    return 1 <= len(thresholds) <= 3 and all((c < p and q <= p - c) or (c >= p and q <= 1 + k) for c, q, p in _rows(case))


def size(case: Case) -> tuple[int, ...]:
    """The order of contract G cases: by ``R``, then the scheduled, computed
    and prompt tokens, the groups, their thresholds, ``k``."""
    a = case.args
    return (len(a["num_computed_tokens"]), sum(a["num_scheduled_tokens"]), sum(a["num_computed_tokens"]),
            sum(a["num_prompt_tokens"]), len(a["thresholds"]), sum(b or 0 for b in a["thresholds"]),
            a["num_speculative_tokens"])


def reductions(case: Case) -> Iterator[Case]:
    """Smaller cases built from ``case``: a request deleted, a count lowered
    by one or to its least, a group dropped, its threshold lowered or set to
    None, one speculative token fewer, every scheduled count and threshold
    one lower together."""
    a = case.args
    c, q, p = list(a["num_computed_tokens"]), list(a["num_scheduled_tokens"]), list(a["num_prompt_tokens"])
    th, k = list(a["thresholds"]), a["num_speculative_tokens"]
    for i in range(len(c)):
        if len(c) > 1:
            yield _case(c[:i] + c[i + 1:], q[:i] + q[i + 1:], p[:i] + p[i + 1:], th, k)
    for arr, least in ((q, 1), (c, 0), (p, 1)):
        for i in range(len(arr)):
            for v in (least, arr[i] - 1):
                if least <= v < arr[i]:
                    saved, arr[i] = arr[i], v
                    yield _case(list(c), list(q), list(p), th, k)
                    arr[i] = saved
    for g in range(len(th)):
        yield _case(c, q, p, th[:g] + th[g + 1:], k)
        b = th[g]
        if b is not None:
            yield _case(c, q, p, th[:g] + [None] + th[g + 1:], k)
        if b is not None and b > 1:
            yield _case(c, q, p, th[:g] + [b - 1] + th[g + 1:], k)
    if k > 0:
        yield _case(c, q, p, th, k - 1)
    # Every count and threshold one lower together (keeps which rows are below which threshold).
    if any(v > 1 for v in q) and all(b is None or b > 1 for b in th):
        yield _case(c, [max(1, v - 1) for v in q], p, [None if b is None else b - 1 for b in th], k)


# ---------------------------------------------------------------- bounded-exhaustive scopes

_THRESHOLDS: tuple[list[int | None], ...] = ([1], [2], [None], [1, 2], [None, 2])

SCOPES = {
    "small": ScopeSpec("every step of R <= 2 requests with c in 0..2, q in 1..3, p in 1..2, thresholds [1], [2], [None], "
                       "[1, 2] or [None, 2], k in 0..1; in size order", "spec", 3420),
    "ci": ScopeSpec("every step of R <= 2 requests with c, q, p in 0..1 / 1..2 / 1..2, the same thresholds and k; "
                    "in size order", "spec", 720),
}


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract G case of ``scope`` (``SCOPES``), smallest first in
    :func:`size`'s order."""
    check_scope(scope, SCOPES)
    cs, qs = (range(3), range(1, 4)) if scope == "small" else (range(2), range(1, 3))
    rows = list(itertools.product(cs, qs, range(1, 3)))
    out = []
    for r in (1, 2):
        for chosen in itertools.product(rows, repeat=r):
            for th in _THRESHOLDS:
                for k in (0, 1):
                    out.append(_case([x[0] for x in chosen], [x[1] for x in chosen], [x[2] for x in chosen], list(th), k))
    out.sort(key=size)
    yield from out
