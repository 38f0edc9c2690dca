"""Bounded-exhaustive checking: every property on every input of a scope.

A contract's scopes (``Contract.scopes``, enumerated by its strategies
module; ``batchfuzz.strategies._exhaustive`` says how) list every input of a
documented small set, smallest first in the contract's order
(``Contract.size``). :func:`run_scope` takes the cases in that order and runs
every property on each, through an executor (``batchfuzz.execution``: a
worker process or this one, as for random checks), and stops at the first
case that fails one. That case is a smallest counterexample of the scope *by
construction* (every smaller case of the scope was checked and held), so it
is reported as it is, with no shrinking. A run that gets through the scope
is a bounded guarantee: "all N inputs within scope S hold".

The target's domain is respected as in a random hunt: a case outside the
domain the check runs in (``--domain``, else the target's
``@batchfuzz.domain``, else the scope's own) or rejected by the target's
``@batchfuzz.assumes`` is skipped and counted, never a counterexample. A
crash or a hang is a counterexample of the pseudo-property ``crash`` or
``timeout`` (``runner.failure_signature`` decides what fails).

A scope's record is checked while it runs: the cases must come in the
contract's order and their number must be the declared ``count``; a scope
that breaks either is a defect of the record (``registry.RecordError``),
since its guarantee would not hold. That every case lies in the scope's own
domain is checked by ``tests/test_exhaustive.py`` for every scope (a check
per case here would cost a quarter of a run).

A scope's cases are enumerated once per process (:func:`scope_cases`) and
every property gets its own copy of a case, so a target that scribbles on
its inputs changes neither the next property's case nor a later run's.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from batchfuzz.case import Case
from batchfuzz.execution import REJECTED, Executor, InProcess, wrap
from batchfuzz.registry import DEFAULT_SCOPE, Contract, Property, RecordError, Scope, Target, choose_domain
from batchfuzz.runner import DEADLINE_GRACE_S, Failure, _failure, failure_signature

# How often (seconds) a run reports progress to its caller.
PROGRESS_EVERY_S = 2.0


@dataclass
class ScopeResult:
    """How far a run over a scope got, and its counterexample if any."""

    contract: str
    target: str
    scope: str
    domain: str
    count: int  # the scope's declared number of cases
    properties: tuple[str, ...]
    enumerated: int = 0  # cases taken from the scope so far
    checked: int = 0  # of those, cases every property ran on (or the failing one)
    skipped: int = 0  # outside the run's domain, or rejected by the target's @assumes
    evaluations: int = 0  # property evaluations
    seconds: float = 0.0
    failure: Failure | None = None
    index: int | None = None  # the counterexample's position in the scope (1-based)
    last: Case | None = None  # the last case checked
    out_of_time: bool = False
    by_property: dict[str, int] = field(default_factory=dict)  # cases each property held on

    @property
    def complete(self) -> bool:
        """The scope was covered: every case checked, or a counterexample found."""
        return self.failure is not None or (not self.out_of_time and self.enumerated == self.count)

    @property
    def status(self) -> str:
        if self.failure is not None:
            return "counterexample"
        return "passed" if self.complete else "incomplete"

    def summary(self) -> str:
        """One sentence: the bounded guarantee, the counterexample's place, or how far it got."""
        skipped = f" ({self.skipped} outside the {self.domain} domain or the target's assumptions, skipped)" if self.skipped else ""
        if self.failure is not None:
            return (f"counterexample at input {self.index} of {self.count} within scope {self.scope}: the smallest in the "
                    f"contract's order (every earlier input held{skipped})")
        if self.complete:
            return f"all {self.checked} inputs within scope {self.scope} hold{skipped}"
        share = 100.0 * self.enumerated / self.count
        return (f"incomplete: the budget ended after {self.enumerated} of the {self.count} inputs within scope {self.scope} "
                f"({share:.0f}%), all holding{skipped}")

    def to_json(self) -> dict[str, Any]:
        return {
            "contract": self.contract, "target": self.target, "scope": self.scope, "domain": self.domain, "count": self.count,
            "enumerated": self.enumerated, "checked": self.checked, "skipped": self.skipped, "evaluations": self.evaluations,
            "seconds": round(self.seconds, 3), "status": self.status, "index": self.index, "summary": self.summary(),
            "failure": self.failure.to_json() if self.failure is not None else None,
        }


@functools.lru_cache(maxsize=16)
def _enumerated(contract_name: str, scope: Scope) -> tuple[Case, ...]:
    return tuple(scope.cases())


def scope_cases(contract: Contract, scope: Scope) -> tuple[Case, ...]:
    """Every case of ``scope``, in its order, enumerated once per process
    (callers must not change them: :func:`run_scope` copies each case it
    hands to a target)."""
    return _enumerated(contract.name, scope)


def run_scope(
    contract: Contract,
    target: Target | Executor,
    scope: str | Scope = DEFAULT_SCOPE,
    *,
    target_name: str = "target",
    properties: tuple[Property, ...] | None = None,
    domain: str | None = None,
    deadline: float | None = None,
    example_timeout_s: float | None = None,
    on_progress: Callable[[ScopeResult], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> ScopeResult:
    """Run ``properties`` (default: all) on every case of ``scope`` against
    ``target`` (a callable or an executor) in the scope's order, up to the
    first counterexample. Cases outside ``domain`` (default: the target's,
    else the scope's) or rejected by its ``@assumes`` are skipped; no case
    starts after ``deadline`` (``time.time()``; the result is then
    incomplete); ``on_progress(result)`` every ``PROGRESS_EVERY_S`` seconds."""
    executor = wrap(contract, target, target_name)
    sc = contract.scope(scope) if isinstance(scope, str) else scope
    props = properties if properties is not None else contract.properties
    run_domain = choose_domain(domain, executor.describe().get("domain"), sc.domain)
    own, within = contract.domain(sc.domain), contract.domain(run_domain)
    result = ScopeResult(contract.name, target_name, sc.name, run_domain, sc.count, tuple(p.name for p in props),
                         by_property={p.name: 0 for p in props})
    # Isolated workers get a pickled copy of every case; in this process a
    # property gets its own copy of the case (a scribbling target must change
    # neither the case the next property judges by nor the cached enumeration).
    copy_each = isinstance(executor, InProcess)
    timeout = functools.partial(_call_timeout, deadline, example_timeout_s)
    start = time.perf_counter()
    last_report = time.monotonic()
    previous: tuple[int, ...] | None = None
    try:
        for case in scope_cases(contract, sc):
            if (deadline is not None and time.time() > deadline) or (should_stop is not None and should_stop()):
                result.out_of_time = True
                break
            result.enumerated += 1
            previous = _in_order(contract, sc, result.enumerated, case, previous)
            if within is not own and not within.contains(case):
                result.skipped += 1
                continue
            if _check_case(contract, executor, props, case, result, timeout, copy_each):
                result.index = result.enumerated
                break
            if on_progress is not None and time.monotonic() - last_report >= PROGRESS_EVERY_S:
                last_report = time.monotonic()
                result.seconds = time.perf_counter() - start
                on_progress(result)
    finally:
        result.seconds = time.perf_counter() - start
    if result.failure is None and not result.out_of_time and result.enumerated != sc.count:
        raise RecordError(f"contract {contract.name!r}: scope {sc.name!r} has {result.enumerated} cases, declares {sc.count}")
    return result


def _call_timeout(deadline: float | None, example_timeout_s: float | None) -> float | None:
    """One call's timeout: ``example_timeout_s``, cut to the deadline's grace."""
    if deadline is None:
        return example_timeout_s
    left = max(0.05, deadline + DEADLINE_GRACE_S - time.time())
    return left if example_timeout_s is None else min(example_timeout_s, left)


def _in_order(contract: Contract, sc: Scope, index: int, case: Case, previous: tuple[int, ...] | None) -> tuple[int, ...]:
    """``case``'s size, the ``index``-th of ``sc``: a RecordError where the
    scope has more cases than it declares or leaves the contract's order."""
    if index > sc.count:
        raise RecordError(f"contract {contract.name!r}: scope {sc.name!r} has more than the {sc.count} cases it declares")
    size = contract.size(case)
    if previous is not None and size < previous:
        raise RecordError(f"contract {contract.name!r}: scope {sc.name!r} is not in the contract's order: case "
                          f"{index} has size {size}, after a case of size {previous}")
    return size


def _check_case(contract: Contract, executor: Executor, props: tuple[Property, ...], case: Case, result: ScopeResult,
                timeout: Callable[[], float | None], copy_each: bool) -> bool:
    """Every property on ``case``; True (with ``result.failure`` set) at the first that fails."""
    for k, prop in enumerate(props):
        outcome = executor.check(prop.name, copy.deepcopy(case) if copy_each else case, timeout())
        if outcome.status == REJECTED:  # the target's @assumes: not one of its inputs
            result.skipped += 1
            return False
        result.evaluations += 1
        if k == 0:
            result.checked += 1
            result.last = case
        if failure_signature(outcome) is not None:
            result.failure = _failure(contract, result.target, prop, case, outcome, complete=True)
            return True
        result.by_property[prop.name] += 1
    return False
