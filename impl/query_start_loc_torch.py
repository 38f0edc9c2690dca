"""torch implementation of contract C: padded ``query_start_loc`` (CPU and CUDA).

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
The numpy-in binder used by the registry does exactly that.
"""

from __future__ import annotations

import torch

from reference.args import check_int
from reference.query_start_loc import check_out_meta

_INT_DTYPES = (torch.int32, torch.int64)


def pad_query_start_loc(
    num_scheduled_tokens: torch.Tensor, num_reqs_padded: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Contract C over tensors. Returns ``out[:P+1]`` or a new tensor of nst's
    dtype on nst's device. Entries of nst are assumed ``>= 0`` (host-checked)."""
    if not isinstance(num_scheduled_tokens, torch.Tensor):
        raise TypeError(f"num_scheduled_tokens must be a torch.Tensor, got {type(num_scheduled_tokens).__name__}")
    nst = num_scheduled_tokens
    if nst.dtype not in _INT_DTYPES:
        raise TypeError(f"num_scheduled_tokens must have dtype int32 or int64, got {nst.dtype}")
    if nst.dim() != 1:
        raise ValueError(f"num_scheduled_tokens must be 1-D, got shape {tuple(nst.shape)}")
    r = int(nst.shape[0])
    p = check_int("num_reqs_padded", num_reqs_padded, minimum=0)
    if p < r:
        raise ValueError(
            f"num_reqs_padded must be >= the number of requests R = len(num_scheduled_tokens) = {r}, "
            f"got num_reqs_padded={p}"
        )
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
