"""``batchfuzz replay [PATH ...]``: re-check every failure in the corpus.

Each corpus entry's property is re-checked on its stored, shrunk case, as
``tests/test_corpus.py`` does, in a worker process unless ``--no-isolation``;
``--write-tests DIR`` writes every entry as a pytest file instead
(``batchfuzz.fuzz.regressions``). A corpus file is data: the user's function
or engine release an entry names runs only when ``--target`` or ``--engine``
names it too. Exit codes: 0 all pass, 1 some still fail, 2 a malformed file,
4 nothing replayed (docs/nightly.md, "The failure corpus").
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from batchfuzz.commands import _options
from batchfuzz.usage import ExitCode

RUNS_WORKERS = True  # batchfuzz.plugins.CommandTraits


def _target(text: str) -> tuple[str, str]:
    from batchfuzz.targets import TargetError, parse

    contract, spec = _options.contract_target(text)
    try:
        parse(spec)
    except TargetError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return contract, spec


def _release(text: str) -> str:
    kind, sep, rest = text.partition(":")
    if not sep or kind not in ("wheel", "dir", "installed") or (kind == "installed") == bool(rest):
        raise argparse.ArgumentTypeError(f"--engine must be wheel:PATH, dir:PATH or installed:, got {text!r}")
    return text


def register(sub: Any) -> None:
    p = sub.add_parser("replay", help="replay the failure corpus (as the test run does)",
                       description="Re-check every corpus entry's property on its stored case. Exit codes: 0 every "
                                   "entry replayed passes, 1 an entry still fails, 2 usage error or a malformed file, "
                                   "4 nothing replayed (no entry found, or every one skipped).")
    p.add_argument("paths", nargs="*", metavar="PATH", help="corpus files or directories (default: the project's corpus)")
    _options.targets(p, type=_target, help="replay CONTRACT's entries recorded against a user's function against this one (repeatable)")
    p.add_argument("--engine", action="append", default=[], type=_release, metavar="wheel:PATH|dir:PATH|installed:",
                   help="replay entries recorded against this engine release (repeatable); a corpus file's own choice of "
                        "release is never run without it")
    _options.no_isolation(p, help="run the targets in this process")
    p.add_argument("--write-tests", metavar="DIR", default=None,
                   help="instead of replaying, write every entry as a pytest file in DIR (one per entry, to commit): it "
                        "fails while the bug is there, exactly where replay fails, and passes once it is fixed")
    p.add_argument("-q", "--quiet", action="store_true", help="print only entries that still fail or cannot be loaded")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from batchfuzz.fuzz import corpus

    if args.write_tests is not None:
        from batchfuzz.fuzz import regressions
        from batchfuzz.usage import writable_dir

        writable_dir(args.write_tests, "--write-tests")
        written = regressions.write_tests([Path(p) for p in args.paths], Path(args.write_tests), targets=dict(args.target),
                                          engines=args.engine)
        return ExitCode.USAGE if written["malformed"] else ExitCode.OK
    counts = corpus.replay_paths([Path(p) for p in args.paths], targets=dict(args.target), isolate=not args.no_isolation,
                                 quiet=args.quiet, engines=args.engine)
    if counts["fails"]:
        return ExitCode.COUNTEREXAMPLE
    if counts["malformed"]:
        return ExitCode.USAGE
    if counts["passes"]:
        return ExitCode.OK
    # A CI job whose replay skipped every entry (or found none) checked nothing: not green.
    if counts["skipped"]:
        print("nothing was replayed: every entry was skipped (each says why: name a user's function with --target, "
              "an engine release with --engine)")
    return ExitCode.UNCHECKED
