"""One check run: a contract's properties against one target, within a budget
(what ``batchfuzz check`` runs; the command parses its options into a
:class:`CheckRequest`, calls :func:`run` and maps its :class:`CheckResult`
to an exit code).

The target runs in a worker process (``batchfuzz.execution``) unless the
request says ``isolate=False``: a segfault, an exit, a device fault or a
hang is a counterexample of the pseudo-property ``crash`` or ``timeout``,
shrunk and reproduced like any other. The budget bounds the whole run.

Random (the default): every property runs through ``runner.hunt_in_rounds``.
Examples, not seconds, decide the verdict: the budget counts from the moment
the target has loaded in its worker (starting the worker, batchfuzz's
imports and forks are not charged to it, and are reported as
``startup_seconds``); every property gets ``min_examples`` examples before
any gets more, and a property still short of them when the budget ends runs
on until it has them, for at most one more budget.

Exhaustive (``exhaustive=True``): every input of one of the contract's
bounded scopes instead of random ones (``batchfuzz.exhaustive``), smallest
first, so its first counterexample is a smallest one of the scope and is
printed unshrunk, through the same printer; a scope that holds is reported
as "all N inputs within scope S hold". docs/exhaustive.md lists the scopes.

Everything wrong with the request (an unknown contract, domain, property or
scope, a target that cannot be imported or whose result the contract cannot
read, an unwritable ``json_path``, a ``database`` that cannot be opened) is a
``UsageError`` raised before any example runs. The run prints its progress,
its results and, on a counterexample, a reproduction; it writes its report
(a dict: status, examples per property, seconds, startup_seconds, the
counterexample and its reproduction) to ``json_path``, as read by
tests/test_hostile.py (random) and tests/test_exhaustive.py (exhaustive).
"""

from __future__ import annotations

import functools
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from batchfuzz import output, profiles, registry
from batchfuzz.usage import UsageError, refuse_system_dir, writable_dir, writable_file

if TYPE_CHECKING:  # the rest is imported by run(): `batchfuzz --help` stays light
    from batchfuzz import exhaustive, runner
    from batchfuzz.execution import Executor
    from batchfuzz.targets import TargetRef

# How long after the budget a check may still run: the example in flight
# (runner.DEADLINE_GRACE_S), then the report.
GRACE_S = profiles.DEADLINE_GRACE_S + 3.0

# Default budgets: a random check, and an exhaustive one (a scope is covered
# completely or reported incomplete, so it gets time to finish).
DEFAULT_BUDGET_S = 30.0
EXHAUSTIVE_BUDGET_S = 600.0
# Examples every property gets before the budget may end it (Hypothesis's
# valid examples: a case the target's @assumes rejects does not count).
DEFAULT_MIN_EXAMPLES = 10

# The statuses of a CheckResult (the report's "status", but for "interrupted",
# which writes no report): the command maps each to an exit code.
PASSED, COUNTEREXAMPLE, INCOMPLETE, INTERRUPTED = "passed", "counterexample", "incomplete", "interrupted"


def default_timeout(budget_s: float) -> float:
    """The per-example timeout a budget implies: a tenth of it, within [1 s, 30 s]."""
    return min(30.0, max(1.0, budget_s / 10))


@dataclass(frozen=True)
class CheckRequest:
    """What to check, as ``batchfuzz check``'s options say it (None: the default)."""

    contract: str
    target: str  # a target reference (batchfuzz.targets.parse)
    budget_s: float | None = None  # DEFAULT_BUDGET_S, EXHAUSTIVE_BUDGET_S when exhaustive
    timeout_s: float | None = None  # per example; default_timeout(budget)
    min_examples: int = DEFAULT_MIN_EXAMPLES
    isolate: bool = True
    domain: str | None = None  # registry.choose_domain's explicit domain
    steps: str | None = None  # contracts over scheduled steps: "model" or "engine" (names the domain)
    properties: tuple[str, ...] = ()  # only these (default: all)
    seed: int | None = None  # default: from the clock, printed
    database: str | None = None  # a directory, or a redis:// URL read without writing
    exhaustive: bool = False
    scope: str | None = None  # with exhaustive; default registry.DEFAULT_SCOPE
    json_path: str | None = None
    write_test: str | None = None  # a directory: a counterexample is also written there as a pytest file
    started: float | None = None  # when the command started (time.time()); default: now. Until the target is
    # ready (imports, the worker, its probe) is start-up: the budget's clock starts after it


@dataclass(frozen=True)
class Progress:
    """One progress report of a running check, given to ``run``'s ``on_progress``.

    Random runs report after every hunt (one property's round of examples:
    ``runner.FIRST_ROUND_EXAMPLES``, then ``runner.ROUND_EXAMPLES``, each),
    with ``property`` the property just run and ``examples`` its examples so
    far; exhaustive runs report every ``exhaustive.PROGRESS_EVERY_S`` seconds,
    with ``property`` None (every input is checked against every property),
    ``examples`` the inputs enumerated so far, ``total`` the scope's and
    ``skipped`` those outside the domain or the target's assumptions.
    """

    property: str | None
    examples: int
    failed: bool
    seconds_left: float
    total: int | None = None
    skipped: int = 0


@dataclass(frozen=True)
class CheckResult:
    """How a check ended: ``status`` (PASSED, COUNTEREXAMPLE, INCOMPLETE or INTERRUPTED) and the report written."""

    status: str
    report: dict[str, Any]


class _Lines:
    """The default progress: a live line on a terminal (rewritten in place), plain lines otherwise,
    at most one every ``PLAIN_EVERY_S`` (random) or ``PLAIN_EVERY_EXHAUSTIVE_S`` seconds (exhaustive)."""

    PLAIN_EVERY_S = 5.0
    PLAIN_EVERY_EXHAUSTIVE_S = 10.0

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last = time.time()

    def __call__(self, p: Progress) -> None:
        if p.property is None:
            if not self.tty and time.time() - self.last < self.PLAIN_EVERY_EXHAUSTIVE_S:
                return
            self.last = time.time()
            line = f"  {p.examples:7d} of {p.total} inputs, {p.skipped} skipped  {p.seconds_left:5.0f}s left"
            self.stream.write("\r" + line.ljust(78) if self.tty else line + "\n")
        else:
            status = "FAIL" if p.failed else "ok"
            if self.tty:
                line = f"  {status:4} {p.property:40} {p.examples:7d} examples  {p.seconds_left:5.0f}s left"
                self.stream.write("\r" + line.ljust(78))
            elif time.time() - self.last > self.PLAIN_EVERY_S:
                # a heartbeat, not a row of the results table printed at the end (a log would show each twice)
                self.stream.write(f"... {p.property}: {p.examples} examples so far{' (failed)' if p.failed else ''}, "
                                  f"{p.seconds_left:.0f}s of the budget left\n")
                self.last = time.time()
        self.stream.flush()



def _end_live_line(lines: _Lines | None) -> None:
    """The default progress's live line on a terminal ends before the results are printed."""
    if lines is not None and lines.tty:
        print()


@dataclass
class _Plan:
    """A request resolved and validated: what runs, where, until when."""

    contract: registry.Contract
    props: tuple[registry.Property, ...]
    scope: registry.Scope | None
    domain: str | None  # the explicit domain (--domain, or the one --steps names)
    budget: float
    timeout: float
    database: Any
    ref: TargetRef
    executor: Executor
    info: dict[str, Any]
    started: float
    deadline: float
    startup_s: float


def run(request: CheckRequest, on_progress: Callable[[Progress], None] | None = None) -> CheckResult:
    """Check ``request``'s target against its contract; print progress, results
    and any reproduction; write the JSON report. Raises ``UsageError`` before
    any example runs when the request cannot run.

    ``on_progress`` (default: a live line on a terminal, plain lines
    otherwise) receives every :class:`Progress`; a caller with its own display
    passes it here, and the run's other output is unchanged by it.
    """
    plan = _plan(request)
    lines = _Lines(sys.stdout) if on_progress is None else None
    shown = on_progress or lines
    assert shown is not None
    with plan.executor:
        if plan.scope is not None:
            return _exhaustive(request, plan, shown, lines)
        return _random(request, plan, shown, lines)


def _plan(request: CheckRequest) -> _Plan:
    """Validate ``request`` (every usage error, before any example), load the target, and time the run."""
    started = request.started or time.time()
    budget = request.budget_s if request.budget_s is not None else \
        EXHAUSTIVE_BUDGET_S if request.exhaustive else DEFAULT_BUDGET_S
    try:
        contract = registry.get(request.contract)
    except KeyError as exc:
        raise UsageError(str(exc)) from None
    scope = _scope(request, contract)
    domain = _domain(request, contract)
    props = _properties(request, contract)
    if request.json_path:
        writable_file(request.json_path, "--json")
    if request.write_test:
        writable_dir(request.write_test, "--write-test")
    database = _database(request.database)
    timeout = request.timeout_s if request.timeout_s is not None else default_timeout(budget)
    ref, executor, info = _load(request, contract, domain, budget, timeout)
    # The budget is the examples': its clock starts now. batchfuzz's own start (the command's and the registry's
    # imports, the fork server, the worker, the target's load and probe) is start-up, reported, not charged.
    ready = time.time()
    return _Plan(contract=contract, props=props, scope=scope, domain=domain, budget=budget, timeout=timeout,
                 database=database, ref=ref, executor=executor, info=info, started=started,
                 deadline=ready + budget, startup_s=ready - started)


def _scope(request: CheckRequest, contract: registry.Contract) -> registry.Scope | None:
    """The scope an exhaustive check enumerates (None for a random one); the options it excludes are usage errors."""
    if request.scope is not None and not request.exhaustive:
        raise UsageError("--scope needs --exhaustive")
    if not request.exhaustive:
        return None
    for flag, given in (("--seed", request.seed is not None), ("--database", request.database is not None)):
        if given:
            raise UsageError(f"{flag} does not apply to --exhaustive (it enumerates, it does not draw)")
    try:
        return contract.scope(request.scope or registry.DEFAULT_SCOPE)
    except KeyError as exc:
        raise UsageError(str(exc)) from None


def _domain(request: CheckRequest, contract: registry.Contract) -> str | None:
    """The domain asked for (``--domain``, or the one ``--steps`` names), checked to be the contract's."""
    domain = request.domain
    if request.steps is not None:
        domain = _steps_domain(contract, request.steps, domain)
    if domain is not None:
        try:
            contract.domain(domain)
        except KeyError as exc:
            raise UsageError(str(exc)) from None
    return domain


def _properties(request: CheckRequest, contract: registry.Contract) -> tuple[registry.Property, ...]:
    if not request.properties:
        return contract.properties
    try:
        return tuple(contract.property(n) for n in request.properties)
    except KeyError as exc:
        raise UsageError(str(exc)) from None


def _load(request: CheckRequest, contract: registry.Contract, domain: str | None, budget: float,
          timeout: float) -> tuple[TargetRef, Executor, dict[str, Any]]:
    """The target's reference, its executor and what it declares; a target
    that does not load, or whose result cannot be read, is a usage error."""
    from batchfuzz import runner
    from batchfuzz.execution import executor_for
    from batchfuzz.targets import TargetError, parse

    try:
        ref = parse(request.target)
        # Loading the target (its module's import) is the target's own time: bounded by the budget.
        executor = executor_for(contract, ref, isolate=request.isolate, load_timeout_s=max(budget, timeout))
        info = executor.describe()
    except TargetError as exc:
        raise UsageError(f"target {request.target}: {exc}") from None
    if info.get("error"):
        executor.close()
        raise UsageError(f"target {request.target}: {info['error']}")
    why = runner.probe_result(contract, executor, registry.choose_domain(domain, info.get("domain")), timeout_s=timeout)
    if why:
        executor.close()
        raise UsageError(f"target {request.target}: {why}; bind it to the contract's result (docs/bindings.md)")
    return ref, executor, info


def _steps_domain(contract: registry.Contract, source: str, domain: str | None) -> str:
    """The domain ``--steps SOURCE`` names (``engine_steps.steps_domain``, the
    one rule); a usage error, saying why, where there is none."""
    from batchfuzz import engine_steps

    try:
        return engine_steps.steps_domain(contract, source, domain)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _database(spec: str | None) -> Any:
    """``--database``: a directory is read and written; a shared Redis database
    is only read (a check of one function must not seed every machine's
    nightly run with its examples), its local copy written."""
    if not spec:
        return None
    if "://" not in spec:
        refuse_system_dir(spec, "--database")
    from batchfuzz.fuzz.database import DatabaseError, open_database

    try:
        return open_database(spec, local_dir=profiles.database_path(), read_only="://" in spec)
    except DatabaseError as exc:
        raise UsageError(f"--database: {exc}") from None


def _mode(request: CheckRequest) -> str:
    return "in a worker process" if request.isolate else "in this process"


def _random(request: CheckRequest, plan: _Plan, on_progress: Callable[[Progress], None],
            lines: _Lines | None) -> CheckResult:
    """Random inputs: every property, round robin, until the budget (and the minimum of examples)."""
    from hypothesis import settings

    from batchfuzz import runner

    contract, props = plan.contract, plan.props
    profiles.register_profiles()
    base = settings(settings.get_profile("dev"), derandomize=False, database=plan.database)
    seed = request.seed if request.seed is not None else int(time.time() * 1000) & 0xFFFFFFFF
    domain = registry.choose_domain(plan.domain, plan.info.get("domain"))
    print(f"batchfuzz check {contract.name} {request.target}: {len(props)} properties, domain {domain}, budget "
          f"{plan.budget:g}s, timeout {plan.timeout:g}s per example, {_mode(request)}, seed {seed}", flush=True)
    try:
        options = runner.HuntOptions(base, seed=seed, domain=domain, deadline=plan.deadline, example_timeout_s=plan.timeout)
        rounds = runner.Rounds(budget_s=plan.budget, min_examples=request.min_examples,
                               min_deadline=plan.deadline + plan.budget)
        results = runner.hunt_in_rounds(contract, plan.executor, props, options, rounds, target_name=plan.ref.spec,
                                        on_result=functools.partial(_progress, on_progress, plan.deadline))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return CheckResult(INTERRUPTED, {})
    _end_live_line(lines)
    return _random_verdict(request, plan, results, seed, domain)


def _progress(on_progress: Callable[[Progress], None], deadline: float, r: runner.HuntResult,
              acc: runner.HuntResult) -> None:
    on_progress(Progress(property=acc.property, examples=acc.examples, failed=acc.failure is not None,
                         seconds_left=max(0.0, deadline - time.time())))


def _random_verdict(request: CheckRequest, plan: _Plan, results: list[runner.HuntResult], seed: int,
                    domain: str) -> CheckResult:
    """The random check's table, verdict and report."""
    min_examples = request.min_examples
    seconds = time.time() - plan.started
    examples = sum(r.examples for r in results)
    failure = next((r.failure for r in results if r.failure is not None), None)
    scores: dict[str, int] = {}
    for r in results:
        for k, v in r.scores.items():
            scores[k] = scores.get(k, 0) + v
    _print_properties(results, failure is not None, min_examples)
    if scores:
        print("  scores (reported, not failed on): " + ", ".join(f"{k}={v}" for k, v in sorted(scores.items())))
    report: dict[str, Any] = {
        "contract": plan.contract.name, "target": request.target, "domain": domain, "examples": examples,
        "seconds": round(seconds, 3), "startup_seconds": round(plan.startup_s, 3), "budget": plan.budget,
        "min_examples": min_examples, "timeout": plan.timeout, "isolated": request.isolate,
        "seed": seed, "scores": scores, "status": PASSED, "property": None, "counterexample": None,
        "properties": {r.property: {"examples": r.examples, "status": "failed" if r.failure else "passed"
                                    if r.examples >= min_examples else "not run" if not r.examples else "short"}
                       for r in results},
    }
    short = [r.property for r in results if r.examples < min_examples and r.failure is None]
    if failure is not None:
        replay = (f"replay the search: batchfuzz check {plan.contract.name} {request.target} --property "
                  f"{failure.during or failure.property} --seed {seed}")
        report.update(_print_counterexample(plan, failure, replay, write_test=request.write_test))
        return _finish(request, plan, report, COUNTEREXAMPLE)
    if short:
        per = (seconds - plan.startup_s) / examples if examples else None
        why = (f"an example took {per:.2f}s on average (the target's calls, generation and checking, on this machine "
               f"now)" if per is not None else "not one example finished")
        reason = (f"{len(short)} of {len(results)} properties did not reach the minimum of {min_examples} examples "
                  f"within twice the budget ({2 * plan.budget:g}s after start-up): {', '.join(short)}; {why}")
        print(f"\nincomplete: {reason}; give it a larger --budget (or a smaller --min-examples)")
        not_run = [r.property for r in results if r.examples == 0 and r.failure is None]
        report.update(status=INCOMPLETE, not_run=not_run, short=short, reason=reason)
        return _finish(request, plan, report, INCOMPLETE)
    print(f"\npassed: no counterexample in {examples} examples ({seconds:.1f}s)")
    return _finish(request, plan, report, PASSED)


def _print_properties(results: list[runner.HuntResult], failed: bool, min_examples: int) -> None:
    for r in results:
        if r.failure:
            mark, note = "FAIL", ""
        elif failed and r.examples < min_examples:
            mark, note = "-", "  (short: the search stops at the first counterexample)"
        elif r.examples >= min_examples:
            mark, note = "ok", ""
        else:
            mark, note = "-", f"  (short of the minimum of {min_examples}: the budget ended, and one more after it)"
        print(f"  {mark:4} {r.property:40} {r.examples:7d} examples{note}")


def _finish(request: CheckRequest, plan: _Plan, report: dict[str, Any], status: str) -> CheckResult:
    """End the worker, saying so when the target left processes behind that had to be
    ended with it; write the report (``json_path``)."""
    plan.executor.close()
    n = getattr(plan.executor, "orphans", 0)
    if n:
        print(f"note: the target left {n} process{'es' if n != 1 else ''} behind; batchfuzz ended them with its worker")
    report["orphans_ended"] = n
    output.write_outputs(request.json_path, report, say=lambda line: None)
    return CheckResult(status, report)


def _print_counterexample(plan: _Plan, failure: runner.Failure, replay: str, what: str = "the shrunk case",
                          write_test: str | None = None) -> dict[str, Any]:
    """Print ``failure`` as a reproduction, the other properties its case
    breaks (``what`` names the case) and ``replay`` (the command that finds it again); the report's
    fields for it. Random and exhaustive runs share it."""
    from batchfuzz import reproduce, runner
    from batchfuzz.codec import literal
    from batchfuzz.execution import PSEUDO_PROPERTIES

    repro = reproduce.reproduction(failure, plan.ref, timeout_s=max(10.0, 3 * plan.timeout))
    label = plan.contract.property_label(failure.property)
    print(f"\nCOUNTEREXAMPLE: property {failure.property} [{label}] ({failure.spec})"
          + (f", while checking {failure.during}" if failure.during else ""))
    print(f"{failure.error_type}: {failure.message}\n")
    if not failure.complete:
        print("(the budget ended while shrinking: the case is the smallest found so far)\n")
    print(reproduce.HEADER)
    print(repro)
    # Which properties the case breaks: None where that was not computed (said, never left out silently).
    also: list[str] | None = None
    if failure.property in PSEUDO_PROPERTIES:
        also = []
    elif time.time() < plan.deadline + runner.DEADLINE_GRACE_S:
        also = runner.violated_properties(plan.contract, plan.executor, failure.case, timeout_s=plan.timeout)
        print(f"--- {what} violates: {', '.join(also) or 'none of the properties when re-checked (a flaky target?)'}")
    else:
        print(f"--- which properties {what} violates: not checked (the budget ended; a larger --budget checks them)")
    print(f"--- {replay}")
    written = reproduce.write_test(failure, write_test, plan.ref, timeout_s=max(10.0, 3 * plan.timeout),
                                   origin=f"`batchfuzz check {plan.contract.name} {plan.ref.spec}`") if write_test else None
    if written:
        # `python -m pytest`: it puts the working directory on sys.path, so the target's module imports as it did here
        print(f"--- regression test written: {written} (run it: python -m pytest {shlex.quote(written)})")
    return dict(
        test_file=written, status=COUNTEREXAMPLE, property=failure.property, label=label, during=failure.during, message=failure.message,
        error_type=failure.error_type, exit=failure.exit, shrink_complete=failure.complete,
        counterexample={"args": {k: literal(v) for k, v in failure.case.args.items()},
                        "context": {k: literal(v) for k, v in failure.case.context.items()}},
        case=failure.to_json()["case"], reproduction=repro, violated_properties=also,
    )


def _exhaustive(request: CheckRequest, plan: _Plan, on_progress: Callable[[Progress], None],
            lines: _Lines | None) -> CheckResult:
    """Every property on every input of the plan's scope, smallest first."""
    from batchfuzz import exhaustive

    contract, props, scope = plan.contract, plan.props, plan.scope
    assert scope is not None
    domain = registry.choose_domain(plan.domain, plan.info.get("domain"), scope.domain)
    print(f"batchfuzz check {contract.name} {request.target} --exhaustive: scope {scope.name} ({scope.count} inputs: "
          f"{scope.description}), {len(props)} properties, domain {domain}, budget {plan.budget:g}s, timeout "
          f"{plan.timeout:g}s per example, {_mode(request)}", flush=True)

    def progress(r: exhaustive.ScopeResult) -> None:
        on_progress(Progress(property=None, examples=r.enumerated, failed=r.failure is not None,
                             seconds_left=max(0.0, plan.deadline - time.time()), total=r.count, skipped=r.skipped))

    try:
        result = exhaustive.run_scope(contract, plan.executor, scope, target_name=plan.ref.spec, properties=props,
                                      domain=domain, deadline=plan.deadline, example_timeout_s=plan.timeout,
                                      on_progress=progress)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return CheckResult(INTERRUPTED, {})
    _end_live_line(lines)
    for name in result.properties:
        failed = result.failure is not None and result.failure.property == name
        print(f"  {'FAIL' if failed else 'ok':4} {name:40} {result.by_property[name] + failed:7d} inputs")
    if result.failure is not None and result.failure.property not in result.properties:
        print(f"  FAIL {result.failure.property:40} {1:7d} inputs")
    report: dict[str, Any] = {
        "contract": contract.name, "target": request.target, "domain": domain, "exhaustive": True, "scope": scope.name,
        "budget": plan.budget, "timeout": plan.timeout, "isolated": request.isolate, "property": None,
        "counterexample": None, **result.to_json(),
    }
    report.pop("failure")
    report["seconds"] = round(time.time() - plan.started, 3)
    report["startup_seconds"] = round(plan.startup_s, 3)
    status = PASSED
    if result.failure is not None:
        status = COUNTEREXAMPLE
        print(f"\n{result.summary()}")
        extra = "".join(f" --property {p}" for p in request.properties)
        replay = f"replay: batchfuzz check {contract.name} {request.target} --exhaustive --scope {scope.name}{extra}"
        report.update(_print_counterexample(plan, result.failure, replay, "the case", write_test=request.write_test))
    elif not result.complete:
        status = INCOMPLETE
        print(f"\n{result.summary()}; give it a larger --budget")
    else:
        print(f"\n{result.summary()}\n  {result.evaluations} property evaluations in {result.seconds:.1f}s")
    return _finish(request, plan, report, status)
