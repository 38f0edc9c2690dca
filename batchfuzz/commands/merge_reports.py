"""``batchfuzz merge-reports DIR ... --report OUT``: one report from the shards of a fuzz run.

Each DIR is the report directory of one ``batchfuzz fuzz --shard K/N`` run
(``summary.json`` and ``junit.xml``; see :mod:`batchfuzz.merge`). OUT gets
``summary.json``, ``summary.md`` and ``junit.xml`` of the whole run, totals
recomputed. ``--corpus DEST --corpus-from SRC ...`` also copies the shards'
corpus files into DEST (a plain copy: the file name is the content address).

Exit codes, those of ``batchfuzz fuzz`` for the whole run: 0 complete, no
failure; 1 a failure (or a harness error) in any shard; 2 bad input (a
missing or garbage file, named; a shard given twice; shards of different runs;
the same work item in two shards); 3 incomplete: a shard missing or
interrupted, or work items that did not run.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from batchfuzz import merge
from batchfuzz.cli import UsageError


def register(sub: Any) -> None:
    p = sub.add_parser("merge-reports", help="merge the reports (and corpora) of a sharded fuzz run",
                       description="Combine the summary.json and junit.xml of every shard of a batchfuzz fuzz --shard run "
                                   "into one summary.json, summary.md and junit.xml.")
    p.add_argument("dirs", nargs="+", metavar="DIR", help="report directories of the shards")
    p.add_argument("--report", metavar="OUT", required=True, help="where the merged reports go")
    p.add_argument("--corpus", metavar="DEST", default=None, help="copy the shards' corpus files into DEST")
    p.add_argument("--corpus-from", metavar="SRC", nargs="+", default=[], help="the shards' corpus directories (with --corpus)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if bool(args.corpus) != bool(args.corpus_from):
        raise UsageError("--corpus DEST and --corpus-from SRC ... go together")
    out = Path(args.report)
    for d in args.dirs:
        if Path(d).exists() and out.exists() and Path(d).resolve() == out.resolve():
            raise UsageError(f"--report {out} is one of the shard directories: the merged report would overwrite it")
    try:
        merged = merge.merge_dirs(args.dirs)
        paths = merge.write(out, merged)
    except merge.MergeError as exc:
        raise UsageError(str(exc)) from None
    s = merged.summary
    for g in s["shards"]["given"]:
        print(f"shard {g['index']}/{s['shards']['count']}: {g['status']}, {g['examples']} examples, {g['failures']} failures, "
              f"{g['errors']} errors ({g['dir']})")
    for k in merged.missing:
        print(f"shard {k}/{s['shards']['count']}: MISSING")
    t = s["totals"]
    print(f"merged: {s['status']}, {t['examples']} examples, {t['failures']} failures ({t['new_corpus_entries']} new), "
          f"{t['errors']} errors, {t['items']} items")
    for f in s["failures"]:
        print(f"FAILED {f.get('contract')} {f.get('implementation')} {f.get('property')} (shard {f['shard']}): "
              f"{f.get('error_type')}; corpus {f.get('corpus_file')}")
    print(f"reports: {', '.join(str(p) for p in paths)}")
    if args.corpus:
        c = merge.merge_corpora(args.corpus_from, args.corpus)
        print(f"corpus {args.corpus}: {len(c.copied)} copied, {len(c.same)} already there, {len(c.conflicts)} conflicts")
        for line in c.conflicts:
            print(f"  conflict: {line}")
    if merged.exit_code == merge.EXIT_INCOMPLETE:
        print("incomplete: " + "; ".join(
            [f"shard {k}/{s['shards']['count']} missing" for k in merged.missing]
            + [f"shard {g['index']}/{s['shards']['count']} interrupted" for g in s["shards"]["given"] if g["partial"]]
            + ([f"{t['items_not_run']} work item(s) did not run: {', '.join(s['not_run'][:10])}"
                + (" ..." if len(s["not_run"]) > 10 else "")] if s["not_run"] else [])))
    return merged.exit_code
