"""``batchfuzz check CONTRACT MODULE:FUNCTION``: fuzz a user's function against a contract.

Exit codes: 0 no counterexample within the budget, 1 counterexample found
(printed as a copy-paste reproduction), 2 usage or import error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

from batchfuzz import profiles, registry, runner
from batchfuzz.cli import UsageError, parse_duration
from batchfuzz.codec import literal
from batchfuzz.targets import TargetError, load_target


def register(sub: Any) -> None:
    p = sub.add_parser("check", help="fuzz your own function against a contract",
                       description="Fuzz MODULE:FUNCTION (the contract's canonical signature) against CONTRACT's properties. "
                                   "The contracts, their domains and the target signatures: docs/contracts.md.")
    p.add_argument("contract", help="contract name (see `batchfuzz list`)")
    p.add_argument("target", help="MODULE:FUNCTION or path/to/file.py:FUNCTION")
    p.add_argument("--budget", type=parse_duration, default=30.0, help="wall-clock budget, e.g. 30, 90s, 5m (default 30s)")
    p.add_argument("--json", dest="json_path", metavar="PATH", help="write a JSON report here")
    p.add_argument("--seed", type=int, default=None, help="seed for a deterministic run")
    p.add_argument("--database", metavar="PATH", help="persist Hypothesis examples here (replayed by later runs)")
    p.add_argument("--property", action="append", default=None, help="only this property (repeatable)")
    p.add_argument("--domain", default=None, metavar="NAME",
                   help="input domain: spec (the widest) or engine (what an engine's callers produce); default: the one "
                        "the target declares with @batchfuzz.domain, else spec")
    p.set_defaults(func=run)


def _load(args: argparse.Namespace) -> tuple[registry.Contract, Any]:
    try:
        contract = registry.get(args.contract)
    except KeyError as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    try:
        target = load_target(args.target)
    except TargetError as exc:
        raise UsageError(str(exc)) from None
    return contract, target


def run(args: argparse.Namespace) -> int:
    contract, target = _load(args)
    props = contract.properties
    if args.domain is not None:
        try:
            contract.domain(args.domain)
        except KeyError as exc:
            raise UsageError(str(exc).strip("'\"")) from None
    if args.property:
        try:
            props = tuple(contract.property(n) for n in args.property)
        except KeyError as exc:
            raise UsageError(str(exc).strip("'\"")) from None
    profiles.register_profiles()
    base = settings(
        settings.get_profile("dev"), derandomize=False,
        database=DirectoryBasedExampleDatabase(args.database) if args.database else None,
    )
    seed = args.seed if args.seed is not None else int(time.time() * 1000) & 0xFFFFFFFF
    from batchfuzz.preconditions import declared_domain

    domain = args.domain or declared_domain(target) or "spec"
    print(f"batchfuzz check {contract.name} {args.target}: {len(props)} properties, domain {domain}, budget {args.budget:g}s, seed {seed}")
    start = time.monotonic()
    try:
        results = runner.hunt_for(contract, target, props, target_name=args.target, budget_s=args.budget,
                                  base_settings=base, seed=seed, domain=domain)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    seconds = time.monotonic() - start
    examples = sum(r.examples for r in results)
    failure = next((r.failure for r in results if r.failure is not None), None)
    scores: dict[str, int] = {}
    for r in results:
        for k, v in r.scores.items():
            scores[k] = scores.get(k, 0) + v
    for r in results:
        if r.failure:
            mark, note = "FAIL", ""
        elif r.examples:
            mark, note = "ok", ""
        else:
            mark, note = "-", "  (not run: the search stops at the first counterexample)"
        print(f"  {mark:4} {r.property:40} {r.examples:7d} examples{note}")
    if scores:
        print("  scores (reported, not failed on): " + ", ".join(f"{k}={v}" for k, v in sorted(scores.items())))
    report: dict[str, Any] = {
        "contract": contract.name, "target": args.target, "examples": examples, "seconds": round(seconds, 3),
        "seed": seed, "domain": domain, "scores": scores, "status": "passed", "property": None, "counterexample": None,
    }
    if failure is not None:
        module, _, func = args.target.rpartition(":")
        import_line = f"from {module} import {func}" if not module.endswith(".py") else f"# load {func} from {module}"
        repro = failure.reproduction(function_name=func.split(".")[-1], import_line=import_line)
        print(f"\nCOUNTEREXAMPLE: property {failure.property} ({failure.spec})")
        print(f"{failure.error_type}: {failure.message}\n")
        print("--- reproduction (copy-paste) ---")
        print(repro)
        also = runner.violated_properties(contract, target, failure.case)
        if also:
            print(f"--- the shrunk case violates: {', '.join(also)}")
        cmd = f"batchfuzz check {contract.name} {args.target} --property {failure.property} --seed {seed}"
        print(f"--- replay the search: {cmd}")
        report.update(
            status="counterexample", property=failure.property, message=failure.message, error_type=failure.error_type,
            counterexample={"args": {k: literal(v) for k, v in failure.case.args.items()},
                            "context": {k: literal(v) for k, v in failure.case.context.items()}},
            case=failure.to_json()["case"], reproduction=repro, violated_properties=also,
        )
    else:
        print(f"\npassed: no counterexample in {examples} examples ({seconds:.1f}s)")
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump(report, fh, indent=2)
    return 1 if failure is not None else 0
