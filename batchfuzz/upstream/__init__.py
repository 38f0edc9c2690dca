"""From a failing matrix cell to a report an engine's maintainers can act on.

A report (``report``) is one Markdown text fit for an upstream issue: the
engine, release, file and function; the rule in the engine's own words,
quoted briefly from the release's source at run time (never stored here);
the property broken, its label (a *safety* property, or the engine's
*documented choice* where it may answer in more than one safe way) and why
it matters; the shrunk case; and a reproduction that cuts the function out
of the engine's own source text and asserts, with no batchfuzz import.

``check_patch`` applies a unified diff to a temporary copy of the files it
touches and runs the reproduction on the release and on the patched copy:
the fix is shown to remove the failure the reproduction asserts.

The findings with a report are in ``batchfuzz.upstream.findings``;
docs/upstream-reports.md says what a report holds and where it stops.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchfuzz.engines import ReleaseSource, SourceError
from batchfuzz.upstream.findings import FINDINGS, Finding, Quote

__all__ = ["FINDINGS", "Finding", "PatchResult", "Quote", "apply_patch", "check_patch", "engine_module", "finding", "quote",
           "release_source", "report", "reproduction", "touched"]

_QUOTE_LINES = 2  # a quote is a line or two of the engine's text
_QUOTE_CHARS = 200  # characters of one quoted line


def finding(key: str) -> Finding:
    """The finding called ``key``; ValueError naming it and the known ones."""
    for f in FINDINGS:
        if f.key == key:
            return f
    raise ValueError(f"unknown finding {key!r}; known: {', '.join(f.key for f in FINDINGS)}")


def release_source(f: Finding, version: str | None = None) -> ReleaseSource:
    """The release ``version`` (default: the finding's) of ``f``'s engine, its
    wheel from the cache or the registry (SourceError when neither has it)."""
    from batchfuzz.engines import fetch_wheel

    kind = engine_module(f).ReleaseSource
    return kind.from_wheel(fetch_wheel(kind.distribution, version or f.release))


def engine_module(f: Finding) -> Any:
    """The registered engine module of ``f``'s engine (its ReleaseSource kind)."""
    from batchfuzz import engines

    return engines.engine(f.package)


def _node(tree: ast.AST, qualname: str) -> ast.AST | None:
    node = tree
    for name in qualname.split("."):
        found = next((n for n in ast.iter_child_nodes(node) if getattr(n, "name", None) == name), None)
        if found is None:
            return None
        node = found
    return node


def _bounded(lines: list[str]) -> str:
    """At most a line or two, marked where cut mid-sentence; backticks made
    quotes so that the text cannot close a Markdown span."""
    text = " ".join([ln.strip()[:_QUOTE_CHARS] for ln in lines if ln.strip()][:_QUOTE_LINES])
    return (text if text.endswith(".") or not text else text + " [...]").replace("`", "'")


def quote(source: ReleaseSource, q: Quote) -> str:
    """A line or two of the engine's own text for ``q``: the docstring of
    ``q.qualname``, or the comment just above the first line of it holding
    ``q.needle``. Raises SourceError when the release does not have it (the
    report would otherwise quote nothing)."""
    text = source.read(q.path)
    if text is None:
        raise SourceError(f"{source.ref} has no {q.path}")
    node = _node(ast.parse(text), q.qualname)
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        raise SourceError(f"{q.path} of {source.ref} has no {q.qualname}")
    if q.needle is None:
        doc = ast.get_docstring(node) or ""
        found = _bounded(doc.splitlines())
    else:
        lines = text.splitlines()[node.lineno - 1:node.end_lineno]
        at = next((i for i, ln in enumerate(lines) if q.needle in ln), None)
        above: list[str] = []
        while at is not None and at > 0 and lines[at - 1].strip().startswith("#"):
            at -= 1
            above.insert(0, lines[at].strip().lstrip("#"))
        found = _bounded(above)
    if not found:
        raise SourceError(f"{q.qualname} in {q.path} of {source.ref} has no {'docstring' if q.needle is None else 'comment'} "
                          "to quote")
    return found


def reproduction(f: Finding) -> str:
    """The reproduction script: the finding's body after the shared header
    that cuts a function out of the engine's source."""
    return _HEADER.format(package=f.package) + "\n\n" + f.script.strip() + "\n"


def report(f: Finding, source: ReleaseSource) -> str:
    """The Markdown report of ``f`` on ``source`` (normally the finding's release)."""
    label = {"safety": "a safety property", "choice": "a documented choice: one of several safe answers, see below"}[f.label]
    rules = "\n".join(f"- {q.where} (`{q.path}`, `{q.qualname}`): \"{quote(source, q)}\"" for q in f.rule)
    tracker = "" if f.tracker is None else _TRACKER.format(t=f.tracker)
    kernel = f"\n**What the kernel does with it:** {f.kernel}\n" if f.kernel else ""
    checked = _CHECKED.format(f=f) if f.checked else ""
    return _REPORT.format(f=f, version=source.version, label=label, rules=rules, script=reproduction(f).rstrip(),
                          tracker=tracker, kernel=kernel, checked=checked)


@dataclass(frozen=True)
class PatchResult:
    """The reproduction's exit status on the release and on the patched copy."""

    before: int
    after: int
    output_after: str

    @property
    def fixed(self) -> bool:
        return self.before != 0 and self.after == 0


def touched(diff: str) -> list[str]:
    """The files a unified diff changes, as paths under the source root (``a/``, ``b/`` dropped)."""
    paths = re.findall(r"^\+\+\+ (?:b/)?(\S+)", diff, flags=re.MULTILINE)
    return [p for p in paths if p != "/dev/null"]


def _copy(source: ReleaseSource, root: Path, paths: list[str]) -> None:
    for rel in paths:
        text = source.read(rel)
        if text is None:
            raise SourceError(f"{source.ref} has no {rel} (named by the patch or the finding)")
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def apply_patch(diff: str, root: Path, ref: str) -> None:
    """Apply ``diff`` (``patch -p1``) to the tree at ``root``; ValueError with
    patch's last words when it does not apply to the release ``ref``."""
    applied = subprocess.run(["patch", "-p1", "--batch", "--forward", "-d", str(root)], input=diff.rstrip("\n") + "\n",
                             capture_output=True, text=True, timeout=60)
    if applied.returncode != 0:
        raise ValueError(f"the patch does not apply to {ref}: {(applied.stdout + applied.stderr)[-400:]}")


def _run(script: Path, root: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), str(root)], capture_output=True, text=True, timeout=timeout_s,
                          cwd=root, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def check_patch(f: Finding, source: ReleaseSource, diff: str, timeout_s: float = 120) -> PatchResult:
    """Run ``f``'s reproduction on the release's files and on a copy with
    ``diff`` applied (``patch -p1``). Raises ValueError when the diff touches
    no file or does not apply, naming what patch said."""
    touched_files = touched(diff)
    if not touched_files:
        raise ValueError("the patch names no file to change (no '+++ b/PATH' line)")
    with tempfile.TemporaryDirectory(prefix="batchfuzz-upstream-") as tmp:
        base, patched = Path(tmp, "release"), Path(tmp, "patched")
        for root in (base, patched):
            _copy(source, root, sorted({*touched_files, *f.files}))
        apply_patch(diff, patched, source.ref)
        script = Path(tmp, "reproduce.py")
        script.write_text(reproduction(f), encoding="utf-8")
        before, after = _run(script, base, timeout_s), _run(script, patched, timeout_s)
        return PatchResult(before.returncode, after.returncode, (after.stdout + after.stderr)[-2000:])


_HEADER = '''\
# A self-contained reproduction: it needs Python, numpy and torch, and the
# engine's source: a checkout or unpacked wheel given as the first argument,
# else the installed {package}. Nothing else of the engine is imported.
import __future__
import ast
import importlib.util
import os
import sys


def engine_file(relpath):
    """The engine's file: under the directory given as the first argument,
    else in the installed package (found without importing it)."""
    if len(sys.argv) > 1:
        root = sys.argv[1]
    else:
        spec = importlib.util.find_spec({package!r})
        if spec is None or spec.origin is None:
            sys.exit("{package} is not installed: give a source checkout or an unpacked wheel as the first argument")
        root = os.path.dirname(os.path.dirname(spec.origin))
    path = os.path.join(root, relpath)
    with open(path, encoding="utf-8") as f:
        return path, f.read()


def engine_function(relpath, qualname, namespace):
    """FUNCTION or CLASS.METHOD, compiled from the engine's own text in
    ``namespace`` (decorators dropped, annotations left unevaluated), so
    that the module's other imports are not needed."""
    path, text = engine_file(relpath)
    node = ast.parse(text, path)
    for name in qualname.split("."):
        node = next(n for n in ast.iter_child_nodes(node) if getattr(n, "name", None) == name)
    node.decorator_list = []
    code = compile(ast.Module(body=[node], type_ignores=[]), path, "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)
    return namespace[node.name]'''


_TRACKER = """
**The fix proposed upstream** ({t.url}), as a diff against the release: {t.note}

```diff
{t.diff}
```
"""

_CHECKED = """
**The fix, checked** (batchfuzz's `--patch` and `--cells` on the diff above: every property of every batchfuzz cell of
the touched files, on the release's files and on a copy with the fix applied, and the shrunk case of every finding
there, replayed): {f.checked}
"""

_REPORT = """\
# {f.engine} {version}: {f.title}

**Where:** `{f.path}`, `{f.qualname}` ({f.engine} {version}).

**The rule, in the engine's own words** (quoted from {f.engine} {version}):
{rules}

**What goes wrong** (property `{f.prop}` of batchfuzz's contract `{f.contract}`, {label}):
{f.broken}

**Smallest case:** {f.case}

**Why it matters:** {f.matters}

**Realizable:** {f.realizable}
{kernel}
**Reproduction.** Save as `reproduce.py` and run `python reproduce.py [SOURCE_ROOT]`
(`SOURCE_ROOT`: a checkout or unpacked wheel holding `{f.package}/`; without it, the installed {f.package}).
It fails with an `AssertionError` while the bug is there and passes once it is fixed:

```python
{script}
```

**Smallest fix we can state:**

```diff
{f.fix}
```
{checked}{tracker}
*Found by batchfuzz (property-based checking of engines' batch metadata); the function runs from the release's
own source, as the reproduction shows.*
"""
