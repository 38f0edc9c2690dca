"""The contract registry: one record per contract, the single source of truth.

Modelled on PyTorch's OpInfo: a :class:`Contract` names the oracle, the
implementations (per device), the input domains (each a Hypothesis strategy
and a predicate), the properties, the error inputs and the known buggy
variants; it is validated when it is built, so a record that cannot work is
an error at import, naming the contract and the field. The tests
(``tests/test_contracts.py``, ``tests/test_catalogue.py``), the CLI and
``batchfuzz.testing`` are all driven by these records.

Records are found by import: every module of ``batchfuzz.contracts`` whose
name does not start with ``_`` or end with ``_variants``, then the modules
that installed distributions declare under the ``batchfuzz.contracts`` entry
point group, then the modules named in ``$BATCHFUZZ_CONTRACTS``
(comma-separated). Adding a contract needs no edit here or in any test file.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import inspect
import os
import pkgutil
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from batchfuzz.case import Case

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

Target = Callable[..., Any]
DEVICES = ("cpu", "cuda")
ORIGINS = ("shipped", "mutant")
MIN_MUTANTS = 5
CONTRACTS_ENV_VAR = "BATCHFUZZ_CONTRACTS"
ENTRY_POINT_GROUP = "batchfuzz.contracts"
# What a property judges (docs/contracts.md, "Safety and documented choice"):
# SAFETY, what any correct engine must hold; CHOICE, one of several safe
# answers, the one the engine documents (its comments, docstrings, callers).
SAFETY, CHOICE = "safety", "choice"
LABELS = (SAFETY, CHOICE)




SPEC = "spec"  # the widest domain, which every contract has


def choose_domain(explicit: str | None, declared: str | None, fallback: str = SPEC) -> str:
    """The domain a run draws from: the one named explicitly (``--domain``, a
    work item's), else the one the target declares (``@batchfuzz.domain``),
    else ``fallback`` (``spec``; an exhaustive scope's own domain)."""
    return explicit or declared or fallback

class UnknownName(KeyError):
    """A registry lookup of a name that is not there (a contract, property,
    variant, implementation, domain or scope). A ``KeyError`` (so a
    ``LookupError``) whose ``str()`` is the message itself, which names what
    is known: print it as it is."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

class RecordError(ValueError):
    """A contract record that cannot work (raised when it is built)."""


@dataclass(frozen=True)
class Implementation:
    """An optimised implementation; ``bind(device)`` gives the canonical callable.

    Host code (numpy, plain Python) runs on ``("cpu",)``; torch code on
    ``("cpu", "cuda")``, bound to a device by a ``bind`` function of its
    ``batchfuzz.impl`` module.
    """

    name: str
    bind: Callable[[str], Target]
    devices: tuple[str, ...] = ("cpu",)
    description: str = ""

    def __post_init__(self) -> None:
        if not self.devices or any(d not in DEVICES for d in self.devices):
            raise RecordError(f"implementation {self.name!r}: devices must be some of {DEVICES}, got {self.devices!r}")

    def for_device(self, device: str) -> Target:
        if device not in self.devices:
            raise ValueError(f"implementation {self.name!r} does not run on device {device!r} (runs on {', '.join(self.devices)})")
        return self.bind(device)


def _resolve(reference: Any) -> Any:
    """``"package.module:attribute"`` -> that attribute (imported now); anything else as it is."""
    if not isinstance(reference, str):
        return reference
    module, sep, attr = reference.partition(":")
    if not sep or not module or not attr:
        raise RecordError(f"a lazy reference must be 'package.module:attribute', got {reference!r}")
    import importlib

    return getattr(importlib.import_module(module), attr)


def host_impl(name: str, fn: Target | str, description: str = "") -> Implementation:
    """A host implementation (numpy or plain Python). ``fn`` may be a
    ``"package.module:function"`` reference, imported when the implementation
    is first bound (a torch-using host function: listing the registry must not import torch)."""
    return Implementation(name=name, bind=lambda device: _resolve(fn), devices=("cpu",), description=description)


def torch_impl(name: str, bind: Callable[[str], Target] | str, description: str = "") -> Implementation:
    """A torch implementation bound to a device by ``bind(device)``; ``bind``
    may be a ``"package.module:bind"`` reference, imported when first bound,
    so that loading the registry (``batchfuzz list``, usage errors) does not import torch."""
    return Implementation(name=name, bind=lambda device: _resolve(bind)(device), devices=DEVICES, description=description)


@dataclass(frozen=True)
class Property:
    """A property of the contract: ``check(target, case)`` raises
    ``batchfuzz.checks.PropertyViolation`` when ``target`` breaks it on ``case``;
    ``spec`` is the sentence of docs/contracts.md it checks; ``label`` is
    ``SAFETY`` or ``CHOICE`` (every contract gives one: checked when the
    contract is built)."""

    name: str
    spec: str
    check: Callable[[Target, Case], None]
    # True for a property about what the target does to its own arguments:
    # it gets the target itself, not the copying guard of batchfuzz.execution.
    raw: bool = False
    label: str = ""

    def __post_init__(self) -> None:
        if self.label not in ("", *LABELS):
            raise RecordError(f"property {self.name!r}: label must be one of {LABELS}, got {self.label!r}")


@dataclass(frozen=True)
class Domain:
    """A set of inputs: ``cases()`` draws them (shrinking stays inside, since
    every draw is a member), ``contains(case)`` decides membership (for corpus
    entries and explicit examples). ``description`` states the engine fact
    behind it."""

    name: str
    description: str
    cases: Callable[[], SearchStrategy[Case]]
    contains: Callable[[Case], bool]
    # Whether the contract's structural reductions (batchfuzz.reduce) keep a
    # member a member: false where membership is more than ``contains`` can
    # check (realizable steps are what a scheduler model produces).
    reducible: bool = True


def domains_from(strategies: Any, descriptions: dict[str, str], *, irreducible: tuple[str, ...] = ()) -> tuple[Domain, ...]:
    """The domains a contract's strategies module defines (its ``cases(domain)``
    and ``in_domain(case, domain)``), one per entry of ``descriptions``, in
    order; those named in ``irreducible`` are not reduced (``Domain.reducible``)."""
    return tuple(
        Domain(name, text, functools.partial(strategies.cases, name), functools.partial(_in_domain, strategies.in_domain, name),
               reducible=name not in irreducible)
        for name, text in descriptions.items()
    )


def _in_domain(predicate: Callable[[Case, str], bool], name: str, case: Case) -> bool:
    return bool(predicate(case, name))


DEFAULT_SCOPE = "small"


@dataclass(frozen=True)
class Scope:
    """A bounded-exhaustive scope: a documented small set of inputs that
    ``cases()`` enumerates completely, smallest first in the contract's order
    (``Contract.size``), so the first failing case is a smallest
    counterexample of the scope (``batchfuzz.exhaustive``). Every case lies
    in the domain ``domain``; ``count`` is how many there are, and
    ``description`` says what is enumerated and in which order."""

    name: str
    description: str
    domain: str
    count: int
    cases: Callable[[], Iterable[Case]]

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise RecordError(f"scope {self.name!r}: name must be an identifier")
        if not self.description.strip():
            raise RecordError(f"scope {self.name!r}: description must say what is enumerated")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise RecordError(f"scope {self.name!r}: count must be an int >= 1, got {self.count!r}")
        if not callable(self.cases):
            raise RecordError(f"scope {self.name!r}: cases must be callable, got {type(self.cases).__name__}")


def scopes_from(strategies: Any) -> tuple[Scope, ...]:
    """The scopes a contract's strategies module defines: ``SCOPES`` (name ->
    a ``ScopeSpec``: description, domain, count) and ``scope_cases(name)``, in order."""
    return tuple(Scope(name, spec.description, spec.domain, spec.count, functools.partial(strategies.scope_cases, name))
                 for name, spec in strategies.SCOPES.items())


@dataclass(frozen=True)
class InputSpace:
    """A contract's inputs as its strategies module defines them: the
    domains (with the record's description of each), the order of cases
    (``size``), the reductions and the bounded-exhaustive scopes. Built by
    :func:`input_space`; a record takes it once, as ``Contract(inputs=...)``."""

    module: str
    domains: tuple[Domain, ...]
    size: Callable[[Case], tuple[int, ...]]
    reductions: Callable[[Case], Iterable[Case]]
    scopes: tuple[Scope, ...] = ()


def input_space(strategies: Any, descriptions: dict[str, str], *, irreducible: tuple[str, ...] = ()) -> InputSpace:
    """The inputs of a contract from its strategies module, checked against
    ``batchfuzz.plugins.StrategiesModule`` (a PluginError names what the
    module lacks): one domain per entry of ``descriptions`` (name -> the
    engine fact behind it), in order, those in ``irreducible`` not reduced;
    its ``size`` and ``reductions``; its scopes when it has ``SCOPES``."""
    from batchfuzz import plugins

    has_scopes = plugins.check_strategies(strategies, descriptions)
    return InputSpace(getattr(strategies, "__name__", repr(strategies)), domains_from(strategies, descriptions, irreducible=irreducible),
                      strategies.size, strategies.reductions, scopes_from(strategies) if has_scopes else ())


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

    ``caught_by`` names the properties expected to find it, the first being
    the one the catalogue hunts with; ``canonical`` is the documented minimal
    counterexample (a subset of the case's ``args``) that shrinking must
    reach, or be no larger than.
    """

    name: str
    description: str
    fn: Target
    origin: str
    caught_by: tuple[str, ...]
    canonical: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise RecordError(f"variant {self.name!r}: origin must be one of {ORIGINS}, got {self.origin!r}")
        if not self.caught_by:
            raise RecordError(f"variant {self.name!r}: caught_by must name at least one property")


def _no_labels(case: Case) -> Sequence[str]:
    return ()


def _no_size(case: Case) -> tuple[int, ...]:
    return ()


@dataclass(frozen=True)
class Contract:
    """One contract of docs/contracts.md.

    ``arguments`` are the canonical argument names in call order: the case's
    ``args`` keys, and the oracle's first parameters (any further oracle
    parameter has a default, like contract C's ``out=None``). ``domains``
    start with ``spec``, the widest. ``labels(case)`` names input classes for
    statistics; ``size(case)`` is the contract's order of cases (a tuple,
    compared lexicographically: the catalogue's "no larger" and the
    reductions' "smaller"); ``reductions(case)`` proposes smaller cases
    (``batchfuzz.reduce``); ``scores(target, case)`` are counted, never failed on; ``reproduce``
    (function name, case, violated property, imports) writes the calls of a
    reproduction where the plain positional call would not replay the failure.
    ``scopes`` are its bounded-exhaustive scopes (:class:`Scope`), one of them
    named ``DEFAULT_SCOPE`` when there are any. ``inputs`` gives domains,
    size, reductions and scopes at once, from the strategies module
    (:func:`input_space`); a record gives either it or those fields.
    """

    name: str
    title: str
    section: str
    signature: str
    arguments: tuple[str, ...]
    oracle: Target
    implementations: tuple[Implementation, ...]
    properties: tuple[Property, ...]
    error_inputs: tuple[ErrorInput, ...]
    variants: tuple[Variant, ...]
    examples: tuple[Case, ...] = ()
    labels: Callable[[Case], Sequence[str]] = _no_labels
    size: Callable[[Case], tuple[int, ...]] = _no_size
    reductions: Callable[[Case], Iterable[Case]] | None = None
    # Arguments (oracle parameter names) the target may write: a persistent
    # buffer, an ``out=``. Every other argument is passed as a copy
    # (``batchfuzz.execution.guarded``) and must be left unchanged.
    writes: tuple[str, ...] = ()
    scores: Callable[[Target, Case], dict[str, int]] | None = None
    reproduce: Callable[[str, Case, str, set[str]], list[str]] | None = None
    notes: str = ""
    scopes: tuple[Scope, ...] = ()
    # Exceptions a target raises as the contract's own answer (a refusal its
    # properties compare with the oracle's, like contract G's refused
    # thresholds): passed to the properties, not the target's ``raises``
    # verdict (batchfuzz.execution.evaluate; tests/test_faults.py).
    refusals: tuple[type[Exception], ...] = ()
    module: str = field(default="", compare=False)
    domains: tuple[Domain, ...] = field(default=(), kw_only=True)
    inputs: InputSpace | None = field(default=None, kw_only=True, compare=False)

    def __post_init__(self) -> None:
        self._take_inputs()
        if not self.name.isidentifier():
            raise self._bad("name must be an identifier")
        self._check_arguments()
        self._check_names()
        self._check_required()
        self._check_domains()
        self._check_variants()
        for k, ex in enumerate(self.examples):
            if tuple(ex.args) != self.arguments:
                raise self._bad(f"examples[{k}] has arguments {list(ex.args)}, expected {list(self.arguments)}")
        for k, e in enumerate(self.error_inputs):
            extra = [a for a in e.args if a not in self._oracle_parameters()]
            if extra:
                raise self._bad(f"error_inputs[{k}] names {extra}, which the oracle does not take")

    def _bad(self, what: str) -> RecordError:
        return RecordError(f"contract {self.name!r}: {what}")

    def _take_inputs(self) -> None:
        """The input space's fields, given through ``inputs=`` only."""
        if self.inputs is None:
            return
        # A field equal to the input space's own is the record rebuilt by
        # dataclasses.replace (tests do), not a second source.
        given = [f for f, unset in (("domains", ()), ("size", _no_size), ("reductions", None), ("scopes", ()))
                 if getattr(self, f) != unset and getattr(self, f) != getattr(self.inputs, f)]
        if given:
            raise self._bad(f"gives inputs= and {', '.join(given)}: give them through inputs= (registry.input_space) only")
        for f in ("domains", "size", "reductions", "scopes"):
            object.__setattr__(self, f, getattr(self.inputs, f))

    def _check_names(self) -> None:
        for kind, names in (("implementation", [i.name for i in self.implementations]),
                            ("property", [p.name for p in self.properties]),
                            ("variant", [v.name for v in self.variants]),
                            ("domain", [d.name for d in self.domains]),
                            ("scope", [s.name for s in self.scopes])):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise self._bad(f"{kind} names must be unique, repeated: {dupes}")

    def _check_required(self) -> None:
        if not self.implementations:
            raise self._bad("needs at least one implementation")
        if not self.properties:
            raise self._bad("needs at least one property")
        unlabelled = [p.name for p in self.properties if p.label not in LABELS]
        if unlabelled:
            raise self._bad(f"properties without a label ({' or '.join(LABELS)}): {unlabelled}")
        if not self.error_inputs:
            raise self._bad("needs at least one error input")

    def _check_domains(self) -> None:
        if not self.domains or self.domains[0].name != "spec":
            raise self._bad(f"domains must start with 'spec', got {[d.name for d in self.domains]}")
        domains = [d.name for d in self.domains]
        for s in self.scopes:
            if s.domain not in domains:
                raise self._bad(f"scope {s.name!r}: domain {s.domain!r} is not a domain of the contract {domains}")
        if self.scopes and DEFAULT_SCOPE not in [s.name for s in self.scopes]:
            raise self._bad(f"scopes must include the default scope {DEFAULT_SCOPE!r}, got {[s.name for s in self.scopes]}")

    def _check_variants(self) -> None:
        """Each variant names properties and arguments of the contract; enough
        mutants; every property claimed by a variant (one that cannot fail is
        a defect)."""
        props = {p.name for p in self.properties}
        for v in self.variants:
            unknown = [p for p in v.caught_by if p not in props]
            if unknown:
                raise self._bad(f"variant {v.name!r}: caught_by names no property {unknown} (properties: {sorted(props)})")
            if v.canonical is not None and not set(v.canonical) <= set(self.arguments):
                raise self._bad(f"variant {v.name!r}: canonical names {sorted(set(v.canonical) - set(self.arguments))}, "
                                f"which are not arguments {list(self.arguments)}")
        mutants = sum(v.origin == "mutant" for v in self.variants)
        if mutants < MIN_MUTANTS:
            raise self._bad(f"needs at least {MIN_MUTANTS} mutant variants, has {mutants}")
        claimed = {p for v in self.variants for p in v.caught_by}
        unclaimed = sorted(props - claimed)
        if unclaimed:
            raise self._bad(f"properties no variant claims to break (a property that cannot fail is a defect): {unclaimed}")

    def _oracle_parameters(self) -> list[str]:
        return list(inspect.signature(self.oracle).parameters)

    def _check_arguments(self) -> None:
        if not self.arguments:
            raise self._bad("arguments must name the canonical arguments")
        params = list(inspect.signature(self.oracle).parameters.values())
        names = [p.name for p in params[: len(self.arguments)]]
        if names != list(self.arguments):
            raise self._bad(f"arguments {list(self.arguments)} do not match the oracle's parameters {[p.name for p in params]}")
        rest = [p.name for p in params[len(self.arguments):] if p.default is inspect.Parameter.empty]
        if rest:
            raise self._bad(f"the oracle's parameters {rest} after the canonical arguments need defaults")

    # ------------------------------------------------------------ lookups

    def property(self, name: str) -> Property:
        for p in self.properties:
            if p.name == name:
                return p
        raise UnknownName(f"contract {self.name!r} has no property {name!r} (has: {', '.join(p.name for p in self.properties)})")

    def property_label(self, name: str) -> str:
        """The label of property ``name``: the contract's own properties', or
        ``SAFETY`` for the harness's crash, timeout and raises (any target
        must return)."""
        return next((p.label for p in self.properties if p.name == name), SAFETY)

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise UnknownName(f"contract {self.name!r} has no variant {name!r} (has: {', '.join(v.name for v in self.variants)})")

    def implementation(self, name: str) -> Implementation:
        for i in self.implementations:
            if i.name == name:
                return i
        raise UnknownName(f"contract {self.name!r} has no implementation {name!r} "
                       f"(has: {', '.join(i.name for i in self.implementations)})")

    def domain(self, name: str) -> Domain:
        for d in self.domains:
            if d.name == name:
                return d
        raise UnknownName(f"contract {self.name!r} has no domain {name!r} (has: {', '.join(d.name for d in self.domains)})")

    def scope(self, name: str = DEFAULT_SCOPE) -> Scope:
        for s in self.scopes:
            if s.name == name:
                return s
        raise UnknownName(f"contract {self.name!r} has no scope {name!r} (has: {', '.join(s.name for s in self.scopes) or 'none'})")

    def strategy(self, domain: str = "spec") -> SearchStrategy[Case]:
        return self.domain(domain).cases()

    def call(self, target: Target, case: Case) -> Any:
        """``target`` called positionally with the case's canonical arguments."""
        return target(*(case.args[k] for k in self.arguments))

    def modules(self) -> list[str]:
        """The modules this record references: itself, its oracle,
        implementations, strategies and variants (the catalogue draws its
        constant pool from exactly these)."""
        fns: list[Any] = [self.oracle]
        fns += [i.for_device(i.devices[0]) for i in self.implementations]
        fns += [d.cases for d in self.domains]
        fns += [v.fn for v in self.variants]
        out = {self.module} if self.module else set()
        for fn in fns:
            while isinstance(fn, functools.partial):
                fn = fn.func
            mod = getattr(inspect.unwrap(fn), "__module__", None)
            if mod and mod != __name__:
                out.add(mod)
        return sorted(out)


# ---------------------------------------------------------------- the registry

_CONTRACTS: dict[str, Contract] = {}
_LOADED = False


def register(contract: Contract) -> Contract:
    """Add ``contract`` (called once by its record module)."""
    if contract.name in _CONTRACTS and _CONTRACTS[contract.name] is not contract:
        raise RecordError(f"contract {contract.name!r} registered twice")
    if not contract.module:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        object.__setattr__(contract, "module", caller)
    _CONTRACTS[contract.name] = contract
    return contract


def record_modules() -> list[str]:
    """The modules that hold contract records (see the module docstring)."""
    import batchfuzz.contracts as pkg

    names = [f"{pkg.__name__}.{m.name}" for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name)
             if not m.name.startswith("_") and not m.name.endswith("_variants")]
    from importlib.metadata import entry_points

    names += [ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)]
    names += [n.strip() for n in os.environ.get(CONTRACTS_ENV_VAR, "").split(",") if n.strip()]
    return names


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    for name in record_modules():
        importlib.import_module(name)
    _LOADED = True


def contracts() -> list[Contract]:
    """Every registered contract, in section order."""
    _load()
    return sorted(_CONTRACTS.values(), key=lambda c: (c.section, c.name))


def _unknown_contracts(names: Sequence[str]) -> UnknownName:
    """The one message for contract names that name nothing registered."""
    shown = ", ".join(repr(n) for n in names)
    return UnknownName(f"unknown contract{'s' if len(names) > 1 else ''} {shown}; known: {', '.join(sorted(_CONTRACTS))}")


def get(name: str) -> Contract:
    """The registered contract ``name``; raises UnknownName (naming the known ones) otherwise."""
    _load()
    if name not in _CONTRACTS:
        raise _unknown_contracts([name])
    return _CONTRACTS[name]


def select(patterns: Iterable[str] | None, *, globs: bool = False) -> list[Contract]:
    """The contracts a selection names, in section order: each pattern is a
    contract's name or its section letter, or with ``globs`` also an
    ``fnmatch`` glob of names (``split_*``); ``None`` selects every contract.
    The one check of contract names given by users (``get`` for one name):
    raises UnknownName naming every pattern that selects nothing, and the
    known contracts."""
    cs = contracts()
    if patterns is None:
        return cs
    wanted = list(patterns)

    def hit(c: Contract, p: str) -> bool:
        return c.name == p or c.section == p or (globs and fnmatch.fnmatchcase(c.name, p))

    unknown = [p for p in wanted if not any(hit(c, p) for c in cs)]
    if unknown:
        raise _unknown_contracts(unknown)
    return [c for c in cs if any(hit(c, p) for p in wanted)]
