"""Bind an engine's own code to a batchfuzz contract, from its source text.

An engine's batch-layout logic lives in methods of heavy classes (a model
runner, an input batch) whose modules import GPU kernels, distributed
runtimes and configuration systems. To fuzz that logic on a machine that has
none of them, this module cuts the code out of the source *text* with
``ast`` and runs it unchanged in a namespace of small stand-ins:

- ``SourceFile.piece(qualname)`` cuts out a function, a method
  (``Class.method``; classmethods and staticmethods too) or a class;
  ``SourceFile.fragment(qualname, Writes(...), given=...)`` cuts out the
  statements of a method that do one job (those that write a target, with the
  earlier statements of the method they depend on);
- ``Scope.load(piece)`` resolves every global name the cut-out reads (a
  binding's stand-in, a definition of the same source tree, an allowed real
  module such as numpy, or a builtin) and returns the callable; a name none
  of these provides makes the piece ``Unbindable``, with the names and lines
  in the reason; a function the source does not have raises ``Absent``;
- stand-ins for the engine objects a method reads (``Stub``, ``Recorder``,
  ``Record``, ``cpu_gpu_buffer``, ``block_table``, ``unreachable``) and
  converters from engine results (``to_numpy``, ``slice_pairs``,
  ``tuple_part``);
- ``probe`` dry-runs an adapted target once, so that a changed signature or a
  missing attribute surfaces at bind time as ``Unbindable`` rather than as a
  fuzzing failure.

Nothing here knows a particular engine; docs/bindings.md binds a method of a
small engine-shaped class step by step.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import copy
import itertools
import linecache
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MethodType, ModuleType, SimpleNamespace
from typing import Any, Protocol, TypeVar

import numpy as np

# ---------------------------------------------------------------- outcomes


class Absent(LookupError):
    """The source does not have the function, class or file asked for."""


class Unbindable(Exception):
    """The source has it, but the binding cannot run it as it stands (a name
    no one provides, a changed signature, a fragment that is not there)."""


class StandInReached(RuntimeError):
    """Code ran into a stand-in that its binding declared unreachable."""


# ---------------------------------------------------------------- source access


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


_COMPILE_FLAGS = __import__("__future__").annotations.compiler_flag  # annotations stay unevaluated strings


@dataclass(frozen=True)
class Piece:
    """Code cut out of a source file, ready to be compiled in a scope.

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
        return Piece(self.path, qualname, kind, (node,), params=_param_names(node.args), decorators=kept)

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
        located = list(_walk_statements(node.body, ()))
        hits = [path for path, stmt in located if not _is_compound(stmt) and pattern.matches(stmt)]
        if not hits:
            raise Unbindable(f"{self.path}:{qualname} has no statement that {pattern} (the code changed)")
        selected = _select(hits)
        by_path = dict(located)
        chosen: dict[Path, ast.stmt] = {p: by_path[p] for p in selected}
        given_set = set(given)
        params = set(_param_names(node.args))
        work = list(chosen.items())
        while work:
            path, stmt = work.pop()
            for name in _reads_before_writes([stmt]):
                if name in given_set:
                    continue
                for prev_path, prev in _preceding(by_path, path):
                    if name not in _stores(prev):
                        continue
                    if prev_path not in chosen:
                        chosen[prev_path] = prev
                        work.append((prev_path, prev))
                    if name in _defines([prev]):
                        break
        for p, stmt in chosen.items():
            clash = sorted(_stores(stmt) & (given_set - params)) if p not in selected else []
            if clash:
                raise Unbindable(f"{self.path}:{qualname}: the fragment that {pattern} depends on line {stmt.lineno}, which "
                                 f"rebinds given name(s) {', '.join(clash)} (give what that line computes from instead)")
        stmts = [chosen[p] for p in sorted(chosen, key=lambda p: (chosen[p].lineno, chosen[p].col_offset))]
        for stmt in stmts:
            for sub in _walk_scope(stmt):
                if isinstance(sub, ast.Return):
                    raise Unbindable(f"{self.path}:{qualname}: the fragment that {pattern} holds a return at line {sub.lineno}")
        reads = _reads_before_writes(stmts)
        defaults = dict(_param_defaults(node.args))
        used_params = tuple((n, defaults[n]) for n in reads if n in params and n not in given_set and n in defaults)
        missing_params = [n for n in reads if n in params and n not in given_set and n not in defaults]
        if missing_params:
            raise Unbindable(f"{self.path}:{qualname}: the fragment reads parameter(s) {', '.join(missing_params)}, "
                             "which have no default and which the binding does not give")
        note = f"{len(selected)} statement(s) that {pattern}, {len(stmts) - len(selected)} they depend on"
        return Piece(self.path, qualname, "fragment", tuple(stmts), params=tuple(given), defaults=used_params, note=note)

    # -- the top level, for resolving names

    def top_level(self, name: str) -> ast.stmt | None:
        """The last top-level statement that binds ``name``: a def, a class,
        an import, or an assignment (``if``/``try`` blocks are not looked into:
        what they bind depends on the running environment)."""
        found: ast.stmt | None = None
        for stmt in self.tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and stmt.name == name:
                found = stmt
            elif isinstance(stmt, ast.Import | ast.ImportFrom) and any(_import_binds(a) == name for a in stmt.names):
                found = stmt
            elif isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                found = stmt
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name and stmt.value:
                found = stmt
        return found


def _module_of(path: str) -> str:
    mod = path[:-3] if path.endswith(".py") else path
    mod = mod.replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def _import_binds(alias: ast.alias) -> str:
    return alias.asname or alias.name.split(".")[0]


def _param_names(args: ast.arguments) -> tuple[str, ...]:
    names = [a.arg for a in (*args.posonlyargs, *args.args)]
    if args.vararg:
        names.append(args.vararg.arg)
    names += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        names.append(args.kwarg.arg)
    return tuple(names)


def _param_defaults(args: ast.arguments) -> Iterator[tuple[str, ast.expr]]:
    positional = [*args.posonlyargs, *args.args]
    for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True):
        yield a.arg, d
    for a, kd in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if kd is not None:
            yield a.arg, kd


# ---------------------------------------------------------------- fragment patterns


@dataclass(frozen=True)
class Writes:
    """Selects the statements that write ``target``, a dotted name such as
    ``"num_scheduled_tokens_list"`` or ``"self.query_start_loc"``.

    A simple statement writes it when it assigns (``=``, ``+=``, annotated) to
    the target or to a subscript or attribute of it, when it is a bare call of
    a method of it (``target[...].fill(x)``, ``target.copy_to_gpu()``), or when
    a call in it passes it (or a part of it) as ``out=``. Reading it does not
    count.
    """

    target: str

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or not all(p.isidentifier() for p in self.target.split(".")):
            raise ValueError(f"target must be a dotted name like 'self.buffer', got {self.target!r}")

    def __str__(self) -> str:
        return f"writes {self.target}"

    def _rooted(self, expr: ast.expr) -> bool:
        """``expr`` is the target, or a subscript/attribute chain on it."""
        want = self.target.split(".")
        while True:
            if isinstance(expr, ast.Subscript):
                expr = expr.value
                continue
            chain = _dotted(expr)
            if chain is not None and chain[: len(want)] == want:
                return True
            if isinstance(expr, ast.Attribute):
                expr = expr.value
                continue
            return False

    def matches(self, stmt: ast.stmt) -> bool:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets = [t for tgt in stmt.targets for t in _unpack(tgt)]
        elif isinstance(stmt, ast.AugAssign | ast.AnnAssign):
            targets = [stmt.target]
        if any(self._rooted(t) for t in targets):
            return True
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute):
            if self._rooted(stmt.value.func.value):
                return True
        for sub in _walk_scope(stmt):
            if isinstance(sub, ast.Call) and any(k.arg == "out" and self._rooted(k.value) for k in sub.keywords):
                return True
        return False


def _dotted(expr: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        return [expr.id, *reversed(parts)]
    return None


def _unpack(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        return [t for e in target.elts for t in _unpack(e)]
    if isinstance(target, ast.Starred):
        return _unpack(target.value)
    return [target]


# ---------------------------------------------------------------- statement paths and data flow

_Node = TypeVar("_Node", bound=ast.AST)

Path = tuple[tuple[str, int], ...]
"""Where a statement sits in a function: from the function body inwards, one
``(block, index)`` per level; ``block`` is "body", "orelse", "finalbody",
"handlers.K" or "cases.K" of the statement one level up."""

_COMPOUND: tuple[type[ast.stmt], ...] = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match,
                                          *((ast.TryStar,) if hasattr(ast, "TryStar") else ()))


def _is_compound(stmt: ast.stmt) -> bool:
    return isinstance(stmt, _COMPOUND)


def _blocks(stmt: ast.stmt) -> Iterator[tuple[str, list[ast.stmt]]]:
    """The statement lists directly inside a compound statement."""
    if not _is_compound(stmt):
        return
    for f in ("body", "orelse", "finalbody"):
        block = getattr(stmt, f, None)
        if block:
            yield f, block
    for k, handler in enumerate(getattr(stmt, "handlers", None) or ()):
        yield f"handlers.{k}", handler.body
    for k, case in enumerate(getattr(stmt, "cases", None) or ()):
        yield f"cases.{k}", case.body


def _walk_statements(body: list[ast.stmt], prefix: Path = (), block: str = "body") -> Iterator[tuple[Path, ast.stmt]]:
    """Every statement of a function body with its path, in source order, not
    entering nested definitions."""
    for i, stmt in enumerate(body):
        path = (*prefix, (block, i))
        yield path, stmt
        for f, inner in _blocks(stmt):
            yield from _walk_statements(inner, path, f)


def _select(hits: list[Path]) -> list[Path]:
    """The statements of the lowest block that holds every hit: the hits
    themselves when they share a block, else the compound statement whose
    different blocks (branches) they sit in."""
    k = 0
    shortest = min(len(h) for h in hits)
    while k < shortest - 1 and all(h[k] == hits[0][k] for h in hits):
        k += 1
    if all(h[k][0] == hits[0][k][0] and h[:k] == hits[0][:k] for h in hits):
        return sorted({h[: k + 1] for h in hits})
    return [hits[0][:k]]


def _preceding(located: Mapping[Path, ast.stmt], path: Path) -> Iterator[tuple[Path, ast.stmt]]:
    """Statements before ``path`` in its block, nearest first, then those
    before its enclosing statement in the block around it, out to the body."""
    p = path
    while p:
        parent, (block, index) = p[:-1], p[-1]
        for i in range(index - 1, -1, -1):
            q = (*parent, (block, i))
            yield q, located[q]
        p = parent


def _walk_scope(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` that does not enter nested functions, lambdas, classes or
    comprehensions (their names are their own)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef | ast.comprehension):
                continue
            if isinstance(child, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
                continue
            todo.append(child)


def _stores(stmt: ast.stmt) -> set[str]:
    """Names a statement may bind (in its own scope)."""
    out: set[str] = set()
    for n in _walk_scope(stmt):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del):
            out.add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n is not stmt:
            out.add(n.name)
        elif isinstance(n, ast.alias):
            out.add(_import_binds(n))
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
        elif isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name):
            out.add(n.target.id)
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        out.add(stmt.name)
    return out


class _Flow:
    """Names read before they are surely bound, over a statement list in order."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def read(self, name: str, bound: set[str]) -> None:
        if name not in bound and name not in self.reads:
            self.reads.append(name)

    def expr(self, node: ast.AST | None, bound: set[str]) -> None:
        if node is None:
            return
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                self.read(node.id, bound)
            return
        if isinstance(node, ast.Lambda | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            for name in _scope_free(node):
                self.read(name, bound)
            return
        if isinstance(node, ast.NamedExpr):
            self.expr(node.value, bound)
            bound.add(node.target.id)
            return
        for child in ast.iter_child_nodes(node):
            self.expr(child, bound)

    def target(self, node: ast.expr, bound: set[str]) -> None:
        for t in _unpack(node):
            if isinstance(t, ast.Name):
                bound.add(t.id)
            else:
                self.expr(t, bound)  # a[i] = ...: a and i are read

    def block(self, stmts: Iterable[ast.stmt], bound: set[str]) -> set[str]:
        for s in stmts:
            self.stmt(s, bound)
        return bound

    def stmt(self, s: ast.stmt, bound: set[str]) -> None:
        if isinstance(s, ast.Assign):
            self.expr(s.value, bound)
            for t in s.targets:
                self.target(t, bound)
        elif isinstance(s, ast.AugAssign):
            self.expr(s.target if not isinstance(s.target, ast.Name) else ast.Name(s.target.id, ast.Load()), bound)
            self.expr(s.value, bound)
            self.target(s.target, bound)
        elif isinstance(s, ast.AnnAssign):
            self.expr(s.value, bound)
            if s.value is not None:
                self.target(s.target, bound)
        elif isinstance(s, ast.For | ast.AsyncFor):
            self.expr(s.iter, bound)
            inner = set(bound)
            self.target(s.target, inner)
            self.block(s.body, inner)
            self.block(s.orelse, set(bound))
        elif isinstance(s, ast.While):
            self.expr(s.test, bound)
            self.block(s.body, set(bound))
            self.block(s.orelse, set(bound))
        elif isinstance(s, ast.If):
            self.expr(s.test, bound)
            then = self.block(s.body, set(bound))
            otherwise = self.block(s.orelse, set(bound))
            bound |= then & otherwise
        elif isinstance(s, ast.With | ast.AsyncWith):
            for item in s.items:
                self.expr(item.context_expr, bound)
                if item.optional_vars is not None:
                    self.target(item.optional_vars, bound)
            self.block(s.body, bound)
        elif isinstance(s, ast.Try):
            inner = self.block(s.body, set(bound))
            for h in s.handlers:
                self.expr(h.type, bound)
                hb = set(bound) | ({h.name} if h.name else set())
                self.block(h.body, hb)
            self.block(s.orelse, set(inner))
            self.block(s.finalbody, bound)
        elif isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for d in s.decorator_list:
                self.expr(d, bound)
            if isinstance(s, ast.ClassDef):
                for base in s.bases:
                    self.expr(base, bound)
            else:
                for default in (*s.args.defaults, *(k for k in s.args.kw_defaults if k is not None)):
                    self.expr(default, bound)
            for name in _scope_free(s):
                self.read(name, bound)
            bound.add(s.name)
        elif isinstance(s, ast.Import | ast.ImportFrom):
            for alias in s.names:
                bound.add(_import_binds(alias))
        elif isinstance(s, ast.Global | ast.Nonlocal | ast.Pass | ast.Break | ast.Continue):
            pass
        else:  # Expr, Assert, Return, Raise, Delete, Match, ...
            for child in ast.iter_child_nodes(s):
                self.expr(child, bound)


def _strip_annotations(node: _Node) -> _Node:
    """A copy of ``node`` without annotations (they are never evaluated here)."""
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        if isinstance(n, ast.arg):
            n.annotation = None
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            n.returns = None
    return node


def _scope_free(node: ast.AST) -> list[str]:
    """Free names of a nested scope (function, lambda, class, comprehension):
    read in it and bound neither in it nor by its parameters, in order."""
    import symtable

    node = _strip_annotations(node)
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        src = ast.unparse(node)
    else:
        src = f"__batchfuzz_scope__ = {ast.unparse(node)}"
    table = symtable.symtable(src, "<scope>", "exec")
    out: list[str] = []

    def visit(t: symtable.SymbolTable, top: bool) -> None:
        for sym in t.get_symbols():
            if sym.is_referenced() and ((sym.is_global() and not sym.is_declared_global()) or (top and sym.is_free())):
                if sym.get_name() not in out:
                    out.append(sym.get_name())
        for child in t.get_children():
            visit(child, False)

    for child in table.get_children():
        visit(child, True)
    # Module-level names the unparsed statement itself reads (a class's bases, decorators).
    for sym in table.get_symbols():
        if sym.is_referenced() and sym.get_name() != "__batchfuzz_scope__" and sym.get_name() not in out:
            out.append(sym.get_name())
    return out


def _reads_before_writes(stmts: list[ast.stmt]) -> list[str]:
    flow = _Flow()
    flow.block([_strip_annotations(s) for s in stmts], set())
    return flow.reads


def _defines(stmts: list[ast.stmt]) -> set[str]:
    """Names surely bound after running ``stmts``."""
    return _Flow().block([_strip_annotations(s) for s in stmts], set())


def _first_line(nodes: Iterable[ast.AST], name: str) -> int | None:
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id == name:
                return n.lineno
    return None


# ---------------------------------------------------------------- scopes: resolving names and compiling


_SCOPE_IDS = itertools.count()
_REAL_MODULES_DEFAULT = frozenset({"numpy", "torch"}) | frozenset(sys.stdlib_module_names)


class Scope:
    """Compiles pieces of one source tree, resolving the global names they read.

    A name is looked up, in order, in ``stand_ins`` (what the binding gives),
    the top level of the piece's own file (a function or class, cut out in
    turn; a constant whose value is a literal; an import), where an import of
    a module of ``package`` is followed into that module's file in the tree,
    and an import of a module in ``real_modules`` (default: the standard
    library, numpy and torch) imports the real module. Builtins come last.
    Anything else makes the piece Unbindable, naming what is missing and where
    it is read; so does a helper defined with decorators, which is not cut out
    (its decorators would have to run, and they are often the engine's own,
    such as a kernel compiler): give a stand-in for it. Every file gets one namespace, shared by all pieces cut from
    it, so that helpers defined beside a function are found as at import time.
    ``files`` may be a dict shared between scopes of one tree, so that each
    file is parsed once.
    """

    def __init__(self, tree: SourceTree, package: str, stand_ins: Mapping[str, Any] | None = None,
                 real_modules: Iterable[str] = _REAL_MODULES_DEFAULT, files: dict[str, SourceFile] | None = None) -> None:
        if not isinstance(package, str) or not package.isidentifier():
            raise ValueError(f"package must be a top-level package name, got {package!r}")
        self.tree = tree
        self.package = package
        self.stand_ins = dict(stand_ins or {})
        self.real_modules = frozenset(real_modules)
        self._files: dict[str, SourceFile] = files if files is not None else {}
        self._namespaces: dict[str, dict[str, Any]] = {}
        self._resolving: set[tuple[str, str]] = set()
        self._id = next(_SCOPE_IDS)

    # -- files

    def file(self, relpath: str) -> SourceFile:
        """The parsed file ``relpath``; Absent when the tree does not have it."""
        if relpath not in self._files:
            text = self.tree.read(relpath)
            if text is None:
                raise Absent(f"{relpath} is not in this source tree")
            self._files[relpath] = SourceFile(text, relpath)
        return self._files[relpath]

    def _module_path(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if self.tree.read(candidate) is not None:
                return candidate
        return None

    def namespace(self, relpath: str) -> dict[str, Any]:
        """The globals of the cut-outs of ``relpath``: the dict of a module
        object registered in ``sys.modules`` under a private name (tools such
        as ``dataclasses`` look a class's module up there), never under the
        engine's own module name."""
        if relpath not in self._namespaces:
            name = f"batchfuzz._cut_{self._id}.{_module_of(relpath)}"
            module = ModuleType(name)
            module.__dict__["__builtins__"] = builtins
            sys.modules[name] = module
            self._namespaces[relpath] = module.__dict__
        return self._namespaces[relpath]

    # -- loading pieces

    def load(self, piece: Piece) -> Callable[..., Any]:
        """Compile ``piece`` and return it: a function (self or cls first for
        methods), a class, or for a fragment a function of its given names
        that returns its locals after the statements ran."""
        ns = self.namespace(piece.path)
        src = self.file(piece.path)
        if "." in piece.qualname and piece.kind != "class":
            _check_outside_class(piece)
        needs = self._needs(piece)
        self._provide(piece.path, needs, piece.nodes, why=piece.label)
        if piece.kind == "fragment":
            defaults = [(n, self._eval_default(piece, expr)) for n, expr in piece.defaults]
            first, last = piece.lines
            ret = ast.Return(ast.Call(ast.Name("locals", ast.Load()), [], []))
            ast.copy_location(ret, ast.Pass(lineno=last, col_offset=0, end_lineno=last, end_col_offset=0))
            body: list[ast.stmt] = [*copy.deepcopy([n for n in piece.nodes if isinstance(n, ast.stmt)]), ret]
            args = ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in piece.params] + [ast.arg(n) for n, _ in defaults],
                                 kwonlyargs=[], kw_defaults=[], defaults=[ast.Constant(None)] * len(defaults))
            name = "__fragment__"
            func = ast.FunctionDef(name=name, args=args, body=body, decorator_list=[], returns=None,
                                   lineno=first, col_offset=0, end_lineno=last, end_col_offset=0)
            module = ast.Module([func], [])
            ast.fix_missing_locations(module)
            local: dict[str, Any] = {}
            exec(compile(module, src.filename, "exec", flags=_COMPILE_FLAGS, dont_inherit=True), ns, local)
            fn = local[name]
            if defaults:
                fn.__defaults__ = tuple(v for _, v in defaults)
            fn.__qualname__ = f"{piece.qualname}[{piece.note}]"
            return fn
        node = copy.deepcopy(piece.nodes[0])
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            raise TypeError(f"a {piece.kind} piece must hold a def or a class, got {type(node).__name__}")
        if not isinstance(node, ast.ClassDef):
            node.decorator_list = []
        local = {}
        exec(compile(ast.Module([node], []), src.filename, "exec", flags=_COMPILE_FLAGS, dont_inherit=True), ns, local)
        obj = local[node.name]
        if piece.kind != "class":
            obj.__qualname__ = piece.qualname
        return obj

    def _eval_default(self, piece: Piece, expr: ast.expr) -> Any:
        names = [n.id for n in ast.walk(expr) if isinstance(n, ast.Name)]
        self._provide(piece.path, names, (expr,), why=f"a default value in {piece.label}")
        code = compile(ast.Expression(copy.deepcopy(expr)), self.file(piece.path).filename, "eval", dont_inherit=True)
        return eval(code, self.namespace(piece.path))

    def _needs(self, piece: Piece) -> list[str]:
        if piece.kind == "fragment":
            given = set(piece.params) | {n for n, _ in piece.defaults}
            return [n for n in _reads_before_writes(list(piece.nodes)) if n not in given]
        node = piece.nodes[0]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node = copy.deepcopy(node)
            node.decorator_list = []
        return _scope_free(node)

    def _provide(self, relpath: str, names: Iterable[str], nodes: Sequence[ast.AST], why: str) -> None:
        ns = self.namespace(relpath)
        missing: list[str] = []
        for name in names:
            if name in ns or (relpath, name) in self._resolving:
                continue
            if name in self.stand_ins:
                ns[name] = self.stand_ins[name]
                continue
            try:
                ns[name] = self._resolve(relpath, name)
            except _NotFound as exc:
                if hasattr(builtins, name):
                    continue
                line = _first_line(nodes, name)
                missing.append(f"{name!r}{f' (line {line})' if line else ''}{': ' + str(exc) if str(exc) else ''}")
        if missing:
            raise Unbindable(f"{why} needs {', '.join(missing)}, which the binding does not provide")

    def _resolve(self, relpath: str, name: str) -> Any:
        src = self.file(relpath)
        stmt = src.top_level(name)
        if stmt is None:
            raise _NotFound("")
        key = (relpath, name)
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            self._resolving.add(key)
            try:
                piece = Piece(relpath, name, "class" if isinstance(stmt, ast.ClassDef) else "function", (stmt,),
                              decorators=tuple(ast.unparse(d) for d in getattr(stmt, "decorator_list", [])))
                obj = self.load(piece) if not piece.decorators or isinstance(stmt, ast.ClassDef) else self._load_decorated(piece)
            finally:
                self._resolving.discard(key)
            return obj
        if isinstance(stmt, ast.Assign | ast.AnnAssign):
            value = stmt.value
            assert value is not None
            if not _is_constant_expression(value):
                raise _NotFound(f"{relpath} computes it at import time ({ast.unparse(value).splitlines()[0][:60]})")
            self._resolving.add(key)
            try:
                names = [n.id for n in ast.walk(value) if isinstance(n, ast.Name)]
                self._provide(relpath, names, (value,), why=f"{relpath}:{name}")
            finally:
                self._resolving.discard(key)
            code = compile(ast.Expression(copy.deepcopy(value)), src.filename, "eval", dont_inherit=True)
            return eval(code, self.namespace(relpath))
        assert isinstance(stmt, ast.Import | ast.ImportFrom)
        alias = next(a for a in stmt.names if _import_binds(a) == name)
        if isinstance(stmt, ast.Import):
            module = alias.name if alias.asname else alias.name.split(".")[0]
            return self._import_module(module, relpath)
        module = self._absolute(stmt, relpath)
        if module.split(".")[0] == self.package:
            path = self._module_path(module)
            if path is None:
                sub = self._module_path(f"{module}.{alias.name}")
                raise _NotFound(f"imported from {module}{', a module' if sub else ''}, not in this source tree")
            if self.file(path).top_level(alias.name) is None:
                if self._module_path(f"{module}.{alias.name}") is not None:
                    raise _NotFound(f"{module}.{alias.name} is a module of the engine (give a stand-in)")
                raise _NotFound(f"{module} does not define {alias.name}")
            ns = self.namespace(path)
            self._provide(path, [alias.name], (), why=f"{path} (for {name!r} in {relpath})")
            if alias.name not in ns:
                raise _NotFound(f"{module}.{alias.name} is a builtin name")
            return ns[alias.name]
        mod = self._import_module(module, relpath)
        if not hasattr(mod, alias.name):
            try:
                return self._import_module(f"{module}.{alias.name}", relpath)
            except _NotFound:
                raise _NotFound(f"{module} has no {alias.name}") from None
        return getattr(mod, alias.name)

    def _load_decorated(self, piece: Piece) -> Any:
        raise _NotFound(f"{piece.path} defines it with decorator(s) {', '.join(piece.decorators)}, which are not applied "
                        "here (give a stand-in)")

    def _absolute(self, stmt: ast.ImportFrom, relpath: str) -> str:
        if not stmt.level:
            return stmt.module or ""
        package = _module_of(relpath).split(".")
        if not relpath.endswith("__init__.py"):
            package = package[:-1]
        base = package[: len(package) - (stmt.level - 1)]
        return ".".join([*base, stmt.module] if stmt.module else base)

    def _import_module(self, module: str, relpath: str) -> Any:
        top = module.split(".")[0]
        if top == self.package:
            raise _NotFound(f"{module} is a module of the engine (give a stand-in)")
        if top not in self.real_modules:
            raise _NotFound(f"{relpath} imports it from {module}, which is not an allowed module here")
        import importlib

        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            raise _NotFound(f"cannot import {module}: {exc}") from None
        return mod


class _NotFound(Exception):
    pass


def _check_outside_class(piece: Piece) -> None:
    """A method runs here as a plain function: ``super()`` (which needs the
    class cell) and private names (mangled with the class name) would not
    mean what they mean in the class, so they make the piece Unbindable."""
    for node in piece.nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in ("super", "__class__"):
                raise Unbindable(f"{piece.label} uses {n.id} (line {n.lineno}), which needs the class it was cut from")
            if isinstance(n, ast.Attribute) and n.attr.startswith("__") and not n.attr.endswith("__"):
                raise Unbindable(f"{piece.label} reads the private name {n.attr} (line {n.lineno}), mangled with its class's name")


_CONSTANT_NODES = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Tuple, ast.List, ast.Set, ast.Dict,
                   ast.Name, ast.Load, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


def _is_constant_expression(node: ast.AST) -> bool:
    """Literals, operators and names only (``(1 << 64) - 1``, ``A * 2``): an
    expression that computes a constant without calling anything."""
    return all(isinstance(n, _CONSTANT_NODES) for n in ast.walk(node))


# ---------------------------------------------------------------- stand-ins for engine objects


class Stub(SimpleNamespace):
    """An engine object made of exactly the attributes a binding gives it.

    Functions passed in ``methods`` become its methods (bound to it, as a
    class would bind them), so a cut-out method can call a sibling cut-out
    method or a ``Recorder``. Reading an attribute it was not given raises an
    AttributeError naming the object and the attribute.
    """

    def __init__(self, _name: str = "stub", methods: Mapping[str, Callable[..., Any]] | None = None, **attrs: Any) -> None:
        super().__init__(**attrs)
        object.__setattr__(self, "_name", _name)
        for key, fn in (methods or {}).items():
            object.__setattr__(self, key, MethodType(fn, self))

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(f"{object.__getattribute__(self, '_name')} has no attribute {attr!r}: the binding does not provide it")

    def __repr__(self) -> str:
        keys = ", ".join(k for k in vars(self) if not k.startswith("_"))
        return f"Stub({object.__getattribute__(self, '_name')}: {keys})"


@dataclass
class Call:
    """One recorded call: positional and keyword arguments."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def arg(self, position: int, name: str) -> Any:
        """The argument passed at ``position`` or as ``name``."""
        if name in self.kwargs:
            return self.kwargs[name]
        if position < len(self.args):
            return self.args[position]
        raise KeyError(f"the call passed neither argument {position} nor {name}= (args {len(self.args)}, kwargs {sorted(self.kwargs)})")


@dataclass
class Recorder:
    """A stand-in callable that records every call and returns ``returns``
    (a context manager that does nothing, by default, so it also serves
    ``with recorder(...):``)."""

    name: str = "recorder"
    returns: Any = field(default_factory=contextlib.nullcontext)
    calls: list[Call] = field(default_factory=list)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(Call(args, kwargs))
        return self.returns

    @property
    def last(self) -> Call:
        if not self.calls:
            raise LookupError(f"{self.name} was never called")
        return self.calls[-1]


class Record(SimpleNamespace):
    """A stand-in for an engine result type built with keyword arguments
    (``cls(field=..., ...)``, a dataclass constructor): keeps them as
    attributes. As a class it can stand for ``cls`` in a classmethod."""


def unreachable(name: str) -> Callable[..., Any]:
    """A stand-in for a name the binding claims the bound code never uses on
    its inputs: calling it raises StandInReached naming it."""

    def reached(*args: Any, **kwargs: Any) -> Any:
        raise StandInReached(f"{name} was reached, but the binding declared it unreachable")

    reached.__name__ = name
    return reached


def cpu_gpu_buffer(array: np.ndarray) -> Stub:
    """A host/device buffer pair over ``array``, as engines keep them:
    ``.np`` is ``array`` itself (writes land in the caller's array), ``.cpu``
    a torch view of it, ``.gpu`` a separate torch CPU tensor standing in for
    the device copy, refreshed by ``copy_to_gpu(n=None)``."""
    import torch

    if not isinstance(array, np.ndarray):
        raise TypeError(f"array must be a numpy array, got {type(array).__name__}")
    cpu = torch.from_numpy(array)
    gpu = cpu.clone()

    def copy_to_gpu(self: Stub, n: int | None = None) -> Any:
        if n is None:
            self.gpu.copy_(self.cpu)
            return self.gpu
        self.gpu[:n].copy_(self.cpu[:n])
        return self.gpu[:n]

    def copy_to_cpu(self: Stub, n: int | None = None) -> Any:
        if n is None:
            self.cpu.copy_(self.gpu)
            return self.cpu
        self.cpu[:n].copy_(self.gpu[:n])
        return self.cpu[:n]

    return Stub("cpu_gpu_buffer", np=array, cpu=cpu, gpu=gpu, methods={"copy_to_gpu": copy_to_gpu, "copy_to_cpu": copy_to_cpu})


def block_table(block_size: int, table: np.ndarray) -> Stub:
    """One KV-cache group's block table: ``block_size``, the table as a
    host/device buffer (``.block_table``), and the accessors engines read it
    through (``get_numpy_array()``, ``get_cpu_tensor()``,
    ``get_device_tensor(num_reqs)``)."""
    if not isinstance(block_size, int | np.integer) or isinstance(block_size, bool) or block_size < 1:
        raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
    if not isinstance(table, np.ndarray) or table.ndim != 2:
        raise ValueError(f"table must be a 2-D numpy array, got {type(table).__name__} {getattr(table, 'shape', '')}")
    buf = cpu_gpu_buffer(table)
    return Stub("block_table", block_size=int(block_size), block_table=buf, methods={
        "get_numpy_array": lambda self: self.block_table.np,
        "get_cpu_tensor": lambda self: self.block_table.cpu,
        "get_device_tensor": lambda self, num_reqs=None: self.block_table.gpu if num_reqs is None else self.block_table.gpu[:num_reqs],
    })


# ---------------------------------------------------------------- converters for engine results


def to_numpy(value: Any) -> np.ndarray:
    """A tensor on any device, a numpy array or a sequence, as a numpy array."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        return np.asarray(value.detach().cpu().numpy())
    return np.asarray(value)


def slice_pairs(slices: Sequence[Any] | None, request: str = "request_slice", token: str = "token_slice"
                ) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
    """Engine slice objects (attributes holding Python slices) as
    ``[((rs, re), (ts, te)), ...]``; None stays None."""
    if slices is None:
        return None
    out = []
    for k, s in enumerate(slices):
        r, t = getattr(s, request, None), getattr(s, token, None)
        if not isinstance(r, slice) or not isinstance(t, slice):
            raise TypeError(f"slice object {k} ({type(s).__name__}) has no Python slices .{request} and .{token}")
        out.append(((int(r.start), int(r.stop)), (int(t.start), int(t.stop))))
    return out


def tuple_part(result: Any, index: int, size: int | None = None) -> Any:
    """Part ``index`` of a tuple result (checking its length when ``size`` is given)."""
    if not isinstance(result, tuple):
        raise TypeError(f"expected a tuple result, got {type(result).__name__}")
    if size is not None and len(result) != size:
        raise TypeError(f"expected a tuple of {size}, got one of {len(result)}")
    return result[index]


# ---------------------------------------------------------------- contract arguments


def count(name: str, value: Any, minimum: int = 0) -> int:
    """A contract's count argument as an int, or a TypeError/ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def int_array(name: str, value: Any, minimum: int | None = 0, ndim: int = 1) -> np.ndarray:
    """A contract's integer array argument (a numpy int32/int64 array or a
    list of ints), or a TypeError/ValueError naming it and the bad value."""
    arr = np.asarray(value) if isinstance(value, list | tuple) else value
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{name} must be a numpy array or a list of ints, got {type(value).__name__}")
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype, got {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if minimum is not None and arr.size and int(arr.min()) < minimum:
        k = int(np.argmin(arr.reshape(-1)))
        raise ValueError(f"{name} entries must be >= {minimum}, got {int(arr.reshape(-1)[k])} at flat index {k}")
    return arr


def cast_exact(name: str, value: np.ndarray, dtype: Any) -> np.ndarray:
    """``value`` as ``dtype`` (an engine buffer's dtype), or a ValueError
    naming it when a value does not fit (a cast must never change a value)."""
    dt = np.dtype(dtype)
    if value.size and dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = int(value.min()), int(value.max())
        if lo < info.min or hi > info.max:
            raise ValueError(f"{name} holds {lo if lo < info.min else hi}, which the engine's {dt} buffer cannot hold")
    return value.astype(dt)


# ---------------------------------------------------------------- bind-time dry run


_BINDING_ERRORS = (NameError, AttributeError, TypeError, ImportError, StandInReached, KeyError, LookupError)


def probe(target: Callable[..., Any], *args: Any, what: str = "the target") -> None:
    """Call ``target(*args)`` once on a small valid input. A changed
    signature, a name or attribute the stand-ins lack, or a stand-in declared
    unreachable shows here and raises Unbindable; any other outcome (an
    answer, an engine assertion) is the engine's behaviour and is left to the
    properties to judge."""
    try:
        target(*args)
    except _BINDING_ERRORS as exc:
        raise Unbindable(f"dry run of {what} failed: {type(exc).__name__}: {exc}") from exc
    except Exception:
        return
