"""Argument checks for the public strategies (``batchfuzz.strategies``), in
the manner of Hypothesis's own: a bad argument raises
:class:`hypothesis.errors.InvalidArgument` at once, when the strategy is built.

InvalidArgument, not TypeError/ValueError, because that is what Hypothesis
users expect a strategy to raise for a bad argument (``st.integers(min_value=3,
max_value=1)`` does); the messages are those of the one vocabulary of argument
checks, ``reference/_args.py`` (argument, rule, value: ``max_reqs must be >= 1,
got 0``), so a rule reads the same whether an oracle, an implementation, a
binding or a strategy states it. What returns no strategy keeps the
vocabulary's own TypeError/ValueError (``scope_cases``, an iterator:
``check_scope`` of ``strategies/_exhaustive.py``; the numpy samplers of
``batchfuzz.workloads``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hypothesis.errors import InvalidArgument

from batchfuzz.reference._args import choice_message, int_message, interval_message


def check_integer(name: str, value: Any, *, min_value: int | None = None, max_value: int | None = None) -> int:
    """``value`` as an int; raises InvalidArgument naming ``name`` otherwise."""
    why = int_message(name, value, minimum=min_value, maximum=max_value)
    if why:
        raise InvalidArgument(why)
    return int(value)


def check_interval(lo_name: str, lo: int, hi_name: str, hi: int) -> None:
    """``lo <= hi``; raises InvalidArgument naming both otherwise."""
    why = interval_message(lo_name, lo, hi_name, hi)
    if why:
        raise InvalidArgument(why)


def check_choice(name: str, value: Any, options: Iterable[Any]) -> Any:
    """``value`` if it is one of ``options``; raises InvalidArgument otherwise."""
    why = choice_message(name, value, options)
    if why:
        raise InvalidArgument(why)
    return value


def check_subset(name: str, values: Any, options: Iterable[Any]) -> tuple[Any, ...]:
    """A non-empty collection of ``options`` (as a tuple); raises InvalidArgument otherwise."""
    opts = tuple(options)
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InvalidArgument(f"{name} must be a collection of {', '.join(repr(o) for o in opts)}, got {values!r}")
    vals = tuple(values)
    if not vals:
        raise InvalidArgument(f"{name} must not be empty, got {values!r}")
    for k, v in enumerate(vals):
        why = choice_message(f"{name}[{k}]", v, opts)
        if why:
            raise InvalidArgument(why)
    return vals
