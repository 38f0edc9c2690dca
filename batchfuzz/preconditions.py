"""A target's own statement of the inputs it is meant for.

Engine code is written for the inputs its callers produce, which can be
narrower than a contract's widest domain (``spec``): the v1 model runner's
dummy run never sees a step without requests. Two decorators say so, and
every way of running a target (``batchfuzz check``, ``fuzz --target``,
``batchfuzz.testing.check_contract``, corpus replay) honours them: cases are
drawn, shrunk and reduced inside the stated domain only, so a reported
counterexample always lies in it.

- ``@batchfuzz.domain("engine")``: check the target under a named domain of
  the contract (docs/contracts.md lists each contract's domains and the
  engine facts behind them) unless the command line names another;
- ``@batchfuzz.assumes(predicate)``: cases on which ``predicate`` (called
  with the contract's canonical arguments, positionally, like the target)
  returns false are not inputs of this target. Stack several to require all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

DOMAIN_ATTR = "__batchfuzz_domain__"
ASSUMES_ATTR = "__batchfuzz_assumes__"


def domain(name: str) -> Callable[[F], F]:
    """Mark a target as meant for the contract's domain ``name``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"domain name must be a non-empty string, got {name!r}")

    def mark(fn: F) -> F:
        setattr(fn, DOMAIN_ATTR, name)
        return fn

    return mark


def assumes(predicate: Callable[..., bool]) -> Callable[[F], F]:
    """Mark a target as meant only for the cases where ``predicate(*args)`` is true."""
    if not callable(predicate):
        raise TypeError(f"assumes needs a callable predicate, got {type(predicate).__name__} {predicate!r}")

    def mark(fn: F) -> F:
        setattr(fn, ASSUMES_ATTR, (*getattr(fn, ASSUMES_ATTR, ()), predicate))
        return fn

    return mark


def declared_domain(target: Any) -> str | None:
    """The domain a target declares with :func:`domain`, if any."""
    return getattr(target, DOMAIN_ATTR, None)


def declared_assumptions(target: Any) -> tuple[Callable[..., bool], ...]:
    """The predicates a target declares with :func:`assumes`."""
    return tuple(getattr(target, ASSUMES_ATTR, ()))
