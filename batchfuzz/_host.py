"""The one conversion of results to host values: tensors (on any device) to numpy.

Targets may return lists, numpy arrays or torch tensors (docs/contracts.md,
target signatures); everything that compares, encodes or prints a value calls
:func:`to_host` first. It recognises a tensor by its type's module, so this
module does not import torch.
"""

from __future__ import annotations

from typing import Any


def is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach") and hasattr(value, "cpu")


def to_host(value: Any) -> Any:
    """A tensor becomes a numpy array (copied to the host, synchronising with its
    device); lists and tuples are converted element by element; anything else
    is returned as it is."""
    if is_tensor(value):
        return value.detach().cpu().numpy()
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(to_host(v) for v in value)
    return value
