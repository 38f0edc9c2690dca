"""What every engine module shares, written once: an engine module is its
specs and binders (``batchfuzz.plugins.EngineModule``; docs/bindings.md,
"Adding an engine").

A module declares ``ENGINE``, ``RELEASES``, its ``ReleaseSource`` and
``SPECS`` (one ``Spec`` per binding: the function, the contract, the binder
that cuts the function out of a ``Release`` and the bind-time probe input),
then takes ``bindings``, ``binding_plan`` and ``resolve`` from one
``Engine``::

    _ENGINE = Engine(ENGINE, ReleaseSource, SPECS)
    bindings, binding_plan, resolve = _ENGINE.bindings, _ENGINE.binding_plan, _ENGINE.resolve

An engine with rows of its own (vLLM's split-search copies) or its own words
for an absent function subclasses ``Engine`` and overrides a hook.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from batchfuzz import bind
from batchfuzz.engine_registry import Bound, ReleaseSource, SourceError
from batchfuzz.preconditions import domain

# What a binder gives: the target and what was cut out, and optionally the configuration values it assumed.
Built = tuple[Callable[..., Any], str] | tuple[Callable[..., Any], str, tuple[str, ...]]


class Release:
    """One release: its source and the files parsed so far, shared by every
    binding. ``STAND_INS``: names the engine's cut-outs read that no file of
    theirs defines in a form that can be cut out (a subclass sets them)."""

    STAND_INS: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, source: ReleaseSource) -> None:
        self.source = source
        self.files: dict[str, bind.SourceFile] = {}

    def loader(self, **stand_ins: Any) -> bind.Loader:
        """A loader of this release's files; ``stand_ins`` add to the engine's own."""
        return bind.Loader(self.source, self.source.package, stand_ins={**self.STAND_INS, **stand_ins}, files=self.files)


@dataclass(frozen=True)
class Spec:
    """One binding: ``function`` (``path:qualname`` in the release) as
    ``contract``, cut out by ``build`` (the binder) and dry-run on ``probe``;
    ``assumed``: configuration the engine reads and the stand-ins give, as
    NAME=VALUE."""

    function: str
    contract: str
    build: Callable[[Any], Built]
    probe: tuple[Any, ...]
    assumed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Planned:
    """One binding of a release before it is made: its row's function and
    contract, and ``bind()`` giving its Bound (cutting out, loading and
    probing the release's code: what ``matrix`` runs in a worker process)."""

    function: str
    contract: str
    bind: Callable[[], Bound]


class Engine:
    """An engine's bindings from its specs: each spec bound in a release
    (absent, unbindable or bound, dry-run on its probe input, named, and
    checked under the contract's ``engine`` domain), and a ``Bound.ref``
    rebuilt in a fresh process, the release's files cached per process."""

    def __init__(self, name: str, source_kind: type[ReleaseSource], specs: tuple[Spec, ...],
                 release_kind: type[Release] = Release) -> None:
        self.name = name
        self.source_kind = source_kind
        self.specs = specs
        self.release_kind = release_kind
        self.release = functools.lru_cache(maxsize=16)(self._open)
        self._resolved = functools.lru_cache(maxsize=256)(self._resolve)

    # -- hooks a subclass may override

    def probe_args(self, spec: Spec) -> tuple[Any, ...]:
        """The probe input of ``spec`` (fresh for each call where it is mutable)."""
        return spec.probe

    def absent_reason(self, rel: Release, spec: Spec, exc: bind.Absent) -> str:
        """Why ``spec`` is absent from ``rel``: the binder's own words."""
        return str(exc)

    def extra_plan(self, rel: Release) -> list[Planned]:
        """Rows of the engine's own after SPECS (none)."""
        return []

    def resolve_extra(self, rel: Release, function: str, contract: str) -> Bound | None:
        """One of ``extra_plan``'s rows rebuilt from its ref, without its probe (None: not one of them)."""
        return None

    # -- the skeleton

    def ref(self, source: ReleaseSource, function: str, contract: str) -> str:
        return f"{self.name}::{source.ref}::{function}::{contract}"

    def label(self, rel: Release) -> str:
        return f"{self.name} {rel.source.version}"

    def finish(self, rel: Release, target: Callable[..., Any], function: str, contract: str) -> Callable[..., Any]:
        """A bound target named after its release and function, checked on the inputs the engine's callers produce."""
        target.__qualname__ = f"{self.name}_{rel.source.version.replace('.', '_')}.{function.split(':')[-1]}[{contract}]"
        return domain("engine")(target)

    def bind_one(self, rel: Release, spec: Spec, probe: bool = True) -> Bound:
        """One spec bound in ``rel``, dry-run on its probe input (``bind.probe``)
        unless ``probe`` is False: a worker rebuilding a target the matrix bound
        (``resolve``) calls the engine's code only in the properties' calls."""
        release, raised = self.label(rel), ""
        try:
            built = spec.build(rel)
            target, detail, assumed = built[0], built[1], (*spec.assumed, *(built[2] if len(built) > 2 else ()))
            if probe:
                raised = bind.probe(target, *self.probe_args(spec), what=f"{spec.function} as {spec.contract}")
        except bind.Absent as exc:
            return Bound(release, spec.function, spec.contract, "absent", reason=self.absent_reason(rel, spec, exc))
        except bind.Unbindable as exc:
            return Bound(release, spec.function, spec.contract, "unbindable", reason=str(exc), assumed=spec.assumed)
        target.__name__ = spec.contract
        return Bound(release, spec.function, spec.contract, "bound", target=self.finish(rel, target, spec.function, spec.contract),
                     ref=self.ref(rel.source, spec.function, spec.contract), detail=detail, assumed=assumed,
                     probe_raised=raised, probe_args=self.probe_args(spec) if raised else ())

    def binding_plan(self, source: ReleaseSource, *, search: bool = True) -> list[Planned]:
        """The bindings of one release, not yet made: SPECS in order, then
        (``search``) the engine's own rows."""
        if not isinstance(source, ReleaseSource):
            raise TypeError(f"source must be a ReleaseSource, got {type(source).__name__}")
        rel = self.release_kind(source)
        plan = [Planned(spec.function, spec.contract, functools.partial(self.bind_one, rel, spec)) for spec in self.specs]
        return plan + (self.extra_plan(rel) if search else [])

    def bindings(self, source: ReleaseSource, *, search: bool = True) -> list[Bound]:
        """Every binding of this engine for one release (``binding_plan``), made in this process."""
        return [p.bind() for p in self.binding_plan(source, search=search)]

    def _open(self, source_ref: str) -> Release:
        return self.release_kind(self.source_kind.from_ref(source_ref))

    def _resolve(self, source_ref: str, function: str, contract: str) -> Bound:
        rel = self.release(source_ref)
        spec = next((s for s in self.specs if s.function == function and s.contract == contract), None)
        found = self.resolve_extra(rel, function, contract) if spec is None else self.bind_one(rel, spec, probe=False)
        if found is None:
            raise LookupError(f"engine {self.name!r} has no binding of {function} to {contract}")
        return found

    def resolve(self, ref: str) -> Callable[..., Any]:
        """The target of a ``Bound.ref`` (``ENGINE::SOURCE::FUNCTION::CONTRACT``); the
        release's files and bindings are cached per process. LookupError when
        the release cannot be opened or the function is not bound there."""
        if not isinstance(ref, str):
            raise TypeError(f"ref must be a str, got {type(ref).__name__}")
        parts = ref.split("::")
        if len(parts) != 4 or parts[0] != self.name:
            raise ValueError(f"ref must be '{self.name}::SOURCE::FUNCTION::CONTRACT', got {ref!r}")
        try:
            bound = self._resolved(parts[1], parts[2], parts[3])
        except SourceError as exc:
            raise LookupError(f"cannot open the release of {ref!r}: {exc}") from exc
        if bound.target is None:
            raise LookupError(f"{bound.function} as {bound.contract} is {bound.status} in {bound.release}: {bound.reason}")
        return bound.target
