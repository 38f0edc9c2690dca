"""Time to find each catalogue variant: batchfuzz's own search, HypoFuzz and CrossHair, side by side.

For every variant of the selected contracts (default A, C and D), its
primary property (``caught_by[0]``, as the catalogue hunts it) is searched
for with three tools, each in a fresh process and capped at ``--cap``
seconds of search (docs/hypofuzz-crosshair.md has the figures):

- ``batchfuzz``: ``runner.hunt`` in process, under the catalogue's settings
  (``catalogue.catalogue_settings``: the derandomized ``ci`` stream) with the
  example count unbounded; the cap ends generation, a found case then gets
  up to ``SHRINK_S`` more to shrink;
- ``crosshair``: the same hunt with ``backend="crosshair"``
  (hypothesis-crosshair): only the backend differs;
- ``hypofuzz``: ``hypothesis fuzz --no-dashboard -n 1`` on the test
  ``batchfuzz.hypothesis_tests`` exposes for the variant
  (benchmarks/hypofuzz_target.py), with a fresh example database; the
  failure is read from that database (HypoFuzz's unshrunk or shrunk
  failures of the test's key) and its last progress report gives the
  inputs and seconds it had fuzzed; the process group is then stopped.

Seconds to find count from the start of the search (for HypoFuzz, from its
"using 1 process" line: test collection done), not the process's imports;
``wall`` is the whole process. The machine's load average is recorded with
every run.

    PYTHONPATH=$PWD python3 benchmarks/hypofuzz_crosshair.py [--contract A] [--tool hypofuzz] [--cap 30] [--json PATH] [--markdown PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("batchfuzz", "hypofuzz", "crosshair")
DEFAULT_CONTRACTS = ("A", "C", "D")
DEFAULT_CAP_S = 30.0
SHRINK_S = 30.0  # a found case's shrink, past the cap
START_S = 120.0  # HypoFuzz's start (collection in the hub, then in its worker), before the cap counts
POLL_S = 0.2
REPORT_WAIT_S = 5.0  # after HypoFuzz saved a failure: for the report that ends its search, saved in the background
TARGET_MODULE = "benchmarks/hypofuzz_target.py"


@dataclass
class Result:
    """One tool's search for one variant."""

    contract: str
    variant: str
    tool: str
    found: bool
    seconds_to_find: float | None  # from the start of the search to the first failing example
    examples_to_find: int | None  # examples (HypoFuzz: inputs) up to it
    examples: int  # every example run (HypoFuzz: inputs in its last report)
    wall_s: float  # the whole process
    case: str = ""  # the reported case (HypoFuzz: not read back)
    note: str = ""
    load: str = ""  # 1-minute load average before / after


def hypothesis_command() -> list[str]:
    """Hypothesis's command-line entry (``hypothesis``): the script beside
    this Python when there is one, else its ``main`` run by this Python (a
    virtual environment that takes Hypothesis from the system has no script)."""
    script = Path(sys.executable).parent / "hypothesis"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from hypothesis.extra.cli import main; main()"]


def hunt_one(contract: str, variant: str, tool: str, cap_s: float) -> dict[str, Any]:
    """The ``batchfuzz`` or ``crosshair`` search of one variant, here."""
    from hypothesis import settings

    from batchfuzz import catalogue, registry, runner

    c = registry.get(contract)
    v = c.variant(variant)
    rs = catalogue.catalogue_settings(max_examples=10**9)
    if tool == "crosshair":
        rs = settings(rs, backend="crosshair")
    start = time.time()
    with catalogue.pinned_source_constants(c):
        r = runner.hunt(c, v.fn, c.property(v.caught_by[0]),
                        runner.HuntOptions(rs, generate_until=start + cap_s, deadline=start + cap_s + SHRINK_S, labels=False),
                        target_name=f"variant:{variant}")
    f = r.failure
    case, note = "", "" if f is None or f.complete else "shrink cut short"
    if f is not None:
        try:
            case = catalogue.compact_args(f.case.args)
        except BaseException as exc:  # CrossHair's errors are BaseExceptions: a value used outside its path
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            note = f"the reported case holds a symbolic value: printing it raised {type(exc).__name__}: {str(exc)[:100]}"
    return {"found": f is not None, "examples_to_find": r.first_failure_example,
            "seconds_to_find": None if r.first_failure_time is None else r.first_failure_time - start,
            "examples": r.examples, "case": case, "note": note}


def _load() -> float:
    return os.getloadavg()[0]


def run_hunt(contract: str, variant: str, tool: str, cap_s: float) -> Result:
    """:func:`hunt_one` in a fresh process (``--one``)."""
    before, start = _load(), time.time()
    cmd = [sys.executable, __file__, "--one", tool, contract, variant, "--cap", str(cap_s)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=cap_s + SHRINK_S + START_S)
        lines = out.stdout.strip().splitlines()
        got = json.loads(lines[-1]) if out.returncode == 0 and lines else None
        note = "" if got else f"exit {out.returncode}: {out.stderr.strip()[-300:]}"
    except subprocess.TimeoutExpired:
        got, note = None, "the process ran past its cap (stopped)"
    wall = time.time() - start
    load = f"{before:.1f}/{_load():.1f}"
    if got is None:
        return Result(contract, variant, tool, False, None, None, 0, wall, note=note, load=load)
    return Result(contract, variant, tool, got["found"], got["seconds_to_find"], got["examples_to_find"], got["examples"],
                  wall, got["case"], got["note"], load)


def _database_key(contract: str, variant: str) -> bytes:
    """The example-database key HypoFuzz gives the variant's exposed test: the
    ``function_digest`` of its inner test, whose extra digest HypoFuzz's
    collection sets to the pytest node id (as Hypothesis's pytest plug-in does)."""
    from hypothesis.internal.reflection import function_digest

    from batchfuzz import registry
    from batchfuzz.hypothesis_tests import make_test

    c = registry.get(contract)
    inner = make_test(c, c.variant(variant).caught_by[0], f"variant:{variant}").hypothesis.inner_test  # type: ignore[attr-defined]
    inner._hypothesis_internal_add_digest = f"{TARGET_MODULE}::{inner.__name__}".encode()
    return function_digest(inner)


@dataclass
class _Progress:
    """What HypoFuzz's database says of one test: a failure saved, and the
    inputs and seconds of fuzzing of its last progress report from the
    search (not the shrink; None: no such report yet)."""

    failed: bool
    inputs: int
    fuzzed_s: float | None


def _hypofuzz_progress(db_dir: str, key: bytes) -> _Progress:
    from hypofuzz.database import FailureState, HypofuzzDatabase, Phase
    from hypothesis.database import DirectoryBasedExampleDatabase

    db = HypofuzzDatabase(DirectoryBasedExampleDatabase(db_dir))
    failed = any(any(True for _ in db.failures(state=s).fetch(key)) for s in (FailureState.UNSHRUNK, FailureState.SHRUNK))
    # A report is saved as a phase ends: the one that ends the search (its phase
    # generate or replay) counts the inputs up to the failure.
    searching = [r for r in db.reports.fetch(key) if r.phase in (Phase.GENERATE, Phase.REPLAY)]
    last = max(searching, key=lambda r: r.elapsed_time, default=None)
    return _Progress(failed, sum(last.status_counts.values()) if last else 0, last.elapsed_time if last else None)


def _shrinking(db_dir: str, key: bytes) -> bool:
    """Whether HypoFuzz has left its search for the shrink (a report of a later phase is saved)."""
    from hypofuzz.database import HypofuzzDatabase, Phase
    from hypothesis.database import DirectoryBasedExampleDatabase

    return any(r.phase in (Phase.SHRINK, Phase.FAILED) for r in HypofuzzDatabase(DirectoryBasedExampleDatabase(db_dir)).reports.fetch(key))


def _watch(proc: subprocess.Popen[bytes], db_dir: str, key: bytes, start: float, cap_s: float) -> _Progress:
    """Poll HypoFuzz's database until a failure is saved, the process ends,
    or the cap passes (counted from its first progress report: its worker
    has collected the test and started; START_S before that). After a
    failure, up to REPORT_WAIT_S more for the report that ends its search
    (saved as its shrink starts, in the background; HypoFuzz 25.11.1 saves
    no later one: its worker fails after the shrink, docs/hypofuzz-crosshair.md).
    What it says then."""
    fuzzing = None
    progress = _hypofuzz_progress(db_dir, key)
    while proc.poll() is None and not progress.failed:
        now = time.time()
        if fuzzing is None and progress.fuzzed_s is not None:
            fuzzing = now - progress.fuzzed_s
        if now > (fuzzing + cap_s if fuzzing is not None else start + START_S):
            break
        time.sleep(POLL_S)
        progress = _hypofuzz_progress(db_dir, key)
    found, seen = time.time(), progress.fuzzed_s
    while progress.failed and proc.poll() is None and not _shrinking(db_dir, key) and time.time() < found + REPORT_WAIT_S:
        time.sleep(POLL_S)
        if _hypofuzz_progress(db_dir, key).fuzzed_s != seen:
            break
    return _hypofuzz_progress(db_dir, key)


def run_hypofuzz(contract: str, variant: str, cap_s: float) -> Result:
    """HypoFuzz on the variant's exposed test until its database holds a failure, or the cap."""
    before, start = _load(), time.time()
    key = _database_key(contract, variant)
    with tempfile.TemporaryDirectory(prefix="batchfuzz-hypofuzz-") as db_dir, tempfile.TemporaryFile() as log:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "BATCHFUZZ_BENCH_VARIANT": f"{contract}:{variant}",
               "BATCHFUZZ_PROFILE": "dev", "BATCHFUZZ_DATABASE": db_dir}
        cmd = [*hypothesis_command(), "fuzz", "--no-dashboard", "-n", "1", "--", "-q", "-p", "no:cacheprovider", TARGET_MODULE]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        progress = _watch(proc, db_dir, key, start, cap_s)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        log.seek(0)
        text = log.read().decode(errors="replace")
    wall = time.time() - start
    note = f"{progress.inputs} inputs in {progress.fuzzed_s or 0:.2f} s of fuzzing (its report as the search ended)"
    if progress.fuzzed_s is None:
        note = "never started fuzzing: " + text.strip()[-300:]
    return Result(contract, variant, "hypofuzz", progress.failed, progress.fuzzed_s if progress.failed else None,
                  progress.inputs if progress.failed else None, progress.inputs, wall, note=note,
                  load=f"{before:.1f}/{_load():.1f}")


def _cell(r: Result) -> str:
    if not r.found:
        return f"not found ({r.examples} ex.)" + (f": {r.note}" if r.note and not r.note.startswith("its last") else "")
    return f"{r.seconds_to_find:.2f} s, {r.examples_to_find} ex."


def markdown(results: list[Result], tools: tuple[str, ...], cap_s: float) -> str:
    """One table row per variant: each tool's seconds and examples to find (or not found within the cap)."""
    rows: dict[tuple[str, str], dict[str, Result]] = {}
    for r in results:
        rows.setdefault((r.contract, r.variant), {})[r.tool] = r
    out = [f"| contract | variant | {' | '.join(tools)} |", "|---|---|" + "---|" * len(tools)]
    for (contract, variant), by_tool in rows.items():
        out.append(f"| {contract} | `{variant}` | " + " | ".join(_cell(by_tool[t]) if t in by_tool else "" for t in tools) + " |")
    found = {t: sum(r.found for r in results if r.tool == t) for t in tools}
    out.append("")
    out.append(f"Found within the {cap_s:g} s cap: " + ", ".join(f"{t} {found[t]}/{len(rows)}" for t in tools) + ".")
    return "\n".join(out)


def parser() -> argparse.ArgumentParser:
    """The command line (tests/test_hypothesis_tests.py parses the one docs/hypofuzz-crosshair.md shows)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--contract", action="append", help="a contract name or section letter (repeatable; default A, C, D)")
    p.add_argument("--variant", action="append", help="only these variants (repeatable)")
    p.add_argument("--tool", action="append", choices=TOOLS, help="only these tools (repeatable; default all three)")
    p.add_argument("--cap", type=float, default=DEFAULT_CAP_S, help=f"seconds of search per variant per tool (default {DEFAULT_CAP_S:g})")
    p.add_argument("--json", help="write every run here")
    p.add_argument("--markdown", help="write the table here")
    p.add_argument("--one", nargs=3, metavar=("TOOL", "CONTRACT", "VARIANT"), help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    if a.cap <= 0:
        p.error(f"--cap must be a positive number of seconds, got {a.cap:g}")
    if a.one:
        print(json.dumps(hunt_one(a.one[1], a.one[2], a.one[0], a.cap)))
        return 0
    from batchfuzz import registry

    try:
        contracts = registry.select(a.contract or DEFAULT_CONTRACTS)
    except registry.UnknownName as exc:
        p.error(f"--contract: {exc}")
    items = [(c, v) for c in contracts for v in c.variants if not a.variant or v.name in a.variant]
    unknown = sorted(set(a.variant or ()) - {v.name for _, v in items})
    if unknown:
        p.error(f"--variant {', '.join(unknown)}: no such variant of {', '.join(c.name for c in contracts)}")
    tools = tuple(a.tool or TOOLS)
    results = []
    for c, v in items:
        for tool in tools:
            r = run_hypofuzz(c.name, v.name, a.cap) if tool == "hypofuzz" else run_hunt(c.name, v.name, tool, a.cap)
            print(f"{c.name} {v.name} {tool}: {_cell(r)} (wall {r.wall_s:.1f} s, load {r.load}) {r.note}", flush=True)
            results.append(r)
    table = markdown(results, tools, a.cap)
    print(table)
    if a.json:
        from importlib.metadata import PackageNotFoundError, version

        def _version(dist: str) -> str | None:
            try:
                return version(dist)
            except PackageNotFoundError:
                return None

        versions = {d: _version(d) for d in ("hypothesis", "hypofuzz", "hypothesis-crosshair", "crosshair-tool")}
        Path(a.json).write_text(json.dumps({"cap_s": a.cap, "cpus": os.cpu_count(), "versions": versions,
                                            "runs": [asdict(r) for r in results]}, indent=1))
    if a.markdown:
        Path(a.markdown).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
