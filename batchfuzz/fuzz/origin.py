"""A failure's origin: what one bug is, whichever property, worker, shard or
night found it (an exception's type and location, how a crash ended, a
timeout's kind, or a wrong answer's shrunk case, two wrong answers being one
bug by :func:`one_bug`). An origin is of one contract, target and device and
names one corpus entry and one report line. The rules: docs/nightly.md ("One
failure, one report line"); tests/test_origin.py checks each.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import re
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("violation", "exception", "raises", "crash", "timeout")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in ', re.MULTILINE)


class OriginError(ValueError):
    """A JSON origin that is not one (the message names where and the field)."""


def _library_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return sorted({os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)},
                  key=len, reverse=True)


def _relative(path: str) -> str:
    """``path`` relative to the working directory when it is under it (one
    run's processes share it, whatever each one's ``sys.path``), else to the
    longest ``sys.path`` entry that holds it, else as given."""
    real = os.path.realpath(path)

    def under(root: str) -> str:
        r = os.path.realpath(root)
        return r if real.startswith(r.rstrip(os.sep) + os.sep) else ""

    best = under(os.getcwd()) or max((under(p) for p in sys.path if p), key=len, default="")
    return Path(os.path.relpath(real, best)).as_posix() if best else path


def location(traceback_text: str) -> str:
    """``file:line`` of the innermost frame of a formatted traceback outside the
    standard library and installed packages (the innermost frame when all
    are), or "" when the text holds no frame."""
    frames = [(m["file"], m["line"]) for m in _FRAME.finditer(traceback_text or "")]
    frames = [f for f in frames if not f[0].startswith("<")]  # <frozen ...>, <string>
    if not frames:
        return ""
    libs = _library_dirs()
    own = [f for f in frames if not any(os.path.realpath(f[0]).startswith(d + os.sep) for d in libs)]
    file, line = (own or frames)[-1]
    return f"{_relative(file)}:{line}"


@dataclass(frozen=True)
class Origin:
    """What makes two failures one (the module docstring gives the rules)."""

    contract: str
    target: str
    device: str
    kind: str
    error_type: str = ""
    location: str = ""  # exceptions: file:line
    exit: str = ""  # a crash without a traceback: how the process ended
    property: str = ""  # empty: a violation's origin is its case (a corpus file written before says its property)
    case: str = ""  # a violation: the shrunk case, canonical JSON of batchfuzz.codec.encode_case

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise OriginError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    @builtins.property
    def id(self) -> str:
        key = json.dumps([self.contract, self.target, self.device, self.kind, self.error_type, self.location, self.exit,
                          self.property, self.case], separators=(",", ":"))
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """One line for a report: ``IndexError at tests/hostile.py:71``."""
        if self.kind == "violation":  # an origin recorded before cases alone made one names its property
            return f"wrong answer: {self.property}" if self.property else "wrong answer"
        if self.kind == "timeout":
            return "timeout"
        if self.location:
            return f"{self.kind}: {self.error_type} at {self.location}"
        if self.kind == "crash":
            return f"crash: {self.exit or self.error_type}"
        return f"{self.kind}: {self.error_type}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "error_type": self.error_type, "location": self.location,
                "exit": self.exit, "property": self.property, "case": self.case, "description": self.describe(),
                "contract": self.contract, "target": self.target, "device": self.device}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Origin:
        """The origin a corpus entry or a report recorded; OriginError naming ``where`` and the field."""
        if not isinstance(data, dict):
            raise OriginError(f"{where}: field 'origin' must be an object, got {type(data).__name__}")
        fields = {}
        for key in ("contract", "target", "device", "kind", "error_type", "location", "exit", "property", "case"):
            value = data.get(key, "" if key not in ("contract", "target", "device", "kind") else None)
            if not isinstance(value, str):
                raise OriginError(f"{where}: field 'origin.{key}' must be a string, got {value!r}")
            fields[key] = value
        try:
            origin = cls(**fields)
        except OriginError as exc:
            raise OriginError(f"{where}: field 'origin': {exc}") from None
        if "id" in data and data["id"] != origin.id:
            raise OriginError(f"{where}: field 'origin.id' {data['id']!r} is not the id of its fields ({origin.id})")
        return origin


def origin_of(*, contract: str, target: str, device: str, kind: str, prop: str, error_type: str, traceback: str,
              exit: str, case: Any) -> Origin:
    """The origin of a failure of ``kind`` (``batchfuzz.runner.Failure.kind``)
    found by ``prop`` on ``case`` (a ``batchfuzz.case.Case``)."""
    if kind == "violation":
        from batchfuzz.codec import encode_case

        return Origin(contract, target, device, kind, case=json.dumps(encode_case(case), sort_keys=True, separators=(",", ":")))
    if kind == "timeout":
        return Origin(contract, target, device, kind)
    where = location(traceback)
    if kind == "crash" and not where:
        return Origin(contract, target, device, kind, error_type=error_type, exit=exit)
    return Origin(contract, target, device, kind, error_type=error_type, location=where)


def one_bug(smaller_violates: Iterable[str], larger_violates: Iterable[str], larger_property: str) -> bool:
    """Whether two wrong answers of one target, on a smaller case that breaks
    ``smaller_violates`` and on a case no smaller that breaks ``larger_violates``
    and was found by ``larger_property``, are one bug: the smaller case breaks
    the property that found the larger one (two findings of one property
    always are), or the larger case breaks every property the smaller one
    breaks (it shows the same bug, and more of its consequences)."""
    smaller = set(smaller_violates)
    return larger_property in smaller or smaller <= set(larger_violates)
