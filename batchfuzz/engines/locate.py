"""Where each binding's behaviour lives in a release, and how that moved
between two releases (``batchfuzz vllm --where`` and ``--drift``;
docs/where-it-lives.md states the rules and the thresholds).

:func:`where`: one :class:`Location` per binding an engine makes for a
release (its ``SPECS``, then the split search's copies), read from the
engine's binding registry, never from a list kept here: the contract, the
file and function, how it was found (by the name its spec gives, or by the
structure rule of ``split_search``), the binding used and its status.

:func:`drift`: one :class:`Drift` per cell (function x contract) of either
release: the function's definition in the older release looked up in the
newer one, by name, then by structure, then by vocabulary (the distinctive
names its code uses), and classified ``unchanged``, ``changed``,
``signature``, ``moved``, ``renamed``, ``removed``, ``added``, ``newly
bound`` or ``absent`` (in neither); a removed function names the newer release's functions its
behaviour most likely went to, with the share of its distinctive names
each holds.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import inspect
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from batchfuzz.engines import Bound, ReleaseSource, split_search

# Similarity (weighted Dice over distinctive names) from which a function of
# the same file or class under a new name counts as the old one renamed.
RENAME_SIMILARITY = 0.6
# The share of its distinctive names a function of the same name in another
# class must hold to count as the old one moved there.
MOVE_SHARE = 0.5
# Containment (the weighted share of a removed function's distinctive names a
# newer function uses) from which that function is named as where the
# behaviour may have gone (at most CANDIDATES of them, best first).
WENT_SHARE = 0.25
CANDIDATES = 3
# The candidate files of a removed function: those holding at least this
# share of its long names (>= LONG_NAME characters), at most MAX_FILES of them.
FILE_SHARE = 0.3
LONG_NAME = 8
MAX_FILES = 60

_COMMON = frozenset(dir(builtins)) | {"self", "cls", "np", "torch", "kwargs", "args"}
_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
_DEF = re.compile(r"\bdef\s+(\w+)\s*\(")


# ---------------------------------------------------------------- definitions of a file


@dataclass(frozen=True)
class Definition:
    """One function of a release's file, with what the drift compares."""

    path: str
    qualname: str
    node: _FunctionNode = field(repr=False, compare=False)

    @property
    def function(self) -> str:
        return f"{self.path}:{self.qualname}"

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]

    @property
    def owner(self) -> str:
        """The class (or enclosing function) that holds it, "" at module level."""
        return self.qualname.rpartition(".")[0]

    def signature(self) -> str:
        return f"({ast.unparse(self.node.args)})"

    def lines(self) -> tuple[int, int]:
        first = min([self.node.lineno, *(d.lineno for d in self.node.decorator_list)])
        return first, self.node.end_lineno or self.node.lineno

    def code(self) -> str:
        """Its syntax without positions or its own name: equal code, equal string."""
        return ast.dump(ast.Module(body=self.node.body, type_ignores=[])) + ast.dump(self.node.args)

    def structure(self) -> str:
        """Its syntax with every identifier erased: equal under any renaming."""
        return self._structure

    def names(self) -> frozenset[str]:
        """The distinctive names its code uses: variables, attributes, keywords,
        parameters (builtins, ``self`` and names under 3 characters left out)."""
        return self._names

    # Both are asked for thousands of times per drift (every pool member against
    # every removed function): worked out once per definition.
    @functools.cached_property
    def _structure(self) -> str:
        return _erased(self.node)

    @functools.cached_property
    def _names(self) -> frozenset[str]:
        out = set()
        for n in ast.walk(self.node):
            name = (n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute)
                    else n.arg if isinstance(n, ast.keyword | ast.arg) else None)
            if name and len(name) >= 3 and name not in _COMMON:
                out.add(name)
        return frozenset(out)

    def reads(self) -> frozenset[str]:
        """The dotted names it reads (``parallel_config.enable_fault_tolerance``)."""
        inner = {id(n.value) for n in ast.walk(self.node) if isinstance(n, ast.Attribute)}
        return frozenset(ast.unparse(n) for n in ast.walk(self.node)
                         if isinstance(n, ast.Attribute) and id(n) not in inner and _rooted(n))


def _rooted(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _erased(node: ast.AST) -> str:
    parts = []
    for n in ast.walk(node):
        fields = []
        for name, value in ast.iter_fields(n):
            if name in ("id", "attr", "arg", "name", "asname", "module", "type_comment"):
                continue
            if isinstance(value, str | int | float | bool | bytes | type(None)):
                fields.append(f"{name}={value!r}")
        parts.append(f"{type(n).__name__}({','.join(fields)})")
    return ";".join(parts)


def definitions(path: str, text: str) -> dict[str, Definition]:
    """Every function of a file by qualified name (``Class.method``,
    ``outer.<locals>.inner``); {} for a file that does not parse."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError:
        return {}
    out: dict[str, Definition] = {}

    def walk(body: Iterable[ast.stmt], prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef):
                walk(stmt.body, f"{prefix}{stmt.name}.")
            elif isinstance(stmt, _FunctionNode):
                qual = f"{prefix}{stmt.name}"
                out.setdefault(qual, Definition(path, qual, stmt))
                walk(_nested(stmt), f"{qual}.<locals>.")

    walk(tree.body, "")
    return out


def _nested(fn: _FunctionNode) -> Iterator[ast.stmt]:
    """The functions and classes defined in ``fn``'s own body (any depth of blocks)."""
    todo: list[ast.AST] = list(fn.body)
    while todo:
        n = todo.pop(0)
        if isinstance(n, _FunctionNode | ast.ClassDef):
            yield n
        elif isinstance(n, ast.stmt):
            todo.extend(c for c in ast.iter_child_nodes(n) if isinstance(c, ast.stmt))


class _Files:
    """A release's files parsed on demand (each at most once)."""

    def __init__(self, source: ReleaseSource) -> None:
        self.source = source
        self._defs: dict[str, dict[str, Definition]] = {}
        self._defined: dict[str, list[str]] | None = None

    def defs(self, path: str) -> dict[str, Definition]:
        if path not in self._defs:
            text = self.source.read(path)
            self._defs[path] = definitions(path, text) if text is not None else {}
        return self._defs[path]

    def find(self, function: str) -> Definition | None:
        path, _, qual = function.partition(":")
        return self.defs(path).get(qual.split("#", 1)[0])

    def defining(self, name: str) -> list[str]:
        """The paths whose text has a ``def name(`` (one scan of the release, the first time)."""
        if self._defined is None:
            self._defined = {}
            for path, text in self.texts():
                for found in dict.fromkeys(_DEF.findall(text)):
                    self._defined.setdefault(found, []).append(path)
        return self._defined.get(name, [])

    def texts(self) -> Iterator[tuple[str, str]]:
        for path in self.source.paths():
            text = self.source.read(path)
            if text is not None:
                yield path, text


# ---------------------------------------------------------------- where it lives


@dataclass(frozen=True)
class Location:
    """One binding of one release: where its function is and how it was found."""

    release: str
    contract: str
    function: str  # as the binding names it (a search copy ends in #COUNTS=TOKENS/REQUESTS)
    path: str
    qualname: str
    found: str  # "by name" or "by structure (...)"
    binding: str  # the engine module's builder
    status: str
    reason: str = ""
    lines: str = ""  # "first-last" of the definition in this release, "" when it is not there
    signature: str = ""
    assumed: tuple[str, ...] = ()  # the configuration values the binding gave the code (a Bound's ``assumed``)


def bindings(engine: Any, source: ReleaseSource, keep: Callable[[Bound], bool] = lambda b: True,
             search: bool = True) -> list[Bound]:
    """The engine's bindings for ``source``, selected by ``keep``, the split search's copies included
    (``search``: worth leaving out when ``keep`` keeps none, ``matrix.searched``)."""
    extra = {"search": search} if "search" in inspect.signature(engine.bindings).parameters else {}
    return [b for b in engine.bindings(source, **extra) if keep(b)]


def _builder(engine: Any, bound: Bound) -> tuple[str, str]:
    """(how found, binding used) of a Bound, from the engine's SPECS."""
    if "#" in bound.function:
        return (f"by structure: {split_search.__name__}'s rule (docs/split-copies.md)",
                f"{split_search.__name__}.bind_site")
    spec = next((s for s in engine.SPECS if s.function == bound.function and s.contract == bound.contract), None)
    build = getattr(spec, "build", None)
    while isinstance(build, functools.partial):  # a builder given its path: the function it calls
        build = build.func
    if build is None:
        return "by name", "?"
    qual = getattr(build, "__qualname__", getattr(build, "__name__", "?"))
    if ".<locals>." in qual:  # a builder made by a factory (one per function)
        qual = qual.split(".<locals>.", 1)[0] + "(...)"
    return getattr(spec, "found", "") or "by name", f"{getattr(build, '__module__', '?')}.{qual}"


def where(engine: Any, source: ReleaseSource, keep: Callable[[Bound], bool] = lambda b: True,
          bound: Sequence[Bound] | None = None) -> list[Location]:
    """Where each binding of ``engine`` lives in ``source`` (``bound``: its
    bindings, when already made)."""
    files = _Files(source)
    out = []
    for b in bound if bound is not None else bindings(engine, source, keep):
        found, binding = _builder(engine, b)
        path, _, qual = b.function.partition(":")
        d = files.find(b.function)
        out.append(Location(release=source.version, contract=b.contract, function=b.function, path=path,
                            qualname=qual.split("#", 1)[0], found=found, binding=binding, status=b.status,
                            reason=_first_line(b.reason), lines="{}-{}".format(*d.lines()) if d else "",
                            signature=d.signature() if d else "", assumed=tuple(getattr(b, "assumed", ()))))
    return out


def _first_line(text: str, limit: int = 200) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[:limit] + "..."


# ---------------------------------------------------------------- drift


@dataclass(frozen=True)
class Candidate:
    """A function of the newer release, with the share of the old one's distinctive names it holds."""

    function: str
    share: float


@dataclass(frozen=True)
class Drift:
    """One cell across two releases: its statuses and what became of its function."""

    function: str
    contract: str
    old: str  # the cell's binding status in the older release ("" when it has no such cell)
    new: str
    change: str
    now: str = ""  # where the function is in the newer release
    detail: str = ""
    went: tuple[Candidate, ...] = ()
    checked: tuple[str, ...] = ()  # the newer release's bound functions of the same contract


@dataclass(frozen=True)
class _Fate:
    """What became of one function in the newer release."""

    change: str
    now: str = ""
    detail: str = ""
    went: tuple[Candidate, ...] = ()


CHANGES = ("unchanged", "changed", "signature", "moved", "renamed", "removed", "added", "newly bound", "absent")


def _weights(defs: Iterable[Definition]) -> dict[str, float]:
    """Inverse document frequency of each name over ``defs``."""
    pool = list(defs)
    df: dict[str, int] = {}
    for d in pool:
        for n in d.names():
            df[n] = df.get(n, 0) + 1
    return {n: math.log(1 + len(pool) / c) for n, c in df.items()}


def _weigher(weights: dict[str, float]) -> Callable[[Iterable[str]], float]:
    top = max(weights.values(), default=1.0)  # a name the pool never uses is as rare as the rarest
    return lambda names: sum(weights.get(n, top) for n in names)


def similarity(a: frozenset[str], b: frozenset[str], weights: dict[str, float]) -> float:
    """Weighted Dice coefficient of two name sets: how alike two functions are."""
    w = _weigher(weights)
    total = w(a) + w(b)
    return 2 * w(a & b) / total if total else 0.0


def containment(a: frozenset[str], b: frozenset[str], weights: dict[str, float]) -> float:
    """The weighted share of ``a``'s names that ``b`` uses: how much of an old
    function's vocabulary a newer function holds (it may hold more)."""
    w = _weigher(weights)
    return w(a & b) / w(a) if a else 0.0


def _parameters(old: Definition, new: Definition) -> str:
    """What changed in the parameter list, "" when nothing did."""
    if old.signature() == new.signature():
        return ""
    a, b = ([x.arg for x in (*d.node.args.posonlyargs, *d.node.args.args, *d.node.args.kwonlyargs)] for d in (old, new))
    gone, came = [x for x in a if x not in b], [x for x in b if x not in a]
    if not gone and not came:
        return "parameters reordered, or their annotations or defaults changed"
    changes = [*(f"-{x}" for x in gone), *(f"+{x}" for x in came)]
    return "parameters " + " ".join(changes[:8]) + (f" (and {len(changes) - 8} more)" if len(changes) > 8 else "")


def _compare(old: Definition, new: Definition) -> tuple[str, str]:
    """(change, detail) of a function found again in the newer release."""
    notes = [_parameters(old, new)] if old.signature() != new.signature() else []
    gained, lost = sorted(new.reads() - old.reads()), sorted(old.reads() - new.reads())
    if gained:
        notes.append("now reads " + ", ".join(gained[:6]) + (" ..." if len(gained) > 6 else ""))
    if lost:
        notes.append("no longer reads " + ", ".join(lost[:6]) + (" ..." if len(lost) > 6 else ""))
    if old.code() == new.code():
        return "unchanged", ""
    a, b = old.lines(), new.lines()
    notes.append(f"{a[1] - a[0] + 1} -> {b[1] - b[0] + 1} lines")
    return ("signature" if old.signature() != new.signature() else "changed"), "; ".join(notes)


def _by_name(files: _Files, old: Definition) -> list[Definition]:
    """The newer release's functions of the same name, any file."""
    return [d for path in files.defining(old.name) for d in files.defs(path).values() if d.name == old.name]


def _pool(files: _Files, old: Definition) -> list[Definition]:
    """The newer release's functions that may hold a removed one's behaviour:
    those of the files holding most of its long names (docs/where-it-lives.md)."""
    names = old.names()
    long = sorted((n for n in names if len(n) >= LONG_NAME), key=lambda n: (-len(n), n))[:40] or sorted(names)
    need = max(2, math.ceil(FILE_SHARE * len(long))) if len(long) >= 2 else 1
    hits = []
    for path, text in files.texts():
        k = sum(n in text for n in long)
        if k >= need:
            hits.append((-k, path))
    paths = dict.fromkeys([old.path, *(path for _, path in sorted(hits)[:MAX_FILES])])
    return [d for path in paths for d in files.defs(path).values()]


def follow(old: Definition, files: _Files, old_files: _Files) -> _Fate:
    """What became of ``old`` (of ``old_files``) in the newer release (``files``)."""
    same = files.defs(old.path).get(old.qualname)
    if same is not None:
        change, detail = _compare(old, same)
        return _Fate(change, now=same.function, detail=detail)
    named = _by_name(files, old)
    if named:
        weights = _weights(named)
        exact = [d for d in named if d.qualname == old.qualname]
        best = max(exact or named, key=lambda d: containment(old.names(), d.names(), weights))
        score = containment(old.names(), best.names(), weights)
        if exact or score >= MOVE_SHARE:  # a common method name in another class is no move by itself
            _change, detail = _compare(old, best)
            how = "the same qualified name" if exact else f"the same name, now in {best.owner or 'the module'}"
            note = f"{how} in another file, holding {score:.2f} of its distinctive names"
            return _Fate("moved", now=best.function, detail="; ".join(filter(None, (note, detail))))
    pool = list({d.function: d for d in [*_pool(files, old), *named]}.values())
    structure = old.structure()
    twin = next((d for d in pool if d.structure() == structure), None)
    if twin is not None:
        return _Fate("renamed", now=twin.function, detail="the same code under another name")
    weights = _weights(pool)
    for d in pool:  # a new name where the old one was, and much the same code
        near = d.path == old.path or (old.owner and d.owner == old.owner)
        score = similarity(old.names(), d.names(), weights)
        if near and score >= RENAME_SIMILARITY and old_files.find(d.function) is None:
            _change, detail = _compare(old, d)
            return _Fate("renamed", now=d.function, detail="; ".join(filter(None, (f"similarity {score:.2f}", detail))))
    ranked = sorted(((containment(old.names(), d.names(), weights), d) for d in pool), key=lambda p: (-p[0], p[1].function))
    went = tuple(Candidate(d.function, round(s, 2)) for s, d in ranked[:CANDIDATES] if s >= WENT_SHARE)
    where_ = "its file is gone" if old_files.source.read(old.path) is not None and files.source.read(old.path) is None \
        else "no function of that name is left"
    return _Fate("removed", detail=where_, went=went)


def drift(engine: Any, older: ReleaseSource, newer: ReleaseSource, keep: Callable[[Bound], bool] = lambda b: True,
          bound: tuple[Sequence[Bound], Sequence[Bound]] | None = None, search: bool = True) -> list[Drift]:
    """Every cell of either release (older's first, then the newer's own),
    with what became of its function (``bound``: both releases' bindings,
    when already made; else made with ``keep`` and ``search`` as :func:`bindings` takes them)."""
    a, b = bound if bound is not None else (bindings(engine, older, keep, search), bindings(engine, newer, keep, search))
    old_status = {(x.function, x.contract): x.status for x in a}
    new_status = {(x.function, x.contract): x.status for x in b}
    old_files, new_files = _Files(older), _Files(newer)
    memo: dict[str, _Fate] = {}
    out = []
    for key in dict.fromkeys([*old_status, *new_status]):
        function, contract = key
        cell = (function, contract, old_status.get(key, ""), new_status.get(key, ""))
        d = old_files.find(function)
        if d is None:  # a function the older release does not define
            now = _now(new_files, function)
            change, detail = ("added", f"not in {older.version}") if now else ("absent", "in neither release")
            out.append(Drift(*cell, change=change, now=now, detail=detail))
            continue
        if d.function not in memo:
            memo[d.function] = follow(d, new_files, old_files)
        f = memo[d.function]
        if key in old_status:
            out.append(Drift(*cell, change=f.change, now=f.now, detail=f.detail, went=f.went))
        else:  # defined before, bound only now
            detail = f"defined in {older.version}, not bound there; since: {f.change}"
            out.append(Drift(*cell, change="newly bound", now=f.now, detail="; ".join(filter(None, (detail, f.detail))),
                             went=f.went))
    came = {f.now: old for old, f in memo.items() if f.change in ("moved", "renamed") and f.now}
    out = [dataclasses.replace(d, detail=f"not in {older.version}: where {came[d.now]} went")
           if d.change == "added" and d.now in came else d for d in out]
    checked: dict[str, list[str]] = {}
    for x in b:
        if x.status == "bound":
            checked.setdefault(x.contract, []).append(x.function)
    return [dataclasses.replace(d, checked=tuple(checked.get(d.contract, ()))) if d.change == "removed" else d for d in out]


def _now(files: _Files, function: str) -> str:
    d = files.find(function)
    return d.function if d else ""


# ---------------------------------------------------------------- tables


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def where_markdown(locations: Sequence[Location], title: str) -> str:
    """The "where it lives" table of one release."""
    out = [f"## {title}", "", "| contract | file | function | lines | found | binding | status |",
           "|---|---|---|---|---|---|---|"]
    for loc in locations:
        status = loc.status + (f": {loc.reason}" if loc.reason else "")
        if loc.assumed:
            status += " (assumed: " + "; ".join(loc.assumed) + ")"
        qual = loc.function.partition(":")[2]
        out.append(f"| {loc.contract} | `{loc.path}` | `{_cell(qual)}` | {loc.lines or '-'} | {_cell(loc.found)} | "
                   f"`{loc.binding}` | {_cell(status)} |")
    return "\n".join(out) + "\n"


def drift_markdown(drifts: Sequence[Drift], older: str, newer: str) -> str:
    """The drift report of two releases: a row per cell, then where each removed function's behaviour went."""
    counts = {c: sum(d.change == c for d in drifts) for c in CHANGES}
    out = [f"## {older} -> {newer}", "", f"{len(drifts)} cells: " + ", ".join(f"{n} {c}" for c, n in counts.items() if n) + ".",
           "", f"| function ({older}) | contract | {older} | {newer} | change | in {newer} | detail |",
           "|---|---|---|---|---|---|---|"]
    for d in drifts:
        now = "" if d.now == d.function.split("#", 1)[0] else d.now
        out.append(f"| `{_cell(d.function)}` | {d.contract} | {d.old or '-'} | {d.new or '-'} | {d.change} | "
                   f"{'`' + _cell(now) + '`' if now else ''} | {_cell(d.detail)} |")
    removed = {d.function.split("#", 1)[0]: d for d in drifts if d.change == "removed"}
    if removed:
        out += ["", f"### Where the removed functions' behaviour went (candidates in {newer})", ""]
        for function, d in removed.items():
            went = "; ".join(f"`{c.function}` ({c.share:.2f})" for c in d.went) or \
                f"no function of {newer} holds {WENT_SHARE} of its distinctive names"
            out.append(f"- `{function}`: {went}")
        out += ["", f"The functions bound to the same contract in {newer}, where the engine's bindings check that "
                "contract now:", ""]
        for contract in dict.fromkeys(d.contract for d in drifts if d.change == "removed"):
            d = next(x for x in drifts if x.change == "removed" and x.contract == contract)
            shown = ", ".join(f"`{f}`" for f in d.checked[:6]) + (f" and {len(d.checked) - 6} more" if len(d.checked) > 6 else "")
            out.append(f"- {contract}: {shown or 'none'}")
    return "\n".join(out) + "\n"
