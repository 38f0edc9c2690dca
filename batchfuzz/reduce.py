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

from batchfuzz.case import Case
from batchfuzz.registry import Contract, Domain

# A reduction loop that keeps finding smaller cases stops after this many
# accepted steps or seconds (the case is then returned as far as it got).
MAX_STEPS = 200
MAX_SECONDS = 20.0


def reduce_case(contract: Contract, domain: Domain, case: Case, error: BaseException,
                fails: Callable[[Case], BaseException | None], *, max_steps: int = MAX_STEPS,
                max_seconds: float = MAX_SECONDS) -> tuple[Case, BaseException]:
    """The smallest case reachable from ``case`` (which fails with ``error``)
    by accepted reductions, and the exception it fails with.

    ``fails(candidate)`` runs the property on the candidate and returns the
    exception it raised, or None when it passed; a candidate is accepted when
    that exception has ``error``'s type (a reduction must not turn one bug
    into another), it lies in ``domain`` and it is smaller than the current
    case.
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
            exc = fails(candidate.copy())
            if exc is not None and type(exc) is type(error):
                current, current_error = candidate, exc
                break
        else:
            return current, current_error
    return current, current_error
