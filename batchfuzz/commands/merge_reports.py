"""``batchfuzz merge-reports DIR ... --report OUT``: one report from the shards of a fuzz run.

Each DIR is the report directory of one ``batchfuzz fuzz --shard K/N`` run;
OUT gets the whole run's ``summary.json``, ``summary.md`` and ``junit.xml``,
totals recomputed (:mod:`batchfuzz.fuzz.merge`), and ``--corpus DEST
--corpus-from SRC ...`` copies the shards' corpus files into DEST. The exit
codes are ``fuzz``'s for the whole run (docs/nightly.md, "batchfuzz
merge-reports").
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
