"""One generated input of a contract: call arguments plus context."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Case:
    """``args`` are passed to the target positionally, in order, by the
    contract's properties; ``context`` is what the strategy knows beyond the
    call (``max_model_len`` for contract A, a stale buffer for contract C, ...)
    and is used by properties, never by the target."""

    args: dict[str, Any]
    context: dict[str, Any] = field(default_factory=dict)

    def copy(self) -> Case:
        return Case(copy.deepcopy(self.args), copy.deepcopy(self.context))


_IMMUTABLE = (int, float, bool, str, bytes, type(None))


def copy_value(value: Any) -> Any:
    """A copy of one argument a target may write to: immutable values as they
    are, numpy arrays and our own records by their ``copy()``, anything else deep-copied."""
    if type(value) in _IMMUTABLE:
        return value
    if hasattr(value, "copy") and callable(value.copy) and type(value).__module__.startswith(("numpy", "batchfuzz")):
        return value.copy()
    return copy.deepcopy(value)
