"""The tampering check: whether a target replaced the functions the verdict
runs through (docs/fuzz-loop.md, "The tampering check")."""

from __future__ import annotations

import itertools
import operator
import sys
import types
from collections.abc import Callable
from typing import Any

from batchfuzz import registry
from batchfuzz.execution.outcome import CRASH, Outcome

# What a target may not change in the process it runs in: the attributes of
# these modules (and of every batchfuzz module) the properties and oracles
# call. A target that replaces one (``numpy.array_equal = lambda *a: True``)
# could make the properties judge a wrong result right.
_WATCHED = ("numpy", "numpy.testing", "builtins", "math", "operator")
_CODE = operator.attrgetter("__code__")
_CHECK = operator.attrgetter("check")


def _watched_modules() -> list[Any]:
    return [m for name, m in list(sys.modules.items())
            if m is not None and (name in _WATCHED or name == "batchfuzz" or name.startswith("batchfuzz."))]


def _watched_names(m: Any) -> tuple[str, ...]:
    """A module's names whose values must not change: all of a watched
    library's; a batchfuzz module's public ones and its private functions
    and classes (``_admits``; not its private caches, which do change)."""
    return tuple(k for k, v in list(vars(m).items()) if not k.startswith("__")
                 and (m.__name__ in _WATCHED or not k.startswith("_") or isinstance(v, (types.FunctionType, type))))


def _judging_functions(modules: list[Any], properties: tuple[Any, ...]) -> tuple[types.FunctionType, ...]:
    """The Python functions the verdict runs through, whose code a target
    could rewrite in place (``evaluate.__code__ = ...``): those of the
    watched modules, the methods of batchfuzz's classes, every contract's
    properties and oracle."""
    found: dict[int, types.FunctionType] = {}
    values: list[Any] = [p.check for p in properties] + [c.oracle for c in registry.contracts()]
    for m in modules:
        for v in list(vars(m).values()):
            values.append(v)
            if isinstance(v, type) and v.__module__.startswith("batchfuzz"):
                members = list(vars(v).values())
                values += members + [getattr(a, f, None) for a in members for f in ("fget", "fset", "__func__")]
    for v in values:
        if isinstance(v, types.FunctionType):
            found.setdefault(id(v), v)
    return tuple(found.values())


class HarnessSnapshot:
    """The harness's functions as they were (see ``tampering``), laid out so
    that finding nothing changed takes two C-level passes (docs/fuzz-loop.md,
    "The tampering check")."""

    def __init__(self) -> None:
        self.modules: list[tuple[str, tuple[str, ...], Callable[[Any], Any], tuple[Any, ...]]] = []
        watched = _watched_modules()
        for m in watched:
            names = _watched_names(m)
            if not names:
                continue
            getter = operator.itemgetter(*names) if len(names) > 1 else (lambda d, k=names[0]: (d[k],))
            self.modules.append((m.__name__, names, getter, getter(vars(m))))
        # The same names flat, for the pass that finds nothing changed: one C-level map over them all.
        self.dicts = tuple(vars(sys.modules[mod]) for mod, names, _, _ in self.modules for _ in names)
        self.names = tuple(k for _, names, _, _ in self.modules for k in names)
        self.values = tuple(v for _, _, _, values in self.modules for v in values)
        self.properties = tuple(p for c in registry.contracts() for p in c.properties)
        self.checks = tuple(map(_CHECK, self.properties))
        self.functions = _judging_functions(watched, self.properties)
        self.codes = tuple(map(_CODE, self.functions))


def snapshot_harness() -> HarnessSnapshot:
    """The harness's functions as they are now (see ``tampering``)."""
    return HarnessSnapshot()


def tampering(before: HarnessSnapshot, *, restore: bool = True) -> list[str]:
    """The watched attributes that were replaced or deleted since ``before``
    (``numpy.array_equal``, ``batchfuzz.execution.evaluate.__code__``, a
    property's ``check``), put back when ``restore``."""
    changed = []
    same = all(map(operator.is_, map(dict.get, before.dicts, before.names, itertools.repeat(_MISSING)), before.values))
    for mod, names, getter, values in () if same else before.modules:
        m = sys.modules.get(mod)
        if m is None:
            continue
        d = vars(m)
        try:
            if all(map(operator.is_, getter(d), values)):
                continue
        except KeyError:
            pass  # a name was deleted: found below
        for k, v in zip(names, values, strict=True):
            if d.get(k, _MISSING) is not v:
                changed.append(f"{mod}.{k}")
                if restore:
                    setattr(m, k, v)
    if tuple(map(_CODE, before.functions)) != before.codes:
        for f, code in zip(before.functions, before.codes, strict=True):
            if f.__code__ is not code:
                changed.append(f"{f.__module__}.{f.__qualname__}.__code__")
                if restore:
                    f.__code__ = code
    if tuple(map(_CHECK, before.properties)) != before.checks:
        for p, check in zip(before.properties, before.checks, strict=True):
            if p.check is not check:
                changed.append(f"the property {p.name}'s check")
                if restore:
                    object.__setattr__(p, "check", check)
    return changed


_MISSING = object()
TAMPERED = "TamperedWithHarness"


def _tampered(changed: list[str]) -> Outcome:
    names = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return Outcome(CRASH, TAMPERED, f"the target replaced {names} in its process: the properties' own checks cannot be "
                   f"trusted after that, so no result of it is judged", exit=f"changed {names}")


def tampered_on_import(changed: list[str]) -> str:
    """Why a target whose import replaced ``changed`` cannot be used."""
    return _tampered(changed).message.replace("the target replaced", "importing the target replaced")
