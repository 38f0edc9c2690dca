"""Namespace resolution and compiling: ``Loader`` turns a cut-out piece of
an engine's source into a callable.

It resolves every global name a piece reads (a binding's stand-in, a
definition of the same source tree, cut out in turn, an allowed real module
such as numpy, or a builtin) and compiles the piece in a namespace of its
own file; a name none of these provides makes the piece ``Unbindable``, with
the names and the lines in the reason.
"""

from __future__ import annotations

import ast
import builtins
import copy
import itertools
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

from batchfuzz.binding.errors import Absent, Unbindable
from batchfuzz.binding.slicing import first_line, import_binds, reads_before_writes, scope_free
from batchfuzz.binding.source import Piece, SourceFile, SourceTree, module_of

_COMPILE_FLAGS = __import__("__future__").annotations.compiler_flag  # annotations stay unevaluated strings


_LOADER_IDS = itertools.count()
_REAL_MODULES_DEFAULT = frozenset({"numpy", "torch"}) | frozenset(sys.stdlib_module_names)


class Loader:
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
    ``files`` may be a dict shared between loaders of one tree, so that each
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
        self._id = next(_LOADER_IDS)

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
            name = f"batchfuzz._cut_{self._id}.{module_of(relpath)}"
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
            stand_in = _StandInImports(self.package, self.stand_ins, ns)
            body: list[ast.stmt] = [*(stand_in.visit(copy.deepcopy(n)) for n in piece.nodes if isinstance(n, ast.stmt)), ret]
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
        node = _StandInImports(self.package, self.stand_ins, ns).visit(copy.deepcopy(piece.nodes[0]))
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
            return [n for n in reads_before_writes(list(piece.nodes)) if n not in given]
        node = piece.nodes[0]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node = copy.deepcopy(node)
            node.decorator_list = []
        return scope_free(node)

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
                line = first_line(nodes, name)
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
        alias = next(a for a in stmt.names if import_binds(a) == name)
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
        package = module_of(relpath).split(".")
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


class _StandInImports(ast.NodeTransformer):
    """An import of the engine's package inside a piece, all of whose names the
    binding stands in for, binds those stand-ins, as the lookup order says for
    the names a piece reads: at call time it would import the installed engine
    (another release, or none), not what the binding gave."""

    NAME = "__batchfuzz_stand_ins__"  # the namespace entry the rewritten statements read

    def __init__(self, package: str, stand_ins: Mapping[str, Any], ns: dict[str, Any]) -> None:
        self.package, self.stand_ins, self.ns = package, stand_ins, ns

    def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
        ours = node.level > 0 or (node.module or "").split(".")[0] == self.package
        names = [import_binds(a) for a in node.names]
        if not ours or not all(n in self.stand_ins for n in names):
            return node
        self.ns[self.NAME] = self.stand_ins
        return [ast.fix_missing_locations(ast.copy_location(ast.Assign([ast.Name(n, ast.Store())], ast.Subscript(
            ast.Name(self.NAME, ast.Load()), ast.Constant(n), ast.Load())), node)) for n in names]
