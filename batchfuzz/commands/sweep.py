"""``batchfuzz sweep``: exhaustive check of contract A over a whole domain."""

from __future__ import annotations

import argparse
from typing import Any

from batchfuzz import output
from batchfuzz.commands import _options
from batchfuzz.progress import Progress
from batchfuzz.usage import ExitCode, UsageError

RUNS_WORKERS = True  # batchfuzz.plugins.CommandTraits


def register(sub: Any) -> None:
    p = sub.add_parser("sweep", help="exhaustively check the dummy token split over a domain")
    p.add_argument("--max-reqs", type=int, default=1024)
    p.add_argument("--max-tokens", type=int, default=16384)
    _options.device(p)
    _options.json_output(p, help=None)
    p.set_defaults(func=run)


def _elements(max_reqs: int, max_tokens: int) -> int:
    """Split entries of the whole sweep: sum over R of R * (max_tokens - R + 1)."""
    return sum(r * (max_tokens - r + 1) for r in range(1, max_reqs + 1))


def run(args: argparse.Namespace) -> int:
    import torch

    from batchfuzz.impl.split_dummy_tokens_torch import split_dummy_tokens_batched
    from batchfuzz.sweep import sweep_split

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    # The bar counts split entries (the work grows with R), so its time left is the sweep's.
    bar = Progress("sweep (split entries)", total=_elements(args.max_reqs, args.max_tokens), heartbeat_s=10.0)

    def progress(res: Any, r: int) -> None:
        bar.update(res.elements, now=f"R {r}/{args.max_reqs}, {res.pairs} pairs, "
                                     f"{len(res.failures)} properties failing so far")

    try:
        with bar:
            res = sweep_split(split_dummy_tokens_batched, max_reqs=args.max_reqs, max_tokens=args.max_tokens,
                              device=args.device, on_progress=progress)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"swept {res.pairs} (R, N) pairs, {res.elements} split entries on {res.device} in {res.seconds:.2f}s "
          f"(1 <= R <= {res.max_reqs}, R <= N <= {res.max_tokens}): {'all properties hold' if res.ok else 'FAILURES'}")
    for name, (r, n) in res.failures.items():
        print(f"  {name}: first failure at num_reqs={r}, num_tokens={n}")
    output.write_outputs(args.json_path, {"max_reqs": res.max_reqs, "max_tokens": res.max_tokens, "device": res.device,
                                          "pairs": res.pairs, "elements": res.elements, "seconds": res.seconds,
                                          "failures": res.failures, "torch": torch.__version__}, say=lambda line: None)
    return ExitCode.OK if res.ok else ExitCode.COUNTEREXAMPLE
