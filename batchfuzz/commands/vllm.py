"""``batchfuzz vllm``: vLLM's own batch-layout functions, release by release.

Every release given (``--wheel FILE``, ``--source DIR``, ``--installed``,
or ``--release VERSION``: the release wheel, downloaded with ``pip download
--no-deps`` into the cache outside any repository) x every function
``batchfuzz.engines.vllm`` binds x its contract, under the contract's
``engine`` domain: a cell is ``pass``, ``fail`` (property and shrunk
counterexample), ``absent``, ``unbindable`` (with the reason) or
``incomplete`` (``batchfuzz.engines.matrix``). Nothing of vLLM is imported
or installed: the functions are cut out of the release's source text.

Exit codes: 0 every bound cell passed; 1 a cell failed, or a function is
unbindable or could not be run; 2 a usage error (a release that cannot be
opened or downloaded, an unwritable output); 3 a cell incomplete.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import json
import os
import sys
import time
from typing import Any

from batchfuzz.cli import UsageError, parse_duration, writable_file


def register(sub: Any) -> None:
    p = sub.add_parser(
        "vllm", help="check vLLM's own functions, release by release (the release matrix)",
        description="Bind vLLM's own batch-layout functions from each release given and check each against its contract "
                    "on the engine domain. Exit codes: 0 all pass, 1 a fail or an unbindable function, 2 usage error, "
                    "3 a cell incomplete.",
    )
    p.add_argument("--wheel", action="append", default=[], metavar="FILE", help="a vLLM release wheel (repeatable)")
    p.add_argument("--source", action="append", default=[], metavar="DIR",
                   help="a vLLM source checkout: the directory holding vllm/ (repeatable)")
    p.add_argument("--installed", action="store_true", help="the installed vllm distribution's files (not imported)")
    p.add_argument("--release", action="append", default=[], metavar="VERSION",
                   help="a release by version, e.g. 0.33.0: its wheel is downloaded into the cache (repeatable)")
    p.add_argument("--function", action="append", default=None, metavar="GLOB",
                   help="only functions matching GLOB, e.g. '*_allow_microbatching' (repeatable)")
    p.add_argument("--contract", action="append", default=None, metavar="NAME", help="only these contracts (repeatable)")
    p.add_argument("--budget", type=parse_duration, default=20.0,
                   help="seconds per cell (all of a contract's properties, shrinking included; default 20)")
    p.add_argument("--timeout", type=parse_duration, default=10.0, metavar="SECONDS",
                   help="per-example timeout: a call that runs longer is a `timeout` failure (default 10)")
    p.add_argument("--seed", type=int, default=None, help="seed for a repeatable run (default: random, printed)")
    p.add_argument("--no-isolation", action="store_true", help="run the release's code in this process")
    p.add_argument("--json", dest="json_path", metavar="PATH", help="write the matrix here as JSON ({'rows': [...]})")
    p.add_argument("--markdown", metavar="PATH", help="write the matrix here as a Markdown table")
    p.set_defaults(func=run)


def _sources(args: argparse.Namespace) -> list[Any]:
    from batchfuzz.engines import SourceError, fetch_wheel
    from batchfuzz.engines.vllm import ReleaseSource

    sources = []
    try:
        for version in args.release:
            sources.append(ReleaseSource.from_wheel(fetch_wheel("vllm", version)))
        sources += [ReleaseSource.from_wheel(w) for w in args.wheel]
        sources += [ReleaseSource.from_dir(d) for d in args.source]
        if args.installed:
            sources.append(ReleaseSource.installed())
    except (SourceError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if not sources:
        raise UsageError("give at least one release: --wheel FILE, --source DIR, --installed or --release VERSION")
    return sources


def run(args: argparse.Namespace) -> int:
    from batchfuzz import registry
    from batchfuzz.engines import matrix, split_search
    from batchfuzz.engines.vllm import SPECS, bindings

    for path, what in ((args.json_path, "--json"), (args.markdown, "--markdown")):
        if path:
            writable_file(path, what)
    if args.contract:
        known = {c.name for c in registry.contracts()}
        for name in args.contract:
            if name not in known:
                raise UsageError(f"--contract {name!r}: no such contract; known: {', '.join(sorted(known))}")
    functions = [s.function for s in SPECS]
    unknown = [pat for pat in args.function or () if not any(fnmatch.fnmatchcase(f, pat) or fnmatch.fnmatchcase(f, f"*{pat}")
                                                              for f in functions)]
    # The copies of the split that the search finds are rows too, named PATH:QUALNAME#COUNTS=TOKENS/REQUESTS: a
    # pattern naming none of the fixed bindings must name such a row (hold a "#").
    for pat in unknown:
        if "#" not in pat:
            raise UsageError(f"--function {pat!r} matches no bound function; known: {', '.join(dict.fromkeys(functions))}; "
                             "copies of the split found by the search are named PATH:QUALNAME#COUNTS=TOKENS/REQUESTS")
    search = (not args.contract or split_search.CONTRACT in args.contract) and (not args.function or bool(unknown))
    sources = _sources(args)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")

    def keep(b: Any) -> bool:
        return (not args.function or any(fnmatch.fnmatchcase(b.function, p) or fnmatch.fnmatchcase(b.function, f"*{p}")
                                         for p in args.function)) and (not args.contract or b.contract in args.contract)

    print(f"batchfuzz vllm: {len(sources)} release(s) ({', '.join(s.version for s in sources)}), budget {args.budget:g}s "
          f"per cell, engine domain, seed {seed}", flush=True)

    def show(cell: Any) -> None:
        print(matrix.to_text([cell]).splitlines()[1], flush=True)

    started = time.time()
    print(matrix.to_text([]), flush=True)
    try:
        cells = matrix.run_matrix(((s.version, functools.partial(bindings, s, search=search)) for s in sources), budget_s=args.budget,
                                  timeout_s=args.timeout, seed=seed, isolate=not args.no_isolation, keep=keep, on_cell=show)
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
