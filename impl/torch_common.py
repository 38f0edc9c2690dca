"""Glue between the canonical numpy-in signatures and torch implementations.

Torch implementations take tensors on a device; the registry binds them to a
device with these adapters so that every property can feed them numpy inputs
and compare numpy outputs. Buffers are copied to the device with their stale
contents, and copied back after the call so the canonical "fills the buffers"
semantics hold for the caller's numpy arrays.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

import numpy as np
import torch

TORCH_DTYPES = {np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64}


def to_device(value: Any, device: str | torch.device) -> Any:
    """numpy int arrays become tensors on ``device`` (same dtype); others pass."""
    if isinstance(value, np.ndarray):
        if value.dtype in TORCH_DTYPES:
            return torch.from_numpy(np.ascontiguousarray(value)).to(device)
        return value
    return value


def to_numpy(value: Any) -> Any:
    """Tensors come back as numpy arrays (synchronising); lists/tuples recurse."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (list, tuple)):
        return type(value)(to_numpy(v) for v in value)
    return value


def buffers_to_device(buffers: Any, device: str | torch.device) -> Any:
    if not is_dataclass(buffers) or isinstance(buffers, type):
        raise TypeError(f"buffers must be a DummyBuffers, got {type(buffers).__name__}")
    return type(buffers)(**{f.name: to_device(getattr(buffers, f.name), device) for f in fields(buffers)})


def copy_back(device_buffers: Any, host_buffers: Any) -> None:
    """Write device buffer contents back into the caller's numpy buffers."""
    for f in fields(device_buffers):
        src = getattr(device_buffers, f.name)
        dst = getattr(host_buffers, f.name)
        if isinstance(src, torch.Tensor) and isinstance(dst, np.ndarray):
            dst[...] = src.cpu().numpy()


def cuda_available() -> bool:
    return bool(torch.cuda.is_available())
