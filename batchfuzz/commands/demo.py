"""``batchfuzz demo``: what a counterexample looks like, in seconds.

Runs ``check`` on a bundled function with the remainder bug that shipped in
vLLM (:mod:`batchfuzz.examples`), with a fixed seed, so that a newcomer sees
a failure found and shrunk within the first minute (the README's quick
start). Exit codes: 0 the bug was found, as it should be; 1 it was not
(batchfuzz itself is broken: please report it); 2 a usage error.
"""

from __future__ import annotations

import argparse
from typing import Any

from batchfuzz.usage import ExitCode

CONTRACT = "split_dummy_tokens"
TARGET = "batchfuzz.examples:split_tokens"
SEED = 1
BUDGET_S = 20.0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="show a counterexample: check a bundled buggy function (seconds)",
        description=f"Check the bundled buggy function {TARGET} against contract A ({CONTRACT}) and show its "
                    "counterexample and reproduction, as `batchfuzz check` does for yours. Exit codes: 0 the "
                    "counterexample was found and shown, 1 it was not (a bug in batchfuzz).")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from batchfuzz import checking

    print(f"batchfuzz demo: {TARGET} gives the remainder of a dummy batch's tokens all to the last request, the bug "
          "that shipped in vLLM; `batchfuzz check` finds it and shrinks it to its smallest case, as it does for your "
          "own function given as MODULE:FUNCTION\n", flush=True)
    result = checking.run(checking.CheckRequest(contract=CONTRACT, target=TARGET, budget_s=BUDGET_S, seed=SEED,
                                                started=getattr(args, "started", None)))
    if result.status != checking.COUNTEREXAMPLE:
        print(f"\nbatchfuzz demo: the known bug of {TARGET} was NOT found ({result.status}): batchfuzz is broken here")
        return ExitCode.COUNTEREXAMPLE
    print("\nbatchfuzz demo: found and shrunk, as it should be (a check of your function exits 1 on a counterexample; "
          "the demo exits 0: it worked)")
    return ExitCode.OK
