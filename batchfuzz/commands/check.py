"""``batchfuzz check CONTRACT TARGET``: fuzz a function against a contract.

The target runs in a worker process (``batchfuzz.execution``) unless
``--no-isolation``: a segfault, an exit, a device fault or a hang is a
counterexample of the pseudo-property ``crash`` or ``timeout``, shrunk and
reproduced like any other. ``--budget`` bounds the whole command.

``--exhaustive [--scope NAME]`` checks every input of one of the contract's
bounded scopes instead of random ones (``batchfuzz.exhaustive``), smallest
first, so its first counterexample is a smallest one of the scope and is
printed unshrunk, through the same printer; a scope that holds is reported
as "all N inputs within scope S hold". docs/exhaustive.md lists the scopes.

Exit codes: 0 every property ran and passed; 1 a counterexample (a wrong
result, a crash or a timeout), printed as a reproduction; 2 a usage error,
found before any example runs (unknown contract or domain, a target that
cannot be imported, whose signature cannot take the contract's arguments or
whose result on a regression example is of a type the contract cannot read,
an unwritable --json path, a --database path that is a regular file, an
unknown scope, --scope without --exhaustive, a target whose module does not
finish importing within the budget); 3 incomplete: even the minimum of
examples per property (``--min-examples``) could not be reached (with
--exhaustive: the budget ended before every input of the scope was checked),
the report saying why.

Examples, not seconds, decide the verdict: the budget counts from the moment
the target has loaded in its worker (starting the worker, batchfuzz's imports
and forks are not charged to it, and are reported as ``startup_seconds``);
every property gets ``--min-examples`` examples before any gets more, and a
property still short of them when the budget ends runs on until it has them,
for at most one more budget.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from batchfuzz import output, profiles, registry
from batchfuzz.commands import _options
from batchfuzz.usage import ExitCode, UsageError

if TYPE_CHECKING:  # the rest is imported by run(): `batchfuzz --help` stays light
    from batchfuzz import exhaustive, runner

# How long after --budget check may still run: the example in flight
# (runner.DEADLINE_GRACE_S), then the report.
GRACE_S = profiles.DEADLINE_GRACE_S + 3.0

# Default budgets: a random check, and an exhaustive one (a scope is covered
# completely or reported incomplete, so it gets time to finish).
DEFAULT_BUDGET_S = 30.0
EXHAUSTIVE_BUDGET_S = 600.0
# Examples every property gets before the budget may end it (Hypothesis's
# valid examples: a case the target's @assumes rejects does not count).
DEFAULT_MIN_EXAMPLES = 10


def default_timeout(budget_s: float) -> float:
    """The per-example timeout a budget implies: a tenth of it, within [1 s, 30 s]."""
    return min(30.0, max(1.0, budget_s / 10))


def register(sub: Any) -> None:
    p = sub.add_parser(
        "check", help="fuzz your own function against a contract",
        description="Fuzz TARGET (a function with the contract's canonical signature) against CONTRACT's properties. "
                    "The contracts, their domains and the target signatures: docs/contracts.md. Exit codes: 0 passed, "
                    "1 counterexample, 2 usage error, 3 incomplete (the budget ended before every property ran).")
    p.add_argument("contract", help="contract name (see `batchfuzz list`)")
    p.add_argument("target", help="MODULE:FUNCTION or path/to/file.py:FUNCTION (also impl:NAME@DEVICE, variant:NAME, oracle)")
    _options.budget(p, default=None,
                    help=f"wall-clock budget for the whole command, shrinking included, e.g. 30, 90s, 5m (default "
                         f"{DEFAULT_BUDGET_S:g}s, {EXHAUSTIVE_BUDGET_S:g}s with --exhaustive); it ends within the budget plus "
                         f"{GRACE_S:g}s")
    _options.timeout(p, default=None, help="per-example timeout: a call that runs longer is a `timeout` counterexample "
                                           "(default: a tenth of the budget, between 1s and 30s)")
    p.add_argument("--min-examples", type=_positive_int, default=DEFAULT_MIN_EXAMPLES, metavar="N",
                   help=f"examples every property gets however busy the machine is (default {DEFAULT_MIN_EXAMPLES}): a "
                        "property short of them when the budget ends runs on, for at most one more budget; exit 3 only "
                        "when even that does not reach them")
    _options.no_isolation(p, help="run the target in this process: faster, but a segfault or a hang in C code ends the command")
    _options.domain(p, help="input domain: spec (the widest) or engine (what an engine's callers produce); default: the one "
                            "the target declares with @batchfuzz.domain, else spec")
    _options.json_output(p, help="write a JSON report here")
    _options.seed(p, help="seed for a deterministic run")
    _options.observe(p)
    p.add_argument("--write-test", metavar="DIR", default=None,
                   help="on a counterexample, also write it as a pytest file in DIR (fails while the bug is there)")
    _options.steps(p, help="for contracts over scheduled steps (D, E): where the steps come from: model (batchfuzz's scheduler "
                           "model: contract E's engine domain) or engine (the installed vLLM's own scheduler: the engine-steps "
                           "domain, docs/engine-steps.md)")
    p.add_argument("--database", metavar="PATH|URL",
                   help="a directory: persist Hypothesis examples there (replayed by later runs); a redis:// URL: read the "
                        "nightly job's shared database without writing to it, new examples going to the local copy "
                        "(docs/nightly.md)")
    p.add_argument("--property", action="append", default=None, help="only this property (repeatable)")
    p.add_argument("--exhaustive", action="store_true",
                   help="check every input of a bounded scope, smallest first, instead of random inputs: the first "
                        "counterexample is a smallest one of the scope (docs/exhaustive.md)")
    p.add_argument("--scope", default=None, metavar="NAME",
                   help=f"the scope --exhaustive enumerates (default {registry.DEFAULT_SCOPE!r}; `batchfuzz list` names each "
                        "contract's scopes)")
    p.set_defaults(func=run)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1 or value > 10**9:
        raise argparse.ArgumentTypeError(f"must be a positive integer of at most 10**9, got {text!r}")
    return value


class _Progress:
    """Per property: examples run, failures, time left; a live line on a terminal, plain lines otherwise."""

    def __init__(self, stream: TextIO, deadline: float) -> None:
        self.stream, self.deadline = stream, deadline
        self.tty = stream.isatty()
        self.last = time.time()

    def update(self, acc: runner.HuntResult, final: bool = False) -> None:
        left = max(0.0, self.deadline - time.time())
        status = "FAIL" if acc.failure else "ok"
        line = f"  {status:4} {acc.property:40} {acc.examples:7d} examples  {left:5.0f}s left"
        if self.tty:
            self.stream.write("\r" + line.ljust(78) + ("\n" if final else ""))
        elif final or time.time() - self.last > 5:
            self.stream.write(line + "\n")
            self.last = time.time()
        self.stream.flush()


def _database(spec: str | None) -> Any:
    """``--database``: a directory is read and written; a shared Redis database
    is only read (a ``check`` of one function must not seed every machine's
    nightly run with its examples), its local copy written."""
    if not spec:
        return None
    from batchfuzz import profiles
    from batchfuzz.fuzz.database import DatabaseError, open_database

    try:
        return open_database(spec, local_dir=profiles.database_path(), read_only="://" in spec)
    except DatabaseError as exc:
        raise UsageError(f"--database: {exc}") from None


def run(args: argparse.Namespace) -> int:
    from batchfuzz import runner
    from batchfuzz.execution import executor_for
    from batchfuzz.targets import TargetError, parse

    started = getattr(args, "started", None) or time.time()
    if args.budget is None:
        args.budget = EXHAUSTIVE_BUDGET_S if args.exhaustive else DEFAULT_BUDGET_S
    deadline = started + args.budget
    try:
        contract = registry.get(args.contract)
    except KeyError as exc:
        raise UsageError(str(exc)) from None
    scope = None
    if args.scope is not None and not args.exhaustive:
        raise UsageError("--scope needs --exhaustive")
    if args.exhaustive:
        for flag, given in (("--seed", args.seed is not None), ("--database", args.database is not None)):
            if given:
                raise UsageError(f"{flag} does not apply to --exhaustive (it enumerates, it does not draw)")
        try:
            scope = contract.scope(args.scope or registry.DEFAULT_SCOPE)
        except KeyError as exc:
            raise UsageError(str(exc)) from None
    if args.steps is not None:
        args.domain = _options.steps_domain(contract, args.steps, args.domain)
    if args.domain is not None:
        try:
            contract.domain(args.domain)
        except KeyError as exc:
            raise UsageError(str(exc)) from None
    props = contract.properties
    if args.property:
        try:
            props = tuple(contract.property(n) for n in args.property)
        except KeyError as exc:
            raise UsageError(str(exc)) from None
    _options.check_outputs((args.json_path, "--json"))
    if args.write_test:
        from batchfuzz.usage import writable_dir

        writable_dir(args.write_test, "--write-test")
    database = _database(args.database)
    timeout = args.timeout if args.timeout is not None else default_timeout(args.budget)
    try:
        ref = parse(args.target)
        # Loading the target (its module's import) is the target's own time: bounded by the budget.
        executor = executor_for(contract, ref, isolate=not args.no_isolation, load_timeout_s=max(args.budget, timeout))
        info = executor.describe()
    except TargetError as exc:
        raise UsageError(f"target {args.target}: {exc}") from None
    if info.get("error"):
        executor.close()
        raise UsageError(f"target {args.target}: {info['error']}")
    why = runner.probe_result(contract, executor, registry.choose_domain(args.domain, info.get("domain")),
                              timeout_s=args.timeout if args.timeout is not None else default_timeout(args.budget))
    if why:
        executor.close()
        raise UsageError(f"target {args.target}: {why}; bind it to the contract's result (docs/bindings.md)")
    # The budget is the examples': batchfuzz's own start (imports, the fork server, the worker) is not charged to it.
    args.startup_seconds = getattr(executor, "startup_s", 0.0) + max(0.0, _imported_at(args) - started)
    deadline = deadline + args.startup_seconds
    with executor:
        if scope is not None:
            return _exhaustive(args, contract, props, scope, ref, executor, info, started, deadline)
        return _check(args, contract, props, ref, executor, info, database, started, deadline)


def _imported_at(args: argparse.Namespace) -> float:
    """When the command's imports were done (``cli.main`` records it)."""
    return float(getattr(args, "imported", None) or getattr(args, "started", None) or time.time())


def _orphans(executor: Any, report: dict[str, Any]) -> None:
    """End the worker, and say so when the target left processes behind that had to be ended with it."""
    executor.close()
    n = getattr(executor, "orphans", 0)
    if n:
        print(f"note: the target left {n} process{'es' if n != 1 else ''} behind; batchfuzz ended them with its worker")
    report["orphans_ended"] = n


def _check(args: argparse.Namespace, contract: registry.Contract, props: tuple[registry.Property, ...], ref: Any,
           executor: Any, info: dict[str, Any], database: Any, started: float, deadline: float) -> int:
    from hypothesis import settings

    from batchfuzz import runner

    profiles.register_profiles()
    base = settings(settings.get_profile("dev"), derandomize=False, database=database)
    seed = args.seed if args.seed is not None else int(time.time() * 1000) & 0xFFFFFFFF
    domain = registry.choose_domain(args.domain, info.get("domain"))
    timeout = args.timeout if args.timeout is not None else default_timeout(args.budget)
    mode = "in this process" if args.no_isolation else "in a worker process"
    print(f"batchfuzz check {contract.name} {args.target}: {len(props)} properties, domain {domain}, budget {args.budget:g}s, "
          f"timeout {timeout:g}s per example, {mode}, seed {seed}", flush=True)
    progress = _Progress(sys.stdout, deadline)
    try:
        results = runner.hunt_for(contract, executor, props, target_name=ref.spec, budget_s=args.budget, base_settings=base,
                                  seed=seed, domain=domain, deadline=deadline, example_timeout_s=timeout,
                                  min_examples=args.min_examples, min_deadline=deadline + args.budget,
                                  on_result=lambda r, acc: progress.update(acc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    seconds = time.time() - started
    examples = sum(r.examples for r in results)
    failure = next((r.failure for r in results if r.failure is not None), None)
    scores: dict[str, int] = {}
    for r in results:
        for k, v in r.scores.items():
            scores[k] = scores.get(k, 0) + v
    if progress.tty:
        print()
    short = [r.property for r in results if r.examples < args.min_examples and r.failure is None]
    not_run = [r.property for r in results if r.examples == 0 and r.failure is None]
    for r in results:
        if r.failure:
            mark, note = "FAIL", ""
        elif failure is not None and r.examples < args.min_examples:
            mark, note = "-", "  (short: the search stops at the first counterexample)"
        elif r.examples >= args.min_examples:
            mark, note = "ok", ""
        else:
            mark, note = "-", f"  (short of the minimum of {args.min_examples}: the budget ended, and one more after it)"
        print(f"  {mark:4} {r.property:40} {r.examples:7d} examples{note}")
    if scores:
        print("  scores (reported, not failed on): " + ", ".join(f"{k}={v}" for k, v in sorted(scores.items())))
    report: dict[str, Any] = {
        "contract": contract.name, "target": args.target, "domain": domain, "examples": examples,
        "seconds": round(seconds, 3), "startup_seconds": round(args.startup_seconds, 3), "budget": args.budget,
        "min_examples": args.min_examples, "timeout": timeout, "isolated": not args.no_isolation,
        "seed": seed, "scores": scores, "status": "passed", "property": None, "counterexample": None,
        "properties": {r.property: {"examples": r.examples, "status": "failed" if r.failure else "passed"
                                    if r.examples >= args.min_examples else "not run" if not r.examples else "short"}
                       for r in results},
    }
    code = ExitCode.OK
    if failure is not None:
        code = ExitCode.COUNTEREXAMPLE
        replay = (f"replay the search: batchfuzz check {contract.name} {args.target} --property "
                  f"{failure.during or failure.property} --seed {seed}")
        report.update(_print_counterexample(contract, executor, ref, failure, timeout, deadline, replay,
                                            write_test=args.write_test))
    elif short:
        code = ExitCode.INCOMPLETE
        per = (seconds - args.startup_seconds) / examples if examples else None
        why = (f"an example took {per:.2f}s on average (the target's calls, generation and checking, on this machine "
               f"now)" if per is not None else "not one example finished")
        reason = (f"{len(short)} of {len(results)} properties did not reach the minimum of {args.min_examples} examples "
                  f"within twice the budget ({2 * args.budget:g}s after start-up): {', '.join(short)}; {why}")
        print(f"\nincomplete: {reason}; give it a larger --budget (or a smaller --min-examples)")
        report.update(status="incomplete", not_run=not_run, short=short, reason=reason)
    else:
        print(f"\npassed: no counterexample in {examples} examples ({seconds:.1f}s)")
    _orphans(executor, report)
    return _write_json(args, report, code)


def _write_json(args: argparse.Namespace, report: dict[str, Any], code: int) -> int:
    """``--json``, when given, at the end of a run; returns the run's exit code."""
    output.write_outputs(args.json_path, report, say=lambda line: None)
    return code


def _print_counterexample(contract: registry.Contract, executor: Any, ref: Any, failure: runner.Failure, timeout: float,
                          deadline: float, replay: str, what: str = "the shrunk case",
                          write_test: str | None = None) -> dict[str, Any]:
    """Print ``failure`` as a reproduction, the other properties its case
    breaks (``what`` names the case) and ``replay`` (the command that finds it again); the report's
    fields for it. ``check`` and ``check --exhaustive`` share it."""
    from batchfuzz import reproduce, runner
    from batchfuzz.codec import literal
    from batchfuzz.execution import PSEUDO_PROPERTIES

    repro = reproduce.reproduction(failure, ref, timeout_s=max(10.0, 3 * timeout))
    print(f"\nCOUNTEREXAMPLE: property {failure.property} ({failure.spec})"
          + (f", while checking {failure.during}" if failure.during else ""))
    print(f"{failure.error_type}: {failure.message}\n")
    if not failure.complete:
        print("(the budget ended while shrinking: the case is the smallest found so far)\n")
    print("--- reproduction (copy-paste; run it with python) ---")
    print(repro)
    also: list[str] = []
    if time.time() < deadline + runner.DEADLINE_GRACE_S and failure.property not in PSEUDO_PROPERTIES:
        also = runner.violated_properties(contract, executor, failure.case, timeout_s=timeout)
        if also:
            print(f"--- {what} violates: {', '.join(also)}")
    print(f"--- {replay}")
    written = reproduce.write_test(failure, write_test, ref, timeout_s=max(10.0, 3 * timeout),
                                   origin=f"`batchfuzz check {contract.name} {ref.spec}`") if write_test else None
    if written:
        print(f"--- regression test written: {written} (pytest {written})")
    return dict(test_file=written,
        status="counterexample", property=failure.property, during=failure.during, message=failure.message,
        error_type=failure.error_type, exit=failure.exit, shrink_complete=failure.complete,
        counterexample={"args": {k: literal(v) for k, v in failure.case.args.items()},
                        "context": {k: literal(v) for k, v in failure.case.context.items()}},
        case=failure.to_json()["case"], reproduction=repro, violated_properties=also,
    )


def _exhaustive(args: argparse.Namespace, contract: registry.Contract, props: tuple[registry.Property, ...],
                scope: registry.Scope, ref: Any, executor: Any, info: dict[str, Any], started: float, deadline: float) -> int:
    """``check --exhaustive``: every property on every input of ``scope``, smallest first."""
    from batchfuzz import exhaustive

    domain = registry.choose_domain(args.domain, info.get("domain"), scope.domain)
    timeout = args.timeout if args.timeout is not None else default_timeout(args.budget)
    mode = "in this process" if args.no_isolation else "in a worker process"
    print(f"batchfuzz check {contract.name} {args.target} --exhaustive: scope {scope.name} ({scope.count} inputs: "
          f"{scope.description}), {len(props)} properties, domain {domain}, budget {args.budget:g}s, timeout {timeout:g}s "
          f"per example, {mode}", flush=True)
    tty = sys.stdout.isatty()
    last = [time.time()]

    def progress(r: exhaustive.ScopeResult) -> None:
        """A live line on a terminal, a line every 10 s otherwise."""
        if not tty and time.time() - last[0] < 10:
            return
        last[0] = time.time()
        line = f"  {r.enumerated:7d} of {r.count} inputs, {r.skipped} skipped  {max(0.0, deadline - time.time()):5.0f}s left"
        sys.stdout.write("\r" + line.ljust(78) if tty else line + "\n")
        sys.stdout.flush()

    try:
        result = exhaustive.run_scope(contract, executor, scope, target_name=ref.spec, properties=props, domain=domain,
                                      deadline=deadline, example_timeout_s=timeout, on_progress=progress)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    if tty:
        print()
    for name in result.properties:
        failed = result.failure is not None and result.failure.property == name
        print(f"  {'FAIL' if failed else 'ok':4} {name:40} {result.by_property[name] + failed:7d} inputs")
    if result.failure is not None and result.failure.property not in result.properties:
        print(f"  FAIL {result.failure.property:40} {1:7d} inputs")
    report: dict[str, Any] = {
        "contract": contract.name, "target": args.target, "domain": domain, "exhaustive": True, "scope": scope.name,
        "budget": args.budget, "timeout": timeout, "isolated": not args.no_isolation, "property": None,
        "counterexample": None, **result.to_json(),
    }
    report.pop("failure")
    report["seconds"] = round(time.time() - started, 3)
    report["startup_seconds"] = round(args.startup_seconds, 3)
    code = ExitCode.OK
    if result.failure is not None:
        code = ExitCode.COUNTEREXAMPLE
        print(f"\n{result.summary()}")
        extra = "".join(f" --property {p}" for p in args.property or ())
        replay = f"replay: batchfuzz check {contract.name} {args.target} --exhaustive --scope {scope.name}{extra}"
        report.update(_print_counterexample(contract, executor, ref, result.failure, timeout, deadline, replay, "the case",
                                            write_test=args.write_test))
    elif not result.complete:
        code = ExitCode.INCOMPLETE
        print(f"\n{result.summary()}; give it a larger --budget")
    else:
        print(f"\n{result.summary()}\n  {result.evaluations} property evaluations in {result.seconds:.1f}s")
    _orphans(executor, report)
    return _write_json(args, report, code)
