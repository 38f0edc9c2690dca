"""Shrink quality: does ``batchfuzz check`` shrink every known bug to its canonical form, whatever the seed?

For every catalogue variant (``batchfuzz/contracts/*_variants.py``) and every
seed of ``--seeds`` (default 0..9) this runs exactly what a user runs,
``batchfuzz check CONTRACT variant:NAME --seed S`` (in this process, with
``--no-isolation``, so runs do not wait on worker start-up; the search and
the shrinking are the same), reads the reported counterexample from its
``--json`` report and compares it with the variant's documented canonical
form by the catalogue's measure (``batchfuzz.catalogue.compare``: equal,
smaller = no larger in the contract's order ``Contract.size``, or larger).

It prints one row per variant: seeds found, seeds no larger than the
canonical form, seeds whose shrink the budget cut short, the slowest run's
seconds, and the worst seed (the largest reported case) with its size and
the case. Exit status 1 when any variant is not found or shrinks to a
larger case on some seed. ``--json PATH`` writes every run.

    PYTHONPATH=$PWD python3 benchmarks/shrink_quality.py [--contract NAME] [--seeds 0-9] [--budget 120] [--json PATH]
    PYTHONPATH=$PWD python3 benchmarks/shrink_quality.py --render A.json B.json   # the Markdown table of earlier runs
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from batchfuzz import cli, registry
from batchfuzz.catalogue import compact_args, compare
from batchfuzz.codec import decode_case


@dataclass
class Run:
    """One ``check --seed`` run of one variant."""

    seed: int
    status: str  # check's report status: counterexample, passed, incomplete
    verdict: str = ""  # equal, smaller, larger (catalogue.compare); "" when nothing was found
    size: tuple[int, ...] = ()
    case: str = ""
    property: str = ""
    seconds: float = 0.0
    complete: bool = True  # the shrink ran to its end (False: check's budget ended while shrinking)


@dataclass
class Row:
    contract: str
    variant: str
    runs: list[Run] = field(default_factory=list)

    @property
    def found(self) -> int:
        return sum(r.status == "counterexample" for r in self.runs)

    @property
    def no_larger(self) -> int:
        return sum(r.verdict in ("equal", "smaller") for r in self.runs)

    @property
    def ok(self) -> bool:
        return self.no_larger == len(self.runs)

    def worst(self) -> Run:
        """The run that did worst: not found first, then the largest case (the lowest seed among equals)."""
        return max(self.runs, key=lambda r: (r.status != "counterexample", r.verdict == "larger", r.size, -r.seed))


def markdown(rows: list[Row]) -> str:
    """The result table: per variant, seeds found and no larger than the canonical form, cut shrinks, the worst seed."""
    lines = ["| contract | variant | found | no larger | cut short | slowest s | worst seed | its verdict and case |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        w = r.worst()
        if w.status == "counterexample":
            what = f"{w.verdict}, {w.property}: `{w.case}`"
        elif w.status.startswith("refused"):
            what = "refused by check before any example (a usage error, exit 2)"
        else:
            what = f"not found ({w.status})"
        lines.append(f"| {r.contract} | {r.variant} | {r.found}/{len(r.runs)} | {r.no_larger}/{len(r.runs)} | "
                     f"{sum(not x.complete for x in r.runs)} | {max(x.seconds for x in r.runs):.1f} | {w.seed} | {what} |")
    return "\n".join(lines) + "\n"


def load(paths: list[str]) -> list[Row]:
    """Rows from the ``--json`` files of earlier runs, in the registry's order;
    a later file's row for a variant replaces an earlier one (a re-run)."""
    rows: dict[tuple[str, str], Row] = {}
    for path in paths:
        with open(path) as fh:
            for item in json.load(fh):
                runs = [Run(**{**x, "size": tuple(x["size"])}) for x in item["runs"]]
                rows[item["contract"], item["variant"]] = Row(item["contract"], item["variant"], runs)
    order = {(c.name, v.name): k for k, (c, v) in enumerate((c, v) for c in registry.contracts() for v in c.variants)}
    return sorted(rows.values(), key=lambda r: order.get((r.contract, r.variant), len(order)))


def write_json(path: str, rows: list[Row]) -> None:
    out: list[dict[str, Any]] = [{"contract": r.contract, "variant": r.variant,
                                  "runs": [{**vars(x), "size": list(x.size)} for x in r.runs]} for r in rows]
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)


def check_once(contract: registry.Contract, variant: registry.Variant, seed: int, budget_s: float, primary: bool = False) -> Run:
    """``batchfuzz check CONTRACT variant:NAME --seed SEED --no-isolation`` (``primary``: with
    ``--property`` the variant's primary property, the one its canonical form is documented for),
    its JSON report read back."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    argv = ["check", contract.name, f"variant:{variant.name}", "--seed", str(seed), "--budget", f"{budget_s:g}",
            "--no-isolation", "--json", path, *(["--property", variant.caught_by[0]] if primary else [])]
    start = time.perf_counter()
    try:
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = cli.main(argv)
        if code == 2:  # a usage error: check refuses the target before any example (no report)
            return Run(seed, "refused: " + err.getvalue().strip().splitlines()[-1], seconds=time.perf_counter() - start)
        with open(path) as fh:
            report = json.load(fh)
    finally:
        os.unlink(path)
    run = Run(seed, report["status"], seconds=time.perf_counter() - start)
    if code == 1 and report.get("case") is not None:
        case = decode_case(report["case"])
        run.verdict = compare(contract, case, variant.canonical)[0]
        run.size, run.case, run.property = contract.size(case), compact_args(case.args), report["property"]
        run.complete = bool(report.get("shrink_complete", True))
    return run


def parse_seeds(text: str) -> list[int]:
    """``0-9`` or ``0,3,5``: the seeds to run."""
    try:
        if "-" in text:
            low, high = (int(x) for x in text.split("-", 1))
            seeds = list(range(low, high + 1))
        else:
            seeds = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: expected LOW-HIGH or a comma-separated list of ints") from None
    if not seeds:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: names no seed")
    return seeds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--contract", action="append", default=None, help="only this contract (repeatable)")
    p.add_argument("--variant", action="append", default=None, help="only this variant (repeatable)")
    p.add_argument("--seeds", type=parse_seeds, default=list(range(10)), help="seeds, LOW-HIGH or a list (default 0-9)")
    p.add_argument("--budget", type=float, default=120.0,
                   help="check's --budget per run (default 120: on a loaded machine check's own 30 s can end a shrink "
                        "early, and this measures where shrinking stops, not how fast it gets there)")
    p.add_argument("--primary", action="store_true",
                   help="check only the variant's primary property (caught_by[0], the one its canonical form is documented "
                        "for) instead of every property")
    p.add_argument("--json", dest="json_path", help="write every run here")
    p.add_argument("--render", nargs="+", metavar="JSON",
                   help="run nothing: print the Markdown table of these --json files (--contract, --variant filter)")
    args = p.parse_args(argv)
    if args.render:
        loaded = [r for r in load(args.render) if (not args.contract or r.contract in args.contract)
                  and (not args.variant or r.variant in args.variant)]
        print(markdown(loaded), end="")
        return 0 if all(r.ok for r in loaded) else 1
    contracts = [registry.get(n) for n in args.contract] if args.contract else registry.contracts()
    rows: list[Row] = []
    started = time.perf_counter()
    print(f"{'contract':20} {'variant':34} {'found':>5} {'<=canon':>7} {'cut':>3} {'max s':>5}  worst seed: size, case")
    for contract in contracts:
        for variant in contract.variants:
            if args.variant and variant.name not in args.variant:
                continue
            row = Row(contract.name, variant.name, [check_once(contract, variant, s, args.budget, args.primary) for s in args.seeds])
            rows.append(row)
            w = row.worst()
            tail = (f"seed {w.seed}: {w.verdict} {w.size} {w.property}: {w.case}" if w.status == "counterexample"
                    else f"seed {w.seed}: not found ({w.status})")
            cut = sum(not r.complete for r in row.runs)
            slowest = max(r.seconds for r in row.runs)
            print(f"{contract.name:20} {variant.name:34} {row.found:5d} {row.no_larger:7d} {cut:3d} {slowest:5.1f}  {tail}", flush=True)
            if args.json_path:  # after every variant: an interrupted run keeps what it measured
                write_json(args.json_path, rows)
    bad = [r for r in rows if not r.ok]
    print(f"\n{len(rows) - len(bad)} of {len(rows)} variants shrink to no more than their canonical form on every one of "
          f"{len(args.seeds)} seeds ({time.perf_counter() - started:.0f}s)")
    for r in bad:
        print(f"  {r.contract}.{r.variant}: {r.no_larger} of {len(r.runs)} seeds")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
