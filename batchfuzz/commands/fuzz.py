"""``batchfuzz fuzz``: the main job. Every contract's properties against every
implementation available on the chosen device, within a wall-clock budget,
with progress and a per-contract summary table."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from hypothesis import settings

from batchfuzz import profiles, registry, runner
from batchfuzz.cli import UsageError, parse_duration


def register(sub: Any) -> None:
    p = sub.add_parser("fuzz", help="fuzz every contract and implementation (the main job)")
    p.add_argument("--budget", type=parse_duration, default=60.0, help="wall-clock budget (default 60s), e.g. 90s, 2h")
    p.add_argument("--profile", choices=profiles.PROFILES, default="dev", help="Hypothesis profile (default dev)")
    p.add_argument("--contract", action="append", default=None, help="only this contract (repeatable)")
    p.add_argument("--impl", action="append", default=None, help="only this implementation name (repeatable)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    p.set_defaults(func=run)


def _items(args: argparse.Namespace) -> list[tuple[registry.Contract, registry.Implementation]]:
    contracts = registry.contracts()
    if args.contract:
        known = {c.name for c in contracts}
        for name in args.contract:
            if name not in known:
                raise UsageError(f"--contract {name!r} is not a contract; known: {', '.join(sorted(known))}")
        contracts = [c for c in contracts if c.name in args.contract]
    items = [(c, i) for c in contracts for i in c.implementations if args.device in i.devices]
    if args.impl:
        items = [(c, i) for c, i in items if i.name in args.impl]
        if not items:
            raise UsageError(f"--impl {args.impl} matches no implementation")
    return items


def run(args: argparse.Namespace) -> int:
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available")
    items = _items(args)
    base = profiles.load(args.profile)
    base = settings(base, database=None) if args.profile in ("ci", "mutation") else base
    share = args.budget / len(items)
    print(f"batchfuzz fuzz: {len(items)} implementations x properties on {args.device}, "
          f"budget {args.budget:g}s, profile {args.profile}, seed {args.seed}", flush=True)
    start = time.monotonic()
    rows: dict[str, dict[str, Any]] = {}
    failures: list[runner.Failure] = []
    for k, (contract, impl) in enumerate(items):
        deadline = start + share * (k + 1)
        results = runner.hunt_for(contract, impl.for_device(args.device), contract.properties,
                                  target_name=f"{impl.name}@{args.device}", budget_s=share, base_settings=base,
                                  seed=args.seed, stop_on_failure=False, deadline=deadline)
        row = rows.setdefault(contract.name, {"examples": 0, "failures": 0, "impls": 0, "seconds": 0.0})
        row["impls"] += 1
        row["examples"] += sum(r.examples for r in results)
        row["seconds"] += sum(r.seconds for r in results)
        found = [r.failure for r in results if r.failure is not None]
        row["failures"] += len(found)
        failures.extend(found)
        left = max(0.0, args.budget - (time.monotonic() - start))
        status = f"{len(found)} FAILED" if found else "ok"
        print(f"[{k + 1}/{len(items)}] {contract.name:22} {impl.name:20} {sum(r.examples for r in results):7d} examples  "
              f"{status:9} ({left:.0f}s left)", flush=True)
    print()
    print(f"{'contract':24} {'impls':>5} {'examples':>9} {'failures':>8} {'ex/s':>8}")
    for name, row in rows.items():
        rate = row["examples"] / row["seconds"] if row["seconds"] else 0.0
        print(f"{name:24} {row['impls']:5d} {row['examples']:9d} {row['failures']:8d} {rate:8.0f}")
    for f in failures:
        print(f"\nFAILED {f.contract}/{f.target} {f.property}: {f.error_type}: {f.message.splitlines()[0]}")
        print(f.reproduction())
    sys.stdout.flush()
    return 1 if failures else 0
