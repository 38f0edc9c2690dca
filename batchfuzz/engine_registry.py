"""The engine plug-in point: what an engine module's rows are made of and
the lookup of the registered engines by name.

An engine module (``batchfuzz.engines.vllm``; others through the
``batchfuzz.engines`` entry-point group or ``$BATCHFUZZ_ENGINES``, in the
shape ``batchfuzz.plugins.EngineModule`` declares) registers here by being
found, as contract records register in ``batchfuzz.registry``:

- ``ReleaseSource``: where a release's files come from (a wheel, read as a
  zip without installing it; a source checkout; the installed distribution's
  files, found through ``importlib.metadata`` without importing it), with a
  ``ref`` string from which a fresh process rebuilds it;
- ``Bound``: one engine function x one contract, with its status ("bound",
  "absent", "unbindable"), the canonical-signature target and a ``ref``;
- ``engines()``, ``engine(name)``: the registered engine modules;
- ``resolve(ref)``: the target a ``Bound.ref`` names, for worker processes,
  through the engine its first field names.

It sits below every layer that resolves an engine's target (``targets``,
``distributed``), so they reach an engine through this lookup and never
import ``batchfuzz.engines`` (the layers in pyproject.toml).
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import os
import re
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
ENGINES_PACKAGE = "batchfuzz.engines"  # the built-in engines: its modules
# Modules of this package that are tools the engines share, not engines.
_HARNESS_MODULES = frozenset({"base", "split_search", "locate", "follow", "live_dummy"})


class UnknownEngine(LookupError):
    """No registered engine has that name."""


def _engines_path() -> list[str]:
    """The folders of the built-in engines' package, found without importing it."""
    spec = importlib.util.find_spec(ENGINES_PACKAGE)
    return list(spec.submodule_search_locations or []) if spec is not None else []


def engine_modules() -> list[str]:
    """The modules that hold engines, in order: every module of this package
    but the shared ones (``base``, ``split_search``, ``locate``, ``follow``, ``live_dummy``) and private ones, then those the
    ``batchfuzz.engines`` entry-point group names, then
    ``$BATCHFUZZ_ENGINES`` (comma-separated)."""
    import pkgutil
    from importlib.metadata import entry_points

    names = [f"{ENGINES_PACKAGE}.{m.name}" for m in sorted(pkgutil.iter_modules(_engines_path()), key=lambda m: m.name)
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
