"""CUDA-graph-capturable torch forms of contracts B and C.

A captured CUDA graph freezes shapes and Python control flow, so the engine
feeds each step's sizes through persistent device buffers. These forms take
``num_reqs`` and ``num_tokens`` as 0-d device tensors and work on tensors of
fixed capacity: every branch that depends on a size is a mask (``torch.where``,
``masked_fill_``), there is no ``.item()``, no ``nonzero``, no bool of a tensor
and no host copy. Validation of the sizes happens on the host, before they are
written into the device scalars (see the binders in the contract records).

The same code runs eagerly on the CPU (checked there against the oracles by the
generated tests) and eagerly or under graph replay on CUDA.
"""

from __future__ import annotations

import torch

from reference.types import DummyBuffers


def make_dummy_graph(num_reqs: torch.Tensor, num_tokens: torch.Tensor, buffers: DummyBuffers,
                     num_scheduled_tokens: torch.Tensor) -> None:
    """Contract B with device-scalar sizes. Writes every persistent buffer in
    full: ``num_scheduled_tokens`` (capacity ``max_num_reqs``, zero past R),
    ``seq_lens``, ``query_start_loc`` (padded entries equal N because the padded
    counts are zero), and clears ``positions``/``input_ids`` below N."""
    qsl = buffers.query_start_loc
    max_num_reqs = buffers.seq_lens.shape[0]
    req = torch.arange(max_num_reqs, device=qsl.device, dtype=torch.int64)
    r = num_reqs.to(torch.int64)
    n = num_tokens.to(torch.int64)
    base = torch.div(n, r, rounding_mode="floor")
    extra = (req >= r - (n - base * r)).to(torch.int64)
    nst = torch.where(req < r, base + extra, torch.zeros_like(req))
    num_scheduled_tokens.copy_(nst)
    buffers.seq_lens.copy_(nst)
    qsl[:1].zero_()
    qsl[1:].copy_(torch.cumsum(nst, dim=0))
    tok = torch.arange(buffers.positions.shape[0], device=qsl.device)
    buffers.positions.masked_fill_(tok < n, 0)
    buffers.input_ids.masked_fill_(tok < n, 0)


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
