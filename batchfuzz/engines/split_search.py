"""Every copy of the dummy token split in a release's source, found by the
shape of its code and bound to contract A (``split_dummy_tokens``).

An engine spreads ``N`` tokens over ``R`` requests wherever it builds a dummy
batch (input batch, dummy runs, LoRA capture, pooling warm-up), and the copies
drift apart: a fix lands in some and not in others. This module finds them
without a list of names, by a search over each function's syntax tree
(docs/split-copies.md states the rule and what it misses):

1. a *division pair* ``(X, Y)``: the function's own code (comprehensions
   included, nested functions searched as functions of their own) holds
   both a quotient of ``X`` by ``Y`` and the remainder of the same pair:
   ``X // Y`` and ``X % Y``, or ``divmod(X, Y)`` (a *floor* split), or a
   ceiling division ``cdiv(X, Y)``/``ceil_div``/``div_ceil``/
   ``math.ceil(X / Y)``/``-(X // -Y)``/``(X + Y - 1) // Y`` with
   ``X % Y`` (a *ceil* split);
2. a *per-request container* ``C``: a name assigned a sequence with one entry
   per request, ``np.full(L, v)``/``zeros``/``ones``/``empty`` (numpy or torch,
   ``L`` or ``(L,)``), ``[v] * L`` or ``[e for i in range(L)]``, whose length
   ``L`` is ``Y`` for a floor split, or a name computed from the ceiling
   division for a ceil split;
3. the *split's statements*: in the block (statement list) where ``C`` is
   assigned, that assignment, every later statement of the block that writes
   ``C`` (a compound statement holding such a write is taken whole), and,
   backwards, the statements of the block that compute what they read; the
   site counts only when these statements hold both the quotient (or the
   ceiling) and the remainder of the pair.

A floor site whose ``X`` and ``Y`` are plain names and whose statements read
no other local of the function is bound: its statements are compiled as a
fragment given ``X = N`` and ``Y = R`` (``batchfuzz.bind.Loader``), and
``C`` after them is the split. Any other site is reported with the reason it
cannot be bound (a ceil split fixes tokens per request, not the request
count; an operand that is an expression; a local computed elsewhere).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from batchfuzz import bind
from batchfuzz.engines import ReleaseSource, cache_dir

CONTRACT = "split_dummy_tokens"

_CONTAINER_CALLS = frozenset({"full", "zeros", "ones", "empty"})
_CEIL_CALLS = frozenset({"cdiv", "ceil_div", "div_ceil", "ceildiv"})
_FLOOR_BY = re.compile(r"//\s*([A-Za-z_][\w.]*)")


@dataclass(frozen=True)
class SplitSite:
    """One copy of the split: where it is, its operands, its statements.

    ``tokens`` and ``requests`` are the source text of ``X`` and ``Y``;
    ``counts`` is the container's name; ``line`` the line of the quotient;
    ``problem`` says why the site cannot be bound ("" when it can).
    """

    path: str
    qualname: str
    line: int
    kind: str
    tokens: str
    requests: str
    counts: str
    statements: tuple[ast.stmt, ...]
    problem: str = ""

    @property
    def function(self) -> str:
        """The site's name in a ``Bound`` and a matrix row:
        ``path:qualname#counts=tokens/requests`` (stable across releases
        while the names stay)."""
        return f"{self.path}:{self.qualname}#{self.counts}={self.tokens}/{self.requests}"

    @property
    def lines(self) -> tuple[int, int]:
        return (min(s.lineno for s in self.statements), max(s.end_lineno or s.lineno for s in self.statements))

    def describe(self) -> str:
        first, last = self.lines
        return (f"{self.path}:{self.qualname}, lines {first}-{last}: {self.kind} split of {self.tokens} over "
                f"{self.requests} into {self.counts}")


# ---------------------------------------------------------------- walking the tree


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's own code: not entering nested functions,
    lambdas or classes (comprehensions are entered)."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        todo.extend(ast.iter_child_nodes(n))


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function of a module with its qualified name (``Class.method``,
    ``outer.<locals>.inner``)."""
    def walk(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef):
                yield from walk(stmt.body, f"{prefix}{stmt.name}.")
            elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{stmt.name}"
                yield name, stmt
                inner = [n for n in _own_nodes(stmt) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
                yield from walk(inner, f"{name}.<locals>.")  # type: ignore[arg-type]
    yield from walk(tree.body, "")


def _key(expr: ast.expr) -> str:
    return ast.dump(expr)


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _ceil_pair(n: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    """``(X, Y)`` when ``n`` is a ceiling division of X by Y."""
    if isinstance(n, ast.Call) and len(n.args) == 2 and _callee(n) in _CEIL_CALLS:
        return n.args[0], n.args[1]
    if (isinstance(n, ast.Call) and _callee(n) == "ceil" and len(n.args) == 1 and isinstance(n.args[0], ast.BinOp)
            and isinstance(n.args[0].op, ast.Div)):
        return n.args[0].left, n.args[0].right
    if (isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and isinstance(n.operand, ast.BinOp)
            and isinstance(n.operand.op, ast.FloorDiv) and isinstance(n.operand.right, ast.UnaryOp)
            and isinstance(n.operand.right.op, ast.USub)):
        return n.operand.left, n.operand.right.operand
    if isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv):
        left = n.left
        # (X + Y - 1) // Y
        if (isinstance(left, ast.BinOp) and isinstance(left.op, ast.Sub) and isinstance(left.right, ast.Constant)
                and left.right.value == 1 and isinstance(left.left, ast.BinOp) and isinstance(left.left.op, ast.Add)
                and _key(left.left.right) == _key(n.right)):
            return left.left.left, n.right
    return None


def _divisions(nodes: list[ast.AST]) -> tuple[dict[tuple[str, str], tuple[ast.expr, ast.expr, int]], set[tuple[str, str]],
                                               dict[tuple[str, str], tuple[ast.expr, ast.expr, int]]]:
    """The floor quotients, remainders and ceiling divisions among ``nodes``,
    by operand pair (first occurrence's operands and line)."""
    floors: dict[tuple[str, str], tuple[ast.expr, ast.expr, int]] = {}
    mods: set[tuple[str, str]] = set()
    ceils: dict[tuple[str, str], tuple[ast.expr, ast.expr, int]] = {}
    for n in nodes:
        pair = _ceil_pair(n)
        if pair is not None:
            ceils.setdefault((_key(pair[0]), _key(pair[1])), (pair[0], pair[1], getattr(n, "lineno", 0)))
            continue
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv | ast.Mod):
            k = (_key(n.left), _key(n.right))
            if isinstance(n.op, ast.Mod):
                mods.add(k)
            elif not (isinstance(n.right, ast.UnaryOp) and isinstance(n.right.op, ast.USub)):
                floors.setdefault(k, (n.left, n.right, n.lineno))
        elif isinstance(n, ast.Call) and _callee(n) == "divmod" and len(n.args) == 2:
            k = (_key(n.args[0]), _key(n.args[1]))
            floors.setdefault(k, (n.args[0], n.args[1], n.lineno))
            mods.add(k)
    return floors, mods, ceils


def _container_length(value: ast.expr) -> ast.expr | None:
    """``L`` when ``value`` builds one entry per request of ``L`` requests."""
    if isinstance(value, ast.Call) and _callee(value) in _CONTAINER_CALLS and value.args:
        first = value.args[0]
        if isinstance(first, ast.Tuple) and len(first.elts) == 1:
            return first.elts[0]
        return None if isinstance(first, ast.Tuple | ast.List) else first
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult):
        if isinstance(value.left, ast.List) and len(value.left.elts) == 1:
            return value.right
        if isinstance(value.right, ast.List) and len(value.right.elts) == 1:
            return value.left
    if isinstance(value, ast.ListComp) and len(value.generators) == 1:
        it = value.generators[0].iter
        if isinstance(it, ast.Call) and _callee(it) == "range" and len(it.args) == 1:
            return it.args[0]
    return None


# ---------------------------------------------------------------- statements and names


def _blocks(stmt: ast.stmt) -> Iterator[list[ast.stmt]]:
    for f in ("body", "orelse", "finalbody"):
        block = getattr(stmt, f, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    for h in getattr(stmt, "handlers", None) or ():
        yield h.body
    for c in getattr(stmt, "cases", None) or ():
        yield c.body


def _statement_blocks(body: list[ast.stmt]) -> Iterator[list[ast.stmt]]:
    """Every statement list of a function, the body first (not entering nested definitions)."""
    yield body
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for block in _blocks(stmt):
            yield from _statement_blocks(block)


def _comprehension_names(stmt: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(stmt):
        if isinstance(n, ast.comprehension):
            out |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
    return out


def _stores(stmt: ast.AST) -> set[str]:
    return {n.id for n in _own_nodes(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} - _comprehension_names(stmt)


def _reads(stmt: ast.AST) -> set[str]:
    return {n.id for n in _own_nodes(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - _comprehension_names(stmt)


def _loop_names(stmt: ast.AST) -> set[str]:
    """The names a ``for`` inside ``stmt`` binds: the loop sets them before its body reads them."""
    return {t.id for n in ast.walk(stmt) if isinstance(n, (ast.For, ast.AsyncFor))
            for t in ast.walk(n.target) if isinstance(t, ast.Name)}


def _writes(stmt: ast.stmt, name: str) -> bool:
    """``stmt`` writes ``name`` (``bind.Writes``), or is a compound statement holding such a write."""
    pattern = bind.Writes(name)
    if any(True for _ in _blocks(stmt)):
        return any(_writes(s, name) for block in _blocks(stmt) for s in block)
    return pattern.matches(stmt)


def _slice(block: list[ast.stmt], index: int, counts: str, given: set[str]) -> list[ast.stmt]:
    """The split's statements in ``block``: the container's assignment at
    ``index``, the later statements that write it, and backwards what they
    read (names in ``given`` are inputs)."""
    chosen = {index} | {i for i in range(index + 1, len(block)) if _writes(block[i], counts)}
    work = sorted(chosen)
    while work:
        i = work.pop()
        for name in _reads(block[i]) - given:
            for j in range(i - 1, -1, -1):
                if name in _stores(block[j]):
                    if j not in chosen:
                        chosen.add(j)
                        work.append(j)
                    break
    return [block[i] for i in sorted(chosen)]


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return set(names)


def _holds(stmts: list[ast.stmt], pair: tuple[str, str], what: str) -> bool:
    nodes = [n for s in stmts for n in _own_nodes(s)] + list(stmts)
    floors, mods, ceils = _divisions(nodes)
    if what == "floor":
        return pair in floors
    if what == "ceil":
        return pair in ceils
    return pair in mods


# ---------------------------------------------------------------- the search


def _sites_in_function(path: str, qualname: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[SplitSite]:
    own = list(_own_nodes(fn))
    floors, mods, ceils = _divisions(own)
    pairs = [(k, "floor", v) for k, v in floors.items() if k in mods]
    pairs += [(k, "ceil", v) for k, v in ceils.items() if k in mods and k not in floors]
    # A literal operand is a fixed width (bytes, lanes), not a count.
    pairs = [p for p in pairs if not any(isinstance(e, ast.Constant) for e in p[2][:2])]
    if not pairs:
        return []
    locals_ = _params(fn) | {n for s in fn.body for n in _stores(s)}
    found: dict[tuple[str, tuple[str, str]], SplitSite] = {}
    for block in _statement_blocks(fn.body):
        for i, stmt in enumerate(block):
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
                continue
            length = _container_length(stmt.value)
            if length is None:
                continue
            counts = stmt.targets[0].id
            for pair, kind, (x, y, line) in pairs:
                given = {e.id for e in (x, y) if isinstance(e, ast.Name)}
                if kind == "floor":
                    if _key(length) != pair[1]:
                        continue
                    stmts = _slice(block, i, counts, given)
                    if not (_holds(stmts, pair, "floor") and _holds(stmts, pair, "mod")):
                        continue
                else:  # ceil: the length is a name the block sets from the ceiling division
                    if not isinstance(length, ast.Name):
                        continue
                    sizing = [s for s in block[:i] if length.id in _stores(s)][-1:]
                    stmts = _slice(block, i, counts, given | {length.id})
                    if not (sizing and _holds(sizing, pair, "ceil") and _holds(stmts, pair, "mod")):
                        continue
                    stmts = sorted({*stmts, *sizing}, key=lambda s: (s.lineno, s.col_offset))
                problem = ""
                if kind == "ceil":
                    problem = (f"a ceil split: the request count is ceil({ast.unparse(x)} / {ast.unparse(y)}), "
                               f"{ast.unparse(y)} tokens per request; contract A takes the request count as given")
                elif not all(isinstance(e, ast.Name) for e in (x, y)):
                    odd = next(e for e in (x, y) if not isinstance(e, ast.Name))
                    problem = f"the operand {ast.unparse(odd)} is an expression, not a name the statements can be given"
                else:
                    defined: set[str] = set()
                    for s in stmts:
                        outside = sorted((_reads(s) - defined - given - _loop_names(s)) & locals_)
                        if outside:
                            problem = (f"line {s.lineno} reads {', '.join(outside)}: parameter(s) or local(s) of "
                                       f"{qualname} besides the two counts, set outside the split's statements")
                            break
                        defined |= _stores(s)
                site = SplitSite(path, qualname, line, kind, ast.unparse(x), ast.unparse(y), counts, tuple(stmts), problem)
                key = (counts, pair)
                if key not in found or (found[key].problem and not problem):
                    found[key] = site
    return list(found.values())


_NAME = r"([A-Za-z_][\w.]*)"
_DIVISORS = (
    re.compile(r"//\s*" + _NAME),                                          # X // Y, (X + Y - 1) // Y
    re.compile(r"//\s*-\s*" + _NAME),                                      # -(X // -Y)
    re.compile(r"(?:" + "|".join(sorted(_CEIL_CALLS)) + r")\([^()]*,\s*" + _NAME + r"\s*\)"),  # cdiv(X, Y)
    re.compile(r"ceil\([^()]*/\s*" + _NAME + r"\s*\)"),                   # math.ceil(X / Y)
)


def _may_hold_split(text: str) -> bool:
    """A text test that a file with a site always passes (so the search
    parses only the files that pass it): a ``divmod(``, or a divisor ``Y``
    (a name or dotted name) of one of the quotient forms that also appears
    after a ``%``."""
    if "divmod(" in text:
        return True
    for pattern in _DIVISORS:
        for y in {m.group(1) for m in pattern.finditer(text)}:
            if re.search(r"%\s*" + re.escape(y) + r"\b", text):
                return True
    return False


def search_text(path: str, text: str) -> list[SplitSite]:
    """The split sites of one file's text (``path`` names it in the sites)."""
    if not _may_hold_split(text):
        return []
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError:
        return []
    out: list[SplitSite] = []
    for qualname, fn in _functions(tree):
        out.extend(_sites_in_function(path, qualname, fn))
    return sorted(out, key=lambda s: (s.path, s.line, s.counts))


def search(source: ReleaseSource, under: str = "") -> list[SplitSite]:
    """Every split site in the release's Python files under ``under``
    (default: the whole package), in path and line order. For a wheel (which
    never changes) the files that hold sites are remembered in the cache
    (``batchfuzz.engines.cache_dir()/split-search``), so a later search
    parses only those."""
    if not isinstance(source, ReleaseSource):
        raise TypeError(f"source must be a ReleaseSource, got {type(source).__name__}")
    paths = source.paths(under)
    memo = _memo_file(source, under)
    if memo is not None and memo.is_file():
        try:
            paths = [p for p in json.loads(memo.read_text(encoding="utf-8"))["paths"] if p in set(paths)]
        except (ValueError, KeyError, TypeError):
            pass  # a damaged memo: search every file again
    out: list[SplitSite] = []
    for path in paths:
        text = source.read(path)
        if text is not None:
            out.extend(search_text(path, text))
    if memo is not None:
        memo.parent.mkdir(parents=True, exist_ok=True)
        memo.write_text(json.dumps({"ref": source.ref, "under": under, "paths": sorted({s.path for s in out})}), encoding="utf-8")
    return out


def _memo_file(source: ReleaseSource, under: str) -> Path | None:
    """Where the search of a wheel remembers its files (None for other sources)."""
    if not source.ref.startswith("wheel:"):
        return None
    wheel = Path(source.ref.partition(":")[2])
    try:
        stat = wheel.stat()
    except OSError:
        return None
    # The search's own code is part of the key: a changed rule searches every file again.
    rule = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    digest = hashlib.sha256(f"{rule}|{wheel}|{stat.st_size}|{stat.st_mtime_ns}|{under}".encode()).hexdigest()[:24]
    return cache_dir() / "split-search" / f"{digest}.json"


# ---------------------------------------------------------------- binding a site to contract A

PROBE = (3, 5)  # the bind-time dry run's input: num_reqs, num_tokens
_TOKEN_WORD = re.compile(r"tok", re.IGNORECASE)
_REQUEST_WORD = re.compile(r"req|seq", re.IGNORECASE)


def not_a_token_split(site: SplitSite) -> str:
    """Why ``site`` is not a split of tokens over requests ("" when it may
    be). It may be when its dividend ``X`` names tokens (an identifier
    holding ``tok``), its divisor ``Y`` names requests (``req``, ``seq``),
    or both are one-letter names (``n // r``: the names say nothing);
    otherwise the names say it divides something else (pipeline-parallel
    layers over ranks, CPU ids over workers, a kernel's tiles) and contract
    A does not apply: the row says so and is no finding."""
    def names(text: str) -> list[str]:
        return re.findall(r"[A-Za-z_]\w*", text)

    xs, ys = names(site.tokens), names(site.requests)
    if any(_TOKEN_WORD.search(n) for n in xs) or any(_REQUEST_WORD.search(n) for n in ys):
        return ""
    if len(xs) == len(ys) == 1 and len(xs[0]) == len(ys[0]) == 1:
        return ""
    return (f"not a token split: {site.describe()}; neither {site.tokens} names tokens nor {site.requests} requests, so "
            f"contract {CONTRACT} (tokens over requests) does not apply")


def bind_site(site: SplitSite, loader: bind.Loader) -> Callable[..., np.ndarray]:
    """The site as a ``split_dummy_tokens(num_reqs, num_tokens)`` target: its
    statements compiled by ``loader``, given ``X = N`` and ``Y = R``; raises
    ``bind.Unbindable`` with the site's problem when it has one."""
    if site.problem:
        raise bind.Unbindable(f"{site.describe()}: {site.problem}")
    piece = bind.Piece(site.path, site.qualname, "fragment", site.statements, params=(site.tokens, site.requests),
                       note=f"the {len(site.statements)} statement(s) computing {site.counts}")
    run = loader.load(piece)
    counts = site.counts

    def split_dummy_tokens(num_reqs: Any, num_tokens: Any) -> np.ndarray:
        r = bind.count("num_reqs", num_reqs, 1)
        n = bind.count("num_tokens", num_tokens, 1)
        if r > n:
            raise ValueError(f"num_reqs must be <= num_tokens, got num_reqs={r}, num_tokens={n}")
        return np.asarray(bind.to_numpy(run(n, r)[counts])).copy()

    return split_dummy_tokens


def find(source: ReleaseSource, function: str) -> SplitSite:
    """The site named ``function`` (``SplitSite.function``), searching only its file."""
    path, sep, rest = function.partition(":")
    if not sep or "#" not in rest:
        raise LookupError(f"{function!r} does not name a split site (PATH:QUALNAME#COUNTS=TOKENS/REQUESTS)")
    text = source.read(path)
    if text is None:
        raise LookupError(f"{path} is not in {source!r}")
    for site in search_text(path, text):
        if site.function == function:
            return site
    raise LookupError(f"{path} has no split site {function!r} in {source!r}")
