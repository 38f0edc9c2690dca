"""Strategies for contract F, per-microbatch attention metadata (docs/contracts.md, contract F).

A case is a step (``nst``, ``c``, ``positions``, ``block_table``, ``Np``,
``Rp``) and a split of it into microbatches (``ubatch_slices``).

- ``spec``: any well-formed split (cut points anywhere in ``(0, Np)``,
  request ranges by the contract's rule, a microbatch running past the real
  tokens stopping anywhere in ``[R, Rp]``), any positions and block ids.
- ``engine``: the split an engine makes: cuts at ``k * (Np // n)`` with the
  request ranges that vLLM's ``maybe_create_ubatch_slices`` gives, clamped as
  the new runner's ``create_ubatch_slices`` clamps them (so a microbatch of
  padding only holds the last real request with no query token); positions
  ``c[r] + j`` for the ``j``-th scheduled token of request ``r`` and 0 in
  the padding; ``n = 2`` mostly, 3 or 4 sometimes; ``Np`` exact, a capture
  size or padded (data-parallel ranks pad to a common count).

Shrinks towards one request of one token with nothing computed, ``n = 2``,
``Np = max(sum(nst), n)``, no padded request and a block table of one column
of zeros (positions follow: ``c[r] + j`` in ``engine``, towards 0 in ``spec``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.reference._args import INT_DTYPES
from batchfuzz.reference.slice_ubatch_metadata import UbatchSlice, check_slice_args, owner
from batchfuzz.strategies._engine import default_capture_sizes, pad_to_capture_size
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope, compositions
from batchfuzz.strategies._validate import check_choice, check_integer

NUM_UBATCHES = (2, 2, 2, 3, 4)  # 2 mostly (dual-batch overlap); 3 and 4 sometimes
CAPTURE_SIZES = default_capture_sizes(512)
DOMAINS = ("spec", "engine")


def engine_split(nst: list[int], num_tokens_padded: int, num_reqs_padded: int, num_ubatches: int) -> list[UbatchSlice]:
    """The split of the engine domain: cuts at ``k * (Np // n)``; a microbatch
    starts at the owner of its first token and stops at the first request
    starting at or after its end (``searchsorted``, as the engine does), the
    last at ``Rp``; then every start is clamped to ``R - 1`` and every stop
    to ``Rp`` (the new runner's clamp)."""
    size = num_tokens_padded // num_ubatches
    cu = np.concatenate([[0], np.cumsum(nst)])
    num_reqs = len(nst)
    out: list[UbatchSlice] = []
    for k in range(num_ubatches):
        ts = k * size
        te = (k + 1) * size if k < num_ubatches - 1 else num_tokens_padded
        rs = int(np.searchsorted(cu, ts, side="right")) - 1
        re = int(np.searchsorted(cu, te, side="left")) if k < num_ubatches - 1 else num_reqs_padded
        out.append(((min(rs, num_reqs - 1), min(re, num_reqs_padded)), (ts, te)))
    return out


def split_at(nst: list[int], num_tokens_padded: int, num_reqs_padded: int, cuts: list[int],
             stops: list[int] | None = None) -> list[UbatchSlice]:
    """The contract's split at ``cuts`` (increasing, inside ``(0, Np)``): request
    ranges by the rule of docs/contracts.md; ``stops[k]`` is the stop of a
    non-last microbatch that runs past the real tokens (default ``R``)."""
    total, num_reqs = sum(nst), len(nst)
    edges = [0, *cuts, num_tokens_padded]
    out: list[UbatchSlice] = []
    for k in range(len(edges) - 1):
        ts, te = edges[k], edges[k + 1]
        rs = owner(nst, ts) if ts < total else num_reqs - 1
        if k == len(edges) - 2:
            re = num_reqs_padded
        elif te <= total:
            re = owner(nst, te - 1) + 1
        else:
            re = stops[k] if stops is not None else num_reqs
        out.append(((rs, re), (ts, te)))
    return out


def engine_positions(nst: list[int], computed: list[int], num_tokens_padded: int) -> list[int]:
    """``c[r] + j`` for the ``j``-th scheduled token of request ``r``; 0 in the padding."""
    pos: list[int] = []
    for count, done in zip(nst, computed, strict=True):
        pos.extend(range(done, done + count))
    return pos + [0] * (num_tokens_padded - len(pos))


def make_case(nst: list[int], computed: list[int], positions: list[int], table: list[list[int]], num_tokens_padded: int,
              num_reqs_padded: int, slices: list[UbatchSlice], context: dict[str, Any], dtype: Any = np.int32) -> Case:
    return Case({"num_scheduled_tokens": np.array(nst, dtype=dtype), "num_computed_tokens": np.array(computed, dtype=dtype),
                 "positions": np.array(positions, dtype=dtype), "block_table": np.array(table, dtype=np.int32),
                 "num_tokens_padded": num_tokens_padded, "num_reqs_padded": num_reqs_padded,
                 "ubatch_slices": [tuple(map(tuple, s)) for s in slices]}, context)


@st.composite
def _cases(draw: st.DrawFn, domain: str, max_reqs: int, max_tokens_per_req: int) -> Case:
    nst = draw(st.lists(st.integers(1, max_tokens_per_req), min_size=1, max_size=max_reqs))
    num_reqs, total = len(nst), sum(nst)
    computed = draw(st.lists(st.integers(0, 2 * max_tokens_per_req), min_size=num_reqs, max_size=num_reqs))
    n = draw(st.sampled_from(NUM_UBATCHES))
    kind = draw(st.sampled_from(["exact", "capture", "padding"]))
    if kind == "exact":
        padded = max(total, n)
    elif kind == "capture":
        padded = max(pad_to_capture_size(total, CAPTURE_SIZES) or total, n)
    else:
        padded = max(total + draw(st.integers(0, 2 * total)), n)
    padded_reqs = num_reqs + draw(st.one_of(st.just(0), st.integers(0, 4)))
    width = draw(st.integers(1, 3))
    table = draw(st.lists(st.lists(st.integers(0, 15), min_size=width, max_size=width),
                          min_size=padded_reqs, max_size=padded_reqs))
    dtype = draw(st.sampled_from(INT_DTYPES))
    if domain == "engine":
        slices = engine_split(nst, padded, padded_reqs, n)
        positions = engine_positions(nst, computed, padded)
    else:
        cuts = sorted(draw(st.sets(st.integers(1, padded - 1), min_size=n - 1, max_size=n - 1)))
        stops = [draw(st.integers(num_reqs, padded_reqs)) for _ in range(n)]
        slices = split_at(nst, padded, padded_reqs, cuts, stops)
        positions = draw(st.lists(st.integers(0, 64), min_size=padded, max_size=padded))
    return make_case(nst, computed, positions, table, padded, padded_reqs, slices, {"kind": kind, "n": n}, dtype)


def cases(domain: str = "spec", *, max_num_reqs: int = 6, max_tokens_per_req: int = 12) -> st.SearchStrategy[Case]:
    """Contract F cases of ``domain``; ``context["kind"]`` says where ``Np``
    came from. Shrinks as the module docstring says."""
    check_choice("domain", domain, DOMAINS)
    return _cases(domain, check_integer("max_num_reqs", max_num_reqs, min_value=1),
                  check_integer("max_tokens_per_req", max_tokens_per_req, min_value=1))


def _lists(case: Case) -> tuple[list[int], list[int], list[int], list[list[int]], int, int, list[UbatchSlice]]:
    a = case.args
    return ([int(v) for v in np.asarray(a["num_scheduled_tokens"]).tolist()],
            [int(v) for v in np.asarray(a["num_computed_tokens"]).tolist()],
            [int(v) for v in np.asarray(a["positions"]).tolist()],
            np.asarray(a["block_table"]).tolist(), a["num_tokens_padded"], a["num_reqs_padded"],
            [((int(rs), int(re)), (int(ts), int(te))) for (rs, re), (ts, te) in a["ubatch_slices"]])


def in_domain(case: Case, domain: str) -> bool:
    a = case.args
    try:
        check_slice_args(a["num_scheduled_tokens"], a["num_computed_tokens"], a["positions"], a["block_table"],
                         a["num_tokens_padded"], a["num_reqs_padded"], a["ubatch_slices"])
    except (TypeError, ValueError):
        return False
    if domain == "spec":
        return True
    nst, computed, positions, _, padded, padded_reqs, slices = _lists(case)
    n = len(slices)
    return (padded >= n and slices == engine_split(nst, padded, padded_reqs, n)
            and positions[:sum(nst)] == engine_positions(nst, computed, padded)[:sum(nst)])


def every_microbatch_has_a_real_token(num_scheduled_tokens: Any, num_computed_tokens: Any, positions: Any, block_table: Any,
                                      num_tokens_padded: Any, num_reqs_padded: Any, ubatch_slices: Any) -> bool:
    """The v1 runner's splits: its caller refuses a split whose last
    microbatch would hold no real token (``is_last_ubatch_empty``), so every
    microbatch starts before ``sum(nst)``."""
    total = int(np.asarray(num_scheduled_tokens).sum())
    return all(ts < total for _, (ts, _) in ubatch_slices)


def size(case: Case) -> tuple[int, ...]:
    """The order of contract F cases: by ``R``, ``Np``, ``sum(nst)``, ``Rp``,
    ``n``, ``sum(c)``, block-table width, then the sum of block ids."""
    nst, computed, _, table, padded, padded_reqs, slices = _lists(case)
    return (len(nst), padded, sum(nst), padded_reqs, len(slices), sum(computed), len(table[0]) if table else 0,
            sum(map(sum, table)))


def _rebuilt(case: Case, nst: list[int], computed: list[int], table: list[list[int]], padded: int, padded_reqs: int,
             n: int) -> Iterator[Case]:
    """The case's step changed, its split and positions rebuilt: the engine
    split and engine positions, and the old cut points (clipped) with the old
    positions (cut to size)."""
    _, _, old_pos, _, _, _, slices = _lists(case)
    dtype = np.asarray(case.args["num_scheduled_tokens"]).dtype
    if padded < max(sum(nst), n) or padded_reqs < len(nst) or not nst:
        return
    yield make_case(nst, computed, engine_positions(nst, computed, padded), table, padded, padded_reqs,
                    engine_split(nst, padded, padded_reqs, n), dict(case.context), dtype)
    cuts = sorted({ts for _, (ts, _) in slices[1:] if 0 < ts < padded})
    if len(cuts) >= 1:
        positions = (old_pos + [0] * padded)[:padded]
        yield make_case(nst, computed, positions, table, padded, padded_reqs, split_at(nst, padded, padded_reqs, cuts),
                        dict(case.context), dtype)


def reductions(case: Case) -> Iterator[Case]:
    """Smaller cases built from ``case`` (``batchfuzz.reduce``): a request
    deleted, a count lowered, less computed, less padding, fewer
    microbatches, a narrower or zeroed block table."""
    nst, computed, _, table, padded, padded_reqs, slices = _lists(case)
    n = len(slices)
    for i in range(len(nst)):
        rest, rest_c = nst[:i] + nst[i + 1:], computed[:i] + computed[i + 1:]
        rest_t = table[:i] + table[i + 1:]
        yield from _rebuilt(case, rest, rest_c, rest_t, padded - nst[i], padded_reqs - 1, n)
        yield from _rebuilt(case, rest, rest_c, rest_t, padded, padded_reqs - 1, n)
        for value in (1, nst[i] // 2, nst[i] - 1):
            if 1 <= value < nst[i]:
                smaller = nst[:i] + [value] + nst[i + 1:]
                yield from _rebuilt(case, smaller, computed, table, padded - (nst[i] - value), padded_reqs, n)
                yield from _rebuilt(case, smaller, computed, table, padded, padded_reqs, n)
        for value in (0, computed[i] // 2, computed[i] - 1):
            if 0 <= value < computed[i]:
                yield from _rebuilt(case, nst, computed[:i] + [value] + computed[i + 1:], table, padded, padded_reqs, n)
    for padded2 in (max(sum(nst), n), padded - 1):
        yield from _rebuilt(case, nst, computed, table, padded2, padded_reqs, n)
    if padded_reqs > len(nst):
        yield from _rebuilt(case, nst, computed, table[:-1], padded, padded_reqs - 1, n)
    if n > 2:
        yield from _rebuilt(case, nst, computed, table, padded, padded_reqs, n - 1)
    if table and len(table[0]) > 1:
        yield from _rebuilt(case, nst, computed, [row[:1] for row in table], padded, padded_reqs, n)
    if any(map(any, table)):
        yield from _rebuilt(case, nst, computed, [[0] * len(row) for row in table], padded, padded_reqs, n)


# ---------------------------------------------------------------- bounded-exhaustive scopes

# (max requests, max sum(nst), max Np, max Rp - R, max c per request, ubatch counts) of each scope.
_SCOPE_BOUNDS = {"small": (3, 5, 8, 1, 1, (2, 3, 4)), "ci": (2, 3, 4, 1, 1, (2, 3))}

SCOPES = {
    "small": ScopeSpec("every nst of 1 <= R <= 3 positive entries with sum(nst) <= 5, every c in {0, 1}^R, every "
                       "max(sum(nst), n) <= Np <= 8, R <= Rp <= R + 1, n in {2, 3, 4}, split by the engine's rule, engine "
                       "positions, a block table of null rows and (R >= 2) one of rows [r] (padded rows 0); in the order "
                       "R, Np, sum(nst), Rp, n, sum(c), sum of block ids",
                       "engine", 6928),
    "ci": ScopeSpec("as small with R <= 2, sum(nst) <= 3, Np <= 4 and n in {2, 3}", "engine", 264),
}


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract F case of ``scope`` (``SCOPES``), smallest first in
    :func:`size`'s order."""
    max_reqs, max_total, max_padded, max_extra, max_c, ubatch_counts = _SCOPE_BOUNDS[check_scope(scope, SCOPES)]
    for r in range(1, max_reqs + 1):
        for padded in range(2, max_padded + 1):
            for total in range(r, min(max_total, padded) + 1):
                for padded_reqs in range(r, r + max_extra + 1):
                    for n in ubatch_counts:
                        if n > padded:
                            continue
                        # Block tables: all null rows, then (R >= 2) row r = [r], padded rows null.
                        tables = [[[0]] * padded_reqs] + ([[[q] for q in range(r)] + [[0]] * (padded_reqs - r)] if r > 1 else [])
                        for c_sum in range(0, max_c * r + 1):
                            for table in tables:
                                for computed in compositions(c_sum, r, 0, max_c):
                                    for nst in compositions(total, r, 1, total):
                                        yield make_case(list(nst), list(computed),
                                                        engine_positions(list(nst), list(computed), padded), table, padded,
                                                        padded_reqs, engine_split(list(nst), padded, padded_reqs, n),
                                                        {"kind": "exhaustive", "n": n})
