"""Run a contract's properties against a target with Hypothesis.

The one search behind the generated tests, ``check``, ``fuzz``, ``replay``,
the catalogue and ``batchfuzz.testing``: :func:`hunt` (a :class:`Hunt`) runs
one property once and returns its shrunk, reduced counterexample, if any;
:func:`hunt_in_rounds` (a :class:`RoundRobin`) repeats rounds over several
properties with fresh seeds within a budget. A crash, a hang or an exception
of the target fails the pseudo-property ``crash``, ``timeout`` or ``raises``.
docs/fuzz-loop.md ("One hunt") explains the phases, deadlines and seeds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import numbers
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import Phase, event, given, reject, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import HypothesisException

from batchfuzz import observability, profiles
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation
from batchfuzz.codec import encode_case
from batchfuzz.execution import CRASH, FAILED, PSEUDO_PROPERTIES, RAISES, REJECTED, TIMEOUT, Executor, Outcome, wrap
from batchfuzz.reduce import reduce_case
from batchfuzz.registry import Contract, Property, Target, choose_domain

# The pseudo-properties a crash or a hang fails (the property that was being
# checked when it happened is kept as ``Failure.during``).
CRASH_PROPERTY = Property("crash", "calling the target does not kill its process (no segfault, os._exit, sys.exit, "
                          "BaseException or device fault)", lambda target, case: None)
TIMEOUT_PROPERTY = Property("timeout", "every call of the target returns within the per-example timeout",
                            lambda target, case: None)
RAISES_PROPERTY = Property("raises", "every call of the target returns a result (it raises no exception the contract's "
                           "properties could judge instead)", lambda target, case: None)
DEADLINE_GRACE_S = profiles.DEADLINE_GRACE_S


@dataclass
class Failure:
    """A counterexample: the property it violates, the shrunk case, the error."""

    contract: str
    target: str
    property: str
    spec: str
    case: Case
    error_type: str
    message: str
    traceback: str = ""
    exit: str = ""  # for crash and timeout: how the process ended
    during: str = ""  # for crash, timeout and raises: the property whose calls it happened in
    complete: bool = True  # False: the deadline stopped shrinking early

    def kind(self) -> str:
        if self.property in PSEUDO_PROPERTIES:
            return self.property
        return "violation" if self.error_type == PropertyViolation.__name__ else "exception"

    def to_json(self) -> dict[str, Any]:
        return {
            "contract": self.contract, "target": self.target, "property": self.property, "spec": self.spec,
            "case": encode_case(self.case), "error_type": self.error_type, "message": self.message, "exit": self.exit,
            "during": self.during, "shrink_complete": self.complete,
        }


@dataclass
class HuntResult:
    property: str
    examples: int = 0
    seconds: float = 0.0
    failure: Failure | None = None
    events: Counter[str] = field(default_factory=Counter)
    scores: Counter[str] = field(default_factory=Counter)
    out_of_time: bool = False  # the deadline ended this hunt
    # When the first failing example ran: its number among this hunt's examples
    # (1 = the very first: a failure replayed from the example database comes
    # before any generated example) and its wall-clock time (time.time()).
    first_failure_example: int | None = None
    first_failure_time: float | None = None


class _OutOfTime(KeyboardInterrupt):
    """Ends a Hypothesis run at the deadline or the end of a time slice.

    A KeyboardInterrupt, because that is the one exception Hypothesis neither
    takes for a failure nor answers by saving the example it interrupted: for
    any other BaseException it saves that example (never checked) under the
    test's primary database key, where every later run replays it before the
    real failures; each slice's end would leave one such entry."""


class _Replay(KeyboardInterrupt):
    """Ends an overlapped Hypothesis run whose previous example failed
    (``hunt``'s ``overlap``): the example running is not the failing one, so
    it must be neither reported nor saved (a KeyboardInterrupt, as
    ``_OutOfTime`` is, for the same reason)."""


class _Failed(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


class _Crashed(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


class _TimedOut(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


class _Raised(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


def _raise_for(outcome: Outcome) -> None:
    # Four classes raised from four lines: Hypothesis tells distinct bugs
    # apart by exception type and place, so a crash and a wrong answer are
    # shrunk as two bugs, not one turned into the other.
    if outcome.status == FAILED:
        raise _Failed(outcome)
    if outcome.status == RAISES:
        raise _Raised(outcome)
    if outcome.status == CRASH:
        raise _Crashed(outcome)
    if outcome.status == TIMEOUT:
        raise _TimedOut(outcome)


def failure_signature(outcome: Outcome | None) -> tuple[str, str] | None:
    """What counts as "the same failure" when a case is reduced."""
    if outcome is None or outcome.status not in (FAILED, RAISES, CRASH, TIMEOUT):
        return None
    return outcome.status, outcome.error_type


@contextlib.contextmanager
def _quiet_hypothesis() -> Iterator[None]:
    """Hypothesis prints how to reproduce an aborted run; the runner reports
    its own reproduction instead."""
    from hypothesis import reporting

    with reporting.with_reporter(lambda text: None):
        yield


@dataclass(frozen=True)
class HuntOptions:
    """What a hunt runs under. ``deadline`` and ``generate_until`` are
    ``time.time()`` values (several processes share them); docs/fuzz-loop.md
    ("One hunt") says what each option does to the search."""

    run_settings: settings
    seed: int | None = None  # a randomized run's seed (fresh when None); a derandomized run has its own
    domain: str | None = None  # default: the target's declared domain, else spec
    deadline: float | None = None  # no example starts after it, shrinking included
    example_timeout_s: float | None = None  # per call; a hang is a timeout failure
    labels: bool = True  # record the contract's input-class labels (hypothesis.event)
    reduce: bool = True  # reduce the shrunk case with the contract's reductions
    overlap: bool = True  # draw the next example while an isolated target runs the last
    extra_examples: tuple[Case, ...] = ()  # explicit examples, run first
    generate_until: float | None = None  # no new example after it unless a failure is being shrunk

    def __post_init__(self) -> None:
        if not isinstance(self.run_settings, settings):
            raise TypeError(f"run_settings must be hypothesis settings, got {self.run_settings!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral)):
            raise ValueError(f"seed must be an int or None, got {self.seed!r}")
        if self.example_timeout_s is not None and not self.example_timeout_s > 0:
            raise ValueError(f"example_timeout_s must be positive or None, got {self.example_timeout_s!r}")
        if not isinstance(self.extra_examples, tuple) or not all(isinstance(c, Case) for c in self.extra_examples):
            raise ValueError(f"extra_examples must be a tuple of Case, got {self.extra_examples!r}")


@dataclass
class _InFlight:
    """An overlapped example between its ``submit`` and its ``collect``."""

    case: Case
    choices: tuple[Any, ...]  # its Hypothesis choice sequence: what replays it
    timeout_s: float | None
    labels: Sequence[str] | None = None


@dataclass
class _LateFailure:
    """An overlapped example whose outcome, collected one body late, failed."""

    flight: _InFlight
    outcome: Outcome


class _Overlap:
    """A hunt's overlap: whether it is on, the example submitted and not yet
    collected (at most one), and the first one found failing (replayed)."""

    def __init__(self, executor: Executor, *, enabled: bool) -> None:
        self.executor, self.enabled = executor, enabled
        self.in_flight: _InFlight | None = None
        self.late: _LateFailure | None = None

    def collect(self) -> tuple[_InFlight, Outcome]:
        flight, self.in_flight = self.in_flight, None
        assert flight is not None, "collect without an example in flight"
        return flight, self.executor.collect(flight.timeout_s)


class Hunt:
    """One property's search on one target: a Hypothesis run that generates
    and shrinks, a replay of a failure the overlap found late, the reduction
    of the shrunk case, the ``HuntResult``. ``run`` it once."""

    def __init__(self, contract: Contract, target: Target | Executor, prop: Property, options: HuntOptions, *,
                 target_name: str, on_example: Callable[[], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> None:
        self.contract, self.prop, self.options, self.target_name = contract, prop, options, target_name
        self.on_example, self.should_stop = on_example, should_stop
        self.executor = wrap(contract, target, target_name)
        self.domain = choose_domain(options.domain, self.executor.describe().get("domain"))
        self.dom = contract.domain(self.domain)
        self.result = HuntResult(prop.name)
        self.failing: tuple[Case, Outcome] | None = None  # the last failing example run: the shrunk one
        self.replaying = False
        overlapped = not options.extra_examples and not options.run_settings.derandomize
        self.overlap = _Overlap(self.executor, enabled=options.overlap and self.executor.overlaps and overlapped)
        self.want_scores = contract.scores is not None
        self.body = _test_body(self)
        self._ran = False

    def run(self) -> HuntResult:
        """Generate and shrink, replay a late failure, reduce: the result."""
        if self._ran:
            raise RuntimeError(f"the hunt of {self.prop.name} on {self.target_name} has run already")
        self._ran = True
        start = time.perf_counter()
        try:
            self._run(self.options.run_settings, self.options.extra_examples)
            if self.overlap.late is not None and self.failing is None:
                self._replay(self.overlap.late)
        finally:
            self.result.seconds = time.perf_counter() - start
        if self.failing is not None:
            self.result.failure = self._reduced_failure(*self.failing)
        return self.result

    def _replay(self, late: _LateFailure) -> None:
        """Replay the failure found late from its choice sequence and shrink
        it, every call waited for; one that does not repeat stays as found."""
        self.overlap.enabled, self.replaying = False, True
        self.result.out_of_time = False  # a slice's end stops generating, not shrinking: the replay says if time ran out
        self._run(_replay_settings(self.options.run_settings, self.body, late.flight.choices))
        if self.failing is None:
            self.failing = (late.flight.case, late.outcome)

    def _run(self, test_settings: settings, examples: tuple[Case, ...] = ()) -> None:
        """One Hypothesis run of the body; how it ended is in the hunt's state."""
        test = self._test(test_settings, examples)
        try:
            with _quiet_hypothesis(), observability.labelled(self.contract.name, self.prop.name, self.target_name,
                                                             self.domain):
                test()
        except _Replay:
            pass
        except _OutOfTime:
            self.result.out_of_time = True
        except HypothesisException:
            if self.failing is None:
                raise
        except (_Failed, _Raised, _Crashed, _TimedOut):
            pass
        finally:
            if self.overlap.in_flight is not None:  # the last example's outcome (the run ended, was stopped or raised)
                with contextlib.suppress(_Replay):
                    self._settle()

    def _test(self, test_settings: settings, examples: tuple[Case, ...]) -> Callable[[], None]:
        from hypothesis import example

        test = given(case=self.dom.cases())(self.body)
        for ex in reversed(examples):
            test = example(case=ex)(test)
        if test_settings.derandomize:
            test = hypothesis_seed(_round_seed(0, self.contract.name, self.prop.name, self.domain))(test)
        elif self.options.seed is not None:
            # @seed switches the example database off; applying the settings after it switches it back on,
            # so a seeded hunt (every round of hunt_in_rounds) still saves and replays failures.
            test = hypothesis_seed(self.options.seed)(test)
        return settings(test_settings, report_multiple_bugs=False)(test)

    def example(self, case: Case) -> None:
        """The body of one Hypothesis example."""
        if self._out_of_time():
            raise _OutOfTime
        if self.overlap.enabled:
            if self.overlap.in_flight is not None:
                self._settle()
            if self._submit(case):
                return
            self.overlap.enabled = False  # this Hypothesis keeps no choice sequence to replay: every example waits
        self._check(case)

    def _out_of_time(self) -> bool:
        now, o = time.time(), self.options
        if (o.deadline is not None and now > o.deadline) or (self.should_stop is not None and self.should_stop()):
            return True
        return (o.generate_until is not None and now > o.generate_until and self.result.examples > 0
                and self.failing is None and not self.replaying)

    def _submit(self, case: Case) -> bool:
        """Submit ``case`` without waiting (False where it has no choice
        sequence to replay it from); its labels are computed meanwhile."""
        choices = _choices()
        if choices is None:
            return False
        self.executor.submit(self.prop.name, case, scores=self.want_scores)
        flight = self.overlap.in_flight = _InFlight(case, choices, self._timeout())
        if self.options.labels:  # while the target runs
            flight.labels = self.contract.labels(case)
            for label in flight.labels:
                event(label)
        return True

    def _settle(self) -> None:
        """Collect the example in flight; one that failed is kept for its replay (``_Replay``)."""
        flight, outcome = self.overlap.collect()
        if outcome.status == REJECTED:
            return
        self._count(outcome, flight.labels)
        if failure_signature(outcome) is not None:
            self.overlap.late = _LateFailure(flight, outcome)
            raise _Replay

    def _check(self, case: Case) -> None:
        """Run ``case`` and wait for its outcome; a failure raises for Hypothesis to shrink."""
        snapshot = case if self.executor.keeps_cases else case.copy()
        outcome = self.executor.check(self.prop.name, case, self._timeout(), scores=self.want_scores)
        if outcome.status == REJECTED:
            reject()
        labels = self.contract.labels(snapshot) if self.options.labels else None
        for label in labels or ():
            event(label)
        self._count(outcome, labels)
        if failure_signature(outcome) is not None:
            self.failing = (snapshot, outcome)
            _raise_for(outcome)

    def _count(self, outcome: Outcome, labels: Sequence[str] | None) -> None:
        """Book one example's outcome (not a rejected one); a failure's
        place is kept, a pass reported (scores, ``on_example``)."""
        r = self.result
        r.examples += 1
        r.events.update(labels or ())
        if failure_signature(outcome) is not None:
            if r.first_failure_example is None:
                r.first_failure_example, r.first_failure_time = r.examples, time.time()
            return
        if outcome.value:
            r.scores.update(outcome.value)
        if self.on_example is not None:
            self.on_example()

    def _timeout(self) -> float | None:
        """One call's timeout: the option's, cut to the deadline's grace."""
        o = self.options
        if o.deadline is None:
            return o.example_timeout_s
        left = max(0.05, o.deadline + DEADLINE_GRACE_S - time.time())
        return left if o.example_timeout_s is None else min(o.example_timeout_s, left)

    def _reduced_failure(self, case: Case, outcome: Outcome) -> Failure:
        """The failure record, its case reduced where the options say and time was left."""
        if self.options.reduce and not self.result.out_of_time:
            within = dataclasses.replace(self.dom, contains=self._admits)
            fails = functools.partial(self._fails_alike, failure_signature(outcome))
            case, outcome = reduce_case(self.contract, within, case, outcome, fails)
        return _failure(self.contract, self.target_name, self.prop, case, outcome, complete=not self.result.out_of_time)

    def _admits(self, case: Case) -> bool:
        return self.dom.contains(case) and self.executor.check("__admits__", case).status != REJECTED

    def _fails_alike(self, want: tuple[str, str] | None, case: Case) -> Outcome | None:
        """``case``'s outcome where it fails as ``want`` says, before the deadline."""
        if self.options.deadline is not None and time.time() > self.options.deadline:
            return None
        outcome = self.executor.check(self.prop.name, case, self._timeout())
        return outcome if failure_signature(outcome) == want else None


def _test_body(search: Hunt) -> Callable[[Case], None]:
    """The function Hypothesis runs for ``search``, keyed and named for it."""

    def body(case: Case) -> None:
        search.example(case)

    # One database key per (contract, domain, target, property): the source is the same for every hunt, so
    # without this every hunt would share a key and replay each other's saved failures against the wrong strategy.
    key = (search.contract.name, search.domain, search.target_name, search.prop.name)
    body._hypothesis_internal_add_digest = repr(key).encode()  # type: ignore[attr-defined]
    # Observability records name what ran: CONTRACT.PROPERTY, the target, the domain (batchfuzz.observability).
    observability.name_test(body, search.contract.name, search.prop.name)
    return body


def hunt(contract: Contract, target: Target | Executor, prop: Property, options: HuntOptions, *, target_name: str,
         on_example: Callable[[], None] | None = None, should_stop: Callable[[], bool] | None = None) -> HuntResult:
    """Run ``prop`` against ``target`` (a callable, run here, or an executor)
    once under ``options``: the examples run and, on failure, the shrunk and
    reduced counterexample. ``on_example`` is called after every passing
    example, ``should_stop`` polled before every example."""
    return Hunt(contract, target, prop, options, target_name=target_name, on_example=on_example,
                should_stop=should_stop).run()


def _choices() -> tuple[Any, ...] | None:
    """The choice sequence of the example whose body is running (Hypothesis's
    own record of it, from which it regenerates the same example), or None
    where this Hypothesis keeps none or this example has none (an explicit
    ``@example``)."""
    from hypothesis.control import current_build_context

    try:
        choices = current_build_context().data.choices
    except (AttributeError, HypothesisException):
        return None
    return tuple(choices) if choices else None


def _replay_settings(run_settings: settings, body: Callable[..., Any], choices: tuple[Any, ...]) -> settings:
    """Settings under which a Hypothesis run starts with the example of
    ``choices`` and shrinks it: it is saved to an in-memory database (also
    reading and writing the run's own, where it has one) under the secondary
    key of ``body``'s test, where Hypothesis keeps failing examples not yet
    shrunk (as its ``fuzz_one_input`` does; one under the primary key would
    be taken for shrunk already); the run replays the database
    (``Phase.reuse``) and, where ``run_settings`` shrink, shrinks what fails.
    It generates nothing new, and leaves out Hypothesis's explain phase (its
    report is not printed: ``_quiet_hypothesis``)."""
    from hypothesis.database import InMemoryExampleDatabase, MultiplexedDatabase, choices_to_bytes
    from hypothesis.internal.reflection import function_digest

    saved = InMemoryExampleDatabase()
    saved.save(function_digest(body) + b".secondary", choices_to_bytes(choices))
    database = saved if run_settings.database is None else MultiplexedDatabase(saved, run_settings.database)
    phases = (Phase.reuse,) + ((Phase.shrink,) if Phase.shrink in run_settings.phases else ())
    return settings(run_settings, database=database, phases=phases)


def _failure(contract: Contract, target_name: str, prop: Property, case: Case, outcome: Outcome, *, complete: bool) -> Failure:
    if outcome.status == CRASH:
        p, during = CRASH_PROPERTY, prop.name
    elif outcome.status == TIMEOUT:
        p, during = TIMEOUT_PROPERTY, prop.name
    elif outcome.status == RAISES:
        p, during = RAISES_PROPERTY, prop.name
    else:
        p, during = prop, ""
    error_type = outcome.error_type
    if outcome.status == FAILED and error_type == "_Failed":  # pragma: no cover - defensive
        error_type = "PropertyViolation"
    return Failure(contract=contract.name, target=target_name, property=p.name, spec=p.spec, case=case,
                   error_type=error_type, message=outcome.message, traceback=outcome.traceback, exit=outcome.exit,
                   during=during, complete=complete)


# hunt_in_rounds's default round sizes (examples per property per round).
FIRST_ROUND_EXAMPLES = 10
ROUND_EXAMPLES = 50


@dataclass(frozen=True)
class Rounds:
    """How ``hunt_in_rounds`` spends its time (docs/fuzz-loop.md, "Rounds").

    ``budget_s`` sets the end unless the options' ``deadline`` does;
    ``round_examples`` (an int, or a function of the round number) sizes the
    rounds; ``min_examples`` is every property's floor, run on until
    ``min_deadline``."""

    budget_s: float | None = None
    round_examples: int | Callable[[int], int] | None = None
    max_rounds: int | None = None
    min_examples: int = 0
    min_deadline: float | None = None
    stop_on_failure: bool = True

    def __post_init__(self) -> None:
        if self.budget_s is not None and not self.budget_s >= 0:
            raise ValueError(f"budget_s must be >= 0 or None, got {self.budget_s!r}")
        n = self.round_examples
        if n is not None and not callable(n) and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"round_examples must be a positive int, a function of the round or None, got {n!r}")
        if self.max_rounds is not None and (isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int)
                                            or self.max_rounds < 1):
            raise ValueError(f"max_rounds must be a positive int or None, got {self.max_rounds!r}")
        if isinstance(self.min_examples, bool) or not isinstance(self.min_examples, int) or self.min_examples < 0:
            raise ValueError(f"min_examples must be an int >= 0, got {self.min_examples!r}")


class RoundRobin:
    """Several properties hunted on one target in rounds with fresh seeds
    until a deadline, then on the contract's explicit examples. ``run`` it once."""

    def __init__(self, contract: Contract, target: Target | Executor, properties: tuple[Property, ...],
                 options: HuntOptions, rounds: Rounds, *, target_name: str,
                 should_stop: Callable[[], bool] | None = None,
                 on_result: Callable[[HuntResult, HuntResult], None] | None = None) -> None:
        if options.extra_examples or options.generate_until is not None:
            raise ValueError("hunt_in_rounds sets extra_examples and generate_until itself: leave them unset, got "
                             f"{options.extra_examples!r} and {options.generate_until!r}")
        if options.deadline is None and rounds.budget_s is None:
            raise ValueError("hunt_in_rounds needs an end: options.deadline or rounds.budget_s, both are None")
        self.contract, self.properties, self.options, self.rounds = contract, properties, options, rounds
        self.target_name, self.should_stop, self.on_result = target_name, should_stop, on_result
        self.executor = wrap(contract, target, target_name)
        self.results = {p.name: HuntResult(p.name) for p in properties}
        self.end = options.deadline if options.deadline is not None else time.time() + (rounds.budget_s or 0.0)
        floor = rounds.min_deadline if rounds.min_examples and rounds.min_deadline is not None else self.end
        self.floor_end: float = max(self.end, floor)  # a property short of min_examples runs on until then
        self.round_no = 0

    def run(self) -> list[HuntResult]:
        """The rounds, then (unless they ended the run) the explicit examples."""
        if self._rounds() and not self._stopped():
            self._explicit_examples()
        return list(self.results.values())

    def _stopped(self) -> bool:
        return self.should_stop is not None and self.should_stop()

    def _rounds(self) -> bool:
        """Round after round; False where one ended the whole run."""
        while any(r.failure is None for r in self.results.values()):
            if not self._round():
                return False
            self.round_no += 1
            if not self._another_round():
                break
        return True

    def _round(self) -> bool:
        """One hunt of every still-passing property; False: the run is over
        (stopped, out of time, or a failure where the first one ends it)."""
        live = [p for p in self.properties if self.results[p.name].failure is None]
        n_examples = self._round_size()
        for p in live:
            if self._stopped():
                return False
            short = self.results[p.name].examples < self.rounds.min_examples
            p_end = self.floor_end if short else self.end
            if time.time() >= p_end:
                if time.time() < self.floor_end:
                    continue  # another property may still be short of its minimum
                return False
            r = hunt(self.contract, self.executor, p, self._round_options(p, n_examples, short, p_end),
                     target_name=self.target_name)
            self._book(r, full=True)
            if r.failure is not None and self.rounds.stop_on_failure:
                return False
        return True

    def _round_size(self) -> int:
        n = self.rounds.round_examples
        if n is None:  # a short first round: every property gets examples early, whatever the budget
            return FIRST_ROUND_EXAMPLES if self.round_no == 0 else ROUND_EXAMPLES
        return n(self.round_no) if callable(n) else n

    def _round_options(self, p: Property, n_examples: int, short: bool, p_end: float) -> HuntOptions:
        """One round's hunt of ``p``: its size (a short property's made up to its floor), seed and end."""
        base = self.options.run_settings
        n = max(n_examples, self.rounds.min_examples - self.results[p.name].examples) if short else n_examples
        rs = base if base.derandomize else settings(base, max_examples=n)
        seed = 0 if self.options.seed is None else self.options.seed
        return dataclasses.replace(self.options, run_settings=rs, deadline=p_end,
                                   seed=_round_seed(seed, self.contract.name, p.name, self.round_no))

    def _another_round(self) -> bool:
        """A derandomized profile runs one round (another would replay it);
        a property short of its floor gets more until ``floor_end``."""
        derandomized = self.options.run_settings.derandomize
        rounds_left = self.rounds.max_rounds is None or self.round_no < self.rounds.max_rounds
        short = any(r.examples < self.rounds.min_examples and r.failure is None for r in self.results.values())
        if short and time.time() < self.floor_end and not derandomized and rounds_left:
            return True
        return not (derandomized or time.time() >= self.end or not rounds_left)

    def _explicit_examples(self) -> None:
        """The contract's regression examples, last: a failure there is not
        shrunk by Hypothesis, so generated search gets the first chance."""
        if not self.contract.examples or time.time() >= self.end:
            return
        dom = self.contract.domain(choose_domain(self.options.domain, self.executor.describe().get("domain")))
        examples = tuple(ex for ex in self.contract.examples
                         if dom.contains(ex) and self.executor.check("__admits__", ex).status != REJECTED)
        rs = settings(self.options.run_settings, phases=[Phase.explicit], database=None)
        options = dataclasses.replace(self.options, run_settings=rs, seed=None, deadline=self.end, extra_examples=examples)
        for p in self.properties if examples else ():
            if self.results[p.name].failure is not None:
                continue
            r = hunt(self.contract, self.executor, p, options, target_name=self.target_name)
            self._book(r, full=False)
            if r.failure is not None and self.rounds.stop_on_failure:
                break

    def _book(self, r: HuntResult, *, full: bool) -> None:
        """Add one hunt to its property's total (``full``: its events, scores
        and time-out too) and report it (``on_result``)."""
        acc = self.results[r.property]
        acc.examples += r.examples
        acc.seconds += r.seconds
        if full:
            acc.events.update(r.events)
            acc.scores.update(r.scores)
            acc.out_of_time = acc.out_of_time or r.out_of_time
        if r.failure is not None:
            acc.failure = r.failure
        if self.on_result is not None:
            self.on_result(r, acc)


def hunt_in_rounds(contract: Contract, target: Target | Executor, properties: tuple[Property, ...],
                   options: HuntOptions, rounds: Rounds, *, target_name: str,
                   should_stop: Callable[[], bool] | None = None,
                   on_result: Callable[[HuntResult, HuntResult], None] | None = None) -> list[HuntResult]:
    """Hunt ``properties`` round robin with fresh seeds until the end
    ``rounds`` and ``options`` set; one result per property. ``should_stop``
    is polled before every hunt, ``on_result(hunt's, property's total)``
    called after every hunt (a caller persists a failure the moment it is found)."""
    return RoundRobin(contract, target, properties, options, rounds, target_name=target_name,
                      should_stop=should_stop, on_result=on_result).run()


def _round_seed(seed: int, *parts: object) -> int:
    """A stable 32-bit seed per (run seed, contract, property, round): unlike
    ``hash()``, independent of PYTHONHASHSEED, so ``--seed`` replays a run."""
    import zlib

    return zlib.crc32(repr((seed, *parts)).encode()) & 0xFFFFFFFF


def violated_properties(contract: Contract, target: Target | Executor, case: Case, *, timeout_s: float | None = None) -> list[str]:
    """Every property of ``contract`` that ``case`` violates (or crashes) on ``target``."""
    executor = wrap(contract, target)
    return [p.name for p in contract.properties if failure_signature(executor.check(p.name, case.copy(), timeout_s)) is not None]


def probe_result(contract: Contract, executor: Executor, domain: str, *, timeout_s: float | None = None) -> str | None:
    """Why the target's result cannot be read as the contract's, or None.

    Runs the contract's first property on its first regression example that
    lies in ``domain`` and that the target admits (before any generated
    example, so that a target returning engine objects is a usage error, not
    a "counterexample" on every input). Only a ``ResultTypeError`` counts: a
    wrong value, an exception or a crash is left to the run to report.
    """
    dom = contract.domain(domain)
    for case in contract.examples:
        if not dom.contains(case) or executor.check("__admits__", case).status == REJECTED:
            continue
        outcome = executor.check(contract.properties[0].name, case.copy(), timeout_s)
        if outcome.error_type == "ResultTypeError":
            args = ", ".join(f"{k}={v!r}" for k, v in case.args.items())
            return f"its result cannot be read as {contract.name}'s (on {args}): {outcome.message.splitlines()[0]}"
        return None
    return None


def admits(contract: Contract, target: Target | Executor, case: Case, domain: str | None = None) -> bool:
    """Whether ``case`` is an input of ``target``: it lies in ``domain`` (default:
    the target's declared domain, else ``spec``) and every ``@assumes``
    predicate of the target accepts it."""
    executor = wrap(contract, target)
    dom = contract.domain(choose_domain(domain, executor.describe().get("domain")))
    return dom.contains(case) and executor.check("__admits__", case).status != REJECTED
