"""Source access: a release's files as text, parsed, and the pieces cut out of them.

``SourceTree`` is what a release must offer (``read(relpath)``);
``SourceFile`` locates a function, method or class by qualified name
(``piece``), the statements of a method that do one job (``fragment``, the
selection itself in ``batchfuzz.binding.slicing``), and the top-level
statement that binds a name (``top_level``, for ``batchfuzz.binding.loader``).
"""

from __future__ import annotations

import ast
import linecache
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from batchfuzz.binding.errors import Absent, Unbindable
from batchfuzz.binding.slicing import Writes, import_binds, param_names, slice_statements


class SourceTree(Protocol):
    """Where a release's files come from: ``read`` returns a file's text, or
    None when the tree has no such file."""

    def read(self, relpath: str) -> str | None: ...


@dataclass(frozen=True)
class TextTree:
    """A source tree held in memory, ``{relpath: text}`` (tests, examples)."""

    files: Mapping[str, str]

    def read(self, relpath: str) -> str | None:
        return self.files.get(relpath)



@dataclass(frozen=True)
class Piece:
    """Code cut out of a source file, ready to be compiled by a ``Loader``.

    ``kind`` is "function", "method", "classmethod", "staticmethod", "class" or
    "fragment". ``nodes`` are the original AST nodes (line numbers of the
    file). ``params`` are the names the compiled callable takes, in order: a
    function's own parameters, or a fragment's given names. ``decorators``
    lists decorators found on a function and *not* applied (they wrap, as
    ``torch.inference_mode`` does; they do not compute the result).
    ``defaults`` maps the parameters a fragment reads but was not given to
    their default expressions in the method's signature.
    """

    path: str
    qualname: str
    kind: str
    nodes: tuple[ast.stmt, ...]
    params: tuple[str, ...] = ()
    decorators: tuple[str, ...] = ()
    defaults: tuple[tuple[str, ast.expr], ...] = ()
    note: str = ""

    @property
    def lines(self) -> tuple[int, int]:
        return (min(n.lineno for n in self.nodes), max(n.end_lineno or n.lineno for n in self.nodes))

    @property
    def label(self) -> str:
        first, last = self.lines
        return f"{self.path}:{self.qualname} ({self.kind}, lines {first}-{last}{'; ' + self.note if self.note else ''})"


class SourceFile:
    """One parsed Python file: locates pieces in it and knows its top level
    (definitions, literal constants, imports)."""

    def __init__(self, text: str, path: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        self.text = text
        self.path = path
        try:
            self.tree = ast.parse(text, filename=path)
        except SyntaxError as exc:
            raise Unbindable(f"{path} does not parse: {exc}") from exc
        # Tracebacks through cut-out code show the engine's own lines.
        self.filename = f"<source {path}>"
        linecache.cache[self.filename] = (len(text), None, text.splitlines(True), self.filename)

    # -- locating

    def _find(self, qualname: str) -> ast.AST:
        parts = qualname.split(".")
        body: list[ast.stmt] = self.tree.body
        node: ast.AST | None = None
        for k, part in enumerate(parts):
            found = [n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part]
            if not found:
                where = self.path if k == 0 else f"{self.path}:{'.'.join(parts[:k])}"
                raise Absent(f"{where} has no {'class or function' if k == 0 else 'attribute'} {part!r}")
            node = found[-1]  # a later definition wins, as at import time
            if k < len(parts) - 1:
                if not isinstance(node, ast.ClassDef):
                    raise Absent(f"{self.path}:{'.'.join(parts[:k + 1])} is a function, not a class with {parts[k + 1]!r}")
                body = node.body
        assert node is not None
        return node

    def has(self, qualname: str) -> bool:
        try:
            self._find(qualname)
        except Absent:
            return False
        return True

    def piece(self, qualname: str) -> Piece:
        """The function, method or class ``qualname`` ("f", "Class.method",
        "Class"). Raises Absent when the file has no such definition."""
        node = self._find(qualname)
        if isinstance(node, ast.ClassDef):
            return Piece(self.path, qualname, "class", (node,))
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        names = [ast.unparse(d) for d in node.decorator_list]
        in_class = "." in qualname
        kind = "function"
        if in_class:
            kind = "classmethod" if "classmethod" in names else "staticmethod" if "staticmethod" in names else "method"
        kept = tuple(n for n in names if n not in ("classmethod", "staticmethod"))
        return Piece(self.path, qualname, kind, (node,), params=param_names(node.args), decorators=kept)

    def fragment(self, qualname: str, pattern: Writes, given: Sequence[str]) -> Piece:
        """The statements of method ``qualname`` that ``pattern`` selects,
        with the statements before them that compute what they read.

        Selection: every simple statement that matches; if they sit in
        different blocks (branches of one ``if``), the compound statement of
        their lowest common block that holds them. The selected statements are
        lifted out of the blocks around them (the branch conditions and
        ``with`` contexts there are the binding's assumption). Dependencies:
        for every name a selected statement reads that is not in ``given``,
        the nearest earlier statements of the method that may write it (up to
        one that surely does), recursively; a dependency that rebinds a given
        local is refused (it would override the binding's value; a given
        method parameter may be rebound, as the method itself does). Method
        parameters read but not given take their default values.
        """
        node = self._find(qualname)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            raise Unbindable(f"{self.path}:{qualname} is a class, not a method")
        stmts, selected, used_params = slice_statements(node, pattern, given, where=f"{self.path}:{qualname}")
        note = f"{selected} statement(s) that {pattern}, {len(stmts) - selected} they depend on"
        return Piece(self.path, qualname, "fragment", stmts, params=tuple(given), defaults=used_params, note=note)

    # -- the top level, for resolving names

    def top_level(self, name: str) -> ast.stmt | None:
        """The last top-level statement that binds ``name``: a def, a class,
        an import, or an assignment (``if``/``try`` blocks are not looked into:
        what they bind depends on the running environment)."""
        found: ast.stmt | None = None
        for stmt in self.tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and stmt.name == name:
                found = stmt
            elif isinstance(stmt, ast.Import | ast.ImportFrom) and any(import_binds(a) == name for a in stmt.names):
                found = stmt
            elif isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                found = stmt
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name and stmt.value:
                found = stmt
        return found


def module_of(path: str) -> str:
    """The dotted module name of a file path inside a tree (``a/b/__init__.py`` is ``a.b``)."""
    mod = path[:-3] if path.endswith(".py") else path
    mod = mod.replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod
