"""``batchfuzz merge-reports DIR ... --report OUT``: one report from the shards of a fuzz run.

Each DIR is the report directory of one ``batchfuzz fuzz --shard K/N`` run
(``summary.json`` and ``junit.xml``; see :mod:`batchfuzz.fuzz.merge`). OUT gets
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
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("merge-reports", help="merge the reports (and corpora) of a sharded fuzz run",
                       description="Combine the summary.json and junit.xml of every shard of a batchfuzz fuzz --shard run "
                                   "into one summary.json, summary.md and junit.xml.")
    p.add_argument("dirs", nargs="+", metavar="DIR", help="report directories of the shards")
    p.add_argument("--report", metavar="OUT", required=True, help="where the merged reports go")
    p.add_argument("--corpus", metavar="DEST", default=None, help="copy the shards' corpus files into DEST")
    p.add_argument("--corpus-from", metavar="SRC", nargs="+", default=[], help="the shards' corpus directories (with --corpus)")
    p.add_argument("--history", nargs="+", default=[], metavar="DIR",
                   help="earlier nights' (merged) report directories: index.html plots this run beside them")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from batchfuzz.fuzz import merge
    from batchfuzz.usage import refuse_system_dir

    refuse_system_dir(args.report, "--report")
    if args.corpus:
        refuse_system_dir(args.corpus, "--corpus")
    return merge.merge_run(args.dirs, args.report, corpus_dest=args.corpus, corpus_from=args.corpus_from,
                           history=args.history)
