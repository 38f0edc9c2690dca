"""batchfuzz's contract properties as plain Hypothesis tests, one per
contract x property x target, for the tools that find ``@given`` tests
through pytest: HypoFuzz's ``hypothesis fuzz`` (coverage-guided, with a
dashboard) and Hypothesis's ``crosshair`` backend (docs/hypofuzz-crosshair.md)::

    # test_contracts_fuzz.py
    from batchfuzz.hypothesis_tests import expose

    expose(globals(), "split_dummy_tokens", "mypkg.split:split_dummy")

Each test draws cases from the contract's domain and runs one property on
the target in this process through the same evaluation as every batchfuzz
run (``batchfuzz.execution.evaluate``): the same properties, strategies,
input copies and ``@batchfuzz.assumes`` rejections. A failure raises
:class:`ContractFailure`, an ``AssertionError`` naming the contract, the
property and what went wrong. The Hypothesis settings are those of the
active profile, or ``settings=`` given to :func:`expose`, minus what
measures wall-clock time (``profiles.untimed``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from typing import Any

from hypothesis import given, reject
from hypothesis import settings as Settings

from batchfuzz import profiles, registry
from batchfuzz.case import Case
from batchfuzz.execution import PASSED, REJECTED, InProcess
from batchfuzz.preconditions import declared_domain
from batchfuzz.registry import Contract, Property
from batchfuzz.targets import parse

# Characters of a target's message and traceback a failure quotes (text from outside: bounded).
_QUOTED_LIMIT = 4000


class ContractFailure(AssertionError):
    """A property of the contract fails on the target (or the target raised,
    crashed or hung while it was checked); the message says which and why."""


def _reference(target: str | Callable[..., Any], contract: Contract) -> tuple[Callable[..., Any], str]:
    """The callable and its reference text: a target reference
    (``impl:NAME@DEVICE``, ``variant:NAME``, ``oracle``, ``MODULE:FUNCTION``,
    ``FILE.py:FUNCTION``) is loaded; a callable is named ``module:qualname``."""
    if isinstance(target, str):
        ref = parse(target)
        return ref.load(contract), ref.spec
    if not callable(target):
        raise TypeError(f"target must be a target reference or a callable, got {type(target).__name__} {target!r}")
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or "target"
    return target, f"{getattr(target, '__module__', None) or '__main__'}:{name}"


def name_of_test(contract: str, prop: str, target_ref: str) -> str:
    """``test_CONTRACT__PROPERTY__TARGET``, the target's reference made an identifier."""
    slug = re.sub(r"\W+", "_", target_ref).strip("_") or "target"
    return f"test_{contract}__{prop}__{slug}"


def _quoted(text: str) -> str:
    return text if len(text) <= _QUOTED_LIMIT else text[:_QUOTED_LIMIT] + f"... [{len(text) - _QUOTED_LIMIT} more characters]"


def make_test(contract: str | Contract, prop: str | Property, target: str | Callable[..., Any], *,
              domain: str | None = None, settings: Settings | None = None) -> Callable[[], None]:
    """One Hypothesis test: ``prop`` of ``contract`` on ``target``, on cases of
    ``domain`` (default: the one the target declares, else ``spec``). Named
    :func:`name_of_test`. Its example-database key is its own (contract,
    domain, target, property), as ``runner.hunt``'s is; under pytest,
    Hypothesis's plug-in (and HypoFuzz) key it by the test's node id instead."""
    import batchfuzz._preload  # noqa: F401  (torch and the registry now, not in the first example)

    c = registry.get(contract) if isinstance(contract, str) else contract
    p = c.property(prop) if isinstance(prop, str) else prop
    fn, ref = _reference(target, c)
    dom = c.domain(registry.choose_domain(domain, declared_domain(fn)))
    executor = InProcess(c, fn, ref)
    name = name_of_test(c.name, p.name, ref)

    def body(case: Case) -> None:
        outcome = executor.check(p.name, case)
        if outcome.status == REJECTED:
            reject()
        if outcome.status != PASSED:
            what = "fails" if outcome.status == "failed" else f"is not judged: the target {outcome.status}"
            raise ContractFailure(f"{c.name} on {ref}: property {p.name} {what} ({p.spec})\n"
                                  f"{outcome.error_type}: {_quoted(outcome.message)}\n\n{_quoted(outcome.traceback)}")

    body.__name__ = body.__qualname__ = name
    body._hypothesis_internal_add_digest = repr((c.name, dom.name, ref, p.name)).encode()  # type: ignore[attr-defined]
    test = given(case=dom.cases())(body)
    return profiles.untimed(settings if settings is not None else Settings())(test)


def expose(namespace: MutableMapping[str, Any], contract: str | Contract, target: str | Callable[..., Any], *,
           properties: Sequence[str] | None = None, domain: str | None = None,
           settings: Settings | None = None) -> list[str]:
    """Put one test per property of ``contract`` on ``target`` into
    ``namespace`` (a test module's ``globals()``), where pytest, ``hypothesis
    fuzz`` and any Hypothesis backend find them; ``properties``: only these.
    Returns the tests' names. A name already there is an error (two targets
    with one reference)."""
    c = registry.get(contract) if isinstance(contract, str) else contract
    props = c.properties if properties is None else tuple(c.property(p) for p in properties)
    names = []
    for p in props:
        test = make_test(c, p, target, domain=domain, settings=settings)
        name = test.__name__
        if name in namespace:
            raise ValueError(f"expose: {namespace.get('__name__', 'the namespace')} already has a {name!r}")
        test.__module__ = namespace.get("__name__", test.__module__)
        namespace[name] = test
        names.append(name)
    return names


def expose_implementations(namespace: MutableMapping[str, Any], contracts: Iterable[str] | None = None, *,
                           device: str = "cpu", settings: Settings | None = None) -> list[str]:
    """:func:`expose` for every registered implementation of the selected
    contracts (names or section letters, as ``batchfuzz list`` shows them;
    default all) that runs on ``device``."""
    names = []
    for c in registry.select(None if contracts is None else list(contracts)):
        for impl in c.implementations:
            if device in impl.devices:
                names += expose(namespace, c, f"impl:{impl.name}@{device}", settings=settings)
    return names
