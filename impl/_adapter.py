"""numpy in, numpy out: how a torch implementation meets the canonical signatures.

Torch implementations take tensors on a device. The registry calls every
target with numpy arrays and Python ints (docs/contracts.md, target
signatures), so each torch implementation is bound to a device through
:func:`numpy_call`: numpy integer arrays (also inside lists, tuples and
dataclasses such as ``DummyBuffers``) become tensors on the device with the
same dtype and their stale contents, the function runs, the arguments it
writes (``writes``: a persistent buffer, an ``out=``) are copied back into the
caller's numpy arrays, and the result comes back as numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields, is_dataclass, replace
from typing import Any

import numpy as np
import torch

from batchfuzz._host import to_host

TORCH_DTYPES = {np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64}


def to_device(value: Any, device: str | torch.device) -> Any:
    """numpy int32/int64 arrays become tensors on ``device`` (same dtype, same
    contents); lists, tuples and dataclass instances are converted member by
    member; anything else (ints, None, other arrays) is returned as it is."""
    if isinstance(value, np.ndarray):
        if value.dtype in TORCH_DTYPES:
            return torch.from_numpy(np.ascontiguousarray(value).copy()).to(device)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: to_device(getattr(value, f.name), device) for f in fields(value)})
    return value


def copy_back(device_value: Any, host_value: Any) -> None:
    """Write what the function left in ``device_value`` into the numpy arrays of
    ``host_value`` (the caller's), in place, member by member."""
    if isinstance(device_value, torch.Tensor) and isinstance(host_value, np.ndarray):
        host_value[...] = device_value.cpu().numpy()
    elif isinstance(host_value, (list, tuple)):
        for d, h in zip(device_value, host_value, strict=True):
            copy_back(d, h)
    elif is_dataclass(host_value) and not isinstance(host_value, type):
        for f in fields(host_value):
            copy_back(getattr(device_value, f.name), getattr(host_value, f.name))


def numpy_call(fn: Callable[..., Any], device: str | torch.device, args: Sequence[Any], *,
               writes: Sequence[int] = ()) -> Any:
    """``fn(*args)`` with the arguments on ``device``; the arguments at the
    positions ``writes`` are copied back to the caller's arrays; the result is
    returned on the host (:func:`batchfuzz._host.to_host`, dataclasses member
    by member)."""
    on_device = [to_device(a, device) for a in args]
    result = fn(*on_device)
    for i in writes:
        copy_back(on_device[i], args[i])
    if is_dataclass(result) and not isinstance(result, type):
        return replace(result, **{f.name: to_host(getattr(result, f.name)) for f in fields(result)})
    return to_host(result)
