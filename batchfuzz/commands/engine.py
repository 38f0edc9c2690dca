"""``batchfuzz engine NAME``: a registered engine's own batch-layout
functions, release by release (the release matrix).

``NAME`` is an engine registered with ``batchfuzz.engines`` (built in:
``vllm``; others through the ``batchfuzz.engines`` entry-point group or
``$BATCHFUZZ_ENGINES``; docs/bindings.md, "Adding an engine"). Every release
given (``--wheel FILE``, ``--source DIR``, ``--installed``, ``--release
VERSION``: the release wheel, downloaded with ``pip download --no-deps`` into
the cache outside any repository; ``--all-releases``: every release of the
engine's published matrix) x every function the engine binds x its
contract, under the contract's ``engine`` domain: a cell is ``pass``,
``fail`` (property and shrunk counterexample), ``absent``, ``unbindable``
(with the reason), ``incomplete`` or ``error`` (``batchfuzz.engines.matrix``).
Nothing of the engine is imported or installed: the functions are cut out of
the release's source text.

Exit codes: 0 every bound cell passed; 1 a cell failed, or a function is
unbindable or could not be run; 2 a usage error (an unknown engine, a release
that cannot be opened or downloaded, an unwritable output); 3 a cell
incomplete.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from batchfuzz.usage import UsageError, parse_duration, writable_file

EXIT_CODES = "Exit codes: 0 all pass, 1 a fail or an unbindable function, 2 usage error, 3 a cell incomplete."


def register(sub: Any) -> None:
    p = sub.add_parser(
        "engine", help="check a registered engine's own functions, release by release (the release matrix)",
        description="Bind a registered engine's own batch-layout functions from each release given and check each against "
                    f"its contract on the engine domain. {EXIT_CODES}",
    )
    p.add_argument("name", metavar="NAME", help="a registered engine, e.g. vllm")
    add_matrix_options(p, "the engine's")
    p.set_defaults(func=run)


def add_matrix_options(p: argparse.ArgumentParser, whose: str) -> None:
    """The release and run options of a matrix command (``engine`` and its short forms)."""
    p.add_argument("--wheel", action="append", default=[], metavar="FILE", help=f"a release wheel of {whose} (repeatable)")
    p.add_argument("--source", action="append", default=[], metavar="DIR",
                   help="a source checkout: the directory holding the engine's package (repeatable)")
    p.add_argument("--installed", action="store_true", help="the installed distribution's files (not imported)")
    p.add_argument("--release", action="append", default=[], metavar="VERSION",
                   help="a release by version, e.g. 0.33.0: its wheel is downloaded into the cache (repeatable)")
    p.add_argument("--all-releases", action="store_true", help="every release of the engine's published matrix (its RELEASES)")
    p.add_argument("--function", action="append", default=None, metavar="GLOB",
                   help="only functions matching GLOB, e.g. '*_allow_microbatching' (repeatable)")
    p.add_argument("--contract", action="append", default=None, metavar="NAME", help="only these contracts (repeatable)")
    p.add_argument("--budget", type=parse_duration, default=20.0,
                   help="seconds per cell (all of a contract's properties, shrinking included; default 20)")
    p.add_argument("--max-examples", type=int, default=None, metavar="N",
                   help="one round of N examples per property instead of rounds until the budget ends (the budget stays a "
                        "ceiling): verdicts that depend on counts, not on the machine's speed")
    p.add_argument("--timeout", type=parse_duration, default=10.0, metavar="SECONDS",
                   help="per-example timeout: a call that runs longer is a `timeout` failure (default 10)")
    p.add_argument("--seed", type=int, default=None, help="seed for a repeatable run (default: random, printed)")
    p.add_argument("--no-isolation", action="store_true", help="run the release's code in this process")
    p.add_argument("--json", dest="json_path", metavar="PATH", help="write the matrix here as JSON ({'rows': [...]})")
    p.add_argument("--markdown", metavar="PATH", help="write the matrix here as a Markdown table")


def run(args: argparse.Namespace) -> int:
    from batchfuzz import engines

    try:
        found = engines.engine(args.name)
    except engines.UnknownEngine as exc:
        raise UsageError(str(exc)) from None
    return run_matrix(found, args)


def run_matrix(engine: Any, args: argparse.Namespace) -> int:
    """Parse-level checks, then ``batchfuzz.engines.matrix`` over ``engine``'s releases."""
    from batchfuzz.engines import matrix

    for path, what in ((args.json_path, "--json"), (args.markdown, "--markdown")):
        if path:
            writable_file(path, what)
    if args.max_examples is not None and args.max_examples < 1:
        raise UsageError(f"--max-examples must be >= 1, got {args.max_examples}")
    try:
        keep = matrix.selection(engine, args.function, args.contract)
        sources = matrix.release_sources(engine, releases=[*args.release, *(engine.RELEASES if args.all_releases else ())],
                                         wheels=args.wheel, dirs=args.source, installed=args.installed)
    except (LookupError, ValueError) as exc:  # SourceError is a LookupError
        raise UsageError(str(exc)) from None
    seed = args.seed if args.seed is not None else matrix.new_seed()
    print(f"batchfuzz {engine.ENGINE}: {len(sources)} release(s) ({', '.join(s.version for s in sources)}), budget "
          f"{args.budget:g}s per cell, engine domain, seed {seed}", flush=True)

    def show(cell: Any) -> None:
        print(matrix.to_text([cell], among=(spec.function for spec in engine.SPECS)).splitlines()[1], flush=True)

    started = time.time()
    print(matrix.to_text([]), flush=True)
    try:
        releases = matrix.engine_releases(engine, sources, search=matrix.searched(args.function, args.contract))
        cells = matrix.run_matrix(releases, budget_s=args.budget, timeout_s=args.timeout,
                                  seed=seed, isolate=not args.no_isolation, keep=keep, on_cell=show,
                                  max_examples=args.max_examples)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    counts = {v: sum(c.verdict == v for c in cells) for v in matrix.VERDICTS}
    print(f"\n{len(cells)} cells in {time.time() - started:.0f}s: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n))
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump({"seed": seed, "budget": args.budget, "rows": [c.to_json() for c in cells]}, fh, indent=2)
        print(f"wrote {args.json_path}")
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(matrix.to_markdown(cells))
        print(f"wrote {args.markdown}")
    return matrix.exit_code(cells)
