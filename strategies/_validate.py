"""Argument checks for the public strategies, in the manner of Hypothesis's own:
a bad argument raises :class:`hypothesis.errors.InvalidArgument` at once,
naming the argument and its value."""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

from hypothesis.errors import InvalidArgument


def check_integer(name: str, value: Any, *, min_value: int | None = None, max_value: int | None = None) -> int:
    """``value`` as an int; raises InvalidArgument naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgument(f"{name}={value!r} must be an integer (got {type(value).__name__})")
    v = int(value)
    if min_value is not None and v < min_value:
        raise InvalidArgument(f"{name}={v} must be at least {min_value}")
    if max_value is not None and v > max_value:
        raise InvalidArgument(f"{name}={v} must be at most {max_value}")
    return v


def check_interval(lo_name: str, lo: int, hi_name: str, hi: int) -> None:
    if lo > hi:
        raise InvalidArgument(f"Cannot have {lo_name}={lo} > {hi_name}={hi}")


def check_choice(name: str, value: Any, options: Iterable[Any]) -> Any:
    opts = tuple(options)
    if value not in opts:
        raise InvalidArgument(f"{name}={value!r} must be one of {', '.join(repr(o) for o in opts)}")
    return value


def check_subset(name: str, values: Any, options: Iterable[Any]) -> tuple[Any, ...]:
    opts = tuple(options)
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise InvalidArgument(f"{name}={values!r} must be a collection of {', '.join(repr(o) for o in opts)}")
    vals = tuple(values)
    if not vals:
        raise InvalidArgument(f"{name}={values!r} must not be empty")
    for v in vals:
        if v not in opts:
            raise InvalidArgument(f"{name} contains {v!r}, which is not one of {', '.join(repr(o) for o in opts)}")
    return vals
