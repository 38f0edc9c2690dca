"""``batchfuzz fuzz``: the (nightly) fuzz job.

Parses the options into a :class:`~batchfuzz.fuzz.request.FuzzRequest`
(:func:`request`), runs it (:func:`batchfuzz.fuzz.controller.run`) and maps
how it ended to the exit code: 0 passed, 1 failures or harness errors, 2 a
usage error before any example runs, 3 incomplete, 128+N signal N. The
options, the exit codes and how a run works: docs/nightly.md.
"""

from __future__ import annotations

import argparse
from typing import Any

from batchfuzz import profiles
from batchfuzz.commands import _options
from batchfuzz.fuzz.request import FuzzRequest
from batchfuzz.fuzz.settings import CORPUS_ENV_VAR, DEFAULT_BUDGET_S, DEFAULT_CORPUS, DEFAULT_REPORT, GRACE_S, MIN_SLICE_S, STARTUP_S
from batchfuzz.usage import positive_int

RUNS_WORKERS = OWNS_SIGNALS = True  # batchfuzz.plugins.CommandTraits: a partial report on a signal, start-up included


def _shard(text: str) -> tuple[int, int]:
    from batchfuzz.fuzz.shards import parse_shard

    try:
        return parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fuzz", help="fuzz every contract and implementation (the nightly job)",
        description="Fuzz every contract's properties against its implementations (and your --target functions) "
                    "within a budget, in parallel; save every failure to the corpus; write reports. Exit codes: 0 passed, "
                    "1 failures, 2 usage error, 3 incomplete (the budget ended before every item ran), 128+N signal N.",
    )
    _options.budget(p, default=None,
                    help=f"wall-clock budget, e.g. 90s, 15m, 2h (default {DEFAULT_BUDGET_S:g}s, or the least that gives every item "
                         f"its first slice where that is more); every item runs when the budget is at least "
                         f"{STARTUP_S:g}s plus {MIN_SLICE_S:g}s per item per worker; the job ends within the budget plus {GRACE_S:g}s")
    p.add_argument("--workers", type=positive_int, default=None,
                   help="parallel job processes (default: one per core, at most 8, and no more than the work items)")
    _options.max_examples(p, default=None,
                          help="end each work item (one property of one target) once it has run N examples over its slices "
                               "(Hypothesis's max_examples, counted across slices) or found its failure, and the run once every "
                               "item has; the budget stays the ceiling (an item it leaves short of N: exit 3). Default: as many "
                               "as the budget allows")
    p.add_argument("--profile", choices=profiles.PROFILES, default="dev",
                   help="Hypothesis profile: nightly/dev are random with the example database; "
                        "ci/mutation are derandomized single runs (default dev)")
    _options.contracts(p, help="only contracts matching NAME (a name or a glob; repeatable)")
    p.add_argument("--impl", action="append", default=None, metavar="NAME",
                   help="only targets matching NAME (e.g. 'impl:numpy@cpu', 'impl:engine.*', 'mymod:*'; repeatable)")
    p.add_argument("--property", action="append", default=None, metavar="NAME",
                   help="only properties matching NAME (a name or a glob; repeatable)")
    _options.targets(p, help="also fuzz your own function against CONTRACT (repeatable; FILE.py:FUNCTION works too)")
    _options.domain(p, help="input domain for --target functions (spec or engine; default: the one each declares with "
                            "@batchfuzz.domain, else spec); implementations are fuzzed on spec")
    _options.steps(p, help="for contracts over scheduled steps (D, E): where the steps come from, for implementations and "
                           "--target functions alike: model (batchfuzz's scheduler model) or engine (the installed vLLM's own "
                           "scheduler, docs/engine-steps.md); every selected contract must have that source (select them with "
                           "--contract)")
    _options.device(p, help="device for torch implementations (default cpu)")
    _options.seed(p, help="run seed: every slice's examples are a function of (seed, contract, target, property, slice); "
                          "default: random, printed")
    p.add_argument("--database", metavar="DB", default=None,
                   help="Hypothesis example database: a directory, or redis://HOST:PORT/DB (a shared server, with a local "
                        f"copy; needs batchfuzz[redis]); default for dev/nightly: ${profiles.DATABASE_ENV_VAR} or "
                        f"{profiles.DEFAULT_DATABASE}")
    p.add_argument("--no-database", action="store_true", help="run without an example database")
    p.add_argument("--shard", type=_shard, default=None, metavar="K/N",
                   help="run only shard K of N: a stable partition of the work items (docs/nightly.md)")
    p.add_argument("--report", metavar="DIR", default=DEFAULT_REPORT, help=f"report directory (default {DEFAULT_REPORT})")
    p.add_argument("--corpus", metavar="DIR", default=None,
                   help=f"failure corpus directory (default ${CORPUS_ENV_VAR}, else ./{DEFAULT_CORPUS} in the working directory)")
    _options.no_isolation(p, help="run targets inside the job processes: faster, but a segfault or a hang in C code ends a job process")
    _options.timeout(p, default=30.0, help="per-example timeout: a longer call is a `timeout` counterexample (default 30s)")
    _options.observe(p)
    p.add_argument("--history", nargs="+", default=[], metavar="DIR",
                   help="earlier nights' report directories: the report's index.html plots this run beside them")
    p.add_argument("--progress", choices=("auto", "table", "lines", "none"), default="auto",
                   help="live table on a terminal, plain lines otherwise (default auto)")
    p.set_defaults(func=run)


def request(args: argparse.Namespace) -> FuzzRequest:
    """The parsed options as the job's :class:`~batchfuzz.fuzz.request.FuzzRequest` (built once, validated)."""
    return FuzzRequest(
        budget_s=args.budget, workers=args.workers, max_examples=args.max_examples, profile=args.profile,
        contracts=tuple(args.contract or ()), impls=tuple(args.impl or ()), properties=tuple(args.property or ()),
        targets=tuple(args.target), domain=args.domain, steps=args.steps, device=args.device, seed=args.seed,
        database=args.database, no_database=args.no_database, shard=args.shard, report=args.report, corpus=args.corpus,
        isolate=not args.no_isolation, timeout_s=args.timeout, history=tuple(args.history), progress=args.progress,
        started=getattr(args, "started", None))


def run(args: argparse.Namespace) -> int:
    from batchfuzz.fuzz import controller

    return controller.exit_code(controller.run(request(args)))
