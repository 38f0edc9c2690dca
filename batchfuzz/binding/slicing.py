"""Statement slicing and data flow over a method's AST.

``Writes`` selects the statements that write a target; ``slice_statements``
adds the earlier statements they depend on (``SourceFile.fragment``'s
algorithm); ``reads_before_writes`` and ``scope_free`` say which names a
piece reads that it does not bind itself (what ``batchfuzz.binding.loader``
must provide).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from batchfuzz.binding.errors import Unbindable


def import_binds(alias: ast.alias) -> str:
    return alias.asname or alias.name.split(".")[0]


def param_names(args: ast.arguments) -> tuple[str, ...]:
    names = [a.arg for a in (*args.posonlyargs, *args.args)]
    if args.vararg:
        names.append(args.vararg.arg)
    names += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        names.append(args.kwarg.arg)
    return tuple(names)


def param_defaults(args: ast.arguments) -> Iterator[tuple[str, ast.expr]]:
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
            out.add(import_binds(n))
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
            for name in scope_free(node):
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
        elif isinstance(s, ast.For | ast.AsyncFor | ast.While | ast.If):
            self.branches(s, bound)
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
            self.definition(s, bound)
        elif isinstance(s, ast.Import | ast.ImportFrom):
            for alias in s.names:
                bound.add(import_binds(alias))
        elif isinstance(s, ast.Global | ast.Nonlocal | ast.Pass | ast.Break | ast.Continue):
            pass
        else:  # Expr, Assert, Return, Raise, Delete, Match, ...
            for child in ast.iter_child_nodes(s):
                self.expr(child, bound)

    def branches(self, s: ast.For | ast.AsyncFor | ast.While | ast.If, bound: set[str]) -> None:
        """A loop or an ``if``: a name bound in a body counts after it only where every branch binds it."""
        if isinstance(s, ast.For | ast.AsyncFor):
            self.expr(s.iter, bound)
            inner = set(bound)
            self.target(s.target, inner)
            self.block(s.body, inner)
            self.block(s.orelse, set(bound))
        elif isinstance(s, ast.While):
            self.expr(s.test, bound)
            self.block(s.body, set(bound))
            self.block(s.orelse, set(bound))
        else:
            self.expr(s.test, bound)
            then = self.block(s.body, set(bound))
            otherwise = self.block(s.orelse, set(bound))
            bound |= then & otherwise

    def definition(self, s: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, bound: set[str]) -> None:
        """A ``def`` or ``class``: its decorators, bases and defaults are read now, its free names too."""
        for d in s.decorator_list:
            self.expr(d, bound)
        if isinstance(s, ast.ClassDef):
            for base in s.bases:
                self.expr(base, bound)
        else:
            for default in (*s.args.defaults, *(k for k in s.args.kw_defaults if k is not None)):
                self.expr(default, bound)
        for name in scope_free(s):
            self.read(name, bound)
        bound.add(s.name)


def _strip_annotations(node: _Node) -> _Node:
    """A copy of ``node`` without annotations (they are never evaluated here)."""
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        if isinstance(n, ast.arg):
            n.annotation = None
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            n.returns = None
    return node


def scope_free(node: ast.AST) -> list[str]:
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


def reads_before_writes(stmts: list[ast.stmt]) -> list[str]:
    flow = _Flow()
    flow.block([_strip_annotations(s) for s in stmts], set())
    return flow.reads


def _defines(stmts: list[ast.stmt]) -> set[str]:
    """Names surely bound after running ``stmts``."""
    return _Flow().block([_strip_annotations(s) for s in stmts], set())


def first_line(nodes: Iterable[ast.AST], name: str) -> int | None:
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id == name:
                return n.lineno
    return None


def slice_statements(node: ast.FunctionDef | ast.AsyncFunctionDef, pattern: Writes, given: Sequence[str], where: str
                     ) -> tuple[tuple[ast.stmt, ...], int, tuple[tuple[str, ast.expr], ...]]:
    """The statements of function ``node`` that ``pattern`` selects, with the
    earlier statements they depend on, in source order; how many of them the
    pattern selected; and the parameters they read but were not given, with
    their default expressions (``SourceFile.fragment`` says the rules).
    Raises Unbindable, prefixed by ``where``, when the code does not fit."""
    located = list(_walk_statements(node.body, ()))
    hits = [path for path, stmt in located if not _is_compound(stmt) and pattern.matches(stmt)]
    if not hits:
        raise Unbindable(f"{where} has no statement that {pattern} (the code changed)")
    selected = _select(hits)
    by_path = dict(located)
    chosen: dict[Path, ast.stmt] = {p: by_path[p] for p in selected}
    given_set = set(given)
    params = set(param_names(node.args))
    work = list(chosen.items())
    while work:
        path, stmt = work.pop()
        for name in reads_before_writes([stmt]):
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
            raise Unbindable(f"{where}: the fragment that {pattern} depends on line {stmt.lineno}, which "
                             f"rebinds given name(s) {', '.join(clash)} (give what that line computes from instead)")
    stmts = [chosen[p] for p in sorted(chosen, key=lambda p: (chosen[p].lineno, chosen[p].col_offset))]
    for stmt in stmts:
        for sub in _walk_scope(stmt):
            if isinstance(sub, ast.Return):
                raise Unbindable(f"{where}: the fragment that {pattern} holds a return at line {sub.lineno}")
    reads = reads_before_writes(stmts)
    defaults = dict(param_defaults(node.args))
    used_params = tuple((n, defaults[n]) for n in reads if n in params and n not in given_set and n in defaults)
    missing_params = [n for n in reads if n in params and n not in given_set and n not in defaults]
    if missing_params:
        raise Unbindable(f"{where}: the fragment reads parameter(s) {', '.join(missing_params)}, "
                         "which have no default and which the binding does not give")
    return tuple(stmts), len(selected), used_params
