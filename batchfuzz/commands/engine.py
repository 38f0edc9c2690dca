"""``batchfuzz engine NAME``: a registered engine's own batch-layout
functions, release by release (the release matrix).

Every release given x every function the engine binds x its contract, on
the contract's ``engine`` domain, cut out of the release's source text
(nothing of the engine is imported or installed); each cell is ``pass``,
``fail``, ``absent``, ``unbindable``, ``incomplete`` or ``error``
(``batchfuzz.matrix``). ``--where``, ``--drift``, ``--latest`` and
``--follow`` are ``batchfuzz.commands._follow`` (docs/where-it-lives.md);
adding an engine: docs/bindings.md, "Adding an engine".

Exit codes: ``EXIT_CODES``. ``--jobs`` runs cells side by side
(``batchfuzz.matrix.run_matrix``; docs/bindings.md, "Cells side by side").
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections import Counter
from typing import Any

from batchfuzz.commands import _follow, _options
from batchfuzz.output import write_outputs
from batchfuzz.progress import Progress
from batchfuzz.usage import UsageError

EXIT_CODES = ("Exit codes: 0 every checked cell passes, 1 a counterexample (a fail), 2 usage error, 3 a cell incomplete, "
              "4 no counterexample but a cell could not be checked (unbindable, error).")


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
    _options.release(p, repeatable=True, help="a release by version, e.g. 0.33.0: its wheel is downloaded into the cache (repeatable)")
    p.add_argument("--all-releases", action="store_true", help="every release of the engine's published matrix (its RELEASES)")
    p.add_argument("--function", action="append", default=None, metavar="GLOB",
                   help="only functions matching GLOB, e.g. '*_allow_microbatching' (repeatable)")
    _options.contracts(p, help="only these contracts (repeatable)")
    _options.budget(p, default=20.0, help="seconds per cell, wall time (all of a contract's properties, shrinking included; "
                                          "default 20)")
    _options.max_examples(p, default=None,
                          help="one round of N examples per property instead of rounds until the budget ends (the budget stays "
                               "a ceiling): verdicts that depend on counts, not on the machine's speed")
    _options.timeout(p, default=10.0, help="per-example timeout: a call that runs longer is a `timeout` failure (default 10)")
    _options.steps(p, help="where the scheduled steps of contracts D and E come from: model (batchfuzz's scheduler model, "
                           "contract E's engine domain) or engine (the installed vLLM's own scheduler: their engine-steps domain, "
                           "docs/engine-steps.md); the other cells stay on their engine domain and say so")
    _options.seed(p, help="seed for a repeatable run (default: random, printed)")
    _options.no_isolation(p, help="run the release's code in this process (one cell at a time)")
    _options.jobs(p, help="run N cells at a time, each with its own worker process, and bind the next release while they run "
                          f"(default: the usable CPUs, here {_options.usable_cpus()}); a cell's budget is wall time, so cells "
                          "side by side get less CPU each: --max-examples makes verdicts independent of that")
    _options.json_output(p, help="write the matrix here as JSON ({'rows': [...]})")
    _options.markdown_output(p, help="write the matrix here as a Markdown table")
    _follow.add_options(p)


class _Shown:
    """The matrix's progress on the command's bar (``matrix.MatrixEvents``):
    a release's binding before and after (seconds to minutes for a wheel: not
    a silent wait), each cell's row and, under a failing one, its next step."""

    def __init__(self, bar: Progress, engine: Any) -> None:
        self.bar, self.engine = bar, engine

    def binding(self, release: str) -> None:
        self.bar.update(now=f"binding {self.engine.ENGINE} {release}")
        self.bar.say(f"binding {self.engine.ENGINE} {release}: reading its source, binding its functions")

    def bound(self, release: str, rows: list[Any], seconds: float) -> None:
        statuses = Counter(b.status for b in rows)
        self.bar.say(f"bound {self.engine.ENGINE} {release} in {seconds:.0f}s: "
                     + ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) + "; running its cells")

    def start(self, bound: Any) -> None:
        self.bar.update(now=f"{bound.release} {bound.function} ({bound.contract})")

    def cell(self, cell: Any) -> None:
        from batchfuzz import matrix

        self.bar.advance(matrix.to_text([cell], among=(spec.function for spec in self.engine.SPECS)).splitlines()[1])
        for line in matrix.next_step(cell):  # a failing cell's reproduction and check line, not indented: pasted, they run
            self.bar.say(line)


def run(args: argparse.Namespace) -> int:
    from batchfuzz import engines

    try:
        found = engines.engine(args.name)
    except engines.UnknownEngine as exc:
        raise UsageError(str(exc)) from None
    return run_matrix(found, args)


def run_matrix(engine: Any, args: argparse.Namespace) -> int:
    """Parse-level checks, then ``batchfuzz.matrix`` over ``engine``'s releases."""
    from batchfuzz import matrix

    _options.check_outputs((args.json_path, "--json"), (args.markdown, "--markdown"))
    try:
        matrix.check_steps(args.steps)
        keep = matrix.selection(engine, args.function, args.contract)
        releases = [*args.release, *(engine.RELEASES if args.all_releases else ()), *_follow.latest(engine, args)]
        sources = matrix.release_sources(engine, releases=list(dict.fromkeys(releases)),
                                         wheels=args.wheel, dirs=args.source, installed=args.installed,
                                         say=lambda line: print(line, flush=True))
    except (LookupError, ValueError) as exc:  # SourceError is a LookupError
        raise UsageError(str(exc)) from None
    if _follow.reports_only(args):
        return _follow.report(engine, args, sources, keep)
    _follow.before(engine, args, sources, keep)
    seed = args.seed if args.seed is not None else matrix.new_seed()
    run = matrix.CellRun(budget_s=args.budget, timeout_s=args.timeout, seed=seed, isolate=not args.no_isolation,
                         max_examples=args.max_examples, steps=args.steps)
    jobs, why = matrix.cells_at_once(args.jobs, run)
    at_once = f"{jobs} cells at a time" if jobs > 1 else f"one cell at a time ({why})" if why else ""
    print(f"batchfuzz {engine.ENGINE}: {len(sources)} release(s) ({', '.join(s.version for s in sources)}), budget "
          f"{args.budget:g}s per cell, {matrix.steps_phrase(args.steps)}, seed {seed}" + (f", {at_once}" if at_once else ""),
          flush=True)
    started = time.time()
    print(matrix.to_text([]), flush=True)
    bar = Progress(f"{engine.ENGINE} cells")
    try:
        found = matrix.engine_releases(engine, sources, search=matrix.searched(args.function, args.contract),
                                       isolate=not args.no_isolation, timeout_s=args.timeout)
        with bar:
            cells = matrix.run_matrix(found, run, keep=keep, events=_Shown(bar, engine), jobs=jobs)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    _follow.after(engine, args, sources)
    counts = {v: sum(c.verdict == v for c in cells) for v in matrix.VERDICTS}
    print(f"\n{len(cells)} cells in {time.time() - started:.0f}s: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n))
    write_outputs(args.json_path, {"seed": seed, "budget": args.budget, "steps": args.steps, "rows": [c.to_json() for c in cells]},
                  args.markdown, matrix.to_markdown(cells) if args.markdown else None)
    return matrix.exit_code(cells)
