"""Strategies for contract J, the two-batch-overlap split (docs/contracts.md, contract J).

Domains:

- ``spec``: every valid call: any forward mode, ``R`` from 0, extend
  lengths from 0, any threshold in ``[0, 0.5]``;
- ``engine``: what SGLang's callers pass (``TboDPAttentionPreparer.prepare_all_gather``
  and ``TboForwardBatchPreparer`` in ``two_batch_overlap.py``): an extend,
  decode or target-verify step has at least one request and every extend
  request at least one new token; an idle step none; the threshold is the
  server argument ``tbo_token_distribution_threshold`` (default 0.48; 0
  turns the two-chunk mode off), at most 0.5 (asserted there).

Half the draws are small steps (at most 5 requests, extend lengths at most
4), where the two-chunk cut most often lands on a request boundary. Shrinks
towards fewer requests, shorter extend lengths, fewer tokens per
verified request, the forward modes in the order extend, decode,
target_verify, idle, and the thresholds in the order of THRESHOLDS.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.reference.tbo_split import FORWARD_MODES
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope

DOMAINS = ("spec", "engine")
# Server-argument values first (0.48 the default, 0 two-chunk off), then the edge 0.5.
THRESHOLDS = (0.48, 0.0, 0.5, 0.25, 0.1)
MAX_REQS = 12
MAX_LEN = 64


def case_of(forward_mode: str, seq_lens: Any, threshold: float) -> Case:
    return Case({"forward_mode": forward_mode, "seq_lens": np.asarray(seq_lens, dtype=np.int32),
                 "threshold": float(threshold)})


@st.composite
def _cases(draw: st.DrawFn, domain: str) -> Case:
    low = 1 if domain == "engine" else 0
    mode = draw(st.sampled_from(FORWARD_MODES))
    threshold = draw(st.sampled_from(THRESHOLDS) if domain == "engine" or draw(st.booleans())
                     else st.floats(0.0, 0.5, allow_nan=False))
    if mode == "idle":
        return case_of(mode, [], threshold)
    small = draw(st.booleans())  # few short requests: where a request boundary lands on N // 2 in a lopsided step
    r = draw(st.integers(low, 5 if small else MAX_REQS))
    if mode == "extend":
        # short lengths often (request boundaries land on N // 2), long ones too (lopsided steps)
        length = st.integers(low, 4) if small else st.one_of(st.integers(low, 3), st.integers(low, MAX_LEN))
        lens = draw(st.lists(length, min_size=r, max_size=r))
    elif mode == "decode":
        lens = [1] * r
    else:
        lens = [draw(st.integers(1, 8))] * r
    return case_of(mode, lens, threshold)


def cases(domain: str) -> st.SearchStrategy[Case]:
    """Cases of ``domain``: mode, threshold, then the lengths (see the module's shrink order)."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    return _cases(domain)


def in_domain(case: Case, domain: str) -> bool:
    mode, lens, thr = case.args["forward_mode"], [int(x) for x in case.args["seq_lens"]], case.args["threshold"]
    if mode not in FORWARD_MODES or not 0.0 <= thr <= 0.5:
        return False
    if mode == "idle":
        return not lens
    ok = all(x >= 0 for x in lens) and (mode != "decode" or all(x == 1 for x in lens)) and (
        mode != "target_verify" or (all(x == lens[0] for x in lens) and (not lens or lens[0] >= 1)))
    if domain == "engine":
        ok = ok and bool(lens) and min(lens) >= 1
    return ok


def size(case: Case) -> tuple[int, ...]:
    """Fewer requests, fewer tokens, the earlier mode, the earlier threshold."""
    lens = [int(x) for x in case.args["seq_lens"]]
    thr = case.args["threshold"]
    rank = THRESHOLDS.index(thr) if thr in THRESHOLDS else len(THRESHOLDS)
    return (len(lens), sum(lens), FORWARD_MODES.index(case.args["forward_mode"]), rank)


def reductions(case: Case) -> Iterator[Case]:
    """Drop a request, shorten an extend request, move the threshold earlier in THRESHOLDS."""
    mode, lens, thr = case.args["forward_mode"], [int(x) for x in case.args["seq_lens"]], case.args["threshold"]
    for i in range(len(lens)):
        yield case_of(mode, lens[:i] + lens[i + 1:], thr)
    if mode == "extend":
        for i, x in enumerate(lens):
            if x > 1:
                yield case_of(mode, lens[:i] + [x // 2] + lens[i + 1:], thr)
                yield case_of(mode, lens[:i] + [x - 1] + lens[i + 1:], thr)
    if mode == "target_verify" and lens and lens[0] > 1:
        yield case_of(mode, [lens[0] - 1] * len(lens), thr)
    for t in THRESHOLDS[: THRESHOLDS.index(thr) if thr in THRESHOLDS else len(THRESHOLDS)]:
        yield case_of(mode, lens, t)


# ------------------------------------------------------------------ exhaustive scopes

# (most requests, longest extend or verify length) of each scope.
_SCOPE_BOUNDS = {"small": (4, 4), "ci": (3, 3)}


def _scope_all(scope: str) -> list[Case]:
    max_reqs, max_len = _SCOPE_BOUNDS[scope]
    out = []
    for thr in THRESHOLDS:
        out.append(case_of("idle", [], thr))
        for r in range(0, max_reqs + 1):
            out.extend(case_of("extend", list(lens), thr) for lens in itertools.product(range(0, max_len + 1), repeat=r))
            out.append(case_of("decode", [1] * r, thr))
            out.extend(case_of("target_verify", [n] * r, thr) for n in (range(1, max_len + 1) if r else (1,)))
    return sorted(out, key=size)


def _scope_count(scope: str) -> int:
    """How many cases :func:`_scope_all` enumerates, counted without building
    them (listing the contracts must be quick; tests/test_exhaustive.py checks the two agree)."""
    max_reqs, max_len = _SCOPE_BOUNDS[scope]
    per_threshold = 1 + sum((max_len + 1) ** r + 1 + (max_len if r else 1) for r in range(max_reqs + 1))
    return len(THRESHOLDS) * per_threshold


SCOPES = {
    "small": ScopeSpec("every step of R <= 4 requests: extend lengths 0..4 each, decodes, target-verify steps of 1..4 tokens "
                       "per request, the idle step; every threshold of THRESHOLDS; in size's order", "spec",
                       _scope_count("small")),
    "ci": ScopeSpec("as small with R <= 3 and lengths up to 3", "spec", _scope_count("ci")),
}


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract J case of ``scope`` (``SCOPES``), smallest first in :func:`size`'s order."""
    yield from _scope_all(check_scope(scope, SCOPES))
