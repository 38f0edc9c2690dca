"""Every module of batchfuzz is in a layer of the import-linter contract
(pyproject.toml, ``[tool.importlinter]``; ``python3 .ci/lint_imports.py``
checks the imports between the layers). A module in no layer is imported by
any other unchecked, so a new top-level module must be given its place."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Python 3.10 has no tomllib; import-linter brings tomli there.
tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")

ROOT = Path(__file__).resolve().parent.parent
# The repository's top-level folders installed as packages of batchfuzz (the package-dir mapping).
MAPPED = ("reference", "impl", "strategies")


def top_level_modules(root: Path = ROOT) -> set[str]:
    """batchfuzz's modules and packages one level down, as installed (``batchfuzz.x``)."""
    pkg = root / "batchfuzz"
    names = {p.stem for p in pkg.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    names |= {m for m in MAPPED if (root / m / "__init__.py").is_file()}
    return {f"batchfuzz.{n}" for n in names}


def layered(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The modules the layers contract names, top layer first."""
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "layers")["layers"]
    return [m.strip() for layer in layers for m in layer.replace("|", ":").split(":")]


def test_every_module_is_in_a_layer() -> None:
    names = layered()
    assert sorted(top_level_modules() - set(names)) == []
    assert len(names) == len(set(names)), "a module named in two layers"
    assert not set(names) - top_level_modules(), "a layer names a module that does not exist"


def test_a_module_in_no_layer_is_found(tmp_path: Path) -> None:
    (tmp_path / "batchfuzz").mkdir()
    (tmp_path / "batchfuzz" / "__init__.py").write_text("")
    (tmp_path / "batchfuzz" / "cli.py").write_text("")
    (tmp_path / "batchfuzz" / "stray.py").write_text("")
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "__init__.py").write_text("")
    assert top_level_modules(tmp_path) - {"batchfuzz.cli", "batchfuzz.reference"} == {"batchfuzz.stray"}
    assert "batchfuzz.stray" not in layered()
