"""Run a contract's properties against a target with Hypothesis.

The same code serves the generated tests, ``batchfuzz check``, ``fuzz``,
``replay``, the catalogue and ``batchfuzz.testing``: :func:`hunt` runs one
property once with given settings and returns its shrunk (and reduced)
counterexample, if any; :func:`hunt_for` repeats rounds over the properties
with fresh seeds until a deadline.

The target runs in an executor (``batchfuzz.execution``): a worker process
that may crash or hang without taking this process down, or this process.
A crash, a hang or an exception the target raises is a failure of the
pseudo-property ``crash``, ``timeout`` or ``raises``, shrunk like any other
and named apart from the property it kept from judging a result. A deadline (wall clock, ``time.time()``,
so that several processes share one) bounds everything, shrinking included:
past it a hunt stops and reports the smallest failing case seen so far.
"""

from __future__ import annotations

import contextlib
import dataclasses
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


def hunt(
    contract: Contract,
    target: Target | Executor,
    prop: Property,
    *,
    target_name: str,
    run_settings: settings,
    seed: int | None = None,
    extra_examples: tuple[Case, ...] = (),
    on_example: Callable[[], None] | None = None,
    domain: str | None = None,
    reduce: bool = True,
    deadline: float | None = None,
    example_timeout_s: float | None = None,
    labels: bool = True,
    generate_until: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    overlap: bool = True,
) -> HuntResult:
    """Run ``prop`` against ``target`` (a callable, run here, or an executor)
    once under ``run_settings``, on cases of the contract's ``domain``
    (default: the one the target declares with ``@batchfuzz.domain``, else
    ``spec``), minus the cases the target's ``@batchfuzz.assumes`` predicates
    reject.

    Returns the examples run and, on failure, the shrunk case (the last
    failing case Hypothesis replays is its minimal one, since
    ``report_multiple_bugs`` is off), then reduced by the contract's
    structural reductions (``batchfuzz.reduce``) when ``reduce``.

    ``deadline`` (``time.time()``): no example starts after it, an example in
    flight is cut at it plus ``DEADLINE_GRACE_S``, and a failure found by
    then is reported as shrunk so far. ``example_timeout_s`` bounds every
    call (a hang is a ``timeout`` failure; in-process, only Python-level
    hangs can be interrupted). ``generate_until`` (``time.time()``): no new
    example is generated after it (but the first), unless a failure was found
    (then it is shrunk until ``deadline``): a fuzz job's time slice. ``should_stop`` is
    polled before every example (an interrupted run). ``labels``: record the contract's input-class
    labels (``hypothesis.event`` statistics; they cost a few evaluations of
    the oracle per example).

    ``overlap`` (the default; it takes effect with an executor whose target
    runs in another process, ``Executor.overlaps``, in a randomized run
    without ``extra_examples``): an example's body submits its case and returns, and its outcome is
    collected in the next example's body, so Hypothesis draws example k+1
    while the worker runs example k (and the labels are computed then).
    An example that fails is then found one body late, with an innocent
    example's body running: that run is stopped, and a second Hypothesis
    run replays the failing example from its choice sequence
    (``_replay_settings``) and shrinks it, waiting for every call as without
    ``overlap``; the result is what it would have been without. A failure
    that does not repeat there is reported as it was found. Hypothesis's
    own records of the first run (its statistics, observability) count the
    failing example as passed; the replay records it as failing.

    Seeds: a randomized run uses ``seed`` (fresh when None); a derandomized
    run (the ``ci`` profile) is seeded from (contract, property, domain)
    alone, so its example stream does not depend on the target or on the
    source code of this function.
    """
    executor = wrap(contract, target, target_name)
    domain = choose_domain(domain, executor.describe().get("domain"))
    dom = contract.domain(domain)
    result = HuntResult(prop.name)
    last_failure: list[tuple[Case, Outcome]] = []
    want_scores = contract.scores is not None
    # overlap: each example is submitted and its outcome collected in the next example's body (see the docstring).
    mode = {"overlap": overlap and executor.overlaps and not extra_examples and not run_settings.derandomize,
            "replaying": False}
    in_flight: list[_InFlight] = []  # the example submitted and not yet collected (at most one)
    deferred: list[tuple[Case, tuple[Any, ...], Outcome]] = []  # an overlapped example that failed: case, choices, outcome

    def timeout() -> float | None:
        if deadline is None:
            return example_timeout_s
        left = max(0.05, deadline + DEADLINE_GRACE_S - time.time())
        return left if example_timeout_s is None else min(example_timeout_s, left)

    def counted(case: Case, outcome: Outcome, case_labels: Sequence[str] | None) -> None:
        """Book one example's outcome (not a rejected one); a failure is kept,
        the rest reported (scores, ``on_example``)."""
        result.examples += 1
        result.events.update(case_labels or ())
        if failure_signature(outcome) is not None:
            if result.first_failure_example is None:
                result.first_failure_example, result.first_failure_time = result.examples, time.time()
            return
        if outcome.value:
            result.scores.update(outcome.value)
        if on_example is not None:
            on_example()

    def settle() -> None:
        """Collect the example in flight; one that failed is kept for its replay (``_Replay``)."""
        f = in_flight.pop()
        outcome = executor.collect(f.timeout_s)
        if outcome.status == REJECTED:
            return
        counted(f.case, outcome, f.labels)
        if failure_signature(outcome) is not None:
            deferred.append((f.case, f.choices, outcome))
            raise _Replay

    def body(case: Case) -> None:
        now = time.time()
        if (deadline is not None and now > deadline) or (should_stop is not None and should_stop()) or \
                (generate_until is not None and now > generate_until and result.examples and not last_failure
                 and not mode["replaying"]):
            raise _OutOfTime
        if mode["overlap"]:
            if in_flight:
                settle()
            choices = _choices()
            if choices is not None:
                executor.submit(prop.name, case, scores=want_scores)
                in_flight.append(_InFlight(case, choices, timeout()))
                if labels:  # while the target runs
                    case_labels = in_flight[0].labels = contract.labels(case)
                    for label in case_labels:
                        event(label)
                return
            mode["overlap"] = False  # this Hypothesis keeps no choice sequence to replay: every example waits
        snapshot = case if executor.keeps_cases else case.copy()
        outcome = executor.check(prop.name, case, timeout(), scores=want_scores)
        if outcome.status == REJECTED:
            reject()
        sync_labels = contract.labels(snapshot) if labels else None
        for label in sync_labels or ():
            event(label)
        counted(snapshot, outcome, sync_labels)
        if failure_signature(outcome) is not None:
            last_failure.append((snapshot, outcome))
            _raise_for(outcome)

    # One database key per (contract, domain, target, property): the inner
    # function is the same for every hunt, so without this every hunt would
    # share a key and replay each other's saved failures against the wrong
    # strategy.
    body._hypothesis_internal_add_digest = repr((contract.name, domain, target_name, prop.name)).encode()  # type: ignore[attr-defined]
    # Observability records name what ran: CONTRACT.PROPERTY, the target, the domain (batchfuzz.observability).
    observability.name_test(body, contract.name, prop.name)

    def run(test_settings: settings, examples: tuple[Case, ...] = ()) -> None:
        test = given(case=dom.cases())(body)
        for ex in reversed(examples):
            from hypothesis import example

            test = example(case=ex)(test)
        if test_settings.derandomize:
            test = hypothesis_seed(_round_seed(0, contract.name, prop.name, domain))(test)
        elif seed is not None:
            # @seed switches the example database off; applying the settings
            # after it switches it back on, so a seeded hunt (every round of
            # hunt_for) still saves and replays failures.
            test = hypothesis_seed(seed)(test)
        test = settings(test_settings, report_multiple_bugs=False)(test)
        try:
            with _quiet_hypothesis(), observability.labelled(contract.name, prop.name, target_name, domain):
                test()
        except _Replay:
            pass
        except _OutOfTime:
            result.out_of_time = True
        except HypothesisException:
            if not last_failure:
                raise
        except (_Failed, _Raised, _Crashed, _TimedOut):
            pass
        finally:
            if in_flight:  # the last example's outcome (the run ended, was stopped or raised while it ran)
                with contextlib.suppress(_Replay):
                    settle()

    start = time.perf_counter()
    try:
        run(run_settings, extra_examples)
        if deferred and not last_failure:
            case, choices, outcome = deferred[0]
            mode.update(overlap=False, replaying=True)
            result.out_of_time = False  # a slice's end stops generating, not shrinking: the replay says if time ran out
            run(_replay_settings(run_settings, body, choices))
            if not last_failure:  # it did not fail again: reported as it was found
                last_failure.append((case, outcome))
    finally:
        result.seconds = time.perf_counter() - start
    if last_failure:
        case, outcome = last_failure[-1]
        if reduce and not result.out_of_time:
            within = dataclasses.replace(dom, contains=lambda c: dom.contains(c) and
                                         executor.check("__admits__", c).status != REJECTED)
            want = failure_signature(outcome)

            def fails(c: Case) -> Outcome | None:
                if deadline is not None and time.time() > deadline:
                    return None
                o = executor.check(prop.name, c, timeout())
                return o if failure_signature(o) == want else None

            case, outcome = reduce_case(contract, within, case, outcome, fails)
        result.failure = _failure(contract, target_name, prop, case, outcome, complete=not result.out_of_time)
    return result


@dataclass
class _InFlight:
    """An overlapped example between its ``submit`` and its ``collect``."""

    case: Case
    choices: tuple[Any, ...]  # its Hypothesis choice sequence: what replays it
    timeout_s: float | None
    labels: Sequence[str] | None = None


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


# hunt_for's default round sizes (examples per property per round).
FIRST_ROUND_EXAMPLES = 10
ROUND_EXAMPLES = 50


def hunt_for(
    contract: Contract,
    target: Target | Executor,
    properties: tuple[Property, ...],
    *,
    target_name: str,
    budget_s: float,
    base_settings: settings,
    seed: int = 0,
    round_examples: int | Callable[[int], int] | None = None,
    stop_on_failure: bool = True,
    deadline: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_result: Callable[[HuntResult, HuntResult], None] | None = None,
    max_rounds: int | None = None,
    domain: str | None = None,
    example_timeout_s: float | None = None,
    labels: bool = True,
    min_examples: int = 0,
    min_deadline: float | None = None,
) -> list[HuntResult]:
    """Round-robin over ``properties`` with fresh seeds until the deadline
    (``time.time() + budget_s`` unless ``deadline`` is given).

    Each round runs every still-passing property with ``round_examples``
    examples (default: ``FIRST_ROUND_EXAMPLES`` in the first round,
    ``ROUND_EXAMPLES`` after), so every property gets examples early whatever the budget; a
    derandomized profile runs a single round of its own size, since a
    repeated round would replay the same examples.

    ``should_stop`` is polled before every hunt (an interrupted run stops at
    the next hunt boundary and returns what it has); ``on_result(round_result,
    accumulated)`` is called after every hunt, so a caller can persist a
    failure the moment it is found; ``max_rounds`` caps the rounds (with a
    fixed ``seed`` and a fixed ``round_examples`` that makes a run replayable
    example for example). ``round_examples`` may be a function of the round
    number, to size rounds to a time slice. A property never started before
    the deadline keeps zero examples (the caller reports it as not run).

    ``min_examples``: the first round gives every property at least that
    many examples, and a property still short of them at the deadline runs
    on until it has them or ``min_deadline`` (a later ``time.time()``) comes:
    examples, not a busy machine's seconds, decide a verdict.
    """
    executor = wrap(contract, target, target_name)
    results = {p.name: HuntResult(p.name) for p in properties}
    end = deadline if deadline is not None else time.time() + budget_s
    floor_end = max(end, min_deadline) if (min_examples and min_deadline is not None) else end
    round_no = 0
    while True:
        live = [p for p in properties if results[p.name].failure is None]
        if not live:
            break
        if round_examples is None:  # a short first round: every property gets examples early, whatever the budget
            n_examples = FIRST_ROUND_EXAMPLES if round_no == 0 else ROUND_EXAMPLES
        else:
            n_examples = round_examples(round_no) if callable(round_examples) else round_examples
        for p in live:
            if should_stop is not None and should_stop():
                return list(results.values())
            short = results[p.name].examples < min_examples
            p_end = floor_end if short else end
            if time.time() >= p_end:
                if time.time() < floor_end:
                    continue  # another property may still be short of its minimum
                return list(results.values())
            n = max(n_examples, min_examples - results[p.name].examples) if short else n_examples
            rs = base_settings if base_settings.derandomize else settings(base_settings, max_examples=n)
            r = hunt(contract, executor, p, target_name=target_name, run_settings=rs,
                     seed=_round_seed(seed, contract.name, p.name, round_no), domain=domain, deadline=p_end,
                     example_timeout_s=example_timeout_s, labels=labels)
            acc = results[p.name]
            acc.examples += r.examples
            acc.seconds += r.seconds
            acc.events.update(r.events)
            acc.scores.update(r.scores)
            acc.out_of_time = acc.out_of_time or r.out_of_time
            if r.failure is not None:
                acc.failure = r.failure
            if on_result is not None:
                on_result(r, acc)
            if r.failure is not None and stop_on_failure:
                return list(results.values())
        round_no += 1
        still_short = any(results[p.name].examples < min_examples and results[p.name].failure is None for p in properties)
        if still_short and time.time() < floor_end and not base_settings.derandomize and \
                (max_rounds is None or round_no < max_rounds):
            continue
        if base_settings.derandomize or time.time() >= end or (max_rounds is not None and round_no >= max_rounds):
            break
    if should_stop is not None and should_stop():
        return list(results.values())
    # The contract's explicit regression examples run last: a failure there is
    # not shrunk by Hypothesis, so generated search gets the first chance to
    # report a minimal case.
    if contract.examples and time.time() < end:
        dom = contract.domain(choose_domain(domain, executor.describe().get("domain")))
        examples = tuple(ex for ex in contract.examples
                         if dom.contains(ex) and executor.check("__admits__", ex).status != REJECTED)
        for p in properties if examples else ():
            acc = results[p.name]
            if acc.failure is not None:
                continue
            r = hunt(contract, executor, p, target_name=target_name, extra_examples=examples, domain=domain, deadline=end,
                     run_settings=settings(base_settings, phases=[Phase.explicit], database=None),
                     example_timeout_s=example_timeout_s, labels=labels)
            acc.examples += r.examples
            acc.seconds += r.seconds
            if r.failure is not None:
                acc.failure = r.failure
            if on_result is not None:
                on_result(r, acc)
            if r.failure is not None and stop_on_failure:
                break
    return list(results.values())


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
