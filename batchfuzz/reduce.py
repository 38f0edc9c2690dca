"""Structural reduction of a counterexample, after Hypothesis has shrunk it.

Hypothesis shrinks the *choices* a strategy made. Where a smaller input needs
several choices to change together (a request's computed tokens and the
table column holding the block it reads, or a switch from one branch of the
strategy to another), its shrinker stops in a local minimum that depends on
the example stream. Each contract therefore states ``reductions(case)``:
candidate cases that are smaller in the contract's order (``Contract.size``,
compared as a tuple) and built from the case itself: a request deleted, a
count lowered, a KV group dropped, a block column shifted out, stale values
cleared. :func:`reduce_case` takes, greedily, the first candidate that lies
in the domain and still fails in the same way (the same exception type),
until none does. The result is never larger than the case it started from,
and it is a counterexample of the same property by construction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from batchfuzz.case import Case
from batchfuzz.registry import Contract, Domain

T = TypeVar("T")

# A reduction loop that keeps finding smaller cases stops after this many
# accepted steps or seconds (the case is then returned as far as it got).
MAX_STEPS = 200
MAX_SECONDS = 20.0


def reduce_case(contract: Contract, domain: Domain, case: Case, error: T, fails: Callable[[Case], T | None], *,
                max_steps: int = MAX_STEPS, max_seconds: float = MAX_SECONDS) -> tuple[Case, T]:
    """The smallest case reachable from ``case`` (which fails with ``error``)
    by accepted reductions, and how it fails.

    ``fails(candidate)`` runs the property on the candidate and returns how
    it fails, or None when it passes or fails differently (a reduction must
    not turn one bug into another); a candidate is accepted when it fails,
    lies in ``domain`` and is smaller than the current case.
    """
    if contract.reductions is None or not domain.reducible:
        return case, error
    current, current_error = case, error
    deadline = time.monotonic() + max_seconds
    for _ in range(max_steps):
        size = contract.size(current)
        for candidate in contract.reductions(current):
            if time.monotonic() > deadline:
                return current, current_error
            if not contract.size(candidate) < size or not domain.contains(candidate):
                continue
            how = fails(candidate.copy())
            if how is not None:
                current, current_error = candidate, how
                break
        else:
            return current, current_error
    return current, current_error
