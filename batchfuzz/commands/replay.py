"""``batchfuzz replay [PATH ...]``: re-check every failure in the corpus.

Each corpus file's property is re-checked against its implementation (or the
user's target) on the stored, shrunk case, exactly as ``tests/test_corpus.py``
does in the ordinary test run. PATH may be corpus files or directories
(default: the project's corpus, see ``batchfuzz.corpus.default_dir``).

Exit codes: 0 every entry passes (its bug is fixed) or there is none; 1 at
least one entry still fails (listed, with its reproduction); 2 a malformed or
unreplayable corpus file (named), or a PATH that does not exist.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from batchfuzz import corpus
from batchfuzz.cli import UsageError


def register(sub: Any) -> None:
    p = sub.add_parser("replay", help="replay the failure corpus (as the test run does)",
                       description="Re-check every corpus entry's property on its stored case.")
    p.add_argument("paths", nargs="*", metavar="PATH", help="corpus files or directories (default: the project's corpus)")
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
    counts = {"passes": 0, "fails": 0, "skipped": 0, "malformed": 0}
    for path in files:
        try:
            outcome = corpus.replay(corpus.load(path))
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
            print(f"{word} {path}: {e.contract}/{e.target_name} {e.property}{extra}")
    print(f"{len(files)} corpus entries: {counts['passes']} pass, {counts['fails']} still fail, "
          f"{counts['skipped']} skipped, {counts['malformed']} malformed")
    if counts["malformed"]:
        return 2
    return 1 if counts["fails"] else 0
