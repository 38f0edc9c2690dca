"""Strategies for contract A, the dummy token split (docs/contracts.md, contract A).

Domains:

- ``spec``: every ``1 <= R <= N`` of the realistic sizes (``R`` up to 1024,
  ``N`` up to 131072), with the edges ``R == N``, ``R == 1`` and
  ``N % R`` in ``{0, 1, R - 1}``;
- ``engine``: the dummy runs an engine makes: ``N`` a CUDA-graph capture size
  or a token budget and ``R = min(N, max_num_seqs)`` (capture and profiling
  runs), or a uniform-decode run ``R = N // q`` of ``q`` tokens per request.

The context's ``max_model_len`` is at least ``ceil(N / R)`` (so ``N <= R * L``),
and often exactly that (the tightest). Everything shrinks towards small ``R``
and ``N`` and the tightest ``max_model_len``, where a bad split shows first.
"""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.reference._args import ceil_div
from batchfuzz.strategies._engine import MAX_NUM_BATCHED_TOKENS_COMMON, capture_sizes, max_num_seqs
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope
from batchfuzz.strategies._validate import check_choice, check_integer, check_subset

MAX_NUM_REQS = 1024
MAX_NUM_TOKENS = 131072
SHAPES = ("generic", "edges", "engine")
# Tokens per request of a uniform-decode dummy run: 1 + num_speculative_tokens.
UNIFORM_DECODE_QUERY_LENS = (1, 2, 3, 4, 5, 8)


@st.composite
def _generic(draw: st.DrawFn, max_reqs: int, max_tokens: int) -> tuple[int, int]:
    r = draw(st.integers(1, min(max_reqs, max_tokens)))
    n = draw(st.integers(r, min(max_tokens, r * 64)))
    return r, n


@st.composite
def _edges(draw: st.DrawFn, max_reqs: int, max_tokens: int) -> tuple[int, int]:
    r = draw(st.integers(1, min(max_reqs, max_tokens)))
    kind = draw(st.sampled_from(["R==N", "R==1", "rem0", "rem1", "remR-1"]))
    if kind == "R==N":
        return r, r
    if kind == "R==1":
        return 1, draw(st.integers(1, max_tokens))
    q = draw(st.integers(1, max(1, max_tokens // r - 1)))
    rem = {"rem0": 0, "rem1": min(1, r - 1), "remR-1": r - 1}[kind]
    n = q * r + rem
    return (r, n) if n <= max_tokens else (r, r)


@st.composite
def _engine(draw: st.DrawFn, max_reqs: int, max_tokens: int) -> tuple[int, int]:
    """A dummy run as engines make one."""
    seqs = draw(max_num_seqs(max_reqs))
    if draw(st.booleans()):
        n = draw(st.sampled_from(draw(capture_sizes())))
    else:
        n = draw(st.sampled_from(MAX_NUM_BATCHED_TOKENS_COMMON))
    n = min(n, max_tokens)
    if draw(st.integers(0, 3)) == 3:  # uniform decode: q tokens per request, N a multiple of q
        q = draw(st.sampled_from(UNIFORM_DECODE_QUERY_LENS))
        n = max(q, n - n % q)
        if n <= max_tokens and n // q <= max_reqs:
            return n // q, n
    return min(n, seqs), n


def num_reqs_and_tokens(*, max_num_reqs: int = MAX_NUM_REQS, max_num_tokens: int = MAX_NUM_TOKENS,
                        shapes: tuple[str, ...] = SHAPES) -> st.SearchStrategy[tuple[int, int]]:
    """``(num_reqs, num_tokens)`` with ``1 <= R <= N``, ``R <= max_num_reqs``,
    ``N <= max_num_tokens``, drawn from the ``shapes`` given: ``"generic"``
    (any ``R``, ``N`` up to ``64 R``), ``"edges"`` (``R == N``, ``R == 1``,
    ``N % R`` in ``{0, 1, R - 1}``), ``"engine"`` (a capture size or token
    budget with ``R = min(N, max_num_seqs)``, or a uniform-decode run).

    Shrinks towards ``R == N == 1`` through the first shape given.
    """
    max_reqs = check_integer("max_num_reqs", max_num_reqs, min_value=1)
    max_tokens = check_integer("max_num_tokens", max_num_tokens, min_value=1)
    chosen = check_subset("shapes", shapes, SHAPES)
    build = {"generic": _generic, "edges": _edges, "engine": _engine}
    return st.one_of(*(build[s](max_reqs, max_tokens) for s in chosen))


DOMAINS = {"spec": SHAPES, "engine": ("engine",)}


@st.composite
def _cases(draw: st.DrawFn, shapes: tuple[str, ...]) -> Case:
    r, n = draw(num_reqs_and_tokens(shapes=shapes))
    slack = draw(st.one_of(st.just(0), st.integers(0, 4096)))
    return Case({"num_reqs": r, "num_tokens": n}, {"max_model_len": ceil_div(n, r) + slack})


def cases(domain: str = "spec") -> st.SearchStrategy[Case]:
    """Contract A cases of ``domain``; the context holds a ``max_model_len``
    with ``N <= R * max_model_len``. Shrinks as :func:`num_reqs_and_tokens`,
    and towards the tightest ``max_model_len``."""
    check_choice("domain", domain, DOMAINS)
    return _cases(DOMAINS[domain])


def in_domain(case: Case, domain: str) -> bool:
    """Whether ``case`` lies in ``domain`` (both domains share the contract's
    precondition; the engine domain draws only engine-shaped sizes, which are
    not a stricter precondition: any ``R <= N`` is ``min(N, max_num_seqs)``
    for some ``max_num_seqs``)."""
    r, n = case.args["num_reqs"], case.args["num_tokens"]
    return 1 <= r <= n and case.context.get("max_model_len", n) * r >= n


def size(case: Case) -> tuple[int, ...]:
    """The order of contract A cases: by ``R``, then ``N``, then ``max_model_len``."""
    return (case.args["num_reqs"], case.args["num_tokens"], case.context.get("max_model_len", 0))


def reductions(case: Case) -> Iterator[Case]:
    """Smaller cases built from ``case`` (``batchfuzz.reduce``): fewer tokens
    with the same remainder ``N % R`` (the fewest, half the quotient, one
    quotient less), one request or token fewer, halves, each with the
    tightest ``max_model_len``."""
    r, n = case.args["num_reqs"], case.args["num_tokens"]
    same_remainder = (r + n % r, n - r * (n // r // 2), n - r)
    for r2, n2 in ((r, n), *((r, m) for m in same_remainder), (r - 1, n), (r, n - 1), (r - 1, n - 1), (r, n // 2),
                   (r // 2, n // 2), (r - 1, n - r)):
        if 1 <= r2 <= n2:
            yield Case({"num_reqs": r2, "num_tokens": n2}, {**case.context, "max_model_len": ceil_div(n2, r2)})


# ---------------------------------------------------------------- bounded-exhaustive scopes

INT16_EDGE = range(32766, 32771)  # N around the int16 limit 32767

SCOPES = {
    "small": ScopeSpec("every 1 <= R <= N <= 64 with the tightest max_model_len = ceil(N / R) (the strongest L: "
                       "any larger one accepts whatever the tightest accepts); in the order R, then N", "spec", 2080),
    "ci": ScopeSpec("every 1 <= R <= N <= 32 with the tightest max_model_len; in the order R, then N", "spec", 528),
    "int16_edge": ScopeSpec("every 1 <= R <= 2 with 32766 <= N <= 32770 (a count or a sum past the int16 limit 32767), "
                            "the tightest max_model_len; in the order R, then N", "spec", 10),
}


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract A case of ``scope`` (``SCOPES``), smallest first in
    :func:`size`'s order: ``R``, then ``N`` (one ``max_model_len`` per pair)."""
    check_scope(scope, SCOPES)
    if scope == "int16_edge":
        pairs: Iterator[tuple[int, int]] = ((r, n) for r in (1, 2) for n in INT16_EDGE)
    else:
        top = 64 if scope == "small" else 32
        pairs = ((r, n) for r in range(1, top + 1) for n in range(r, top + 1))
    for r, n in pairs:
        yield Case({"num_reqs": r, "num_tokens": n}, {"max_model_len": ceil_div(n, r)})
