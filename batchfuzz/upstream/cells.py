"""A fix checked on the matrix: every property of every cell of the files a
patch touches, run on the release and on a patched copy of its package and
compared property by property; and the stored failing case of every finding
in those files, replayed on both trees.

docs/upstream-reports.md ("Checking a fix") says how to read the outcomes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import Phase, settings

from batchfuzz import matrix, profiles, registry, runner
from batchfuzz.codec import decode_case
from batchfuzz.engines import Bound, ReleaseSource
from batchfuzz.execution import LoadTimeout, executor_for
from batchfuzz.targets import parse
from batchfuzz.upstream import apply_patch, engine_module
from batchfuzz.upstream.findings import Finding

_TIMEOUT_S = 10.0  # one call of the engine's function


@dataclass(frozen=True)
class Verdict:
    """One property's outcome on one tree: ``pass``, ``fail`` (with the
    failure's kind and error type), ``incomplete`` (no example ran),
    ``error`` (the harness could not run it) or the cell's ``absent`` / ``unbindable``."""

    status: str
    kind: str = ""  # fail: e.g. "violation PropertyViolation", "exception IndexError", "crash"
    detail: str = ""  # the failure's first line, or why it did not run

    def __str__(self) -> str:
        return f"{self.status} ({self.kind})" if self.kind else self.status


@dataclass(frozen=True)
class PropertyChange:
    """One property of one (function, contract) cell, on the release and patched."""

    function: str
    contract: str
    prop: str
    label: str
    before: Verdict
    after: Verdict

    @property
    def outcome(self) -> str:
        """``fixed``, ``same``, ``unchanged (already failing)`` (both trees
        fail it with the same kind of failure), ``new failure``, ``changed``
        (another kind of failure) or ``not compared`` (a tree reached no verdict)."""
        b, a = self.before, self.after
        if not {b.status, a.status} <= {"pass", "fail"}:
            return "same" if b == a else "not compared"
        if b.status == a.status:
            return "same" if a.status == "pass" else "unchanged (already failing)" if b.kind == a.kind else "changed"
        return "fixed" if a.status == "pass" else "new failure"

    @property
    def changed(self) -> bool:
        return self.outcome in ("new failure", "changed")

    def of(self, qualname: str, contract: str) -> bool:
        """Whether this is a property of ``qualname``'s cell under ``contract``
        (a copy found by the split search, ``PATH:QUALNAME#...``, included)."""
        return self.contract == contract and self.function.split("#")[0].endswith(":" + qualname)


@dataclass(frozen=True)
class Replay:
    """A finding's stored failing case, checked under its property on both trees."""

    finding: str
    prop: str
    before: Verdict
    after: Verdict


@dataclass(frozen=True)
class PatchCells:
    """What ``cells_on_patch`` found."""

    changes: list[PropertyChange]
    replays: list[Replay]


def touched_findings(touched: list[str], findings: tuple[Finding, ...]) -> list[Finding]:
    """The ``findings`` in a file the patch changes (their function's file, or
    one their reproduction reads): a fix may change a helper the function
    calls (SGLang's does), so every finding of a touched file is replayed."""
    return [f for f in findings if {f.path, *f.files} & set(touched)]


def _verdict(r: runner.HuntResult) -> Verdict:
    if r.failure is not None:
        kind = r.failure.kind()
        return Verdict("fail", kind if kind != "violation" and kind != "exception" else f"{kind} {r.failure.error_type}",
                       (r.failure.message.splitlines() or [""])[0][:200])
    return Verdict("pass") if r.examples else Verdict("incomplete", detail="no example ran within the budget")


def _properties(bound: Bound, *, budget_s: float, max_examples: int, seed: int) -> dict[str, Verdict]:
    """Every property of ``bound``'s cell, ``max_examples`` each, not
    stopping at a failure (the matrix stops at its first), within
    ``budget_s`` a property (a ceiling: the counts decide)."""
    contract = registry.get(bound.contract)
    if bound.status != "bound":
        return {p.name: Verdict(bound.status, detail=bound.reason) for p in contract.properties}
    base = settings(settings.get_profile("dev"), derandomize=False, database=None)
    target = f"engine:{bound.ref}"
    try:
        with executor_for(contract, parse(target), isolate=True) as executor:
            results = runner.hunt_in_rounds(
                contract, executor, contract.properties,
                runner.HuntOptions(base, seed=seed, domain="engine", example_timeout_s=_TIMEOUT_S),
                runner.Rounds(budget_s=budget_s * len(contract.properties), round_examples=max_examples, max_rounds=1,
                              stop_on_failure=False),
                target_name=target)
    except LoadTimeout as exc:
        return {p.name: Verdict("incomplete", detail=f"the cell did not start: {exc}") for p in contract.properties}
    except Exception as exc:  # the harness could not run the cell: said, never a pass
        return {p.name: Verdict("error", detail=f"{type(exc).__name__}: {exc}") for p in contract.properties}
    return {r.property: _verdict(r) for r in results}


def finding_ref(f: Finding, tree: Path) -> str:
    """The ``Bound.ref`` of ``f``'s own function in the package at ``tree``
    (``Finding.row`` names a split-search row's copy)."""
    source = engine_module(f).ReleaseSource.from_dir(tree)
    return f"{f.package}::{source.ref}::{f.path}:{f.qualname}{f.row}::{f.contract}"


def replay(f: Finding, ref: str) -> Verdict:
    """``f``'s stored case (``Finding.counterexample``) under its property, on
    the binding ``ref``; no search, no shrinking."""
    contract = registry.get(f.contract)
    target = f"engine:{ref}"
    options = runner.HuntOptions(settings(phases=[Phase.explicit], database=None, deadline=None), domain="engine",
                                 example_timeout_s=_TIMEOUT_S, extra_examples=(decode_case(f.counterexample),),
                                 reduce=False)
    try:
        with executor_for(contract, parse(target), isolate=True) as executor:
            r = runner.hunt(contract, executor, contract.property(f.prop), options, target_name=target)
    except Exception as exc:  # the harness could not run it: said, never a pass
        return Verdict("error", detail=f"{type(exc).__name__}: {exc}")
    return _verdict(r)


def _replay_among(f: Finding, bounds: list[Bound]) -> Verdict:
    """``replay`` on ``f``'s cell among one tree's bindings, or why it has none."""
    bound = next((b for b in bounds if b.contract == f.contract and b.function.split("#")[0] == f"{f.path}:{f.qualname}"),
                 None)
    if bound is None or bound.status != "bound":
        return Verdict("absent", detail="no binding") if bound is None else Verdict(bound.status, detail=bound.reason)
    return replay(f, bound.ref)


def _extract(source: ReleaseSource, root: Path) -> None:
    """The package's Python files, as the release has them, under ``root``."""
    for rel in source.paths(source.package + "/"):
        text = source.read(rel)
        if text is not None:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")


def trees(source: ReleaseSource, diff: str, touched: list[str], tmp: Path) -> tuple[Path, Path]:
    """The release's package under ``tmp/release``, and a copy under
    ``tmp/patched`` with ``diff`` applied; ValueError when it does not apply.
    The copy is hard links but for the touched files, copied before patching."""
    base, patched = tmp / "release", tmp / "patched"
    _extract(source, base)
    shutil.copytree(base, patched, copy_function=os.link)
    for rel in touched:
        if (patched / rel).exists():
            (patched / rel).unlink()
            shutil.copyfile(base / rel, patched / rel)
    apply_patch(diff, patched, source.ref)
    return base, patched


def _bindings(engine: Any, tree: Path, touched: set[str]) -> list[Bound]:
    """The matrix's bindings of the ``touched`` files of the package at ``tree``."""
    releases = matrix.engine_releases(engine, [engine.ReleaseSource.from_dir(tree)], isolate=True)
    return [b for _name, bindings in releases for b in bindings() if b.function.split(":")[0] in touched]


def _cells(bounds: list[Bound], *, budget_s: float, max_examples: int, seed: int) -> dict[tuple[str, str, str], Verdict]:
    return {(b.function, b.contract, prop): v for b in bounds
            for prop, v in _properties(b, budget_s=budget_s, max_examples=max_examples, seed=seed).items()}


def cells_on_patch(engine: Any, source: ReleaseSource, diff: str, touched: list[str], *, budget_s: float = 20.0,
                   max_examples: int = 200, seed: int = 1, findings: tuple[Finding, ...] = ()) -> PatchCells:
    """Every property of every matrix cell of the ``touched`` files, and the
    stored case of each of ``findings`` in those files, on ``source`` and
    on a copy with ``diff`` applied (``patch -p1``); ValueError when it does not apply."""
    profiles.register_profiles()
    replayed = [f for f in touched_findings(touched, findings) if f.counterexample is not None]
    with tempfile.TemporaryDirectory(prefix="batchfuzz-cells-") as tmp:
        bound = [_bindings(engine, root, set(touched)) for root in trees(source, diff, touched, Path(tmp))]
        before, after = (_cells(bounds, budget_s=budget_s, max_examples=max_examples, seed=seed) for bounds in bound)
        replays = [Replay(f.key, f.prop, _replay_among(f, bound[0]), _replay_among(f, bound[1])) for f in replayed]
    missing = Verdict("absent")
    changes = [PropertyChange(fn, c, p, registry.get(c).property_label(p), before.get(k, missing), after.get(k, missing))
               for k in dict.fromkeys([*before, *after]) for fn, c, p in [k]]
    return PatchCells(changes, replays)
