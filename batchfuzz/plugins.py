"""Every plug-in point of batchfuzz, declared in one place (as pytest declares
its hooks in one file).

batchfuzz is extended by modules of four kinds. The contract record is a
``batchfuzz.registry.Contract``, checked field by field when it is built; the
other three are modules of an agreed shape, declared here as ``Protocol``
classes and checked when they are registered, with a message that names the
module and what it lacks:

- a **strategies module** (:class:`StrategiesModule`, with the optional
  :class:`ScopedStrategiesModule` part): a contract's inputs, which its record
  takes once (``registry.input_space``); found through the record;
- a **command module** (:class:`CommandModule`): a module of
  ``batchfuzz.commands`` whose ``register(subparsers)`` adds one parser and
  sets its ``func``, and which may declare ``RUNS_WORKERS`` and
  ``OWNS_SIGNALS`` (:class:`CommandTraits`, :func:`register_command`);
- an **engine module** (:class:`EngineModule`): one engine's bindings, found
  through ``batchfuzz.engine_registry.engines()`` (``batchfuzz.engines``' modules, the
  ``batchfuzz.engines`` entry-point group and ``$BATCHFUZZ_ENGINES``) and run
  by ``batchfuzz engine NAME`` (docs/bindings.md, "Adding an engine").

This module imports nothing heavy: the checks run before any contract,
strategy or engine code is loaded.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from types import ModuleType
from typing import Any, Protocol


class PluginError(TypeError):
    """A module registered at a plug-in point that does not have its shape."""


# ---------------------------------------------------------------- the declarations


class StrategiesModule(Protocol):
    """A contract's strategies module (``strategies/<contract>.py``).

    ``DOMAINS`` names its domains, ``spec`` first (a tuple of names, or a
    mapping from each name to what it draws); ``cases(domain)`` is a
    Hypothesis strategy of ``batchfuzz.case.Case`` members of ``domain``,
    shrinking towards the smallest case; ``in_domain(case, domain)`` decides
    membership; ``size(case)`` is the contract's order of cases (a tuple,
    compared lexicographically); ``reductions(case)`` proposes cases smaller
    in that order (``batchfuzz.reduce``).
    """

    DOMAINS: Sequence[str] | Mapping[str, Any]

    def cases(self, domain: str) -> Any: ...

    def in_domain(self, case: Any, domain: str) -> bool: ...

    def size(self, case: Any) -> tuple[int, ...]: ...

    def reductions(self, case: Any) -> Iterable[Any]: ...


class ScopedStrategiesModule(StrategiesModule, Protocol):
    """A strategies module with bounded-exhaustive scopes (optional, both or
    neither): ``SCOPES`` maps a scope's name to its
    ``batchfuzz.strategies._exhaustive.ScopeSpec`` (description, domain,
    count), and ``scope_cases(name)`` enumerates that scope, smallest first."""

    SCOPES: Mapping[str, Any]

    def scope_cases(self, scope: str) -> Iterable[Any]: ...


class CommandModule(Protocol):
    """A module of ``batchfuzz.commands``: ``register(subparsers)`` adds its
    parser to the ``batchfuzz`` command's subparsers and sets the parser's
    ``func`` default to the function that runs it (``args -> exit code``).
    Optional, both False when absent: ``RUNS_WORKERS`` and ``OWNS_SIGNALS``
    (:class:`CommandTraits` says what each makes ``batchfuzz.cli.main`` do)."""

    def register(self, subparsers: Any) -> None: ...


@dataclass(frozen=True)
class CommandTraits:
    """What ``batchfuzz.cli.main`` does for a command before running it, as
    its module declares (module attributes of the same names, upper case).

    ``runs_workers``: it runs code under test in worker processes, so the
    fork server starts as soon as the command line parses, its imports
    overlapping the command's own. ``owns_signals``: it handles SIGINT and
    SIGTERM from its first line (``fuzz``: a partial report); a signal that
    comes while the commands are imported waits in
    ``batchfuzz.usage.PENDING_SIGNALS``, and once the command returns they
    are ignored. ``main`` finds a command's traits by its name, before any
    other command is imported, so a command that declares one has its
    module's name (``merge_reports`` for ``merge-reports``)."""

    runs_workers: bool = False
    owns_signals: bool = False


class EngineModule(Protocol):
    """One engine's bindings (``batchfuzz.engines.vllm`` is the built-in one).

    ``ENGINE``: the engine's name (``batchfuzz engine NAME``, the first field
    of every ``Bound.ref``); ``ReleaseSource``: a subclass of
    ``batchfuzz.engines.ReleaseSource`` naming the engine's distribution and
    top-level package; ``RELEASES``: the release versions of its published
    matrix (``batchfuzz engine NAME --all-releases``); ``SPECS``: the bindings,
    each with a ``function`` (``path:qualname`` inside the release) and a
    ``contract`` (a registered contract's name); ``bindings(source)``: one
    ``batchfuzz.engines.Bound`` per spec for a release (it may add rows of
    its own, such as the copies of the split ``batchfuzz.engines.split_search``
    finds, and take a keyword ``search``, False when the selection keeps none
    of them: ``batchfuzz.matrix.engine_releases``); ``resolve(ref)``:
    the target of a ``Bound.ref``, rebuilt in a fresh worker process.
    The module writes its specs and binders; ``batchfuzz.engines.base.Engine``
    gives ``bindings``, ``binding_plan`` and ``resolve`` (the shared skeleton).
    """

    ENGINE: str
    ReleaseSource: type
    RELEASES: Sequence[str]
    SPECS: Sequence[Any]

    def bindings(self, source: Any) -> list[Any]: ...

    def resolve(self, ref: str) -> Callable[..., Any]: ...


# ---------------------------------------------------------------- checking a module against a declaration


def members(protocol: type) -> tuple[tuple[str, bool], ...]:
    """The members a protocol declares, in order: ``(name, is_callable)``
    (its annotated attributes, then its methods), its bases' first."""
    out: dict[str, bool] = {}
    for klass in reversed(protocol.__mro__):
        if klass is object or klass is Protocol or not getattr(klass, "_is_protocol", False):
            continue
        for name in getattr(klass, "__annotations__", {}):
            out.setdefault(name, False)
        for name, value in vars(klass).items():
            if not name.startswith("_") and inspect.isfunction(value):
                out.setdefault(name, True)
    return tuple(out.items())


def _parameters(protocol: type, name: str) -> int:
    """How many arguments a protocol method takes (``self`` not counted)."""
    fn = next(vars(k)[name] for k in protocol.__mro__ if name in vars(k))
    return len(inspect.signature(fn).parameters) - 1


def _problems(module: Any, protocol: type) -> Iterator[str]:
    for name, is_callable in members(protocol):
        if not hasattr(module, name):
            yield f"no {name}"
            continue
        value = getattr(module, name)
        if not is_callable:
            continue
        if not callable(value):
            yield f"{name} is a {type(value).__name__}, not callable"
            continue
        try:
            inspect.signature(value).bind(*range(_parameters(protocol, name)))
        except TypeError:
            yield f"{name} does not take {_parameters(protocol, name)} positional argument(s) (see {protocol.__qualname__})"
        except ValueError:  # a builtin without a signature: trust it
            pass


def _label(module: Any) -> str:
    return getattr(module, "__name__", None) or repr(module)


def check_shape(module: Any, protocol: type, what: str) -> None:
    """Raise PluginError naming ``module`` and every member of ``protocol``
    it lacks or has in the wrong form; ``what`` names the plug-in point."""
    problems = list(_problems(module, protocol))
    if problems:
        raise PluginError(f"{what} {_label(module)}: {'; '.join(problems)} (the shape is batchfuzz.plugins.{protocol.__qualname__})")


def check_strategies(module: Any, domains: Iterable[str] = ()) -> bool:
    """Check a strategies module (and that it has each of ``domains``);
    returns whether it has scopes. ``SCOPES`` and ``scope_cases`` come
    together or not at all."""
    check_shape(module, StrategiesModule, "strategies module")
    missing = [d for d in domains if d not in module.DOMAINS]
    if missing:
        raise PluginError(f"strategies module {_label(module)}: DOMAINS {list(module.DOMAINS)} has no {', '.join(map(repr, missing))}")
    has = [hasattr(module, n) for n in ("SCOPES", "scope_cases")]
    if any(has) and not all(has):
        raise PluginError(f"strategies module {_label(module)}: has {'SCOPES' if has[0] else 'scope_cases'} without "
                          f"{'scope_cases' if has[0] else 'SCOPES'} (the shape is batchfuzz.plugins.ScopedStrategiesModule)")
    if all(has):
        check_shape(module, ScopedStrategiesModule, "strategies module")
    return all(has)


def check_engine(module: Any, base: Any) -> None:
    """Check an engine module: its members, its name, and that its
    ``ReleaseSource`` is a subclass of ``base`` (the engine registry passes
    ``batchfuzz.engine_registry.ReleaseSource``: this module imports no
    other of batchfuzz) naming a distribution and a package, and its SPECS
    name functions and contracts."""
    check_shape(module, EngineModule, "engine module")
    name = module.ENGINE
    if not isinstance(name, str) or not name.isidentifier():
        raise PluginError(f"engine module {_label(module)}: ENGINE must be an identifier (the engine's name), got {name!r}")
    source: Any = module.ReleaseSource
    if not (isinstance(source, type) and issubclass(source, base)):
        raise PluginError(f"engine module {_label(module)}: ReleaseSource must be a subclass of batchfuzz.engines.ReleaseSource, "
                          f"got {source!r}")
    distribution, package = getattr(source, "distribution", ""), getattr(source, "package", "")
    if not distribution or not package:
        raise PluginError(f"engine module {_label(module)}: ReleaseSource must set distribution and package, got "
                          f"{distribution!r} and {package!r}")
    if isinstance(module.RELEASES, str) or not all(isinstance(v, str) and v for v in module.RELEASES):
        raise PluginError(f"engine module {_label(module)}: RELEASES must be a sequence of version strings, got {module.RELEASES!r}")
    for k, spec in enumerate(module.SPECS):
        bad = [a for a in ("function", "contract") if not isinstance(getattr(spec, a, None), str)]
        if bad:
            raise PluginError(f"engine module {_label(module)}: SPECS[{k}] has no str {' or '.join(bad)}")


def command_traits(module: Any) -> CommandTraits:
    """A command module's declared traits, each ``True`` or ``False`` (absent:
    False); anything else is refused, naming the module and the attribute."""
    declared = {}
    for field in fields(CommandTraits):
        attr = field.name.upper()
        value = getattr(module, attr, False)
        if not isinstance(value, bool):
            raise PluginError(f"command module {_label(module)}: {attr} must be True or False, got {value!r} "
                              "(the shape is batchfuzz.plugins.CommandTraits)")
        declared[field.name] = value
    return CommandTraits(**declared)


def command_module_name(command: str) -> str:
    """The module name a command of this name has (``merge-reports``:
    ``merge_reports``): how a command is found before the others are imported."""
    return command.replace("-", "_")


def register_command(module: ModuleType, subparsers: Any) -> argparse.ArgumentParser:
    """Register one command module: check its shape and traits, call its
    ``register``, and check that it added one parser with a ``func`` (and
    the module's name, where it owns signals). Returns that parser."""
    check_shape(module, CommandModule, "command module")
    traits = command_traits(module)
    before = dict(subparsers.choices)
    module.register(subparsers)
    added = list({id(p): p for name, p in subparsers.choices.items() if name not in before}.values())  # aliases: one parser
    if len(added) != 1:
        raise PluginError(f"command module {_label(module)}: register(subparsers) added {len(added)} parsers, expected one")
    if not callable(added[0].get_default("func")):
        raise PluginError(f"command module {_label(module)}: its parser {added[0].prog!r} sets no func "
                          "(parser.set_defaults(func=run))")
    parser: argparse.ArgumentParser = added[0]
    name = parser.prog.rsplit(" ", 1)[-1]
    if traits != CommandTraits() and command_module_name(name) != _label(module).rsplit(".", 1)[-1]:
        raise PluginError(f"command module {_label(module)}: it declares {traits} but its parser is named {name!r}: a command "
                          f"with traits is found by its name, so its module must be named {command_module_name(name)!r}")
    return parser
