"""batchfuzz inside your own test suite.

:func:`check_contract` runs every property of a contract on your function,
with Hypothesis, from inside any test (pytest or plain)::

    import batchfuzz.testing

    def test_my_dummy_split():
        batchfuzz.testing.check_contract("split_dummy_tokens", my_engine.split)

A failure raises :class:`Counterexample` (an ``AssertionError``, so every test
runner reports it as a failed assertion) whose message is a reproduction:
the call of your function with the shrunk arguments and the value the
contract expects, ready to paste into a file. The Hypothesis settings are
those of the active profile (your ``conftest.py``'s, or Hypothesis's
defaults); ``max_examples`` overrides the number of examples per property.

:func:`contract_tests` makes one pytest test per property instead (each
property passes, fails and is selected on its own)::

    test_my_dummy_split = batchfuzz.testing.contract_tests("split_dummy_tokens", my_engine.split)

The message ends with an ``@batchfuzz.testing.example(...)`` line: put above
the test, it makes every later ``check_contract`` of that contract in the
test run that case first, for every property (as Hypothesis's ``@example``
does for a ``@given`` test), so the failure stays a test once it is fixed.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from hypothesis import settings

from batchfuzz import profiles, registry, reproduce, runner
from batchfuzz.case import Case
from batchfuzz.codec import literal
from batchfuzz.registry import Contract

F = TypeVar("F", bound=Callable[..., Any])

# The @example cases of the test running now: (contract name, values), innermost first.
_EXAMPLES: contextvars.ContextVar[tuple[tuple[str, dict[str, Any]], ...]] = contextvars.ContextVar(
    "batchfuzz_examples", default=())


def example(contract: str, **values: Any) -> Callable[[F], F]:
    """A decorator for a test that calls :func:`check_contract`: while the
    test runs, ``check_contract(contract, ...)`` runs this case (the
    contract's arguments and context by name, as a ``Counterexample``'s
    message writes them) on every property before any generated one."""
    if not isinstance(contract, str):
        raise TypeError(f"contract must be a contract name, got {type(contract).__name__} {contract!r}")

    def decorate(test: F) -> F:
        @functools.wraps(test)
        def with_example(*args: Any, **kwargs: Any) -> Any:
            token = _EXAMPLES.set(((contract, dict(values)), *_EXAMPLES.get()))
            try:
                return test(*args, **kwargs)
            finally:
                _EXAMPLES.reset(token)

        return with_example  # type: ignore[return-value]

    return decorate


def _example_cases(c: Contract, domain: str | None, target: Callable[..., Any]) -> tuple[Case, ...]:
    """The cases ``@example`` gave the running test for ``c``; a ValueError
    naming one that lacks an argument or lies outside the domain."""
    from batchfuzz.preconditions import declared_domain

    dom = c.domain(registry.choose_domain(domain, declared_domain(target)))
    cases = []
    for name, values in _EXAMPLES.get():
        if name != c.name:
            continue
        missing = [a for a in c.arguments if a not in values]
        if missing:
            raise ValueError(f"@example({name!r}, ...) lacks the argument(s) {', '.join(missing)} of {name}")
        case = Case({a: values[a] for a in c.arguments}, {k: v for k, v in values.items() if k not in c.arguments})
        if not dom.contains(case):
            raise ValueError(f"@example({name!r}, {values!r}) is not an input of {name}'s {dom.name} domain")
        cases.append(case)
    return tuple(cases)


class Counterexample(AssertionError):
    """A property of the contract fails on the target. ``failure`` holds the
    shrunk case, the property and the error; the message says the property,
    the case and the error, then the reproduction."""

    def __init__(self, failure: runner.Failure, reproduction: str) -> None:
        self.failure = failure
        first = failure.message.splitlines()[0] if failure.message else ""
        case = ", ".join(f"{k}={literal(v)}" for k, v in {**failure.case.args, **failure.case.context}.items())
        super().__init__(
            f"{failure.contract}: property {failure.property} fails on {case}"
            + ("" if failure.complete else " (not fully shrunk)") + f"\n{failure.error_type}: {first}\n\n{reproduction}"
        )


def check_contract(contract: str | Contract, target: Callable[..., Any], *, max_examples: int | None = None,
                   domain: str | None = None, properties: Sequence[str] | None = None) -> None:
    """Check ``target`` against every property of ``contract`` (a name from
    ``batchfuzz list``, or a ``Contract``); raise :class:`Counterexample` on the
    first that fails.

    ``domain``: the contract's input domain to draw from (``"spec"``, the
    widest, or ``"engine"``; default: the one ``target`` declares with
    ``@batchfuzz.domain``, else ``spec``). ``properties``: only these.

    The search runs under the current Hypothesis settings (the user's
    profile; ``max_examples`` replaces its count) without a deadline or the
    ``too_slow`` health check (``profiles.untimed``): a verdict is the
    contract's, whatever the machine's load.
    """
    __tracebackhide__ = True  # pytest shows the test's line and the Counterexample, not this function's source
    # The modules the properties may need (torch among them) before any example
    # runs: a first example must not pay for an import.
    import batchfuzz._preload  # noqa: F401

    c = registry.get(contract) if isinstance(contract, str) else contract
    if not callable(target):
        raise TypeError(f"target must be callable, got {type(target).__name__} {target!r}")
    if max_examples is not None and (isinstance(max_examples, bool) or not isinstance(max_examples, int) or max_examples < 1):
        raise ValueError(f"max_examples must be a positive int, got {max_examples!r}")
    if domain is not None:
        c.domain(domain)  # KeyError naming the domains the contract has
    props = c.properties if properties is None else tuple(c.property(p) for p in properties)
    # The user's current settings, minus what measures wall-clock time: a busy machine changes no verdict.
    run_settings = profiles.untimed(settings() if max_examples is None else settings(settings(), max_examples=max_examples))
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or "target"
    module = getattr(target, "__module__", None) or "__main__"
    ref = f"{module}:{name}" if "<" not in name else f"{module}:target"
    examples = _example_cases(c, domain, target)
    for prop in props:
        r = runner.hunt(c, target, prop, runner.HuntOptions(run_settings, domain=domain, extra_examples=examples),
                        target_name=ref)
        if r.failure is not None:
            keep = f"# To keep this case in your test once it is fixed, add above it:\n{reproduce.example_line(r.failure)}"
            raise Counterexample(r.failure, reproduce.reproduction(r.failure, ref) + "\n\n" + keep)


def contract_tests(contract: str | Contract, target: Callable[..., Any], *, max_examples: int | None = None,
                   domain: str | None = None, properties: Sequence[str] | None = None) -> Callable[[str], None]:
    """A pytest test of ``target`` with one case per property of ``contract``
    (``properties``: only these), each a :func:`check_contract` of that
    property: assign it to a ``test_`` name in a test module::

        test_split = batchfuzz.testing.contract_tests("split_dummy_tokens", my_engine.split)

    and pytest collects ``test_split[matches_oracle]``, ``test_split[max_is_ceil]``, ...:
    each property passes or fails (and is selected with ``-k``) on its own."""
    import pytest

    c = registry.get(contract) if isinstance(contract, str) else contract
    names = [p.name for p in c.properties] if properties is None else [c.property(p).name for p in properties]

    @pytest.mark.parametrize("batchfuzz_property", names)
    def test_property(batchfuzz_property: str) -> None:
        __tracebackhide__ = True
        check_contract(c, target, max_examples=max_examples, domain=domain, properties=[batchfuzz_property])

    return test_property


def assert_property(contract: str | Contract, prop: str, target: Callable[..., Any], args: dict[str, Any],
                    context: dict[str, Any] | None = None) -> None:
    """Check one property of a contract on one case (a reproduction's last
    line): raises ``AssertionError`` (``PropertyViolation``) when it fails,
    or whatever the target raises."""
    from batchfuzz.execution import guarded

    c = registry.get(contract) if isinstance(contract, str) else contract
    p = c.property(prop)
    p.check(target if p.raw else guarded(c, target), Case(dict(args), dict(context or {})))
