"""``batchfuzz.runner``: one hunt's phases (``Hunt``), the rounds over several
properties (``hunt_in_rounds``), and the checks of their options. Every run
here is in this process and bounded by example counts, never by seconds."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.internal.reflection import function_digest

from batchfuzz import registry, runner
from batchfuzz.case import Case
from batchfuzz.execution import InProcess, Outcome

CONTRACT = registry.get("split_dummy_tokens")
GOOD = CONTRACT.implementation("numpy").for_device("cpu")
BAD = CONTRACT.variant("drop_remainder").fn  # its sum falls short of N: sum_is_num_tokens fails
SUM = CONTRACT.property("sum_is_num_tokens")


def _random(examples: int) -> settings:
    return settings(max_examples=examples, derandomize=False, database=None, deadline=None)


class _Overlapping(InProcess):
    """An in-process executor that overlaps as a worker does: ``submit``
    runs the call (on a copy, as a worker gets one) and ``collect`` hands its
    outcome over, so the late failure and its replay run without a process."""

    overlaps = True

    def __init__(self, target: Any) -> None:
        super().__init__(CONTRACT, target, "overlapping")
        self.pending: Outcome | None = None
        self.calls: list[str] = []

    def submit(self, prop_name: str, case: Case, *, scores: bool = False) -> None:
        self.calls.append("submit")
        self.pending = super().check(prop_name, case.copy(), scores=scores)

    def collect(self, timeout_s: float | None = None) -> Outcome:
        self.calls.append("collect")
        outcome, self.pending = self.pending, None
        assert outcome is not None
        return outcome

    def check(self, prop_name: str, case: Case, timeout_s: float | None = None, *, scores: bool = False) -> Outcome:
        self.calls.append("check")
        return super().check(prop_name, case, timeout_s, scores=scores)


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(("field", "value", "error"), [
    ("run_settings", {"max_examples": 5}, TypeError),
    ("seed", True, ValueError),
    ("seed", 1.5, ValueError),
    ("example_timeout_s", 0, ValueError),
    ("extra_examples", [Case({"num_reqs": 1, "num_tokens": 1})], ValueError),
])
def test_hunt_options_refuse_bad_values_naming_them(field: str, value: Any, error: type[Exception]) -> None:
    fields: dict[str, Any] = {"run_settings": settings(), field: value}
    with pytest.raises(error, match=field):
        runner.HuntOptions(**fields)


def test_hunt_options_are_frozen() -> None:
    options = runner.HuntOptions(settings(), seed=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.seed = 4  # type: ignore[misc]
    assert dataclasses.replace(options, seed=4).seed == 4 and options.seed == 3


@pytest.mark.parametrize(("field", "value"), [
    ("budget_s", -1.0), ("round_examples", 0), ("round_examples", True), ("max_rounds", 0), ("min_examples", -1),
])
def test_rounds_refuse_bad_values_naming_them(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        runner.Rounds(**{field: value})


def test_hunt_in_rounds_needs_an_end_and_sets_its_own_examples() -> None:
    props = CONTRACT.properties[:1]
    with pytest.raises(ValueError, match=r"options\.deadline or rounds\.budget_s"):
        runner.hunt_in_rounds(CONTRACT, GOOD, props, runner.HuntOptions(settings()), runner.Rounds(), target_name="t")
    examples = runner.HuntOptions(settings(), extra_examples=CONTRACT.examples[:1])
    with pytest.raises(ValueError, match="extra_examples"):
        runner.hunt_in_rounds(CONTRACT, GOOD, props, examples, runner.Rounds(budget_s=5), target_name="t")


def test_the_rounds_have_a_name_that_says_so() -> None:
    assert not hasattr(runner, "hunt_for")  # renamed: every caller says hunt_in_rounds
    assert runner.hunt_in_rounds.__name__ == "hunt_in_rounds"


# ---------------------------------------------------------------- one hunt


def test_a_passing_hunt_runs_its_examples_and_reports_each() -> None:
    passed: list[int] = []
    r = runner.hunt(CONTRACT, GOOD, SUM, runner.HuntOptions(_random(25), seed=1), target_name="impl:numpy@cpu",
                    on_example=lambda: passed.append(1))
    assert r.failure is None and r.examples == 25 and len(passed) == 25
    assert r.first_failure_example is None and not r.out_of_time


def test_a_failing_hunt_shrinks_and_records_where_it_failed_first() -> None:
    hunt = runner.Hunt(CONTRACT, BAD, SUM, runner.HuntOptions(_random(200), seed=2, reduce=False), target_name="bad")
    r = hunt.run()
    assert r.failure is not None and r.failure.property == "sum_is_num_tokens" and r.failure.complete
    assert r.first_failure_example is not None and r.first_failure_example <= r.examples
    assert hunt.failing is not None and hunt.failing[0] == r.failure.case  # the last failing case run: the shrunk one
    # drop_remainder loses N % R tokens: the smallest failing split has a remainder of one.
    n, reqs = r.failure.case.args["num_tokens"], r.failure.case.args["num_reqs"]
    assert n % reqs == 1 and reqs == 2, r.failure.case.args
    with pytest.raises(RuntimeError, match="has run already"):
        hunt.run()


def test_a_deadline_passed_runs_nothing_and_says_so() -> None:
    r = runner.hunt(CONTRACT, GOOD, SUM, runner.HuntOptions(_random(50), seed=0, deadline=time.time() - 1),
                    target_name="t")
    assert r.examples == 0 and r.out_of_time and r.failure is None


def test_generate_until_passed_lets_only_the_first_example_run() -> None:
    r = runner.hunt(CONTRACT, GOOD, SUM, runner.HuntOptions(_random(50), seed=0, generate_until=time.time() - 1),
                    target_name="t")
    assert r.examples == 1 and r.out_of_time


def test_should_stop_is_polled_before_every_example() -> None:
    polls: list[int] = []

    def stop() -> bool:
        polls.append(1)
        return len(polls) > 7

    r = runner.hunt(CONTRACT, GOOD, SUM, runner.HuntOptions(_random(50), seed=0), target_name="t", should_stop=stop)
    assert r.examples == 7 and len(polls) == 8 and r.out_of_time


def test_the_overlap_finds_late_replays_and_shrinks_as_a_waiting_hunt() -> None:
    """The phases of an overlapped hunt: the failure is collected one body
    late (``late``), the replay run shrinks it waiting for every call, and
    the result is the waiting hunt's."""
    waiting = runner.Hunt(CONTRACT, BAD, SUM, runner.HuntOptions(_random(200), seed=5, reduce=False, overlap=False),
                          target_name="bad")
    w = waiting.run()
    ex = _Overlapping(BAD)
    overlapped = runner.Hunt(CONTRACT, ex, SUM, runner.HuntOptions(_random(200), seed=5, reduce=False), target_name="bad")
    o = overlapped.run()
    assert waiting.overlap.late is None and not waiting.replaying
    assert overlapped.overlap.late is not None and overlapped.replaying and overlapped.overlap.in_flight is None
    assert w.failure is not None and o.failure is not None and w.first_failure_example is not None
    assert o.first_failure_example == w.first_failure_example
    assert o.failure.case == w.failure.case
    first_check = ex.calls.index("check")  # the replay waits for every call
    assert ex.calls[:first_check] == ["submit"] + ["collect", "submit"] * (w.first_failure_example - 1) + ["collect"]
    assert set(ex.calls[first_check:]) == {"check"}


def test_a_derandomized_hunt_waits_for_every_call() -> None:
    ex = _Overlapping(GOOD)
    r = runner.hunt(CONTRACT, ex, SUM, runner.HuntOptions(settings(_random(10), derandomize=True)), target_name="t")
    assert r.examples == 10 and ex.calls == ["check"] * 10


def test_each_target_and_property_has_its_own_database_key() -> None:
    def key(target_name: str, prop: str) -> bytes:
        options = runner.HuntOptions(_random(1))
        return function_digest(runner.Hunt(CONTRACT, GOOD, CONTRACT.property(prop), options, target_name=target_name).body)

    assert key("a", "sum_is_num_tokens") == key("a", "sum_is_num_tokens")
    assert len({key("a", "sum_is_num_tokens"), key("b", "sum_is_num_tokens"), key("a", "max_is_ceil")}) == 3


# ---------------------------------------------------------------- rounds


def test_rounds_are_sized_by_round_and_capped() -> None:
    sizes: list[int] = []
    hunts: list[tuple[str, int]] = []

    def size(round_no: int) -> int:
        sizes.append(round_no)
        return 4

    props = (SUM, CONTRACT.property("max_is_ceil"))
    options = runner.HuntOptions(_random(1000), seed=0, deadline=time.time() + 3600)
    results = runner.hunt_in_rounds(CONTRACT, GOOD, props, options, runner.Rounds(round_examples=size, max_rounds=3),
                                    target_name="t", on_result=lambda r, acc: hunts.append((r.property, r.examples)))
    assert sizes == [0, 1, 2]
    rounds, explicit = hunts[:6], hunts[6:]
    assert rounds == [(SUM.name, 4), ("max_is_ceil", 4)] * 3
    assert [p for p, _ in explicit] == [SUM.name, "max_is_ceil"]  # the contract's examples, last
    assert [r.examples for r in results] == [12 + explicit[0][1], 12 + explicit[1][1]]


def test_a_short_property_is_made_up_to_its_floor() -> None:
    hunts: list[int] = []
    options = runner.HuntOptions(_random(1000), seed=0, deadline=time.time() + 3600)
    rounds = runner.Rounds(round_examples=3, max_rounds=1, min_examples=8)
    runner.hunt_in_rounds(CONTRACT, GOOD, (SUM,), options, rounds, target_name="t",
                          on_result=lambda r, acc: hunts.append(r.examples))
    assert hunts[0] == 8


def test_the_first_failure_ends_the_rounds() -> None:
    props = (SUM, CONTRACT.property("max_is_ceil"))
    options = runner.HuntOptions(_random(200), seed=0, deadline=time.time() + 3600, reduce=False)
    results = runner.hunt_in_rounds(CONTRACT, BAD, props, options, runner.Rounds(max_rounds=5), target_name="bad")
    assert results[0].failure is not None and results[0].failure.property == SUM.name
    assert results[1].examples == 0  # never started
    kept = runner.hunt_in_rounds(CONTRACT, BAD, props, options, runner.Rounds(max_rounds=1, stop_on_failure=False),
                                 target_name="bad")
    assert kept[0].failure is not None and kept[1].examples > 0


def test_should_stop_ends_the_rounds_before_any_hunt() -> None:
    options = runner.HuntOptions(_random(10), seed=0)
    results = runner.hunt_in_rounds(CONTRACT, GOOD, CONTRACT.properties, options, runner.Rounds(budget_s=3600),
                                    target_name="t", should_stop=lambda: True)
    assert [r.examples for r in results] == [0] * len(CONTRACT.properties)
