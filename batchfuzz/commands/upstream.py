"""``batchfuzz upstream``: a finding written up for the engine's maintainers
(its report, with a reproduction that needs no batchfuzz), or a fix for it
checked on a patched copy of the release (``--patch``, ``--cells``). What a
report holds, how a fix is judged and the exit codes: docs/upstream-reports.md.
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
                    "1 the patch does not fix it (or, with --cells, another property changed), 2 usage error, "
                    "3 (--cells) a property reached no verdict on a tree.",
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
                   help="with --patch, also run every property of every matrix cell of the files the patch touches "
                        "on both trees (seed 1, 200 examples and at most 20 s a property) and replay the stored case of "
                        "every finding in them; show what changed")
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
    """Every property of the touched files' cells and the touched findings'
    stored cases, on both trees; the verdict as docs/upstream-reports.md says.
    Run only once the reproduction passes patched: a documented choice still
    failing is then a policy difference."""
    from batchfuzz.registry import CHOICE
    from batchfuzz.upstream import cells

    diff = Path(patch).read_text(encoding="utf-8")
    run = cells.cells_on_patch(upstream.engine_module(found), source, diff, upstream.touched(diff),
                               findings=upstream.FINDINGS)
    for c in run.changes:
        if c.outcome != "same":
            print(f"  {c.function} ({c.contract}) {c.prop} [{c.label}]: {c.before} -> {c.after}: {c.outcome}")
    print(f"  {sum(c.outcome == 'same' for c in run.changes)} other properties the same on both trees")
    for r in run.replays:
        print(f"  replayed case of {r.finding} ({r.prop}): {r.before} -> {r.after}"
              + ("" if r.before.status == "fail" else ": the stored case does not fail the release"))
    target = [c for c in run.changes if c.of(found.qualname, found.contract) and c.prop == found.prop]
    own = [r for r in run.replays if r.finding == found.key]
    # Gone: the search or the replayed case failed on the release, and neither fails patched.
    failed = any(c.outcome == "fixed" for c in target) or any(r.before.status == "fail" for r in own)
    gone = (failed and all(c.outcome in ("fixed", "same") for c in target)
            and all(r.after.status == "pass" for r in own))
    policy = (not gone and found.label == CHOICE and bool(target)
              and all(c.outcome in ("fixed", "unchanged (already failing)") for c in target))
    others = [c for c in run.changes if c not in target and c.changed]
    still = [r.finding for r in run.replays if r.finding != found.key and r.after.status == "fail"]
    unjudged = [c for c in run.changes if c.outcome == "not compared"]
    print(("the finding's property passes" if gone else f"the finding's property {found.prop} still fails: a documented "
           "choice (a policy difference; the reproduction passes)" if policy else "the finding's property still fails")
          + "; " + ("nothing else changed" if not others else f"other properties changed: {len(others)}")
          + "".join(f"; {key}'s replayed case still fails (not fixed by this patch)" for key in still)
          + (f"; properties with no verdict on a tree, not compared: {len(unjudged)}" if unjudged else ""))
    if unjudged and not others and (gone or policy):
        return ExitCode.INCOMPLETE
    return ExitCode.OK if (gone or policy) and not others else ExitCode.COUNTEREXAMPLE
