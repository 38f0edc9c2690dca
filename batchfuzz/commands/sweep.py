"""``batchfuzz sweep``: exhaustive check of contract A over a whole domain."""

from __future__ import annotations

import argparse
import json
from typing import Any

from batchfuzz.cli import UsageError
from batchfuzz.sweep import sweep_split


def register(sub: Any) -> None:
    p = sub.add_parser("sweep", help="exhaustively check the dummy token split over a domain")
    p.add_argument("--max-reqs", type=int, default=1024)
    p.add_argument("--max-tokens", type=int, default=16384)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--json", dest="json_path", metavar="PATH")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from batchfuzz.impl.split_dummy_tokens_torch import split_dummy_tokens_batched

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    try:
        res = sweep_split(split_dummy_tokens_batched, max_reqs=args.max_reqs, max_tokens=args.max_tokens, device=args.device)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"swept {res.pairs} (R, N) pairs, {res.elements} split entries on {res.device} in {res.seconds:.2f}s "
          f"(1 <= R <= {res.max_reqs}, R <= N <= {res.max_tokens}): {'all properties hold' if res.ok else 'FAILURES'}")
    for name, (r, n) in res.failures.items():
        print(f"  {name}: first failure at num_reqs={r}, num_tokens={n}")
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump({"max_reqs": res.max_reqs, "max_tokens": res.max_tokens, "device": res.device, "pairs": res.pairs,
                       "elements": res.elements, "seconds": res.seconds, "failures": res.failures,
                       "torch": torch.__version__}, fh, indent=2)
    return 0 if res.ok else 1
