"""A fix checked on the matrix: the cells of the files a patch touches, run on
the release and on a patched copy of its package, compared cell by cell.

The reproduction (``batchfuzz.upstream.check_patch``) shows the one failure
gone; this shows what else the patch changes among the cells batchfuzz binds
in the same files (``batchfuzz.matrix``, same seed and budget on both
trees)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchfuzz import matrix
from batchfuzz.engines import ReleaseSource
from batchfuzz.registry import CHOICE
from batchfuzz.upstream import apply_patch


@dataclass(frozen=True)
class CellChange:
    """One (function, contract) cell's verdict on the release and patched."""

    function: str
    contract: str
    before: str
    after: str

    @property
    def conclusive(self) -> bool:
        """Both runs reached a verdict: an ``incomplete`` (the budget ran
        out, as on a loaded machine) or ``error`` cell compares nothing."""
        return not {self.before.split()[0], self.after.split()[0]} & {"incomplete", "error"}

    @property
    def safe_after(self) -> bool:
        """No safety property fails on the patched tree: the cell passes, or
        fails a documented choice only (the matrix hunts safety first)."""
        return self.after == "pass" or self.after.endswith(f"[{CHOICE}]")

    @property
    def changed(self) -> bool:
        return self.conclusive and self.before != self.after

    def of(self, qualname: str, contract: str) -> bool:
        """Whether this is the cell of ``qualname`` under ``contract`` (a copy
        found by the split search, ``PATH:QUALNAME#...``, included)."""
        return self.contract == contract and self.function.split("#")[0].endswith(":" + qualname)


def _verdict(cell: matrix.Cell) -> str:
    """``pass``, or ``fail PROPERTY [LABEL]``, or the other verdicts as they are."""
    if not cell.property:
        return cell.verdict
    return f"{cell.verdict} {cell.property} [{cell.label}]" if cell.label else f"{cell.verdict} {cell.property}"


def _extract(source: ReleaseSource, root: Path) -> None:
    """The package's Python files, as the release has them, under ``root``."""
    for rel in source.paths(source.package + "/"):
        text = source.read(rel)
        if text is not None:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")


def _cells(engine: Any, tree: Path, touched: set[str], *, budget_s: float, max_examples: int, seed: int
           ) -> dict[tuple[str, str], matrix.Cell]:
    src = engine.ReleaseSource.from_dir(tree)
    cells = matrix.run_matrix(matrix.engine_releases(engine, [src], isolate=True), matrix.CellRun(
        budget_s=budget_s, timeout_s=10.0, seed=seed, max_examples=max_examples), keep=lambda b: b.function.split(":")[0] in touched)
    return {(c.function, c.contract): c for c in cells}


def cells_on_patch(engine: Any, source: ReleaseSource, diff: str, touched: list[str], *, budget_s: float = 20.0,
                   max_examples: int = 200, seed: int = 1) -> list[CellChange]:
    """Every matrix cell of the ``touched`` files, on ``source`` and on a copy
    with ``diff`` applied (``patch -p1``); ValueError when it does not apply."""
    with tempfile.TemporaryDirectory(prefix="batchfuzz-cells-") as tmp:
        base, patched = Path(tmp, "release"), Path(tmp, "patched")
        for root in (base, patched):
            _extract(source, root)
        apply_patch(diff, patched, source.ref)
        run = {"budget_s": budget_s, "max_examples": max_examples, "seed": seed}
        before = _cells(engine, base, set(touched), **run)  # type: ignore[arg-type]
        after = _cells(engine, patched, set(touched), **run)  # type: ignore[arg-type]
    missing = matrix.Cell("", "", "", "", "absent")
    return [CellChange(key[0], key[1], _verdict(before.get(key, missing)), _verdict(after.get(key, missing)))
            for key in dict.fromkeys([*before, *after])]
