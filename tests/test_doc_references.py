"""Text that points somewhere must point at something: every ``batchfuzz.*``
dotted name and every repository path cited in a docstring (of the
repository's Python files) or in ``docs/*.md`` and ``README.md`` exists.

Dotted names are resolved by importing the longest importable module prefix
and ``getattr`` on the rest; paths are relative to the repository root
(``docs/x.md``, ``batchfuzz/matrix.py``, ``tests/test_binding.py``),
and a Markdown link's target is relative to the page it is on. A citation
that is a template (``strategies/<name>.py``, ``impl/x.py``: a part named
``x`` is the placeholder) is not a path and is not checked; of a glob
(``batchfuzz/contracts/*.py``) the folder is checked.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import warnings
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Dotted names that are not Python names but look like them, each with what it is.
NOT_PYTHON_NAMES: dict[str, str] = {
    "batchfuzz.shards": "the JUnit suite of a merged report's missing shards (batchfuzz.fuzz.merge.SHARDS_SUITE)",
}

_DOTTED = re.compile(r"(?<![\w.])batchfuzz(?:\.[A-Za-z_]\w*)+")
_TOP = ("batchfuzz", "docs", "tests", "reference", "impl", "strategies", "benchmarks", "corpus", ".ci")
_PATH = re.compile(r"(?<![\w./<>*-])((?:" + "|".join(re.escape(t) for t in _TOP) + r")/[\w./-]*\w)(?![\w<>*])")
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def _tracked(*patterns: str) -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        return [ROOT / p for p in out.split()]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an sdist): what is on disk
        return sorted(p for pat in patterns for p in ROOT.glob(pat))


def _docstrings(path: Path) -> str:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
    return "\n".join(d for d in (ast.get_docstring(n, clean=False) for n in nodes) if d)


def _texts() -> dict[str, str]:
    """Where citations live: ``{repo-relative file: its cited text}``."""
    texts = {str(p.relative_to(ROOT)): _docstrings(p) for p in _tracked("*.py")}
    texts.update({str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in _tracked("docs/*.md", "README.md")})
    return texts


@cache
def _resolves(dotted: str) -> str:
    """"" when ``dotted`` names a module or an attribute of one, else why not."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        name = ".".join(parts[:k])
        if name.endswith("__main__"):
            return "names a __main__ module (not importable without running it)"
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not name.startswith(exc.name) and exc.name != name:
                return f"importing {name} fails: {exc}"
            continue
        for attr in parts[k:]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                if not hasattr(obj, attr):
                    return f"{name} has no {'.'.join(parts[k:])}"
                obj = getattr(obj, attr)
        return ""
    return "no such module"


def _placeholder(citation: str) -> bool:
    return "x" in re.split(r"[./]", citation.removesuffix(".py"))


def _citations() -> list[tuple[str, str, str]]:
    """Every citation that points nowhere: ``(file, citation, why)``."""
    broken = []
    for rel, text in sorted(_texts().items()):
        for dotted in sorted(d for d in set(_DOTTED.findall(text)) if not _placeholder(d) and d not in NOT_PYTHON_NAMES):
            why = _resolves(dotted)
            if why:
                broken.append((rel, dotted, why))
        paths = {p for p in _PATH.findall(text) if not _placeholder(p)}
        if rel.endswith(".md"):
            here = (ROOT / rel).parent
            for target in _LINK.findall(text):
                if "://" in target or target.startswith("mailto:"):
                    continue
                resolved = (here / target).resolve()
                if not resolved.exists():
                    shown = resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved
                    broken.append((rel, target, f"the link points at {shown}, which does not exist"))
        for path in sorted(paths):
            if not (ROOT / path).exists():
                broken.append((rel, path, "no such file or folder in the repository"))
    return broken


@pytest.fixture(scope="module")
def broken() -> list[tuple[str, str, str]]:
    return _citations()


def test_every_cited_name_and_path_exists(broken: list[tuple[str, str, str]]) -> None:
    assert not broken, "citations that point nowhere:\n" + "\n".join(f"  {f}: {c} ({why})" for f, c, why in broken)


def test_the_names_that_are_not_python_names_are_not_python_names() -> None:
    from batchfuzz.fuzz.merge import SHARDS_SUITE

    assert set(NOT_PYTHON_NAMES) == {SHARDS_SUITE}
    assert all(_resolves(n) for n in NOT_PYTHON_NAMES)


def test_the_checker_sees_a_broken_citation() -> None:
    assert _resolves("batchfuzz.matrix.run_matrix") == ""
    assert _resolves("batchfuzz.variants.microbatch") == "batchfuzz has no variants.microbatch"
    assert _resolves("batchfuzz.matrix.no_such_thing") == "batchfuzz.matrix has no no_such_thing"
    assert _PATH.findall("see docs/bindings.md, `strategies/<name>.py`, tests/test_bind.py::test_x and batchfuzz/contracts/*.py") \
        == ["docs/bindings.md", "tests/test_bind.py", "batchfuzz/contracts"]  # a glob: its folder is checked
