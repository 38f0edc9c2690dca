"""Strategies for contract M, the data-parallel agreement on two-batch overlap (docs/contracts.md, contract M).

Domains:

- ``spec``: every valid call: 1 to 8 ranks, each with any flag, forward
  mode and split index (0 to 64), overlap enabled or not;
- ``engine``: what SGLang's ``TboDPAttentionPreparer.prepare_all_gather``
  gathers: a rank without a batch reports the idle mode, the flag true and
  split index 0, so every idle rank has those.

Shrinks towards fewer ranks, modes earlier in ``FORWARD_MODES`` (extend
first), flags true and overlap enabled (the cases where overlap runs), and
smaller split indices.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.reference.tbo_dp_agree import ARGUMENTS, FORWARD_MODES, IDLE
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope

DOMAINS = ("spec", "engine")
MAX_RANKS = 8
MAX_SPLIT = 64


def case_of(can_run_tbo: list[bool], forward_modes: list[str], split_seq_index: list[int],
            enable_two_batch_overlap: bool = True) -> Case:
    return Case(dict(zip(ARGUMENTS, (list(can_run_tbo), list(forward_modes), list(split_seq_index),
                                     enable_two_batch_overlap), strict=True)))


_TRUE_FIRST = st.booleans().map(lambda b: not b)  # Hypothesis shrinks towards False: this towards True


@st.composite
def _cases(draw: st.DrawFn, domain: str) -> Case:
    ranks = draw(st.integers(1, MAX_RANKS))
    modes = draw(st.lists(st.sampled_from(FORWARD_MODES), min_size=ranks, max_size=ranks))
    can = draw(st.lists(_TRUE_FIRST, min_size=ranks, max_size=ranks))
    split = draw(st.lists(st.integers(0, MAX_SPLIT), min_size=ranks, max_size=ranks))
    if domain == "engine":  # a rank without a batch: idle, able, split 0
        can = [c or m == IDLE for c, m in zip(can, modes, strict=True)]
        split = [0 if m == IDLE else s for s, m in zip(split, modes, strict=True)]
    return case_of(can, modes, split, draw(_TRUE_FIRST))


def cases(domain: str) -> st.SearchStrategy[Case]:
    """Cases of ``domain``: the rank count, then each rank's mode, flag and split, then the switch."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    return _cases(domain)


def _parts(case: Case) -> tuple[list[bool], list[str], list[int], bool]:
    can, modes, split, enabled = (case.args[k] for k in ARGUMENTS)
    return list(can), list(modes), list(split), enabled


def in_domain(case: Case, domain: str) -> bool:
    can, modes, split, enabled = _parts(case)
    ranks = len(can)
    ok = (1 <= ranks == len(modes) == len(split) and isinstance(enabled, bool)
          and all(m in FORWARD_MODES for m in modes) and all(isinstance(s, int) and s >= 0 for s in split))
    if not ok or domain != "engine":
        return ok
    return all(c and s == 0 for c, m, s in zip(can, modes, split, strict=True) if m == IDLE)


def size(case: Case) -> tuple[int, ...]:
    """Fewer ranks, then modes earlier in FORWARD_MODES, fewer false flags, overlap enabled, smaller splits."""
    can, modes, split, enabled = _parts(case)
    return (len(can), sum(FORWARD_MODES.index(m) for m in modes), can.count(False), int(not enabled), sum(split))


def reductions(case: Case) -> Iterator[Case]:
    """Drop a rank (the last first); move a mode one earlier; set a flag true;
    enable overlap; lower a split index by one. None makes a rank idle, so
    the engine domain's idle ranks stay as they are."""
    can, modes, split, enabled = _parts(case)
    ranks = len(can)
    for r in reversed(range(ranks)) if ranks > 1 else ():
        yield case_of(can[:r] + can[r + 1:], modes[:r] + modes[r + 1:], split[:r] + split[r + 1:], enabled)
    for r in range(ranks):
        i = FORWARD_MODES.index(modes[r])
        if i > 0:
            yield case_of(can, modes[:r] + [FORWARD_MODES[i - 1]] + modes[r + 1:], split, enabled)
        if not can[r]:
            yield case_of(can[:r] + [True] + can[r + 1:], modes, split, enabled)
        if split[r] > 0:
            yield case_of(can, modes, split[:r] + [split[r] - 1] + split[r + 1:], enabled)
    if not enabled:
        yield case_of(can, modes, split, True)


_SCOPE_BOUNDS = {"small": (3, 1), "ci": (2, 0)}  # ranks, largest split index


def _scope_all(scope: str) -> list[Case]:
    max_ranks, max_split = _SCOPE_BOUNDS[scope]
    rank = list(itertools.product(FORWARD_MODES, (True, False), range(max_split + 1)))
    out: list[Case] = []
    for ranks in range(1, max_ranks + 1):
        for per_rank in itertools.product(rank, repeat=ranks):
            modes, can, split = (list(x) for x in zip(*per_rank, strict=True))
            out.extend(case_of(can, modes, split, enabled) for enabled in (True, False))
    return sorted(out, key=size)


def _scope_count(scope: str) -> int:
    """How many cases :func:`_scope_all` enumerates, counted without building
    them (listing the contracts must be quick; tests/test_exhaustive.py checks the two agree)."""
    max_ranks, max_split = _SCOPE_BOUNDS[scope]
    per_rank = len(FORWARD_MODES) * 2 * (max_split + 1)
    return 2 * sum(per_rank ** ranks for ranks in range(1, max_ranks + 1))


SCOPES = {
    "small": ScopeSpec("every 1 to 3 ranks, each with every mode, flag and split index 0 or 1, overlap on and off; "
                       "in size's order", "spec", _scope_count("small")),
    "ci": ScopeSpec("as small with 1 or 2 ranks and split index 0", "spec", _scope_count("ci")),
}


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract M case of ``scope`` (``SCOPES``), smallest first in :func:`size`'s order."""
    yield from _scope_all(check_scope(scope, SCOPES))
