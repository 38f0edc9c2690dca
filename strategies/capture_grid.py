"""Strategies for contract O, the CUDA-graph capture grid (docs/contracts.md, contract O).

Domains:

- ``spec``: every valid call: ``max_num_seqs`` up to 1024, the token budget up
  to 16384, ``decode_query_len`` up to 8, ``tp_size`` in {1, 2, 4, 8}, sequence
  parallelism on or off;
- ``engine``: what vLLM's configuration admits: the token budget at least
  ``max_num_seqs`` (``SchedulerConfig`` refuses less), and sequence
  parallelism only with ``tp_size > 1`` (the pass is off on one rank).

Shrinks towards smaller limits, ``q`` 1, one rank, sequence parallelism off.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope

DOMAINS = ("spec", "engine")
TP_SIZES = (1, 2, 4, 8)


def case_of(max_num_seqs: int, max_num_batched_tokens: int, decode_query_len: int = 1, tp_size: int = 1,
            sequence_parallel: bool = False) -> Case:
    return Case({"max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
                 "decode_query_len": decode_query_len, "tp_size": tp_size, "sequence_parallel": sequence_parallel})


@st.composite
def _cases(draw: st.DrawFn, domain: str) -> Case:
    # Small limits often (where the grid's head and the unit matter), the defaults' range sometimes.
    s = draw(st.one_of(st.integers(1, 40), st.integers(1, 1024)))
    low = s if domain == "engine" else 1
    b = draw(st.one_of(st.integers(low, max(low, 600)), st.integers(low, 16384)))
    q = draw(st.integers(1, 8))
    t = draw(st.sampled_from(TP_SIZES))
    sp = draw(st.booleans()) if domain == "spec" or t > 1 else False
    return case_of(s, b, q, t, sp)


def cases(domain: str) -> st.SearchStrategy[Case]:
    """Cases of ``domain``: ``max_num_seqs``, the token budget, ``q``, ``tp_size``, sequence parallelism."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    return _cases(domain)


def in_domain(case: Case, domain: str) -> bool:
    s, b, q, t, sp = (case.args[k] for k in ("max_num_seqs", "max_num_batched_tokens", "decode_query_len", "tp_size",
                                             "sequence_parallel"))
    ok = s >= 1 and b >= 1 and q >= 1 and t in TP_SIZES and isinstance(sp, bool)
    return ok and (domain != "engine" or (b >= s and (t > 1 or not sp)))


def size(case: Case) -> tuple[int, ...]:
    """Smaller ``max_num_seqs``, token budget, ``q``, ``tp_size``, then sequence parallelism off."""
    a = case.args
    return (a["max_num_seqs"], a["max_num_batched_tokens"], a["decode_query_len"], a["tp_size"], int(a["sequence_parallel"]))


def reductions(case: Case) -> Iterator[Case]:
    """Lower one limit by one (or halve ``tp_size``), or turn sequence parallelism off."""
    s, b, q, t, sp = size(case)
    if s > 1:
        yield case_of(s - 1, b, q, t, bool(sp))
    if b > 1:
        yield case_of(s, b - 1, q, t, bool(sp))
    if q > 1:
        yield case_of(s, b, q - 1, t, bool(sp))
    if t > 1:
        yield case_of(s, b, q, t // 2, bool(sp))
    if sp:
        yield case_of(s, b, q, t, False)


def _scope_all(bound: int) -> list[Case]:
    out = [case_of(s, b, q, t, sp) for s, b, q in itertools.product(range(1, bound + 1), repeat=3)
           for t, sp in ((1, False), (2, True), (4, True), (8, True))]
    return sorted(out, key=size)


SCOPES = {
    "small": ScopeSpec("max_num_seqs, the token budget and q each 1 to 6, with tp 1 or sequence parallelism over tp 2, 4 "
                       "or 8; in size's order", "spec", len(_scope_all(6))),
    "ci": ScopeSpec("as small with each limit 1 to 3", "spec", len(_scope_all(3))),
}


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract O case of ``scope`` (``SCOPES``), smallest first in :func:`size`'s order."""
    yield from _scope_all({"small": 6, "ci": 3}[check_scope(scope, SCOPES)])
