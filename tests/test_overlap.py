"""``runner.hunt``'s overlap (``Executor.overlaps``): with the target in a
worker process, Hypothesis draws the next example while the worker runs the
last one, and a failure found one example late is replayed from its choice
sequence and shrunk as it would have been without. These runs are
randomized on purpose (the suite's ``ci`` profile is derandomized, and a
derandomized hunt never overlaps), each with a fixed seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.control import current_build_context
from hypothesis.errors import InvalidArgument

from batchfuzz import registry, runner
from batchfuzz.execution import PASSED, Isolated

HOSTILE = Path(__file__).with_name("hostile.py")


def _random(examples: int) -> settings:
    return settings(max_examples=examples, derandomize=False, database=None, deadline=None)


def test_an_overlapped_hunt_finds_and_shrinks_what_a_waiting_one_does() -> None:
    contract = registry.get("find_conflicts")
    prop = contract.property("matches_oracle")
    with Isolated(contract, "variant:with_self") as ex:
        waiting, overlapped = (runner.hunt(contract, ex, prop, runner.HuntOptions(_random(200), seed=3, overlap=overlap),
                                           target_name="variant:with_self") for overlap in (False, True))
    assert waiting.failure is not None and overlapped.failure is not None
    assert (overlapped.failure.property, overlapped.failure.error_type) == (waiting.failure.property,
                                                                           waiting.failure.error_type)
    # The same stream of examples up to the failure (a verdict does not steer Hypothesis's generation) ...
    assert overlapped.first_failure_example == waiting.first_failure_example
    # ... and the replay shrank it as far: without it the case would be the one found, several times larger.
    assert contract.size(overlapped.failure.case) == contract.size(waiting.failure.case)
    assert overlapped.failure.complete and overlapped.examples > overlapped.first_failure_example


def test_each_outcome_is_collected_in_the_next_examples_body() -> None:
    """The overlap itself: the case submitted in one example's body is
    collected in the next one's (the last after the run), never waited for
    in its own; every example costs one request."""
    contract = registry.get("find_conflicts")
    events: list[tuple[str, Any]] = []

    def context() -> Any:
        try:
            return current_build_context().data
        except InvalidArgument:
            return None  # outside any example's body

    with Isolated(contract, "impl:numpy@cpu") as ex:
        submit, collect = ex.submit, ex.collect
        ex.submit = lambda *a, **k: events.append(("submit", context())) or submit(*a, **k)  # type: ignore[method-assign]
        ex.collect = lambda *a, **k: events.append(("collect", context())) or collect(*a, **k)  # type: ignore[method-assign]
        ex.check = lambda *a, **k: pytest.fail("an overlapped hunt waited for a call")  # type: ignore[method-assign]
        r = runner.hunt(contract, ex, contract.property("matches_oracle"), runner.HuntOptions(_random(20), seed=0, reduce=False),
                        target_name="impl:numpy@cpu")
    assert r.failure is None and r.examples == 20
    assert [kind for kind, _ in events] == ["submit"] + ["collect", "submit"] * 19 + ["collect"]
    submitted = [data for kind, data in events if kind == "submit"]
    collected = [data for kind, data in events if kind == "collect"]
    assert all(data is not None for data in submitted)
    for k in range(19):
        assert collected[k] is submitted[k + 1] and collected[k] is not submitted[k]
    assert collected[-1] is None


def test_a_failure_that_does_not_repeat_is_reported_as_it_was_found() -> None:
    contract = registry.get("split_dummy_tokens")
    ref = f"{HOSTILE}:wrong_once"
    with Isolated(contract, ref) as ex:
        r = runner.hunt(contract, ex, contract.property("sum_is_num_tokens"), runner.HuntOptions(_random(50), seed=0, reduce=False),
                        target_name=ref)
        again = ex.check("sum_is_num_tokens", r.failure.case, 30) if r.failure is not None else None
    assert r.failure is not None and r.failure.property == "sum_is_num_tokens"
    assert r.first_failure_example == 3  # the third call in the worker, and only that one, is wrong
    assert again is not None and again.status == PASSED  # the replay could not make it fail again

