"""Argument validation shared by oracles and implementations.

Every check raises ``TypeError`` for a wrong type and ``ValueError`` for a bad
value, and the message names the argument and the value (docs/contracts.md,
common rules). Oracles and implementations share these so that error inputs get the
same message whichever one is called.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

# The integer dtypes counts and tables may have (docs/contracts.md, common rules), in the order strategies draw them:
# int32 first, the engine's own dtype for metadata buffers and block tables.
INT_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """Return ``value`` as a Python int, or raise naming ``name`` and the value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        # torch.int tensors of one element are not accepted: counts are host ints.
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {_short(value)}")
    ivalue = int(value)
    if minimum is not None and ivalue < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {ivalue}")
    return ivalue


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
    if arr.dtype not in INT_DTYPES:
        raise TypeError(f"{name} must have dtype int32 or int64, got {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and minimum is not None:
        low = int(arr.min())
        if low < minimum:
            where = int(np.argmax(arr < minimum))
            raise ValueError(f"{name}[{where}] must be >= {minimum}, got {int(arr[where])}")
    return arr


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative ints, exactly (no floats)."""
    return -(-a // b)
