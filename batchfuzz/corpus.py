"""The failure corpus: every failure a fuzz run finds, shrunk, as a small JSON file.

Layout: ``<corpus>/<contract>/<id>.json``, where ``id`` is a short hash of
(contract, implementation or target, device, property, encoded case), so the
same failure found again (the next night, by another worker) maps to the same
file and is not saved twice. Files are written atomically (temporary file,
then ``os.replace``) the moment a failure is found, so a killed run loses
nothing.

Loading is JSON only: the case is decoded by :mod:`batchfuzz.codec`, which
understands ints, lists, numpy integer arrays and registered dataclasses and
never evaluates anything. The ``inputs`` and ``reproduction`` fields are
Python source *for people to read*; nothing here executes them. A malformed
file raises :class:`CorpusError` naming the file.

Replaying an entry re-checks its property against its implementation (or the
user's target) on the stored case: it passes once the bug is fixed and fails
while it is there. ``tests/test_corpus.py`` replays every file of the
project's corpus in the ordinary test run; ``batchfuzz replay`` does the same
from the command line.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import hashlib
import json
import os
import platform
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchfuzz import __version__
from batchfuzz.case import Case
from batchfuzz.codec import CodecError, decode_case, encode_case, literal

FORMAT = "batchfuzz-corpus/1"
ENV_VAR = "BATCHFUZZ_CORPUS"
TARGET_PREFIX = "target:"
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "format": str, "id": str, "contract": str, "property": str, "device": str, "case": dict, "failure": dict,
}


class CorpusError(ValueError):
    """A corpus file that cannot be loaded or replayed (the message names the file)."""


@dataclass
class Entry:
    """One corpus file, decoded."""

    contract: str
    property: str
    device: str
    case: Case
    implementation: str | None = None  # a registry implementation name, or
    target: str | None = None  # a user's MODULE:FUNCTION / file.py:FUNCTION
    error_type: str = ""
    message: str = ""
    kind: str = ""
    spec: str = ""
    path: Path | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @builtins.property
    def target_name(self) -> str:
        """How runs and reports name the target: ``numpy@cpu`` or ``target:mod:fn``."""
        return f"{self.implementation}@{self.device}" if self.implementation else f"{TARGET_PREFIX}{self.target}"

    @builtins.property
    def id(self) -> str:
        return entry_id(self.contract, self.implementation, self.target, self.device, self.property, self.case)


def entry_id(contract: str, implementation: str | None, target: str | None, device: str, prop: str, case: Case) -> str:
    """The dedupe key: equal failures (same target, property and shrunk case) share it."""
    key = json.dumps([contract, implementation, target, device, prop, encode_case(case)], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def default_dir() -> Path:
    """``$BATCHFUZZ_CORPUS``; else ``corpus/`` beside the checkout's pyproject.toml
    when batchfuzz runs from a checkout; else ``./corpus``."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).absolute()
    root = Path(__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    try:
        if pyproject.is_file() and 'name = "batchfuzz"' in pyproject.read_text():
            return root / "corpus"
    except OSError:
        pass
    return Path.cwd() / "corpus"


def versions() -> dict[str, str]:
    import hypothesis
    import numpy

    out = {"batchfuzz": __version__, "hypothesis": hypothesis.__version__, "numpy": numpy.__version__,
           "python": platform.python_version()}
    try:
        import torch

        out["torch"] = str(torch.__version__)
    except Exception:  # pragma: no cover - torch is a dependency, but a corpus file must not need it
        pass
    return out


def make_entry_data(
    failure: Any,
    *,
    implementation: str | None,
    target: str | None,
    device: str,
    found: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON document for a :class:`batchfuzz.runner.Failure`."""
    if (implementation is None) == (target is None):
        raise ValueError("exactly one of implementation and target must be given")
    case: Case = failure.case
    imports: set[str] = set()
    function = target.rpartition(":")[2].split(".")[-1] if target else None
    data: dict[str, Any] = {
        "format": FORMAT,
        "id": entry_id(failure.contract, implementation, target, device, failure.property, case),
        "contract": failure.contract,
        "implementation": implementation,
        "target": target,
        "device": device,
        "property": failure.property,
        "spec": failure.spec,
        "failure": {
            "kind": failure.kind(),
            "error_type": failure.error_type,
            "message": failure.message,
        },
        # What replay decodes (JSON, never evaluated):
        "case": encode_case(case),
        # For people: the same inputs as Python literals, and a reproduction.
        "inputs": {k: literal(v, imports) for k, v in case.args.items()},
        "context": {k: literal(v, imports) for k, v in case.context.items()},
        "reproduction": failure.reproduction(function_name=function),
        "replay": "batchfuzz replay <this file>",
        "versions": versions(),
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "found": dict(found or {}),
    }
    return data


def path_for(root: Path | str, data: dict[str, Any]) -> Path:
    return Path(root) / _safe(data["contract"]) / f"{data['id']}.json"


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name) or "_"


def save(root: Path | str, data: dict[str, Any]) -> tuple[Path, bool]:
    """Write ``data`` under ``root`` unless an equal failure is already there.

    Returns ``(path, new)``. The write is atomic: a reader (or a kill) never
    sees half a file.
    """
    path = path_for(root, data)
    if path.exists():
        return path, False
    write_json_atomic(path, data)
    return path, True


def open_duplicate(root: Path | str, data: dict[str, Any], target: Any) -> Path | None:
    """An entry already in the corpus for the same contract, implementation or
    target, device and property whose case *still fails* on ``target``.

    Shrinking can end in different local minima on different nights, so the
    same bug can come back as another small case; while an earlier entry for
    that property still fails, the new case adds nothing (the test run is red
    already) and is not saved. Once that entry passes, a new failure of the
    property is a new bug and is saved.
    """
    from batchfuzz import registry

    key = (data["contract"], data.get("implementation"), data.get("target"), data["device"], data["property"])
    for p in files(Path(root) / _safe(data["contract"])):
        try:
            e = load(p)
        except CorpusError:
            continue
        if (e.contract, e.implementation, e.target, e.device, e.property) != key:
            continue
        try:
            prop = registry.get(e.contract).property(e.property)
        except KeyError:
            continue
        try:
            prop.check(target, e.case.copy())
        except Exception:
            return p
    return None


def write_json_atomic(path: Path | str, data: Any, *, fsync: bool = True) -> None:
    """Write JSON so that readers (and a killed writer) never see half a file;
    ``fsync`` also makes it survive a machine crash (skipped for state that is
    rewritten many times a second)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; reports and corpus files are for everyone to read
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=False)
            fh.write("\n")
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def files(root: Path | str | None = None) -> list[Path]:
    """Every corpus file under ``root`` (default :func:`default_dir`), sorted."""
    root = Path(root) if root is not None else default_dir()
    if root.is_file():
        return [root]
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*.json") if not p.name.startswith("."))


def load(path: Path | str) -> Entry:
    """Decode one corpus file. Never executes code; raises CorpusError naming the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise CorpusError(f"{path}: cannot read corpus file: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise CorpusError(f"{path}: a corpus file must hold a JSON object, got {type(data).__name__}")
    for key, typ in _REQUIRED.items():
        if key not in data:
            raise CorpusError(f"{path}: missing field {key!r}")
        if not isinstance(data[key], typ):
            raise CorpusError(f"{path}: field {key!r} must be {_typename(typ)}, got {type(data[key]).__name__}")
    if data["format"] != FORMAT:
        raise CorpusError(f"{path}: unsupported format {data['format']!r} (expected {FORMAT!r})")
    impl, target = data.get("implementation"), data.get("target")
    if not ((isinstance(impl, str) and target is None) or (impl is None and isinstance(target, str))):
        raise CorpusError(f"{path}: exactly one of 'implementation' and 'target' must be a string")
    try:
        case = decode_case(data["case"])
    except (CodecError, TypeError, ValueError) as exc:
        raise CorpusError(f"{path}: field 'case' does not decode: {exc}") from None
    failure = data["failure"]
    return Entry(
        contract=data["contract"], property=data["property"], device=data["device"], case=case,
        implementation=impl, target=target, error_type=str(failure.get("error_type", "")),
        message=str(failure.get("message", "")), kind=str(failure.get("kind", "")), spec=str(data.get("spec", "")),
        path=path, data=data,
    )


def _typename(typ: type | tuple[type, ...]) -> str:
    names = {"str": "a string", "dict": "an object", "list": "a list", "int": "an integer"}
    if isinstance(typ, tuple):
        return " or ".join(names.get(t.__name__, t.__name__) for t in typ)
    return names.get(typ.__name__, typ.__name__)


@dataclass
class Outcome:
    """The result of replaying one entry."""

    entry: Entry
    status: str  # "passes" (fixed), "fails" (the bug is still there), "skipped"
    error_type: str = ""
    message: str = ""

    @builtins.property
    def fails(self) -> bool:
        return self.status == "fails"


def _contract(entry: Entry) -> Any:
    from batchfuzz import registry

    try:
        return registry.get(entry.contract)
    except KeyError:
        known = ", ".join(c.name for c in registry.contracts())
        raise CorpusError(f"{entry.path or '<corpus entry>'}: unknown contract {entry.contract!r} (known: {known})") from None


def resolve_target(entry: Entry) -> Any:
    """The callable an entry names: a registry implementation bound to its
    device, or the user's target loaded like ``--target`` loads it."""
    from batchfuzz.targets import TargetError, load_target

    where = entry.path or "<corpus entry>"
    contract = _contract(entry)
    if entry.implementation is not None:
        try:
            impl = contract.implementation(entry.implementation)
        except KeyError:
            known = ", ".join(i.name for i in contract.implementations)
            raise CorpusError(f"{where}: contract {entry.contract!r} has no implementation {entry.implementation!r} "
                              f"(has: {known})") from None
        if entry.device not in impl.devices:
            raise CorpusError(f"{where}: implementation {entry.implementation!r} does not run on {entry.device!r}")
        return impl.for_device(entry.device)
    assert entry.target is not None
    spec = _locate(entry.target, entry.path)
    try:
        return load_target(spec)
    except TargetError as exc:
        raise CorpusError(f"{where}: cannot load target {entry.target!r}: {exc}") from None


def _locate(spec: str, path: Path | None) -> str:
    """A relative ``file.py:FUNCTION`` spec resolves against the working
    directory, else against the directory that holds the corpus directory
    (the repository root for the project's own corpus)."""
    module, sep, attr = spec.rpartition(":")
    if not (module.endswith(".py") or os.sep in module) or os.path.isabs(module) or os.path.exists(module):
        return spec
    if path is not None:
        for parent in path.resolve().parents:
            candidate = parent / module
            if candidate.is_file():
                return f"{candidate}{sep}{attr}"
    return spec


def replay(entry: Entry) -> Outcome:
    """Re-check the entry's property on its stored case. Raises CorpusError for
    an entry that names something that does not exist."""
    contract = _contract(entry)
    try:
        prop = contract.property(entry.property)
    except KeyError:
        known = ", ".join(p.name for p in contract.properties)
        raise CorpusError(f"{entry.path or '<corpus entry>'}: contract {entry.contract!r} has no property "
                          f"{entry.property!r} (has: {known})") from None
    if entry.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return Outcome(entry, "skipped", message="recorded on cuda; no CUDA device here")
    target = resolve_target(entry)
    try:
        prop.check(target, entry.case.copy())
    except Exception as exc:
        return Outcome(entry, "fails", type(exc).__name__, str(exc))
    return Outcome(entry, "passes")


def describe(outcome: Outcome) -> str:
    """A readable account of a still-failing entry, with its reproduction."""
    e = outcome.entry
    lines = [
        f"{e.path}: {e.contract}/{e.target_name} still violates {e.property}" + (f" ({e.spec})" if e.spec else ""),
        f"  {outcome.error_type}: {outcome.message.splitlines()[0] if outcome.message else ''}",
    ]
    repro = e.data.get("reproduction")
    if isinstance(repro, str) and repro:
        lines.append("  reproduction:")
        lines.extend("    " + line for line in repro.splitlines())
    lines.append(f"  replay: batchfuzz replay {e.path}")
    return "\n".join(lines)
