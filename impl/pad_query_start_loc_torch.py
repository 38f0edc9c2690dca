"""torch implementations of contract C: padded ``query_start_loc`` (CPU and
CUDA), eager and in the per-capture-size CUDA-graph form.

``pad_query_start_loc`` is CUDA-graph capturable: it reads only metadata on the
host (shapes, dtypes, devices and the Python int ``num_reqs_padded``), never a
device value. No ``.item()``, ``.tolist()``, ``bool(tensor)``, ``nonzero`` or
data-dependent shape; every branch depends on host ints only. The padded slots
are filled on the device from ``q[R]`` (the last real cumulative value), so the
padding value never travels through the host either.

How this is made sure (tests/test_query_start_loc_stateful.py):
- it runs on the ``meta`` device, where any read of a value raises;
- it runs under a TorchFunctionMode that fails on ``item``, ``tolist``,
  ``__bool__``, ``__int__``, ``__index__``, ``nonzero``, ``cpu``, ``numpy`` ...;
- on CUDA (marked ``gpu``) it is captured into a ``torch.cuda.CUDAGraph`` and
  replayed over a stale buffer, and run under ``torch.cuda.set_sync_debug_mode("error")``.

Value preconditions (entries ``>= 0``, ``sum`` fits the dtype) need the values,
so they are the host's job, checked on the host copy before it is sent to the
device (``check_pad_counts``), as an engine does with its numpy staging array.
The numpy-in binders used by the registry (:func:`bind`, :func:`bind_graph`)
do exactly that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from batchfuzz._host import to_host
from batchfuzz.impl._adapter import TORCH_DTYPES, copy_back, numpy_call, to_device
from batchfuzz.reference._args import check_int_meta
from batchfuzz.reference.pad_query_start_loc import check_out_meta, check_pad_args, check_padded_size


def pad_query_start_loc(
    num_scheduled_tokens: torch.Tensor, num_reqs_padded: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Contract C over tensors. Returns ``out[:P+1]`` or a new tensor of nst's
    dtype on nst's device. Entries of nst are assumed ``>= 0`` (host-checked)."""
    if not isinstance(num_scheduled_tokens, torch.Tensor):
        raise TypeError(f"num_scheduled_tokens must be a torch.Tensor, got {type(num_scheduled_tokens).__name__}")
    nst = num_scheduled_tokens
    check_int_meta("num_scheduled_tokens", nst.dtype, tuple(nst.shape))
    r = int(nst.shape[0])
    p = check_padded_size(num_reqs_padded, r)
    if out is None:
        out = torch.empty(p + 1, dtype=nst.dtype, device=nst.device)
    else:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor or None, got {type(out).__name__}")
        check_out_meta("out", out.dtype, tuple(out.shape), p)
        if out.device != nst.device:
            raise ValueError(f"out is on {out.device} but num_scheduled_tokens is on {nst.device}")
    q = out[: p + 1]
    q[:1].zero_()
    torch.cumsum(nst, dim=0, dtype=q.dtype, out=q[1 : r + 1])
    # Padded slots repeat q[R] (device to device, no host round trip); q[R] = 0 when R == 0.
    q[r + 1 :].copy_(q[r : r + 1].expand(p - r))
    return q


def pad_query_start_loc_graph(num_scheduled_tokens: torch.Tensor, num_reqs: torch.Tensor,
                              num_reqs_padded: int, out: torch.Tensor) -> torch.Tensor:
    """Contract C with the real request count in a device scalar.

    ``num_scheduled_tokens`` is a persistent buffer of capacity ``>= P`` whose
    entries past ``num_reqs`` are stale; they are masked to zero, so the padded
    entries of ``out[:P+1]`` equal the real total. ``P`` (the captured padded
    size) is a Python int, as in a graph captured per padded size.
    """
    p = num_reqs_padded
    req = torch.arange(p, device=out.device, dtype=torch.int64)
    counts = torch.where(req < num_reqs.to(torch.int64), num_scheduled_tokens[:p].to(torch.int64), torch.zeros_like(req))
    out[:1].zero_()
    out[1 : p + 1].copy_(torch.cumsum(counts, dim=0))
    return out[: p + 1]



def bind(device: str) -> Callable[..., np.ndarray]:
    """:func:`pad_query_start_loc` with the canonical numpy signature on
    ``device``. Values are checked on the host (as an engine checks its staging
    array); the torch function itself only reads metadata. With ``out``, the
    stale buffer travels to the device and the whole buffer comes back, so a
    write past ``P`` shows."""

    def pad_on_device(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
        nst, _, p, _, _ = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
        if out is None:
            return np.asarray(numpy_call(pad_query_start_loc, device, (nst, p)))
        numpy_call(pad_query_start_loc, device, (nst, p, out), writes=(2,))
        return out[: p + 1]

    return pad_on_device


def bind_graph(device: str) -> Callable[..., np.ndarray]:
    """:func:`pad_query_start_loc_graph` with the canonical numpy signature:
    the real request count travels as a 0-d device tensor, nst sits in a
    staging buffer of capacity ``P`` whose tail past R is stale garbage, and
    the padded entries come from masking, not from a Python branch on R."""

    def pad_graph_on_device(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
        nst, r, p, _, dtype = check_pad_args(num_scheduled_tokens, num_reqs_padded, out)
        staging = torch.full((max(p, 1),), 987654, dtype=torch.int64, device=device)  # stale past R
        staging[:r] = torch.from_numpy(np.ascontiguousarray(nst)).to(device=device, dtype=torch.int64)
        num_reqs = torch.tensor(r, device=device)
        if out is None:
            t_out = torch.empty(p + 1, dtype=TORCH_DTYPES[np.dtype(dtype)], device=device)
            return np.asarray(to_host(pad_query_start_loc_graph(staging, num_reqs, p, t_out)))
        t_out = to_device(out, device)
        pad_query_start_loc_graph(staging, num_reqs, p, t_out)
        copy_back(t_out, out)
        return out[: p + 1]

    return pad_graph_on_device
