"""``batchfuzz fuzz``: the (nightly) fuzz job.

Every contract's properties against every implementation on the chosen
device (and any ``--target`` a user adds), within a wall-clock budget, over
``--workers`` job processes; the job is :mod:`batchfuzz.fuzz` (its
controller, :func:`batchfuzz.fuzz.controller.run`, says how slices are handed
out). Progress on the terminal; reports (``summary.json``, ``summary.md``,
``junit.xml``) in ``--report``; every failure shrunk and saved to the corpus
as it is found. ``--shard K/N`` runs only the items of shard K of N.

Exit codes: 0 every item ran and passed; 1 a counterexample (a wrong result,
a crash or a timeout) or a harness error, listed; 2 a usage error, found
before any example runs; 3 incomplete: the budget ended before every item
ran (the reports name them); 128+N interrupted by signal N (130 SIGINT,
143 SIGTERM), at any moment, start-up included, after writing a partial
report (a signal that comes once the reports are being written is ignored:
the exit code is the reports'). The reports cannot be written (a full disk,
a file-size limit): exit 1 with the reason (the corpus and the example
database are written apart, atomically, and stay intact). A ``--report`` directory in use by another run
is a usage error (``.run/lock``). ``--workers`` is capped by the work items
and the cores, saying so; a budget too short to give every item its first
slice is said at start, with the budget it would need. ``--max-examples N``
drives the run by example counts instead of seconds: every item runs N
examples (or until its failure), the budget only bounding the run.
"""

from __future__ import annotations

import argparse
from typing import Any

from batchfuzz import profiles
from batchfuzz.commands import _options
from batchfuzz.fuzz.request import FuzzRequest
from batchfuzz.fuzz.settings import CORPUS_ENV_VAR, DEFAULT_BUDGET_S, DEFAULT_CORPUS, DEFAULT_REPORT, GRACE_S, MIN_SLICE_S, STARTUP_S
from batchfuzz.usage import positive_int


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
