"""Exact assertions with readable diffs, for properties (no tolerances)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz._host import to_host


class PropertyViolation(AssertionError):
    """A property of a contract does not hold for a target's output."""


class ResultTypeError(PropertyViolation):
    """The target's result is of a type the contract's properties cannot read
    at all (an engine object, a tuple where a list belongs, a string). On one
    case it is a counterexample like any other; on the probe case the commands
    try before any example (``runner.probe_result``), a usage error: the
    target needs a binding that converts its result (docs/bindings.md).
    """


def _fmt(arr: np.ndarray, limit: int = 24) -> str:
    items = arr.tolist()
    if len(items) > limit:
        return repr(items[:limit])[:-1] + f", ... ({len(items)} entries)]"
    return repr(items)


def as_int_array(value: Any, what: str) -> np.ndarray:
    """Normalise a target's output (list, numpy array, torch tensor) to int64.

    A float or bool output is a violation: counts are integers (docs/contracts.md, common rules).
    """
    if type(value) is list and all(type(v) is int for v in value):
        return np.array(value, dtype=np.int64)  # the common case (an oracle's list), without the element-wise walk below
    value = to_host(value)
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
            raise PropertyViolation(f"{what} must hold integers, got {value!r}")
        return np.asarray(value, dtype=np.int64).reshape(-1)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iu":
            raise PropertyViolation(f"{what} must be an integer array, got dtype {value.dtype}")
        return value.astype(np.int64).reshape(-1) if value.ndim == 1 else value.astype(np.int64)
    raise ResultTypeError(f"{what} must be a sequence of ints, got {type(value).__name__}: {value!r:.120}")


def require(condition: bool, message: str) -> None:
    if not condition:
        raise PropertyViolation(message)


def assert_array_equal(actual: Any, expected: Any, what: str) -> None:
    """Exact equality of integer arrays; the message points at the first difference."""
    a = as_int_array(actual, what)
    e = as_int_array(expected, f"expected {what}")
    if a.shape != e.shape:
        raise PropertyViolation(f"{what}: shape {a.shape} != expected {e.shape}\n  got      {_fmt(a)}\n  expected {_fmt(e)}")
    if not np.array_equal(a, e):
        idx = int(np.flatnonzero(a.reshape(-1) != e.reshape(-1))[0])
        raise PropertyViolation(
            f"{what}: first difference at index {idx}: got {int(a.reshape(-1)[idx])}, "
            f"expected {int(e.reshape(-1)[idx])}\n  got      {_fmt(a)}\n  expected {_fmt(e)}"
        )


def assert_non_decreasing(arr: Any, what: str) -> None:
    a = as_int_array(arr, what)
    if a.size > 1:
        d = np.diff(a)
        if (d < 0).any():
            i = int(np.argmax(d < 0))
            raise PropertyViolation(f"{what} decreases at index {i} -> {i + 1}: {int(a[i])} > {int(a[i + 1])}\n  {what} = {_fmt(a)}")
