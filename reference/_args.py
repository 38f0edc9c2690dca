"""Argument validation shared by oracles, implementations (numpy and torch),
bindings and strategies: the one vocabulary of argument checks.

Every check raises ``TypeError`` for a wrong type (a wrong class or dtype) and
``ValueError`` for a bad value (a bound, a rank, a length, a device), and the
message names the argument and the value (docs/contracts.md, common rules).
Oracles and implementations share these so that error inputs get the same
message whichever one is called. The checks of arrays come in two forms: on
values (:func:`check_count_array`, host data an oracle reads) and on metadata
only (:func:`check_int_meta`, :func:`check_buffer`: dtype, rank, shape, device;
they read no value, so a torch implementation runs them on a device tensor, in
a captured graph too).

The public strategies (``batchfuzz.strategies``) say the same things in
Hypothesis's manner: ``strategies/_validate.py`` raises
``hypothesis.errors.InvalidArgument`` (what Hypothesis users catch for a bad
argument to a strategy) with the messages of this module
(:func:`int_message`).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

# The integer dtypes counts and tables may have (docs/contracts.md, common rules), in the order strategies draw them:
# int32 first, the engine's own dtype for metadata buffers and block tables.
INT_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(value: Any) -> str:
    """How a message shows a wrong argument: an array's or a tensor's dtype and
    shape, else its type's name."""
    if hasattr(value, "dtype") and hasattr(value, "shape") and not isinstance(value, numbers.Number):
        kind = "tensor" if type(value).__module__.startswith("torch") else "array"
        return f"{kind} of dtype {value.dtype} and shape {tuple(value.shape)}"
    return type(value).__name__


def _int_problem(name: str, value: Any, minimum: int | None, maximum: int | None,
                 maximum_name: str | None) -> tuple[type[Exception], str] | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        # torch.int tensors of one element are not accepted: counts are host ints.
        return TypeError, f"{name} must be an int, got {type(value).__name__} {_short(value)}"
    ivalue = int(value)
    if minimum is not None and ivalue < minimum:
        return ValueError, f"{name} must be >= {minimum}, got {ivalue}"
    if maximum is not None and ivalue > maximum:
        bound = f"{maximum_name} ({maximum})" if maximum_name else str(maximum)
        return ValueError, f"{name} must be <= {bound}, got {ivalue}"
    return None


def int_message(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None,
                maximum_name: str | None = None) -> str:
    """What is wrong with ``value`` as the int ``name`` ("" when nothing is):
    the messages of :func:`check_int`, for checks that raise another type."""
    problem = _int_problem(name, value, minimum, maximum, maximum_name)
    return problem[1] if problem else ""


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None,
              maximum_name: str | None = None) -> int:
    """Return ``value`` as a Python int, or raise naming ``name`` and the value
    (TypeError for a non-int, ValueError past ``minimum`` or ``maximum``;
    ``maximum_name`` names where the maximum comes from: ``max_num_reqs``)."""
    problem = _int_problem(name, value, minimum, maximum, maximum_name)
    if problem:
        raise problem[0](problem[1])
    return int(value)


def choice_message(name: str, value: Any, options: Iterable[Any]) -> str:
    """What is wrong with ``value`` as one of ``options`` ("" when nothing is)."""
    opts = tuple(options)
    try:
        if value in opts:
            return ""
    except TypeError:  # an unhashable or incomparable value is not one of them
        pass
    return f"{name} must be one of {', '.join(repr(o) for o in opts)}, got {value!r}"


def check_choice(name: str, value: Any, options: Iterable[Any]) -> Any:
    """``value`` if it is one of ``options``, else ValueError naming ``name``, the options and the value."""
    why = choice_message(name, value, options)
    if why:
        raise ValueError(why)
    return value


def interval_message(lo_name: str, lo: int, hi_name: str, hi: int) -> str:
    """What is wrong with a pair of bounds ``lo <= hi`` ("" when nothing is)."""
    return f"{lo_name} must be <= {hi_name} ({hi}), got {lo}" if lo > hi else ""


def dtype_name(dtype: Any) -> str:
    """A numpy or torch dtype's name without the framework's prefix (``int32``)."""
    return str(dtype).removeprefix("torch.")


def check_int_meta(name: str, dtype: Any, shape: tuple[int, ...], ndim: int = 1) -> None:
    """An integer array's metadata (numpy or torch, read from no value):
    dtype int32 or int64 (TypeError), rank ``ndim`` (ValueError)."""
    if dtype_name(dtype) not in ("int32", "int64"):
        raise TypeError(f"{name} must have dtype int32 or int64, got {dtype}")
    if len(shape) != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(shape)}")


def check_buffer(name: str, value: Any, cls: type, *, ndim: int, rows: int | None = None, rows_name: str = "num_reqs",
                 cols: int | None = None, device: Any = None) -> None:
    """A persistent integer buffer (a numpy array or a torch tensor, ``cls``),
    checked on its metadata only: its class (TypeError naming it), dtype and
    rank (:func:`check_int_meta`), its device when ``device`` is given, then
    its size: at least ``rows`` (named ``rows_name``) entries, or rows, and
    exactly ``cols`` columns (ValueError)."""
    if not isinstance(value, cls):
        kind = "torch tensor" if cls.__module__.startswith("torch") else "numpy array"
        raise TypeError(f"{name} must be a {ndim}-D int32/int64 {kind}, got {describe(value)}")
    buf: Any = value
    shape = tuple(buf.shape)
    check_int_meta(name, buf.dtype, shape, ndim)
    if device is not None and buf.device != device:
        raise ValueError(f"{name} must be on {device}, got {buf.device}")
    if ndim == 1 and rows is not None and shape[0] < rows:
        raise ValueError(f"{name} must have at least {rows_name} ({rows}) entries, got {shape[0]}")
    if ndim == 2 and ((rows is not None and shape[0] < rows) or (cols is not None and shape[1] != cols)):
        raise ValueError(f"{name} must have shape (>= {rows if rows is not None else 0}, {cols if cols is not None else '*'}), "
                         f"got {shape}")


def check_groups(widths: Any, block_sizes: Any) -> tuple[list[int], list[int]]:
    """The KV-cache groups of a checker: ``widths[g]`` (table columns, >= 0)
    and ``block_sizes[g]`` (>= 1), lists of one length, at least one group."""
    if not isinstance(widths, (list, tuple)) or not isinstance(block_sizes, (list, tuple)):
        raise TypeError(f"widths and block_sizes must be lists of ints, got {type(widths).__name__} and "
                        f"{type(block_sizes).__name__}")
    if len(widths) != len(block_sizes) or not widths:
        raise ValueError(f"widths and block_sizes must name the same groups (at least one), got {list(widths)} "
                         f"and {list(block_sizes)}")
    return ([check_int(f"widths[{g}]", w, minimum=0) for g, w in enumerate(widths)],
            [check_int(f"block_sizes[{g}]", b, minimum=1) for g, b in enumerate(block_sizes)])


def check_count_array(name: str, value: Any, *, minimum: int | None = 0) -> np.ndarray:
    """Validate a 1-D integer count array (int32 or int64, list of ints accepted).

    Returns a read-only int64 view/copy for use in checks. Raises ``TypeError`` for
    float or object arrays and ``ValueError`` for the wrong rank or an entry below
    ``minimum``, naming the first offending index; ``minimum=None`` checks no
    bound (a buffer's stale contents).
    """
    if isinstance(value, np.ndarray):
        arr = value
    elif isinstance(value, (list, tuple)):
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value):
            raise TypeError(f"{name} must hold ints, got {_short(value)}")
        arr = np.asarray(value, dtype=np.int64)
    else:
        raise TypeError(
            f"{name} must be a numpy integer array or a list of ints, got {type(value).__name__}"
        )
    check_int_meta(name, arr.dtype, arr.shape)
    if arr.size and minimum is not None:
        low = int(arr.min())
        if low < minimum:
            where = int(np.argmax(arr < minimum))
            raise ValueError(f"{name}[{where}] must be >= {minimum}, got {int(arr[where])}")
    return arr


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative ints, exactly (no floats)."""
    return -(-a // b)
