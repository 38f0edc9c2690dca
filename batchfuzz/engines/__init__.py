"""Engines' own functions as batchfuzz targets, read from a release's source.

A module per engine (``batchfuzz.engines.vllm``; others through the
``batchfuzz.engines`` entry-point group or ``$BATCHFUZZ_ENGINES``, in the
shape ``batchfuzz.plugins.EngineModule`` declares) binds the contracts to
that engine's functions with ``batchfuzz.bind``. This package holds what
they share:

- ``ReleaseSource``: where a release's files come from (a wheel, read as a
  zip without installing it; a source checkout; the installed distribution's
  files, found through ``importlib.metadata`` without importing it), with a
  ``ref`` string from which a fresh process rebuilds it;
- ``Bound``: one engine function x one contract, with its status ("bound",
  "absent", "unbindable"), the canonical-signature target and a ``ref``;
- ``engines()``, ``engine(name)``: the registered engine modules;
- ``resolve(ref)``: the target a ``Bound.ref`` names, for worker processes,
  through the engine its first field names;
- ``fetch_wheel``: a release wheel downloaded with pip into a cache outside
  the repository (``$BATCHFUZZ_CACHE/wheels``, default
  ``~/.cache/batchfuzz/wheels``), checked against the index's SHA-256.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import os
import re
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar


class SourceError(LookupError):
    """A release's source cannot be opened (no such file, not installed, not downloadable)."""


_Source = TypeVar("_Source", bound="ReleaseSource")


class ReleaseSource:
    """Read-only access to one release's files, by path inside the package
    tree (``"vllm/v1/worker/ubatch_utils.py"``).

    Subclasses name the distribution and its top-level package. ``version``
    is the wheel's version, the installed distribution's, or the one a source
    tree records in ``<package>/_version.py``; ``ref`` is
    ``"wheel:/abs/path.whl"``, ``"dir:/abs/path"`` or ``"installed:"``.
    """

    distribution: ClassVar[str] = ""
    package: ClassVar[str] = ""

    def __init__(self, ref: str, version: str, reader: Callable[[str], str | None],
                 lister: Callable[[], Iterable[str]] | None = None) -> None:
        self.ref = ref
        self.version = version
        self._reader = reader
        self._lister = lister
        self._texts: dict[str, str | None] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.distribution} {self.version}, {self.ref})"

    def read(self, relpath: str) -> str | None:
        """The text of ``relpath``, or None when the release has no such file."""
        if not isinstance(relpath, str) or relpath.startswith("/") or ".." in relpath.split("/"):
            raise ValueError(f"relpath must be a relative path inside the release, got {relpath!r}")
        if relpath not in self._texts:
            self._texts[relpath] = self._reader(relpath)
        return self._texts[relpath]

    def paths(self, under: str = "", suffix: str = ".py") -> list[str]:
        """The release's files under the folder ``under`` (default: the
        package) whose names end with ``suffix``, sorted; [] for a source
        built without a listing."""
        if not isinstance(under, str) or under.startswith("/") or ".." in under.split("/"):
            raise ValueError(f"under must be a relative folder inside the release, got {under!r}")
        prefix = (under or self.package).rstrip("/") + "/"
        listed = self._lister() if self._lister is not None else ()
        return sorted(p for p in listed if p.startswith(prefix) and p.endswith(suffix))

    # -- constructors

    @classmethod
    def from_wheel(cls: type[_Source], path: str | os.PathLike[str]) -> _Source:
        """A wheel file, read as a zip (nothing is installed or imported)."""
        p = Path(path).resolve()
        if not p.is_file():
            raise SourceError(f"wheel {str(path)!r} does not exist")
        try:
            archive = zipfile.ZipFile(p)
        except zipfile.BadZipFile as exc:
            raise SourceError(f"{str(path)!r} is not a wheel (zip): {exc}") from None
        names = set(archive.namelist())

        def reader(relpath: str) -> str | None:
            return archive.read(relpath).decode("utf-8") if relpath in names else None

        match = re.match(r"^([A-Za-z0-9_.]+)-([0-9][^-]*)-", p.name)
        if not match:
            raise SourceError(f"{p.name!r} is not named like a wheel (NAME-VERSION-...whl)")
        if match.group(1).replace(".", "_").lower() != cls.distribution.replace("-", "_").lower():
            raise SourceError(f"{p.name!r} is a wheel of {match.group(1)!r}, not of {cls.distribution!r}")
        return cls(f"wheel:{p}", match.group(2), reader, lambda: names)

    @classmethod
    def from_dir(cls: type[_Source], path: str | os.PathLike[str]) -> _Source:
        """A source checkout: the directory that holds the package directory."""
        root = Path(path).resolve()
        if not (root / cls.package).is_dir():
            raise SourceError(f"{str(path)!r} has no {cls.package}/ package directory")

        def reader(relpath: str) -> str | None:
            f = root / relpath
            return f.read_text(encoding="utf-8") if f.is_file() else None

        def lister() -> list[str]:
            return [f.relative_to(root).as_posix() for f in (root / cls.package).rglob("*") if f.is_file()]

        return cls(f"dir:{root}", _recorded_version(reader(f"{cls.package}/_version.py")), reader, lister)

    @classmethod
    def installed(cls: type[_Source]) -> _Source:
        """The installed distribution's files, located through its metadata
        (the package is not imported)."""
        try:
            dist = importlib.metadata.distribution(cls.distribution)
        except importlib.metadata.PackageNotFoundError:
            raise SourceError(f"{cls.distribution} is not installed in this Python environment") from None
        files = {str(f).replace(os.sep, "/"): f for f in (dist.files or ())}

        def reader(relpath: str) -> str | None:
            f = files.get(relpath)
            if f is None:
                return None
            located = Path(str(dist.locate_file(f)))
            return located.read_text(encoding="utf-8") if located.is_file() else None

        return cls("installed:", dist.version, reader, lambda: files)

    @classmethod
    def from_ref(cls: type[_Source], ref: str) -> _Source:
        """Rebuild a source from its ``ref``."""
        if not isinstance(ref, str):
            raise TypeError(f"ref must be a str, got {type(ref).__name__}")
        kind, _, rest = ref.partition(":")
        if kind == "wheel":
            return cls.from_wheel(rest)
        if kind == "dir":
            return cls.from_dir(rest)
        if kind == "installed" and not rest:
            return cls.installed()
        raise ValueError(f"ref must be 'wheel:PATH', 'dir:PATH' or 'installed:', got {ref!r}")


def _recorded_version(text: str | None) -> str:
    """The version a ``_version.py`` records (``__version__ = version = '1.2.3'``)."""
    if text is None:
        return "unknown"
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return "unknown"
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("__version__", "version") for t in stmt.targets):
            if isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                return stmt.value.value
    return "unknown"


STATUSES = ("bound", "absent", "unbindable", "not-split", "error")


@dataclass(frozen=True)
class Bound:
    """One engine function bound to one contract.

    ``status``: "bound" (``target`` has the contract's canonical signature),
    "absent" (the release does not have the function), "unbindable" (it has
    it, but its code has changed beyond what the binding understands),
    "not-split" (a row of the split search that is not a token split) or
    "error" (binding it ended the process that bound it); ``reason`` says why
    for all but the first. ``detail`` says what was cut out (lines, fragment,
    stand-ins); ``assumed`` the values the binding gave configuration the
    engine reads (``"parallel_config.enable_fault_tolerance=False"``).
    ``probe_raised``: the exception the engine's own lines raised on the
    bind-time probe input ``probe_args`` (``bind.probe``), checked by the
    matrix as a counterexample. ``ref`` rebuilds this target in a fresh
    process through ``resolve(ref)``; a binding made in another process
    (``matrix``'s isolated binding) has the ref and no ``target``.
    """

    release: str
    function: str
    contract: str
    status: str
    reason: str = ""
    target: Callable[..., Any] | None = None
    ref: str = ""
    detail: str = ""
    assumed: tuple[str, ...] = ()
    probe_raised: str = ""
    probe_args: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if self.status == "bound" and self.target is None and not self.ref:
            raise ValueError("a 'bound' binding needs a target or a ref")
        if self.status != "bound" and self.target is not None:
            raise ValueError(f"a {self.status!r} binding has no target")


# ---------------------------------------------------------------- the engine registry

ENGINES_ENV_VAR = "BATCHFUZZ_ENGINES"
ENTRY_POINT_GROUP = "batchfuzz.engines"
# Modules of this package that are tools the engines share, not engines.
_HARNESS_MODULES = frozenset({"split_search", "locate", "follow"})


class UnknownEngine(LookupError):
    """No registered engine has that name."""


def engine_modules() -> list[str]:
    """The modules that hold engines, in order: every module of this package
    but the shared tools (``split_search``, ``locate``, ``follow``) and private ones, then those the
    ``batchfuzz.engines`` entry-point group names, then
    ``$BATCHFUZZ_ENGINES`` (comma-separated)."""
    import pkgutil
    from importlib.metadata import entry_points

    names = [f"{__name__}.{m.name}" for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
             if not m.name.startswith("_") and m.name not in _HARNESS_MODULES]
    names += [ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)]
    names += [n.strip() for n in os.environ.get(ENGINES_ENV_VAR, "").split(",") if n.strip()]
    return list(dict.fromkeys(names))


def engines() -> dict[str, Any]:
    """Every registered engine module by its ``ENGINE`` name, each checked
    against ``batchfuzz.plugins.EngineModule`` (a PluginError names what a
    module lacks; two modules claiming one name are an error too)."""
    from batchfuzz import plugins

    found: dict[str, Any] = {}
    for name in engine_modules():
        module = importlib.import_module(name)
        plugins.check_engine(module, ReleaseSource)
        if module.ENGINE in found and found[module.ENGINE] is not module:
            raise plugins.PluginError(f"engine {module.ENGINE!r} is registered twice: by {found[module.ENGINE].__name__} and {name}")
        found[module.ENGINE] = module
    return found


def engine(name: str) -> Any:
    """The engine module named ``name``; UnknownEngine, listing the known
    names, when none is registered under it."""
    known = engines()
    if name not in known:
        raise UnknownEngine(f"no engine named {name!r}; registered: {', '.join(sorted(known)) or 'none'} "
                            f"(add one through the {ENTRY_POINT_GROUP} entry points or ${ENGINES_ENV_VAR})")
    return known[name]


def resolve(ref: str) -> Callable[..., Any]:
    """The target named by a ``Bound.ref`` (``"ENGINE::SOURCE-REF::FUNCTION::CONTRACT"``),
    through the registered engine its first field names. Raises LookupError
    when that binding is not bound in that release."""
    if not isinstance(ref, str) or "::" not in ref:
        raise ValueError(f"ref must be 'ENGINE::SOURCE::FUNCTION::CONTRACT', got {ref!r}")
    name = ref.split("::", 1)[0]
    if not name.isidentifier():
        raise ValueError(f"ref names no engine: {ref!r}")
    found: Callable[..., Any] = engine(name).resolve(ref)
    return found


# ---------------------------------------------------------------- downloading releases



def resolve_bound(ref: str, engine: str, resolved: Callable[[str, str, str], Bound]) -> Callable[..., Any]:
    """The target a ``Bound.ref`` of ``engine`` names (``ENGINE::SOURCE::FUNCTION::CONTRACT``),
    rebuilt through the engine module's ``resolved(source, function, contract)``:
    the one reading of a ref every engine module's ``resolve`` delegates to.
    LookupError when the release cannot be opened or the function is not bound."""
    if not isinstance(ref, str):
        raise TypeError(f"ref must be a str, got {type(ref).__name__}")
    parts = ref.split("::")
    if len(parts) != 4 or parts[0] != engine:
        raise ValueError(f"ref must be '{engine}::SOURCE::FUNCTION::CONTRACT', got {ref!r}")
    try:
        bound = resolved(parts[1], parts[2], parts[3])
    except SourceError as exc:
        raise LookupError(f"cannot open the release of {ref!r}: {exc}") from exc
    if bound.target is None:
        raise LookupError(f"{bound.function} as {bound.contract} is {bound.status} in {bound.release}: {bound.reason}")
    return bound.target

def cache_dir() -> Path:
    """``$BATCHFUZZ_CACHE`` or ``~/.cache/batchfuzz``: outside any repository."""
    return Path(os.environ.get("BATCHFUZZ_CACHE") or Path.home() / ".cache" / "batchfuzz")


def fetch_wheel(distribution: str, version: str, dest: str | os.PathLike[str] | None = None, timeout_s: float = 300,
                say: Callable[[str], None] | None = None) -> Path:
    """The wheel of ``distribution==version`` in ``dest`` (default
    ``cache_dir()/wheels``), downloaded with ``pip download --no-deps`` unless
    it is already there, and checked against the SHA-256 the index publishes
    for it, whether downloaded or reused (``batchfuzz.engines._wheels``).
    ``say`` receives a line before a download (it may take minutes,
    silently), one after it with the wheel's size, and one for a cached
    wheel. Raises SourceError with pip's last words when the registry cannot
    be reached or has no such release, or naming the wheel that is not the release."""
    from batchfuzz.engines import _wheels

    if not re.fullmatch(r"[A-Za-z0-9_.-]+", distribution):
        raise ValueError(f"distribution must be a package name, got {distribution!r}")
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version):
        raise ValueError(f"version must be a release version like '0.33.0', got {version!r}")
    folder = Path(dest) if dest is not None else cache_dir() / "wheels"
    folder.mkdir(parents=True, exist_ok=True)

    def present() -> Path | None:
        stem = distribution.replace("-", "_")
        hits = sorted(p for p in folder.glob(f"{stem}-{version}-*.whl"))
        return hits[0] if hits else None

    found = present()
    if found is not None:
        if say is not None:
            say(f"{distribution}=={version}: the cached wheel {found} ({_megabytes(found)})")
        return _wheels.verified(found, distribution, version, timeout_s)
    published = _wheels.index_hash(distribution, version, timeout_s)
    if say is not None:
        say(f"downloading {distribution}=={version}: its release wheel, with pip download into {folder} (once: later "
            f"runs use the cached file; at most {timeout_s:g}s)")
    started = time.monotonic()
    # Short socket timeouts and few retries: an unreachable registry should fail in seconds, not minutes.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", f"{distribution}=={version}",
           "-d", str(folder), "--quiet", "--timeout", "20", "--retries", "1"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SourceError(f"pip download {distribution}=={version} took more than {timeout_s:g} s") from None
    found = present()
    if proc.returncode != 0 or found is None:
        raise SourceError(f"pip download {distribution}=={version} failed (exit {proc.returncode}): {pip_said(proc)}")
    try:
        verified = _wheels.verified(found, distribution, version, timeout_s, published)
    except SourceError:
        found.unlink()  # not the release: never left in the cache
        raise
    if say is not None:
        say(f"downloaded {found.name} ({_megabytes(found)}) in {time.monotonic() - started:.0f}s")
    return verified


def _megabytes(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB"


def pip_said(proc: subprocess.CompletedProcess[str]) -> str:
    """A failed pip command's last two ERROR lines, each cut to 200 characters."""
    errors = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.startswith("ERROR")] or ["(no message)"]
    return " | ".join(ln if len(ln) <= 200 else ln[:200] + "..." for ln in errors[-2:])
