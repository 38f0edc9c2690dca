"""Mutation score of ``impl/`` with mutmut 3 (docs/mutation.md).

mutmut 3 copies the sources into ``mutants/`` and names each mutant after the
module its file path spells (``src/batchfuzz/impl/x.py`` is
``batchfuzz.impl.x``). This repository installs ``impl/`` as
``batchfuzz.impl`` through setuptools' package-dir, so a path-derived name
would never match the imported module and every mutant would look untested.
This script therefore stages the installed layout, a plain ``src/batchfuzz/``
package with ``impl/``, ``reference/`` and ``strategies/`` inside it, under
``.mutmut/`` (git-ignored), copies the tests and the configuration there, and
runs ``mutmut run`` in it; the ``[tool.mutmut]`` section of pyproject.toml
is written for that staged tree. Then it counts the verdicts per file from
mutmut's own ``.meta`` files and prints them as the table of docs/mutation.md.

    python3 benchmarks/mutation.py                 # full run, all cores
    python3 benchmarks/mutation.py --jobs 16       # parallel children
    python3 benchmarks/mutation.py 'batchfuzz.impl.split_dummy_tokens_numpy.*'   # some mutants only
    python3 benchmarks/mutation.py --report        # the table of the last run, nothing re-run

Re-running keeps the verdicts of unchanged mutants (mutmut's cache in
``.mutmut/mutants``); ``--fresh`` starts over. The run needs the ``dev``
extra's ``mutmut`` (``pip install mutmut==3.8.1``, or offline
``pip install --no-index --find-links .mutmut-wheels mutmut==3.8.1``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / ".mutmut"
# The installed package layout (pyproject.toml [tool.setuptools.package-dir]).
PACKAGE_DIRS = {"batchfuzz": "batchfuzz", "batchfuzz/impl": "impl", "batchfuzz/reference": "reference",
                "batchfuzz/strategies": "strategies"}
COPIED = ("tests", "conftest.py", "pyproject.toml", "corpus")
# mutmut's exit-code verdicts (mutmut.stats.status_by_exit_code), folded into the columns of the table.
VERDICTS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
            24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", -11: "segfault", -9: "segfault",
            37: "type check", None: "not checked"}
COLUMNS = ("killed", "survived", "timeout", "no tests", "segfault", "suspicious", "not checked")


def stage(fresh: bool) -> None:
    """Build (or refresh) the staged tree: the sources as installed, plus tests and config.

    A refresh copies only files whose contents changed, so mutmut's cache of
    verdicts for untouched source files survives."""
    if fresh and STAGE.exists():
        shutil.rmtree(STAGE)
    for dest, src in PACKAGE_DIRS.items():
        _sync(ROOT / src, STAGE / "src" / dest, skip=set(PACKAGE_DIRS.values()) if src == "batchfuzz" else set())
    for name in COPIED:
        path = ROOT / name
        if path.is_dir():
            _sync(path, STAGE / name, skip=set())
        else:
            _copy_if_changed(path, STAGE / name)


def _sync(src: Path, dest: Path, skip: set[str]) -> None:
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if "__pycache__" in rel.parts or (rel.parts and rel.parts[0] in skip) or not path.is_file():
            continue
        _copy_if_changed(path, dest / rel)


def _copy_if_changed(src: Path, dest: Path) -> None:
    if dest.exists() and dest.read_bytes() == src.read_bytes():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest)
    # mutmut regenerates a mutated file whose source is newer; a changed source
    # also invalidates the staged copy under mutants/.
    stale = STAGE / "mutants" / dest.relative_to(STAGE)
    for p in (stale, stale.with_name(stale.name + ".meta")):
        if p.exists():
            p.unlink()


def run_mutmut(jobs: int, names: list[str], examples: int) -> int:
    """``mutmut run`` in the staged tree. One torch thread per child: the
    children fork from a process that has imported torch, and several
    OpenMP pools on a few cores only contend."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0", CI="", BATCHFUZZ_PROFILE="mutation",
               BATCHFUZZ_MUTATION_EXAMPLES=str(examples))
    # A checkout on the path would shadow the staged tree; other entries (an
    # offline machine's --target install of mutmut) stay.
    outside = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and not Path(p).resolve().is_relative_to(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(outside)
    if not outside:
        env.pop("PYTHONPATH")
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *names]
    return subprocess.call(cmd, cwd=STAGE, env=env)


def verdicts() -> dict[str, Counter[str]]:
    """Per source file (as in the repository, e.g. ``impl/x.py``), the count of each verdict."""
    out: dict[str, Counter[str]] = {}
    for meta in sorted((STAGE / "mutants" / "src" / "batchfuzz" / "impl").glob("*.py.meta")):
        data = json.loads(meta.read_text())
        counts: Counter[str] = Counter(VERDICTS.get(code, "suspicious") for code in data["exit_code_by_key"].values())
        if counts:
            out["impl/" + meta.name.removesuffix(".meta")] = counts
    return out


def survivors() -> list[str]:
    """The names of the checked mutants that no test killed (survived, no test reaches them, suspicious)."""
    names = []
    for meta in sorted((STAGE / "mutants" / "src" / "batchfuzz" / "impl").glob("*.py.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if VERDICTS.get(code, "suspicious") in ("survived", "no tests", "suspicious"):
                names.append(name)
    return sorted(names)


TRIAGE = Path(__file__).with_name("mutation_triage.toml")
# Verdicts a survivor can be given by hand (docs/mutation.md, "Triage"); the first two count as equivalent in the score.
TRIAGE_VERDICTS = ("equivalent", "cpu_equivalent", "gpu_only", "unreachable", "survives")


def triage() -> dict[str, tuple[str, str]]:
    """``mutant name -> (verdict, reason)`` from ``mutation_triage.toml`` (one table per verdict,
    keys are mutant names without the ``batchfuzz.impl.`` prefix)."""
    import tomllib

    data = tomllib.loads(TRIAGE.read_text()) if TRIAGE.exists() else {}
    out: dict[str, tuple[str, str]] = {}
    for verdict, entries in data.items():
        if verdict not in TRIAGE_VERDICTS:
            raise ValueError(f"{TRIAGE.name}: unknown verdict table [{verdict}]; use one of {TRIAGE_VERDICTS}")
        for short, why in entries.items():
            name = "batchfuzz.impl." + short
            if name in out:
                raise ValueError(f"{TRIAGE.name}: {short} is triaged twice ({out[name][0]} and {verdict})")
            out[name] = (verdict, str(why))
    return out


def table(counts: dict[str, Counter[str]]) -> str:
    """A markdown table: each verdict per file and the raw score, (killed + timeout) / checked
    (the triage of survivors is applied by :func:`score`, not here)."""
    head = "| file | mutants | " + " | ".join(COLUMNS) + " | raw score |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 3)]
    total: Counter[str] = Counter()
    for name, c in [*counts.items(), ("**impl/ total**", None)]:
        c = total if c is None else c
        if c is not total:
            total.update(c)
        n = sum(c.values())
        tried = n - c["not checked"]
        score = f"{100 * (c['killed'] + c['timeout']) / tried:.1f} %" if tried else "-"
        lines.append(f"| {name} | {n} | " + " | ".join(str(c[k]) for k in COLUMNS) + f" | {score} |")
    return "\n".join(lines)


def score(counts: dict[str, Counter[str]], left: list[str], verdicts_by_name: dict[str, tuple[str, str]]) -> str:
    """The score over the non-equivalent checked mutants, per file: killed / (checked - equivalent),
    where equivalent = triaged ``equivalent`` or ``cpu_equivalent``; a strict column counts
    ``cpu_equivalent`` as not killed too. Untriaged survivors count as not killed."""
    by_file: dict[str, Counter[str]] = {name: Counter() for name in counts}
    for name in left:
        module = name.removeprefix("batchfuzz.impl.").split(".")[0]
        by_file.setdefault(f"impl/{module}.py", Counter())[verdicts_by_name.get(name, ("untriaged", ""))[0]] += 1
    cols = ("equivalent", "cpu_equivalent", "gpu_only", "unreachable", "survives", "untriaged")
    lines = ["| file | checked | killed | " + " | ".join(cols) + " | score | strict score |",
             "|" + "---|" * (len(cols) + 5)]
    total_c: Counter[str] = Counter()
    total_t: Counter[str] = Counter()

    def pct(k: int, d: int) -> str:
        return f"{100 * k / d:.1f} %" if d else "-"

    for name, c in [*counts.items(), ("**impl/ total**", None)]:
        t = total_t if c is None else by_file.get(name, Counter())
        c = total_c if c is None else c
        if c is not total_c:
            total_c.update(c)
            total_t.update(t)
        checked = sum(c.values()) - c["not checked"]
        killed = c["killed"] + c["timeout"]
        eq, strict_eq = t["equivalent"] + t["cpu_equivalent"], t["equivalent"]
        lines.append(f"| {name} | {checked} | {killed} | " + " | ".join(str(t[k]) for k in cols)
                     + f" | {pct(killed, checked - eq)} | {pct(killed, checked - strict_eq)} |")
    return "\n".join(lines)


def triage_tables(left: list[str], verdicts_by_name: dict[str, tuple[str, str]]) -> str:
    """Markdown: one table per verdict of every triaged survivor of the last run, with its reason
    (the section "Every survivor" of docs/mutation.md is this output)."""
    parts = []
    for verdict in TRIAGE_VERDICTS:
        rows = [(name, why) for name, (v, why) in sorted(verdicts_by_name.items()) if v == verdict and name in left]
        if rows:
            parts.append(f"#### {verdict} ({len(rows)})\n\n| mutant | change, and why |\n|---|---|\n"
                         + "\n".join(f"| `{name.removeprefix('batchfuzz.impl.')}` | {why} |" for name, why in rows))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutant names or globs (mutmut's); default: every mutant")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel mutmut children (default: all cores)")
    parser.add_argument("--examples", type=int, default=100,
                        help="Hypothesis examples per property under the mutation profile (default 100); fewer is "
                             "faster (a survivor runs its tests in full) and may leave more survivors")
    parser.add_argument("--fresh", action="store_true", help="discard the staged tree and mutmut's cached verdicts")
    parser.add_argument("--report", action="store_true", help="only print the table and the survivors of the last run")
    parser.add_argument("--triage-tables", action="store_true",
                        help="only print the triaged survivors of the last run as markdown tables, one per verdict")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    if args.examples < 1:
        raise ValueError(f"--examples must be >= 1, got {args.examples}")
    if args.triage_tables:
        print(triage_tables(survivors(), triage()))
        return 0
    rc = 0
    if not args.report:
        start = time.monotonic()
        stage(args.fresh)
        rc = run_mutmut(args.jobs, args.names, args.examples)
        print(f"mutmut run: exit {rc}, {time.monotonic() - start:.0f} s wall with --jobs {args.jobs} --examples {args.examples}")
    counts, left, given = verdicts(), survivors(), triage()
    print(table(counts))
    print()
    print(score(counts, left, given))
    untriaged = [name for name in left if name not in given]
    print(f"{len(left)} not killed, {len(untriaged)} of them untriaged" + (":" if untriaged else ""))
    for name in untriaged:
        print("  " + name)
    stale = sorted(set(given) - set(left))
    if stale:
        print(f"{len(stale)} triaged mutants are no longer survivors (killed now, or renamed): remove them from {TRIAGE.name}")
        for name in stale:
            print("  " + name)
    return rc


if __name__ == "__main__":
    sys.exit(main())
