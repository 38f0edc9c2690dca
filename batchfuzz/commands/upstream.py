"""``batchfuzz upstream``: a finding written up for the engine's maintainers.

``batchfuzz upstream --list`` lists the findings with a report;
``batchfuzz upstream FINDING`` prints the report (Markdown) of the finding on
its release (``--release``, ``--wheel``, ``--source`` or ``--installed`` for
another), or writes it with ``--out FILE``; ``--patch DIFF`` instead applies
a unified diff to a copy of the release's files and runs the reproduction on
both (docs/upstream-reports.md).

Exit codes: 0 the report is written, or the patch removes the failure (with
``--cells``: and the finding's cell no longer fails a safety property, and
no other cell changed); 1 the patch leaves the reproduction
failing, the release does not fail it, or (``--cells``) another cell changed;
2 a usage error (an unknown finding, a release that cannot be opened, a patch
that does not apply, an unwritable output); 3 (``--cells``) the rest holds but
a cell was incomplete on a tree.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from batchfuzz.commands import _options
from batchfuzz.usage import ExitCode, UsageError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "upstream", help="a finding as an upstream issue: report and engine-only reproduction, or a fix checked",
        description="Write a finding up for the engine's maintainers: the rule in the engine's own words (read from the "
                    "release), the property broken, the shrunk case and a reproduction that needs no batchfuzz; or, with "
                    "--patch, check a fix on a patched copy of the release. Exit codes: 0 done (the patch fixes it), "
                    "1 the patch does not fix it, 2 usage error.",
    )
    p.add_argument("finding", nargs="?", metavar="FINDING", help="a finding (see --list)")
    p.add_argument("--list", action="store_true", help="list the findings with a report")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--release", metavar="VERSION",
                        help="the release by version (default: the finding's): its wheel, from the cache or the registry")
    source.add_argument("--wheel", metavar="FILE", help="a release wheel")
    source.add_argument("--source", metavar="DIR", help="a source checkout: the directory holding the engine's package")
    source.add_argument("--installed", action="store_true", help="the installed distribution's files (not imported)")
    p.add_argument("--out", metavar="FILE", help="write the report here instead of printing it")
    p.add_argument("--patch", metavar="DIFF", help="a unified diff (-p1) to check: the reproduction before and after it")
    p.add_argument("--cells", action="store_true",
                   help="with --patch, also run every matrix cell of the files the patch touches on both trees "
                        "(seed 1, 200 examples a property, 20 s a cell) and show what changed")
    p.set_defaults(func=run)


def _source(args: argparse.Namespace, found: Any) -> Any:
    from batchfuzz import matrix, upstream

    given = args.wheel or args.source or args.installed
    try:
        return matrix.release_sources(upstream.engine_module(found), releases=[] if given else [args.release or found.release],
                                      wheels=[args.wheel] if args.wheel else [], dirs=[args.source] if args.source else [],
                                      installed=args.installed)[0]
    except (LookupError, ValueError) as exc:  # SourceError is a LookupError
        raise UsageError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from batchfuzz import upstream

    if args.list:
        for f in upstream.FINDINGS:
            print(f"{f.key}: {f.engine} {f.release} {f.qualname} ({f.label}): {f.title}")
        return ExitCode.OK
    if not args.finding:
        raise UsageError("give a FINDING (batchfuzz upstream --list names them) or --list")
    try:
        found = upstream.finding(args.finding)
    except ValueError as exc:
        raise UsageError(f"FINDING: {exc}") from None
    _options.check_outputs((args.out, "--out"))
    source = _source(args, found)
    if args.cells and not args.patch:
        raise UsageError("--cells needs --patch DIFF")
    if args.patch:
        code = _check(upstream, found, source, args.patch)
        return _cells(upstream, found, source, args.patch) if args.cells and code == ExitCode.OK else code
    try:
        text = upstream.report(found, source)
    except LookupError as exc:
        raise UsageError(f"cannot write the report of {found.key} from {source.ref}: {exc}") from None
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return ExitCode.OK


def _check(upstream: Any, found: Any, source: Any, patch: str) -> int:
    try:
        diff = Path(patch).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--patch: cannot read {patch!r}: {exc.strerror}") from None
    try:
        result = upstream.check_patch(found, source, diff)
    except (LookupError, ValueError) as exc:
        raise UsageError(f"--patch {patch!r}: {exc}") from None
    print(f"{found.key} on {source.ref}: reproduction exits {result.before} on the release, {result.after} patched")
    if result.before == 0:
        print("the release does not fail the reproduction: nothing to fix here")
        return ExitCode.COUNTEREXAMPLE
    if not result.fixed:
        print("the patched copy still fails:\n" + result.output_after)
        return ExitCode.COUNTEREXAMPLE
    print("the patch removes the failure")
    return ExitCode.OK


def _cells(upstream: Any, found: Any, source: Any, patch: str) -> int:
    from batchfuzz.upstream import cells

    diff = Path(patch).read_text(encoding="utf-8")
    changes = cells.cells_on_patch(upstream.engine_module(found), source, diff, upstream.touched(diff))
    for c in changes:
        print(f"  {c.function} ({c.contract}): {c.before} -> {c.after}")
    target = [c for c in changes if c.of(found.qualname, found.contract)]
    others = [c for c in changes if c not in target and c.changed]
    unjudged = [c for c in changes if not c.conclusive]
    gone = bool(target) and all(c.before.startswith("fail") and c.safe_after for c in target)
    passes = gone and all(c.after == "pass" for c in target)
    print(("the failing cell passes" if passes else "the failing cell fails a documented choice only (a policy "
           "difference)" if gone else "the failing cell does not pass") + "; "
          + ("nothing else changed" if not others else f"{len(others)} other cell(s) changed")
          + (f"; {len(unjudged)} cell(s) incomplete or in error on a tree, not compared" if unjudged else ""))
    if unjudged and not others and gone:
        return ExitCode.INCOMPLETE
    return ExitCode.OK if gone and not others else ExitCode.COUNTEREXAMPLE
