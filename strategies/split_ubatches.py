"""Strategies for contract D, the ubatch split (docs/contracts.md, contract D).

A case is ``(num_scheduled_tokens, Np, Rp, n)`` with ``Np`` from the step
itself, a capture size, arbitrary padding (data-parallel ranks pad to a
common size), or right at the refusal boundary, and ``n = 2`` mostly
(dual-batch overlap), 3 or 4 sometimes.

Domains: ``spec`` and ``engine`` coincide. The engine's callers guarantee
exactly the contract's precondition (every request has a token; ``Np`` is
the padded count, at least the real one and at least ``n``, since the
thresholds that gate a split are at least ``n``), and padded counts land
anywhere, the refusal boundary included. ``engine-steps`` takes
``num_scheduled_tokens`` from a step of the installed vLLM's own scheduler
(``realizable_steps(source="engine")``, docs/engine-steps.md): the counts in
the runner's batch order, as int32 as the runner keeps them; ``Np``, ``Rp``
and ``n`` are drawn over them as above (the padding is the caller's, not the
scheduler's).

Shrinks towards one request of one token, ``n = 2``, ``Np = max(sum(nst), n)``
and no padded requests; on ``engine-steps`` the workload shrinks first (as
``realizable_steps(source="engine")`` says), then the padding.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.reference._args import INT_DTYPES, ceil_div
from batchfuzz.strategies._engine import default_capture_sizes, pad_to_capture_size
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope, compositions
from batchfuzz.strategies._steps import ENGINE_STEPS, realizable_steps
from batchfuzz.strategies._validate import check_choice, check_integer

NUM_UBATCHES = (2, 2, 2, 3, 4)  # 2 mostly (dual-batch overlap); 3 and 4 sometimes
CAPTURE_SIZES = default_capture_sizes(512)
DOMAINS = ("spec", "engine", ENGINE_STEPS)
# The domain each step source feeds (``--steps SOURCE``; engine_steps.steps_domain):
# only the engine's scheduler; the scheduler model's steps are contract E's.
STEP_SOURCE_DOMAINS = {"engine": ENGINE_STEPS}


@st.composite
def _ubatch_args(draw: st.DrawFn, max_reqs: int, max_tokens_per_req: int) -> Case:
    nst = draw(st.lists(st.integers(1, max_tokens_per_req), min_size=1, max_size=max_reqs))
    return _padded(draw, nst, None, {})


def _padded(draw: st.DrawFn, nst: list[int], dtype: Any, context: dict[str, Any]) -> Case:
    """A case over the counts ``nst``: ``n``, where ``Np`` comes from, ``Np``,
    ``Rp`` and (when ``dtype`` is None) the dtype drawn; ``context`` added to ``kind``."""
    num_reqs = len(nst)
    n = draw(st.sampled_from(NUM_UBATCHES))
    total = sum(nst)
    kind = draw(st.sampled_from(["exact", "capture", "padding", "boundary"]))
    if kind == "exact":
        padded = max(total, n)
    elif kind == "capture":
        padded = max(pad_to_capture_size(total, CAPTURE_SIZES) or total, n)
    elif kind == "padding":
        padded = max(total + draw(st.integers(0, 2 * total)), n)
    else:
        # Ubatch size s with s * (n - 1) right at, or one below, sum(nst).
        size = max(1, ceil_div(total, n - 1) - draw(st.integers(0, 1)))
        padded = max(size * n + draw(st.integers(0, n - 1)), total, n)
    padded_reqs = num_reqs + draw(st.one_of(st.just(0), st.integers(0, 8)))
    if dtype is None:
        dtype = draw(st.sampled_from(INT_DTYPES))
    return Case({"num_scheduled_tokens": np.array(nst, dtype=dtype), "num_tokens_padded": padded,
                 "num_reqs_padded": padded_reqs, "num_ubatches": n}, {"kind": kind, **context})


@functools.cache
def _engine_step_cases() -> st.SearchStrategy[Case]:
    steps = realizable_steps(source="engine")

    @st.composite
    def engine_cases(draw: st.DrawFn) -> Case:
        step, info = draw(steps)
        q = np.asarray(step.num_scheduled_tokens)
        nst = [int(x) for x in q.tolist() if x > 0]  # every scheduled request has a token; kept as a guard
        return _padded(draw, nst, q.dtype, {"source": "vllm scheduler", "labels": list(info["labels"]),
                                            "workload": info["workload"]})

    return engine_cases()


def cases(domain: str = "spec", *, max_num_reqs: int = 16, max_tokens_per_req: int = 64) -> st.SearchStrategy[Case]:
    """Contract D cases (``spec`` and ``engine`` alike; ``engine-steps`` with
    the counts of a step of vLLM's own scheduler, InvalidArgument saying why
    where vLLM cannot be imported; the bounds do not apply to it);
    ``context["kind"]`` says where ``Np`` came from. Shrinks as the module docstring says."""
    check_choice("domain", domain, DOMAINS)
    bounds = (check_integer("max_num_reqs", max_num_reqs, min_value=1),
              check_integer("max_tokens_per_req", max_tokens_per_req, min_value=1))
    if domain == ENGINE_STEPS:
        return _engine_step_cases()
    return _ubatch_args(*bounds)


def in_domain(case: Case, domain: str) -> bool:
    a = case.args
    nst = np.asarray(a["num_scheduled_tokens"])
    n, padded = a["num_ubatches"], a["num_tokens_padded"]
    return nst.size >= 1 and bool((nst >= 1).all()) and padded >= max(int(nst.sum()), n) and a["num_reqs_padded"] >= nst.size and n >= 2


def size(case: Case) -> tuple[int, ...]:
    """The order of contract D cases: by ``R``, ``Np``, ``sum(nst)``, ``Rp``, then ``n``."""
    a = case.args
    nst = np.asarray(a["num_scheduled_tokens"], dtype=np.int64)
    return (int(nst.size), a["num_tokens_padded"], int(nst.sum()), a["num_reqs_padded"], a["num_ubatches"])


def reductions(case: Case) -> Iterator[Case]:
    """Smaller cases built from ``case`` (``batchfuzz.reduce``): a request
    deleted, a count lowered, two neighbouring requests merged, less padding,
    fewer ubatches."""
    a = case.args
    nst = np.asarray(a["num_scheduled_tokens"])
    padded, padded_reqs, n = a["num_tokens_padded"], a["num_reqs_padded"], a["num_ubatches"]

    def make(nst2: np.ndarray, padded2: int, padded_reqs2: int, n2: int) -> Case:
        return Case({"num_scheduled_tokens": nst2, "num_tokens_padded": padded2, "num_reqs_padded": padded_reqs2,
                     "num_ubatches": n2}, dict(case.context))

    for i in range(nst.size):
        rest = np.delete(nst, i)
        yield make(rest, padded, padded_reqs - 1, n)
        yield make(rest, max(int(rest.sum()), n), max(rest.size, padded_reqs - 1), n)
        for value in (1, int(nst[i]) // 2, int(nst[i]) - 1):
            if 1 <= value < int(nst[i]):
                smaller = nst.copy()
                smaller[i] = value
                yield make(smaller, padded, padded_reqs, n)
                yield make(smaller, padded - (int(nst[i]) - value), padded_reqs, n)
    # Two neighbours merged into one request with both their tokens: the
    # step keeps its tokens, so a split that the refusal rule accepts stays
    # accepted, where deleting a request can leave a last ubatch of padding
    # only (refused, so the bug no longer shows).
    for i in range(nst.size - 1):
        merged = np.concatenate([nst[:i], nst[i:i + 2].sum(keepdims=True), nst[i + 2:]]).astype(nst.dtype)
        yield make(merged, padded, padded_reqs - 1, n)
        yield make(merged, padded, padded_reqs, n)
    for padded2 in (max(int(nst.sum()), n), padded - 1):
        yield make(nst.copy(), padded2, padded_reqs, n)
    for padded_reqs2 in (nst.size, padded_reqs - 1):
        yield make(nst.copy(), padded, padded_reqs2, n)
    if n > 2:
        yield make(nst.copy(), padded, padded_reqs, n - 1)


# ---------------------------------------------------------------- bounded-exhaustive scopes

# (max requests, max sum(nst), max Np, max Rp - R) of each scope.
_SCOPE_BOUNDS = {"small": (4, 8, 16, 2), "ci": (2, 4, 8, 1)}

SCOPES = {
    "small": ScopeSpec("every nst of 1 <= R <= 4 positive entries with sum(nst) <= 8 (int32), every n in {2, 3, 4}, every "
                       "max(sum(nst), n) <= Np <= 16 and every R <= Rp <= R + 2; in the order R, Np, sum(nst), Rp, then n",
                       "spec", 14964),
    "ci": ScopeSpec("as small with R <= 2, sum(nst) <= 4, Np <= 8 and Rp <= R + 1", "spec", 330),
}


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract D case of ``scope`` (``SCOPES``), smallest first in
    :func:`size`'s order: ``R``, ``Np``, ``sum(nst)``, ``Rp``, then ``n``."""
    max_reqs, max_total, max_padded, max_extra = _SCOPE_BOUNDS[check_scope(scope, SCOPES)]
    for r in range(1, max_reqs + 1):
        for padded in range(2, max_padded + 1):
            for total in range(r, min(max_total, padded) + 1):
                for padded_reqs in range(r, r + max_extra + 1):
                    for n in (2, 3, 4):
                        if n > padded:
                            continue
                        # Requests of one (R, Np, sum, Rp, n) are equal in the order: innermost.
                        for nst in compositions(total, r, 1, total):
                            yield Case({"num_scheduled_tokens": np.array(nst, dtype=np.int32), "num_tokens_padded": padded,
                                        "num_reqs_padded": padded_reqs, "num_ubatches": n}, {"kind": "exhaustive"})
