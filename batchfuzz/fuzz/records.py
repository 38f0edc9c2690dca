"""The records of ``summary.json``, typed: a run (:class:`RunReport`), its
contracts, implementations (targets), properties (work items), failures,
origins, errors and totals. :func:`batchfuzz.fuzz.report.build_summary`
writes a run through them and :func:`batchfuzz.fuzz.merge.load_shard` reads
a shard's report back through them.

Each record is a dataclass whose fields are the JSON keys (the format is
unchanged: ``to_json`` gives the dict ``summary.json`` holds).
``from_json(data, where)`` checks it: a missing required field or a value
of the wrong type is a :class:`RecordError` naming ``where`` (the file, then
the contract, implementation and property) and the field; a field added
since (``origins``, a failure's ``origin``) has a default, so the reports
of older runs still load. Keys a record does not know (what another writer
adds, such as a ``timeline``, or the merge's ``shards``) are kept in
``extra`` and written back by ``to_json``: reading never drops them.
tests/test_records.py checks the round trip and the errors.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

R = TypeVar("R", bound="Record")


class RecordError(ValueError):
    """A ``summary.json`` record that is not one; the message names where and the field."""


def _type_name(hint: Any) -> str:
    if hint is float:
        return "int or float"
    if isinstance(hint, type):
        return hint.__name__
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    return getattr(origin, "__name__", str(hint))


def _place(where: str, trail: tuple[str, ...]) -> str:
    """Where a value is: the file, then the names leading to it (``contract/implementation/property``)."""
    return f"{where}: {'/'.join(trail)}" if trail else where


def _check(value: Any, hint: Any, where: str, trail: tuple[str, ...], key: str) -> Any:
    """``value`` (field ``key`` of the record at ``trail``) read as ``hint``:
    records built from their dicts, containers checked and walked, scalars
    checked (a JSON ``true`` is no number)."""
    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        if len(others) == 1:
            return _check(value, others[0], where, trail, key)
        if any(isinstance(value, a) and not isinstance(value, bool) for a in others):
            return value
    elif isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_json(value, where, (*trail, key))
    elif origin is list:
        if isinstance(value, list):
            (item,) = typing.get_args(hint)
            return [_check(v, item, where, trail, f"{key}[{k}]") for k, v in enumerate(value)]
    elif origin is dict:
        if isinstance(value, dict):
            _, item = typing.get_args(hint)
            if isinstance(item, type) and issubclass(item, Record):  # records by name: their names make the trail
                return {k: item.from_json(v, where, (*trail, k)) for k, v in value.items()}
            return {k: _check(v, item, where, trail, f"{key}.{k}") for k, v in value.items()}
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif isinstance(hint, type):
        if isinstance(value, hint) and not (isinstance(value, bool) and hint is not bool):
            return value
    else:  # pragma: no cover - a field type this module does not read
        raise TypeError(f"cannot read field {key!r} of type {hint!r}")
    raise RecordError(f"{_place(where, trail)}: field {key!r} must be {_type_name(hint)}, got {type(value).__name__}")


def _dump(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


@dataclass
class Record:
    """A record of ``summary.json`` (see the module docstring)."""

    _hints: ClassVar[dict[type, dict[str, Any]]] = {}
    # Keys the record does not declare, kept as read and written back: a merge's
    # "shard"/"shards", a failure's inputs and case, what other writers add.
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)

    @classmethod
    def _fields(cls) -> list[tuple[dataclasses.Field[Any], Any]]:
        hints = Record._hints.get(cls)
        if hints is None:
            hints = Record._hints[cls] = typing.get_type_hints(cls)
        return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.name != "extra"]

    @classmethod
    def from_json(cls: type[R], data: Any, where: str, trail: tuple[str, ...] = ()) -> R:
        """The record ``data`` holds; ``where`` is its file, ``trail`` the names
        leading to it there (both name it in a RecordError)."""
        if not isinstance(data, dict):
            raise RecordError(f"{_place(where, trail)} must be an object, got {type(data).__name__}")
        values: dict[str, Any] = {}
        for f, hint in cls._fields():
            if f.name in data:
                values[f.name] = _check(data[f.name], hint, where, trail, f.name)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{_place(where, trail)}: missing field {f.name!r}")
        known = {f.name for f, _ in cls._fields()}
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})

    def to_json(self) -> dict[str, Any]:
        out = {f.name: _dump(getattr(self, f.name)) for f, _ in self._fields()}
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out


@dataclass
class PropertyRecord(Record):
    """One work item's result: an implementation's property. ``seconds`` is
    its fuzzing time, ``startup_seconds`` the time its target took to get
    ready in its slices (a worker started, the target imported), which the
    budget does not charge either."""

    status: str
    examples: int
    seconds: float
    slices: int = 0
    reason: str = ""
    startup_seconds: float = 0.0


@dataclass
class ImplementationRecord(Record):
    """One implementation (target) of a contract: its properties and failures
    (each failure as the run recorded it: property, during, error type,
    message, exit, corpus file, whether new, entry id, origin id)."""

    status: str
    examples: int
    seconds: float
    failures: list[dict[str, Any]]
    properties: dict[str, PropertyRecord]
    coverage: dict[str, Any]
    scores: dict[str, Any]
    settings: dict[str, Any]
    reason: str = ""
    cases_per_second: float = 0.0


@dataclass
class ContractRecord(Record):
    """One contract: its sums over its implementations."""

    examples: int
    seconds: float
    failures: int
    errors: int
    items: int
    items_run: int
    coverage: dict[str, Any]
    implementations: dict[str, ImplementationRecord]
    cases_per_second: float = 0.0


@dataclass
class FailureRecord(Record):
    """One failure of one work item: what the job process recorded
    (``batchfuzz.fuzz.job``), with its contract and implementation."""

    contract: str
    implementation: str
    property: str
    during: str = ""
    spec: str = ""
    kind: str = ""
    error_type: str = ""
    message: str = ""
    exit: str = ""
    reproduction: str = ""
    corpus_file: str | None = None
    new: bool = False
    id: str = ""
    origin: dict[str, Any] | None = None  # batchfuzz.fuzz.origin.Origin.to_json


@dataclass
class OriginRecord(Record):
    """One origin of the run's failures (``batchfuzz.fuzz.report.origins``): one report line."""

    id: str
    contract: str
    implementation: str
    description: str
    properties: list[str]
    failures: int
    corpus_file: str | None = None
    new: bool = False
    shrink_complete: bool = True  # False: its case is the smallest found before the deadline, not a shrunk one


def unshrunk_note(failure: dict[str, Any]) -> str:
    """What every report says of a failure (or origin) whose shrink did not
    complete (``"shrink_complete": false``): its case is not final; "" when it did."""
    if failure.get("shrink_complete", True) is not False:
        return ""
    return ("NOT FULLY SHRUNK: the deadline ended its shrinking; this case is the smallest found so far, "
            "not a minimal one (a run with a larger budget shrinks it further)")


@dataclass
class ErrorRecord(Record):
    """A work item the harness could not run."""

    contract: str
    implementation: str
    type: str
    message: str
    property: str = ""
    traceback: str = ""


@dataclass
class Totals(Record):
    """The run's sums; ``throughput`` is examples per wall second."""

    examples: int
    failures: int
    errors: int
    items: int
    items_run: int
    items_not_run: int
    throughput: float
    new_corpus_entries: int = 0
    origins: int = 0


@dataclass
class RunReport(Record):
    """A whole run (``summary.json``): a single run's, a shard's or a merge's."""

    partial: bool
    status: str
    wall_seconds: float
    budget_seconds: float
    profile: str
    workers: int
    versions: dict[str, Any]
    totals: Totals
    contracts: dict[str, ContractRecord]
    failures: list[FailureRecord]
    errors: list[ErrorRecord]
    notes: list[str]
    not_run: list[str]
    tool: str = "batchfuzz"
    interrupted_by: str | None = None
    started: str | None = None
    finished: str | None = None
    startup_seconds: float = 0.0
    database_lost: list[str] = field(default_factory=list)
    seed: int | None = None
    isolated: bool = True
    device: str | None = None
    database: str | None = None
    corpus: str | None = None
    shard: dict[str, Any] | None = None
    replay_command: str | None = None
    host: dict[str, Any] | None = None
    origins: list[OriginRecord] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: Any, where: str, trail: tuple[str, ...] = ()) -> RunReport:
        if not isinstance(data, dict) or data.get("tool") != "batchfuzz":
            raise RecordError(f"{where}: not a batchfuzz fuzz summary (no \"tool\": \"batchfuzz\")")
        return super().from_json(data, where, trail)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunReport:
        """``summary.json`` at ``path``, read through the records with the limits of
        every untrusted file (:func:`batchfuzz.fuzz.untrusted.load_report`); RecordError naming the file."""
        from batchfuzz.fuzz.untrusted import UntrustedFileError, load_report

        p = Path(path)
        if not os.path.lexists(p):
            raise RecordError(f"{p}: missing")
        try:
            data = load_report(p)
        except UntrustedFileError as exc:
            raise RecordError(str(exc)) from None
        return cls.from_json(data, str(p))
