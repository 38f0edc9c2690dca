"""The failure corpus: every failure a fuzz run finds, shrunk, as a small
JSON file ``<corpus>/<contract>/<id>.json``, its name the hash of its content
(so the same failure found again is the same file), written atomically the
moment it is found, one entry per failure origin (the smallest case that
still fails).

A corpus file is untrusted data: read as bounded JSON only
(:func:`batchfuzz.fuzz.untrusted.load_json`), its case checked to fit the
contract and be small, its target loaded only when it is the project's own
code (a user's function or an engine release is replayed only when the user
names it). Replaying an entry re-checks its property on the stored case: it
passes once the bug is fixed. docs/nightly.md ("The failure corpus").
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import hashlib
import importlib.metadata
import json
import os
import platform
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from batchfuzz import __version__
from batchfuzz.case import Case
from batchfuzz.codec import CodecError, decode_case, encode_case, literal
from batchfuzz.fuzz import untrusted
from batchfuzz.fuzz.origin import KINDS, Origin, OriginError, origin_of
from batchfuzz.fuzz.settings import CORPUS_ENV_VAR, DEFAULT_CORPUS
from batchfuzz.output import write_json_atomic
from batchfuzz.targets import TargetError, TargetRef, parse, same_release
from batchfuzz.text import MAX_NAME_CHARS, outside, printable


def checked_property(prop: str, during: str) -> str:
    """The property an entry's case is re-checked with (its ``during`` for a
    crash, timeout or raises entry): ``batchfuzz.execution.checked_property``,
    imported when needed (it brings in the registry)."""
    from batchfuzz.execution import checked_property as checked

    return checked(prop, during)

FORMAT = "batchfuzz-corpus/2"
OLD_FORMAT = "batchfuzz-corpus/1"  # still read: implementation/target fields instead of one target reference
ENV_VAR = CORPUS_ENV_VAR
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_NUMBERS = 1 << 22
MAX_SIZE_ARGUMENT = 1 << 22
DEVICES = ("cpu", "cuda")
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "format": str, "id": str, "contract": str, "property": str, "device": str, "case": dict, "failure": dict,
}


class CorpusError(ValueError):
    """A corpus file that cannot be loaded or replayed (the message names the file)."""


@dataclass
class CorpusEntry:
    """One corpus file, decoded."""

    contract: str
    property: str
    device: str
    case: Case
    target: str  # a target reference (batchfuzz.targets)
    domain: str = "spec"
    during: str = ""  # for crash, timeout and raises entries: the property being checked
    error_type: str = ""
    message: str = ""
    kind: str = ""
    spec: str = ""
    path: Path | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @builtins.property
    def ref(self) -> TargetRef:
        return parse(self.target)

    @builtins.property
    def id(self) -> str:
        return entry_id(self.contract, self.target, self.device, self.domain, self.property, self.case)

    @builtins.property
    def violates(self) -> list[str]:
        """Every property the entry's case breaks, as recorded (a file written
        before that was recorded: its own property)."""
        v = self.data.get("violates")
        if isinstance(v, list) and all(isinstance(p, str) for p in v):
            return list(v)
        return [self.property]

    @builtins.property
    def origin(self) -> Origin:
        """The origin the file recorded (``batchfuzz.fuzz.origin``); for a file
        written before origins were (no ``origin`` field), the one its own
        fields give: its exception type without a location, or its case."""
        where = str(self.path or "<corpus entry>")
        recorded = self.data.get("origin")
        if recorded is not None:
            try:
                return Origin.from_json(recorded, where)
            except OriginError as exc:
                raise CorpusError(str(exc)) from None
        kind = self.kind if self.kind in KINDS else "violation"
        return origin_of(contract=self.contract, target=self.target, device=self.device, kind=kind, prop=self.property,
                         error_type=self.error_type, traceback="", exit=str(self.data["failure"].get("exit") or ""),
                         case=self.case)


def entry_id(contract: str, target: str, device: str, domain: str, prop: str, case: Case) -> str:
    """The content address: equal failures (same target, property and shrunk case) share it."""
    key = json.dumps([contract, target, device, domain, prop, encode_case(case)], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def default_dir() -> Path:
    """``$BATCHFUZZ_CORPUS``, else ``corpus/`` under the working directory (the
    user's project: never the installed batchfuzz's own tree), as an absolute path."""
    env = os.environ.get(ENV_VAR)
    return Path(env).absolute() if env else Path.cwd() / DEFAULT_CORPUS


def versions() -> dict[str, str]:
    import hypothesis
    import numpy

    out = {"batchfuzz": __version__, "hypothesis": hypothesis.__version__, "numpy": numpy.__version__,
           "python": platform.python_version()}
    # The installed distribution's version, as torch.__version__ gives it, without
    # importing torch (a second of CPU in every check and fuzz that finds a failure).
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = str(torch.__version__)
    else:
        try:
            out["torch"] = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a dependency, but an entry must not need it
            pass
    return out


def make_entry_data(failure: Any, *, target: str, device: str, domain: str = "spec",
                    found: dict[str, Any] | None = None, reproduction: str = "",
                    violates: list[str] | None = None) -> dict[str, Any]:
    """The JSON document for a :class:`batchfuzz.runner.Failure` of ``target``;
    ``violates``: every property its case breaks (default: its own)."""
    parse(target)  # a TargetError for a reference that is not one
    case: Case = failure.case
    imports: set[str] = set()
    origin = origin_of(contract=failure.contract, target=target, device=device, kind=failure.kind(), prop=failure.property,
                       error_type=failure.error_type, traceback=failure.traceback, exit=failure.exit, case=case)
    return {
        "format": FORMAT,
        "id": entry_id(failure.contract, target, device, domain, failure.property, case),
        "contract": failure.contract,
        "target": target,
        "device": device,
        "domain": domain,
        "property": failure.property,
        "during": failure.during,
        "spec": failure.spec,
        # The target's text, bounded and printable (an Outcome's is already): the entry stays one replay reads.
        "failure": {"kind": failure.kind(), "error_type": outside(failure.error_type, MAX_NAME_CHARS),
                    "message": outside(failure.message), "exit": outside(failure.exit, MAX_NAME_CHARS)},
        # What makes this failure one bug whichever property found it (batchfuzz.fuzz.origin).
        "origin": origin.to_json(),
        # Every property the case breaks: what makes two wrong answers one bug (origin.one_bug).
        "violates": list(violates or [failure.property]),
        # What replay decodes (JSON, never evaluated):
        "case": encode_case(case),
        # For people: the same inputs as Python literals, and a reproduction.
        "inputs": {k: literal(v, imports) for k, v in case.args.items()},
        "context": {k: literal(v, imports) for k, v in case.context.items()},
        "reproduction": reproduction,
        "replay": replay_command(failure.contract, target, "<this file>"),
        "versions": versions(),
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "found": dict(found or {}),
    }


def replay_command(contract: str, target: str, path: Path | str) -> str:
    """The ``batchfuzz replay`` line that replays the entry at ``path``, as
    :func:`replay_target` needs it named: a user's function with ``--target``
    (the one the entry recorded), an engine's code with ``--engine`` (its
    release); without them replay would skip the entry."""
    try:
        ref: TargetRef | None = parse(target)
    except TargetError:  # not a target reference (a conformance item's subject): replayed as the project's own
        ref = None
    words = ["batchfuzz", "replay"]
    if ref is not None and ref.kind == "engine":
        words += ["--engine", ref.release]
    elif ref is not None and not ref.is_project_code:
        words += ["--target", f"{contract}={target}"]
    text = str(path)
    return shlex.join(words) + " " + (text if text == "<this file>" else shlex.quote(text))


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


def files(root: Path | str | None = None) -> list[Path]:
    """Every corpus file under ``root`` (default :func:`default_dir`), sorted."""
    root = Path(root) if root is not None else default_dir()
    if root.is_file():
        return [root]
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*.json") if not p.name.startswith("."))


# ---------------------------------------------------------------- loading untrusted files


def case_size_error(case: Case) -> str | None:
    """Why a case is too large to replay safely, or None."""
    numbers = 0

    def walk(value: Any, where: str) -> str | None:
        nonlocal numbers
        if isinstance(value, np.ndarray):
            numbers += int(value.size)
        elif isinstance(value, (list, tuple)):
            for k, v in enumerate(value):
                err = walk(v, f"{where}[{k}]")
                if err:
                    return err
        elif isinstance(value, dict):
            for k, v in value.items():
                err = walk(v, f"{where}.{k}")
                if err:
                    return err
        elif hasattr(value, "__dataclass_fields__"):
            for k in value.__dataclass_fields__:
                err = walk(getattr(value, k), f"{where}.{k}")
                if err:
                    return err
        elif isinstance(value, int):
            numbers += 1
        if numbers > MAX_NUMBERS:
            return f"the case holds more than {MAX_NUMBERS} numbers"
        return None

    for name, value in case.args.items():
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SIZE_ARGUMENT:
            return f"argument {name} = {value} is larger than {MAX_SIZE_ARGUMENT} (a size this large would allocate too much)"
    return walk(case.args, "args") or walk(case.context, "context")


def load(path: Path | str) -> CorpusEntry:
    """Decode one corpus file. Never executes code; raises CorpusError naming the file."""
    path = Path(path)
    try:
        data = untrusted.load_json(path, limit=MAX_FILE_BYTES, max_depth=MAX_DEPTH, what="corpus file")
    except untrusted.UntrustedFileError as exc:
        raise CorpusError(str(exc)) from None
    if not isinstance(data, dict):
        raise CorpusError(f"{path}: a corpus file must hold a JSON object, got {type(data).__name__}")
    if data.get("format") == OLD_FORMAT:
        data = _upgrade(data, path)
    for key, typ in _REQUIRED.items():
        if key not in data:
            raise CorpusError(f"{path}: missing field {key!r}")
        if not isinstance(data[key], typ):
            raise CorpusError(f"{path}: field {key!r} must be {_typename(typ)}, got {type(data[key]).__name__}")
    if data["format"] != FORMAT:
        raise CorpusError(f"{path}: unsupported format {data['format']!r} (expected {FORMAT!r})")
    if data["device"] not in DEVICES:
        raise CorpusError(f"{path}: field 'device' must be one of {', '.join(DEVICES)}, got {data['device']!r}")
    target = data.get("target")
    if not isinstance(target, str):
        raise CorpusError(f"{path}: field 'target' must be a target reference string")
    try:
        parse(target)
    except TargetError as exc:
        raise CorpusError(f"{path}: field 'target': {exc}") from None
    try:
        case = decode_case(data["case"])
    except (CodecError, TypeError, ValueError, RecursionError) as exc:
        raise CorpusError(f"{path}: field 'case' does not decode: {exc}") from None
    too_large = case_size_error(case)
    if too_large:
        raise CorpusError(f"{path}: {too_large}")
    domain = data.get("domain", "spec")
    if not isinstance(domain, str):
        raise CorpusError(f"{path}: field 'domain' must be a string")
    return _entry(data, case, path)


def _entry(data: dict[str, Any], case: Case | None = None, path: Path | None = None) -> CorpusEntry:
    """The entry of a checked document (:func:`load`'s, or one ``make_entry_data`` made, not written yet)."""
    failure = data["failure"]
    return CorpusEntry(
        contract=data["contract"], property=data["property"], device=data["device"],
        case=case if case is not None else decode_case(data["case"]), target=data["target"],
        domain=data.get("domain", "spec"), during=str(data.get("during") or ""),
        error_type=str(failure.get("error_type", "")), message=str(failure.get("message", "")),
        kind=str(failure.get("kind", "")), spec=str(data.get("spec", "")), path=path, data=data,
    )


def _upgrade(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """A format-1 entry (``implementation`` or ``target``, not both) as format 2."""
    impl, target = data.get("implementation"), data.get("target")
    if isinstance(impl, str) and target is None:
        ref = f"impl:{impl}@{data.get('device', 'cpu')}"
    elif impl is None and isinstance(target, str):
        ref = target
    else:
        raise CorpusError(f"{path}: exactly one of 'implementation' and 'target' must be a string")
    return {**data, "format": FORMAT, "target": ref, "upgraded_from": OLD_FORMAT}


def _typename(typ: type | tuple[type, ...]) -> str:
    names = {"str": "a string", "dict": "an object", "list": "a list", "int": "an integer"}
    if isinstance(typ, tuple):
        return " or ".join(names.get(t.__name__, t.__name__) for t in typ)
    return names.get(typ.__name__, typ.__name__)


# ---------------------------------------------------------------- replaying


@dataclass
class Replayed:
    """The result of replaying one entry."""

    entry: CorpusEntry
    status: str  # "passes" (fixed), "fails" (the bug is still there), "skipped"
    error_type: str = ""
    message: str = ""

    @builtins.property
    def fails(self) -> bool:
        return self.status == "fails"


def _contract(entry: CorpusEntry) -> Any:
    from batchfuzz import registry

    try:
        return registry.get(entry.contract)
    except KeyError:
        known = ", ".join(c.name for c in registry.contracts())
        raise CorpusError(f"{entry.path or '<corpus entry>'}: unknown contract {entry.contract!r} (known: {known})") from None


def check_entry(entry: CorpusEntry) -> None:
    """Raise CorpusError when the entry does not fit its contract: an unknown
    contract, property or domain, argument names other than the contract's,
    a case outside the entry's domain."""
    where = entry.path or "<corpus entry>"
    contract = _contract(entry)
    prop = checked_property(entry.property, entry.during)
    try:
        contract.property(prop)
    except KeyError:
        known = ", ".join(p.name for p in contract.properties)
        raise CorpusError(f"{where}: contract {entry.contract!r} has no property {prop!r} (has: {known})") from None
    if entry.during and prop != entry.during:
        raise CorpusError(f"{where}: field 'during' {entry.during!r} is set for property {entry.property!r}, which is "
                          "not a crash, timeout or raises entry")
    _check_project_target(entry, contract)
    if tuple(entry.case.args) != contract.arguments:
        raise CorpusError(f"{where}: the case's arguments {list(entry.case.args)} are not {entry.contract}'s "
                          f"{list(contract.arguments)}")
    try:
        domain = contract.domain(entry.domain)
    except KeyError as exc:
        raise CorpusError(f"{where}: {exc}") from None
    try:
        fits = domain.contains(entry.case)
    except Exception as exc:
        raise CorpusError(f"{where}: the case does not fit {entry.contract}: {type(exc).__name__}: {exc}") from None
    if not fits:
        raise CorpusError(f"{where}: the case is not an input of {entry.contract}'s {entry.domain} domain")
    recorded = entry.data.get("id")
    if entry.data.get("format") == FORMAT and entry.data.get("upgraded_from") is None and recorded != entry.id:
        raise CorpusError(f"{where}: field 'id' {recorded!r} is not the address of the file's content ({entry.id}): "
                          "its contract, target, device, domain, property or case was changed after it was written")
    if entry.path is not None and entry.path.name != f"{recorded}.json":
        raise CorpusError(f"{where}: the file's name is not its id {recorded!r} ({recorded}.json): a corpus file is "
                          "named by the address of its content")


def _check_project_target(entry: CorpusEntry, contract: Any) -> None:
    """Raise CorpusError when the entry names an implementation or a variant
    its contract does not have (the name would reach a written test)."""
    ref = entry.ref
    try:
        if ref.kind == "impl":
            contract.implementation(ref.name)
        elif ref.kind == "variant":
            contract.variant(ref.name)
    except KeyError as exc:  # the registry's UnknownName: its message names the contract and what it has
        raise CorpusError(f"{entry.path or '<corpus entry>'}: {exc}") from None


def replay_target(entry: CorpusEntry, *, targets: dict[str, str] | None = None,
                  engines: list[str] | tuple[str, ...] = ()) -> tuple[TargetRef | None, str]:
    """The target ``entry`` is replayed against, or None and why not.

    The one rule of what a corpus file may make batchfuzz run (read by
    :func:`replay` and by ``replay --write-tests``): the project's own code
    as the entry names it; an engine binding only when the user named its
    release (``engines``); a user's function only as the one ``targets``
    maps the contract to, never the one the file names.
    """
    ref = entry.ref
    again = replay_command(entry.contract, entry.target, entry.path or "<this file>")
    if ref.kind == "engine" and not any(same_release(ref.release, named) for named in engines):
        return None, (f"names an engine release ({ref.release}) the corpus file chose; to run that release's code, "
                      f"replay it with: {again}")
    if ref.is_project_code:
        return ref, ""
    chosen = (targets or {}).get(entry.contract)
    if chosen is None:
        return None, (f"names a user's function ({entry.target}); --target {entry.contract}=MODULE:FUNCTION names the "
                      f"one to replay it against, that one with: {again}")
    return parse(chosen), ""


def replay(entry: CorpusEntry, *, targets: dict[str, str] | None = None, engines: list[str] | tuple[str, ...] = (),
           isolate: bool = True, timeout_s: float = 60.0) -> Replayed:
    """Re-check the entry's property on its stored case.

    ``targets`` maps a contract to the user's function (``MODULE:FUNCTION``)
    that entries naming a user's function are replayed against (``replay
    --target``); without one they are skipped. ``engines`` are the engine
    releases the user named (``replay --engine``: ``wheel:PATH``,
    ``dir:PATH``, ``installed:``): an entry naming an engine binding is
    replayed only when its release is one of them, else skipped. Raises
    CorpusError for an entry that does not fit its contract or names
    something that does not exist.
    """
    from batchfuzz.execution import executor_for
    from batchfuzz.runner import failure_signature

    check_entry(entry)
    contract = _contract(entry)
    ref, why = replay_target(entry, targets=targets, engines=engines)
    if ref is None:
        return Replayed(entry, "skipped", message=why)
    if entry.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return Replayed(entry, "skipped", message="recorded on cuda; no CUDA device here")
    prop = checked_property(entry.property, entry.during)
    try:
        with executor_for(contract, ref, isolate=isolate, device=entry.device) as ex:
            info = ex.describe()
            if info.get("error"):
                raise CorpusError(f"{entry.path or '<corpus entry>'}: cannot load target {ref.spec}: {info['error']}")
            outcome = ex.check(prop, entry.case.copy(), timeout_s)
    except TargetError as exc:
        raise CorpusError(f"{entry.path or '<corpus entry>'}: cannot load target {ref.spec}: {exc}") from None
    if outcome.status == "rejected":
        return Replayed(entry, "skipped", message="the target's @assumes rejects this case")
    if failure_signature(outcome) is not None:
        return Replayed(entry, "fails", outcome.error_type if outcome.status == "failed" else outcome.status,
                        outcome.message + (f" ({outcome.exit})" if outcome.exit else ""))
    return Replayed(entry, "passes")


def replayed_origin(entry: CorpusEntry, executor: Any, timeout_s: float = 30.0) -> Origin | None:
    """The origin ``entry``'s own case gives on ``executor``'s target now
    (what it raises, where, or the property it breaks: not the origin the
    file records), or None when the case passes."""
    from batchfuzz.runner import _failure, failure_signature

    contract = _contract(entry)
    prop = contract.property(checked_property(entry.property, entry.during))
    outcome = executor.check(prop.name, entry.case.copy(), timeout_s)
    if failure_signature(outcome) is None:
        return None
    f = _failure(contract, entry.target, prop, entry.case, outcome, complete=True)
    return origin_of(contract=entry.contract, target=entry.target, device=entry.device, kind=f.kind(), prop=f.property,
                     error_type=f.error_type, traceback=f.traceback, exit=f.exit, case=entry.case)


def one_wrong_answer(a: CorpusEntry, b: CorpusEntry) -> bool:
    """Whether two wrong-answer entries of one contract, target, device and
    domain are one origin, the same bug (``batchfuzz.fuzz.origin.one_bug``, the
    smaller case by :func:`case_order`). Two cases of one property always are:
    shrinking ends in different local minima on different nights, and the
    smaller one stands for both."""
    from batchfuzz.fuzz.origin import one_bug

    if (a.contract, a.target, a.device, a.domain) != (b.contract, b.target, b.device, b.domain) or \
            not a.kind == b.kind == "violation":
        return False
    small, large = sorted((a, b), key=lambda e: case_order(e.contract, e.case))
    return one_bug(small.violates, large.violates, large.property)


def case_order(contract: str, case: Case) -> tuple[tuple[int, ...], int, str]:
    """How corpus cases of one origin are ordered, smallest first: the
    contract's ``size`` (``registry.Contract.size``), then the length and the
    text of the encoded case (a total order, the same on every machine)."""
    from batchfuzz import registry

    text = json.dumps(encode_case(case), sort_keys=True, separators=(",", ":"))
    return tuple(registry.get(contract).size(case)), len(text), text


@dataclass
class Saved:
    """Where :func:`save_failure` put a failure: the origin's one entry
    (``path``), whether it was written now (``new``), and the entries of the
    same origin it replaced (deleted)."""

    path: Path
    new: bool
    replaced: list[Path] = field(default_factory=list)


@contextlib.contextmanager
def _locked(root: Path | str, contract: str) -> Iterator[None]:
    """The contract's folder of the corpus, held by this process (job processes on one
    machine save failures of one target at the same moment)."""
    import fcntl

    folder = Path(root) / _safe(contract)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def same_origin(root: Path | str, entry: CorpusEntry) -> list[CorpusEntry]:
    """The loadable entries under ``root`` of ``entry``'s origin: the same
    origin id, or, for a wrong answer, one of the same bug (:func:`one_wrong_answer`)."""
    out = []
    for p in files(Path(root) / _safe(entry.contract)):
        try:
            e = load(p)
            if e.origin.id == entry.origin.id or one_wrong_answer(e, entry):
                out.append(e)
        except CorpusError:
            continue
    return out


def save_failure(root: Path | str, data: dict[str, Any], executor: Any, timeout_s: float = 30.0,
                 run_started: float | None = None) -> Saved:
    """Save a failure (``make_entry_data``) as its origin's one entry.

    Among the entries of the same origin (:func:`same_origin`: for a wrong
    answer, those of the same bug, whichever property found them) whose case
    still fails on ``executor``'s target and the new case, the smallest
    (:func:`case_order`) is kept and the others of that origin are deleted: a
    later, smaller case replaces the entry, and an entry that passes again no
    longer stands for its origin. Atomic writes, under a lock of the
    contract's folder."""
    from batchfuzz.runner import failure_signature

    root = Path(root)
    with _locked(root, data["contract"]):
        path = path_for(root, data)
        if path.exists():  # the same failure, found again
            return Saved(path, False)
        same = same_origin(root, _entry(data))

        def still_fails(e: CorpusEntry) -> bool:
            if run_started is not None and e.path is not None and e.path.stat().st_mtime >= run_started:
                return True
            return failure_signature(executor.check(checked_property(e.property, e.during), e.case.copy(),
                                                    timeout_s)) is not None

        live = [e for e in same if still_fails(e)]
        mine = case_order(data["contract"], decode_case(data["case"]))
        best = min(live, key=lambda e: case_order(e.contract, e.case), default=None)
        if best is not None and case_order(best.contract, best.case) <= mine:
            keep, new = best.path, False
        else:
            write_json_atomic(path, data)
            keep, new = path, True
        replaced = [e.path for e in same if e.path is not None and e.path != keep]
        for p in replaced:
            p.unlink(missing_ok=True)
        assert keep is not None
        return Saved(keep, new, replaced)


def describe(replayed: Replayed) -> str:
    """A readable account of a still-failing entry, with its reproduction."""
    e = replayed.entry
    lines = [
        f"{e.path}: {e.contract}/{e.target} still violates {e.property}" + (f" ({e.spec})" if e.spec else ""),
        f"  {replayed.error_type}: {replayed.message.splitlines()[0] if replayed.message else ''}",
    ]
    repro = e.data.get("reproduction")
    if isinstance(repro, str) and repro:
        from batchfuzz.reproduce import HEADER

        lines.append(HEADER)
        lines.extend(repro.splitlines())  # not indented: pasted as printed, it runs
    lines.append(f"--- replay: {replay_command(e.contract, e.target, e.path or '<this file>')}")
    return printable("\n".join(lines))  # the file's text, shown on a terminal


def replay_paths(paths: list[Path], targets: dict[str, str], isolate: bool = True, quiet: bool = False,
                 out: Any = None, engines: list[str] | tuple[str, ...] = ()) -> dict[str, int]:
    """``batchfuzz replay``: replay every corpus file under ``paths`` (default:
    :func:`default_dir`), printing each entry's verdict and a total; returns the
    counts of entries that pass, still fail, were skipped, or are malformed.
    ``engines`` are the engine releases the user named (see :func:`replay`).
    Raises UsageError for a given path that does not exist."""
    import sys

    from batchfuzz.usage import UsageError

    def say(text: str) -> None:
        print(printable(text), file=out or sys.stdout)  # names and errors from corpus files

    roots = list(paths) or [default_dir()]
    found: list[Path] = []
    for root in roots:
        if paths and not root.exists():
            raise UsageError(f"{root}: no such corpus file or directory")
        found.extend(files(root))
    counts = {"passes": 0, "fails": 0, "skipped": 0, "malformed": 0}
    if not found:
        say(f"no corpus entries under {', '.join(str(r) for r in roots)}")
        return counts
    for path in found:
        try:
            replayed = replay(load(path), targets=targets, engines=engines, isolate=isolate)
        except CorpusError as exc:
            counts["malformed"] += 1
            say(f"ERROR {exc}")
            continue
        counts[replayed.status] += 1
        if replayed.fails:
            say("FAIL  " + describe(replayed))
        elif not quiet:
            e = replayed.entry
            word = "pass " if replayed.status == "passes" else "skip "
            extra = f": {replayed.message}" if replayed.message else ""  # it may end with a command: nothing after it
            say(f"{word} {path}: {e.contract}/{e.target} {e.property}{extra}")
    say(f"{len(found)} corpus entries: {counts['passes']} pass, {counts['fails']} still fail, "
        f"{counts['skipped']} skipped, {counts['malformed']} malformed")
    return counts
