"""The contract registry: one record per contract, the single source of truth.

Modelled on PyTorch's OpInfo: a record names the oracle, the implementations
(per backend and device), the Hypothesis strategy, the properties, the error
inputs and the known buggy variants. Tests (``tests/test_registry.py``) and
the CLI (``batchfuzz fuzz``/``check``) are generated from these records.

Contract records live one per module in ``batchfuzz/contracts/`` and are found
by import; adding a contract needs no edit here or in any test file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis.strategies import SearchStrategy

from batchfuzz.case import Case

Target = Callable[..., Any]


@dataclass(frozen=True)
class Implementation:
    """An optimised implementation, bound to a device to get a canonical callable."""

    name: str
    backend: str  # "numpy" | "torch" | "python"
    bind: Callable[[str], Target]
    devices: tuple[str, ...] = ("cpu",)
    description: str = ""

    def for_device(self, device: str) -> Target:
        if device not in self.devices:
            raise ValueError(f"implementation {self.name!r} does not run on device {device!r}")
        return self.bind(device)


@dataclass(frozen=True)
class Property:
    """A property of SPEC.md. ``check(target, case)`` raises PropertyViolation."""

    name: str
    spec: str
    check: Callable[[Target, Case], None]


@dataclass(frozen=True)
class ErrorInput:
    """Bad input, the exception type it must raise and a message regex."""

    args: dict[str, Any]
    error: type[Exception]
    match: str
    why: str = ""


@dataclass(frozen=True)
class Variant:
    """A known buggy variant: an engine's shipped behaviour or a planted mutant.

    ``caught_by`` names the properties expected to find it; ``canonical`` is the
    documented minimal counterexample (the case's ``args``) that shrinking must
    reach, or be no larger than, under the ``ci`` profile.
    """

    name: str
    description: str
    fn: Target
    origin: str  # "shipped" (an engine's real behaviour) or "mutant"
    caught_by: tuple[str, ...]
    canonical: dict[str, Any] | None = None


@dataclass(frozen=True)
class Contract:
    name: str
    title: str
    spec_section: str
    signature: str
    oracle: Target
    implementations: tuple[Implementation, ...]
    strategy: Callable[[], SearchStrategy[Case]]
    properties: tuple[Property, ...]
    error_inputs: tuple[ErrorInput, ...] = ()
    variants: tuple[Variant, ...] = ()
    examples: tuple[Case, ...] = ()
    labels: Callable[[Case], Sequence[str]] = lambda case: ()
    size: Callable[[Case], tuple[int, ...]] = lambda case: ()
    # Optional per-example scores summed over a run and reported, not failed on
    # (e.g. how often a conservative decision vetoes a safe step: precision).
    scores: Callable[[Target, Case], dict[str, int]] | None = None
    # Optional reproduction: (function name, case, violated property, imports)
    # -> code lines that replay the failing call(s), where the canonical
    # positional call alone would not (an ``out=`` buffer, a history of steps).
    reproduce: Callable[[str, Case, str, set[str]], list[str]] | None = None
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def property(self, name: str) -> Property:
        for p in self.properties:
            if p.name == name:
                return p
        raise KeyError(f"contract {self.name!r} has no property {name!r} (has: {[p.name for p in self.properties]})")

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"contract {self.name!r} has no variant {name!r}")

    def implementation(self, name: str) -> Implementation:
        for i in self.implementations:
            if i.name == name:
                return i
        raise KeyError(f"contract {self.name!r} has no implementation {name!r}")


_CONTRACTS: dict[str, Contract] = {}
_LOADED = False


def register(contract: Contract) -> Contract:
    if contract.name in _CONTRACTS and _CONTRACTS[contract.name] is not contract:
        raise ValueError(f"contract {contract.name!r} registered twice")
    _CONTRACTS[contract.name] = contract
    return contract


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    import batchfuzz.contracts as pkg

    for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")
    _LOADED = True


def contracts() -> list[Contract]:
    """Every registered contract, in SPEC order (by ``spec_section``)."""
    _load()
    return sorted(_CONTRACTS.values(), key=lambda c: (c.spec_section, c.name))


def get(name: str) -> Contract:
    _load()
    if name not in _CONTRACTS:
        raise KeyError(f"unknown contract {name!r}; known: {', '.join(sorted(_CONTRACTS))}")
    return _CONTRACTS[name]


def numpy_impl(name: str, fn: Target, description: str = "") -> Implementation:
    return Implementation(name=name, backend="numpy", bind=lambda device: fn, devices=("cpu",), description=description)


def python_impl(name: str, fn: Target, description: str = "") -> Implementation:
    return Implementation(name=name, backend="python", bind=lambda device: fn, devices=("cpu",), description=description)


def torch_impl(name: str, binder: Callable[[str], Target], description: str = "") -> Implementation:
    return Implementation(name=name, backend="torch", bind=binder, devices=("cpu", "cuda"), description=description)
