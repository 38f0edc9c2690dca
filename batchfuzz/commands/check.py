"""``batchfuzz check CONTRACT TARGET``: fuzz a function against a contract.

The run is :func:`batchfuzz.checking.run` (its module says what runs where,
and how the budget and the minimum of examples decide the verdict); this
command parses the options into a :class:`batchfuzz.checking.CheckRequest`
and maps the result to an exit code: 0 passed, 1 a counterexample, 2 a usage
error, 3 incomplete, 130 interrupted (README, "Exit codes").
``--exhaustive [--scope NAME]`` checks every input of a bounded scope
instead of random ones (docs/exhaustive.md).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from batchfuzz import checking, registry
from batchfuzz.commands import _options
from batchfuzz.usage import ExitCode, positive_int

RUNS_WORKERS = True  # batchfuzz.plugins.CommandTraits


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
                         f"{checking.DEFAULT_BUDGET_S:g}s, {checking.EXHAUSTIVE_BUDGET_S:g}s with --exhaustive); it ends "
                         f"within the budget plus {checking.GRACE_S:g}s")
    _options.timeout(p, default=None, help="per-example timeout: a call that runs longer is a `timeout` counterexample "
                                           "(default: a tenth of the budget, between 1s and 30s)")
    p.add_argument("--min-examples", type=_min_examples, default=checking.DEFAULT_MIN_EXAMPLES, metavar="N",
                   help=f"examples every property gets however busy the machine is (default {checking.DEFAULT_MIN_EXAMPLES}): a "
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


def _min_examples(text: str) -> int:
    """``--min-examples N``: a positive integer of at most 10**9."""
    value = positive_int(text)
    if value > 10**9:
        raise argparse.ArgumentTypeError(f"must be a positive integer of at most 10**9, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from batchfuzz import live_engine

    if args.contract == live_engine.SUBJECT:  # vLLM's whole engine, not a function (docs/live-engine.md)
        return _live(args)
    result = checking.run(checking.CheckRequest(
        contract=args.contract, target=args.target, budget_s=args.budget, timeout_s=args.timeout,
        min_examples=args.min_examples, isolate=not args.no_isolation, domain=args.domain, steps=args.steps,
        properties=tuple(args.property or ()), seed=args.seed, database=args.database, exhaustive=args.exhaustive,
        scope=args.scope, json_path=args.json_path, write_test=args.write_test, started=getattr(args, "started", None)))
    if result.status == checking.INTERRUPTED:
        return 128 + signal.SIGINT
    return {checking.PASSED: ExitCode.OK, checking.COUNTEREXAMPLE: ExitCode.COUNTEREXAMPLE,
            checking.INCOMPLETE: ExitCode.INCOMPLETE}[result.status]


def _live(args: argparse.Namespace) -> int:
    """``check live_engine vllm-live``: the live engine's own search (``live_engine.check``); the options a
    function's check has that do not apply to it are usage errors."""
    from batchfuzz import live_engine

    if args.target != live_engine.AGAINST:
        print(f"batchfuzz check: {live_engine.SUBJECT}: the target must be {live_engine.AGAINST!r} (the installed vLLM's "
              f"engine), got {args.target!r}", file=sys.stderr)
        return ExitCode.USAGE
    unsupported = [f for f, v in (("--exhaustive", args.exhaustive), ("--domain", args.domain), ("--steps", args.steps),
                                  ("--database", args.database), ("--write-test", args.write_test)) if v]
    if unsupported:
        print(f"batchfuzz check: {live_engine.SUBJECT}: {unsupported[0]} does not apply to the live engine", file=sys.stderr)
        return ExitCode.USAGE
    return live_engine.check(tuple(args.property or ()), examples=args.min_examples, seed=args.seed,
                             budget_s=float(args.budget or checking.DEFAULT_BUDGET_S))
