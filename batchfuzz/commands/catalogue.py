"""``batchfuzz catalogue``: hunt every registered buggy variant and tabulate it.

Each variant is run against its primary property under the ``ci`` profile
(derandomized, no database) with ``max_examples`` raised (default 300, see
``batchfuzz.profiles.CATALOGUE_MAX_EXAMPLES``); its shrunk counterexample is compared
with the documented canonical form, and every property it lists in
``caught_by`` is confirmed to fail on it. Prints a table; ``--markdown``
writes it as Markdown (between markers, so it can live inside README.md) and
``--json`` writes the full report (cases with dtypes, reproductions).

Exit codes: 0 every variant caught with a counterexample no larger than the
documented one, 1 otherwise, 2 usage error.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from batchfuzz import output, profiles
from batchfuzz.commands import _options
from batchfuzz.progress import Progress
from batchfuzz.usage import ExitCode, UsageError

RUNS_WORKERS = True  # batchfuzz.plugins.CommandTraits

if TYPE_CHECKING:
    from hypothesis import settings

    from batchfuzz import catalogue
    from batchfuzz.registry import Contract, Variant


def register(sub: Any) -> None:
    p = sub.add_parser("catalogue", help="hunt every known buggy variant; print and write the table",
                       description="Run every registered variant (shipped engine bugs and planted mutants) against its "
                                   "properties under the ci profile and report what catches it, its shrunk counterexample "
                                   "and how long the search took.")
    _options.contracts(p, help="only this contract (name or section letter; repeatable)")
    p.add_argument("--variant", action="append", default=None, metavar="NAME", help="only this variant name (repeatable)")
    _options.markdown_output(p, help="write the Markdown table here (between the catalogue markers when the file already has them)")
    _options.json_output(p, help="write the full JSON report here")
    _options.max_examples(p, default=profiles.CATALOGUE_MAX_EXAMPLES,
                          help=f"examples per search before a variant counts as not found (default {profiles.CATALOGUE_MAX_EXAMPLES})")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="run variants in N worker processes (default 1; seconds are then measured under shared load)")
    p.add_argument("--primary-only", action="store_true",
                   help="skip confirming the other caught_by properties (faster; the table then shows fewer)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from batchfuzz import catalogue

    items = _items(args)
    if args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    rs = catalogue.catalogue_settings(args.max_examples)
    print(f"batchfuzz catalogue: {len(items)} variants, profile ci (derandomized, no database), "
          f"max_examples={args.max_examples}" + (f", {args.jobs} worker processes" if args.jobs > 1 else ""), flush=True)
    start = time.monotonic()
    bar = Progress("catalogue", total=len(items))
    try:
        with bar:
            entries = catalogue.run_items(items, max_examples=args.max_examples, check_all=not args.primary_only,
                                          jobs=args.jobs, on_entry=functools.partial(_progress, bar),
                                          on_start=lambda c, v: bar.update(now=f"{c.name}/{v.name}"))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    seconds = time.monotonic() - start
    print()
    print(catalogue.text_table(entries))
    bad = [e for e in entries if not e.ok]
    print(f"\n{len(entries) - len(bad)}/{len(entries)} variants caught with a counterexample no larger than the "
          f"documented one ({seconds:.1f}s)")
    for e in bad:
        print(f"  BAD {e.contract}/{e.variant}: " + "; ".join(e.problems()))
    _write(args, rs, items, entries, seconds)
    return ExitCode.COUNTEREXAMPLE if bad else ExitCode.OK


def _items(args: argparse.Namespace) -> list[tuple[Contract, Variant]]:
    """The (contract, variant) pairs asked for; a usage error for an unknown
    name or a --markdown file without the catalogue's markers."""
    from batchfuzz import catalogue

    try:
        items = catalogue.variants(args.contract)
    except LookupError as exc:  # registry.UnknownName
        raise UsageError(f"--contract: {exc}") from None
    if args.variant:
        known = {v.name for _, v in items}
        unknown = sorted(set(args.variant) - known)
        if unknown:
            raise UsageError(f"--variant {unknown} not registered; known: {', '.join(sorted(known))}")
        items = [(c, v) for c, v in items if v.name in args.variant]
    if args.markdown and os.path.exists(args.markdown):
        with open(args.markdown) as fh:
            before = fh.read()
        if before.strip() and catalogue.marker_span(before) is None:
            raise UsageError(f"--markdown {args.markdown}: the file exists and has no catalogue markers; put these two "
                             f"lines where the table goes:\n{catalogue.BEGIN_MARKER}\n{catalogue.END_MARKER}")
    return items


def _progress(bar: Progress, k: int, n: int, e: catalogue.Row) -> None:
    from batchfuzz import catalogue

    mark = "ok " if e.ok else "BAD"
    what = catalogue.compact_args(e.case.args) if e.case is not None else "not found"
    bar.advance(f"[{k}/{n}] {mark} {e.contract}/{e.variant}: {e.verdict} in {e.primary.seconds:.1f}s  {what}")
    for problem in e.problems():
        bar.say(f"      {problem}")


def _write(args: argparse.Namespace, rs: settings, items: list[tuple[Contract, Variant]], entries: list[catalogue.Row],
           seconds: float) -> None:
    """The Markdown table (--markdown, between its markers) and the JSON report (--json)."""
    import hypothesis

    from batchfuzz import catalogue

    if args.markdown:
        table = catalogue.markdown_table(entries, rs)
        existing: str | None = None
        if os.path.exists(args.markdown):
            with open(args.markdown) as fh:
                existing = fh.read()
        text = catalogue.splice_markdown(existing, table)  # before opening for writing: a refusal must not truncate
        output.write_outputs(None, None, args.markdown, text)
    if args.json_path:
        ok = sum(1 for e in entries if e.ok)
        report = {
            "profile": "ci", "max_examples": args.max_examples, "hypothesis": hypothesis.__version__,
            "seconds": round(seconds, 3), "variants": len(entries), "ok": ok,
            "entries": [e.to_json() for e in entries],
            "kills": {c.name: catalogue.kill_matrix(entries, c) for c in {c.name: c for c, _ in items}.values()},
        }
        output.write_outputs(args.json_path, report)
