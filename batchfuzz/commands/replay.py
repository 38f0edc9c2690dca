"""``batchfuzz replay [PATH ...]``: re-check every failure in the corpus.

Each corpus file's property is re-checked against its target on the stored,
shrunk case, exactly as ``tests/test_corpus.py`` does in the ordinary test
run, in a worker process unless ``--no-isolation``. PATH may be corpus files
or directories (default: the project's corpus, see
``batchfuzz.corpus.default_dir``). A corpus file is data: it never makes
batchfuzz import a user's module or load a file; entries recorded against a
user's function are replayed against the one ``--target CONTRACT=MODULE:FUNCTION``
names, and skipped without it; entries recorded against an engine release
(``engine:vllm::dir:PATH::...``: code read from a place the file names) are
replayed only when ``--engine dir:PATH`` (or ``wheel:PATH``, ``installed:``)
names that release, and skipped without it.

Exit codes: 0 every entry passes (its bug is fixed), is skipped, or there is
none; 1 at least one entry still fails (listed, with its reproduction); 2 a
malformed corpus file (named; the other files are still replayed), or a PATH
that does not exist.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from batchfuzz import corpus
from batchfuzz.cli import UsageError
from batchfuzz.targets import TargetError, parse


def _target(text: str) -> tuple[str, str]:
    contract, sep, spec = text.partition("=")
    if not sep or not contract or not spec:
        raise argparse.ArgumentTypeError(f"--target must be CONTRACT=MODULE:FUNCTION or CONTRACT=FILE.py:FUNCTION, got {text!r}")
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
                       description="Re-check every corpus entry's property on its stored case.")
    p.add_argument("paths", nargs="*", metavar="PATH", help="corpus files or directories (default: the project's corpus)")
    p.add_argument("--target", action="append", default=[], type=_target, metavar="CONTRACT=MODULE:FUNCTION",
                   help="replay CONTRACT's entries recorded against a user's function against this one (repeatable)")
    p.add_argument("--engine", action="append", default=[], type=_release, metavar="wheel:PATH|dir:PATH|installed:",
                   help="replay entries recorded against this engine release (repeatable); a corpus file's own choice of "
                        "release is never run without it")
    p.add_argument("--no-isolation", action="store_true", help="run the targets in this process")
    p.add_argument("-q", "--quiet", action="store_true", help="print only entries that still fail or cannot be loaded")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    roots = [Path(p) for p in args.paths] or [corpus.default_dir()]
    files: list[Path] = []
    for root in roots:
        if args.paths and not root.exists():
            raise UsageError(f"{root}: no such corpus file or directory")
        files.extend(corpus.files(root))
    if not files:
        print(f"no corpus entries under {', '.join(str(r) for r in roots)}")
        return 0
    targets = dict(args.target)
    counts = {"passes": 0, "fails": 0, "skipped": 0, "malformed": 0}
    for path in files:
        try:
            outcome = corpus.replay(corpus.load(path), targets=targets, engines=args.engine,
                                    isolate=not args.no_isolation)
        except corpus.CorpusError as exc:
            counts["malformed"] += 1
            print(f"ERROR {exc}")
            continue
        counts[outcome.status] += 1
        if outcome.fails:
            print("FAIL  " + corpus.describe(outcome))
        elif not args.quiet:
            e = outcome.entry
            word = "pass " if outcome.status == "passes" else "skip "
            extra = f" ({outcome.message})" if outcome.message else ""
            print(f"{word} {path}: {e.contract}/{e.target} {e.property}{extra}")
    print(f"{len(files)} corpus entries: {counts['passes']} pass, {counts['fails']} still fail, "
          f"{counts['skipped']} skipped, {counts['malformed']} malformed")
    if counts["fails"]:
        return 1
    return 2 if counts["malformed"] else 0
