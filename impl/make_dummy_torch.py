"""torch implementations of contract B (same code on CPU and CUDA): the eager
layout over tensor buffers, and the CUDA-graph-capturable form.

A captured CUDA graph freezes shapes and Python control flow, so the engine
feeds each step's sizes through persistent device buffers. The graph form
takes ``num_reqs`` and ``num_tokens`` as 0-d device tensors and works on
tensors of fixed capacity: every branch that depends on a size is a mask
(``torch.where``, ``masked_fill_``), there is no ``.item()``, no ``nonzero``,
no bool of a tensor and no host copy. Sizes are validated on the host, before
they are written into the device scalars (see :func:`bind_graph`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from batchfuzz._host import to_host
from batchfuzz.impl._adapter import copy_back, numpy_call, to_device
from batchfuzz.impl.split_dummy_tokens_torch import split_dummy_tokens
from batchfuzz.reference.make_dummy import DummyBatch, DummyBuffers, check_dummy_args


def make_dummy(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
    """Contract B over torch buffers (all on one device)."""
    r, n = check_dummy_args(num_reqs, num_tokens, buffers)
    qsl = buffers.query_start_loc
    device, dtype = qsl.device, qsl.dtype
    nst = split_dummy_tokens(r, n, device=device).to(dtype)

    buffers.seq_lens[:r].copy_(nst)
    buffers.seq_lens[r:].zero_()
    qsl[:1].zero_()
    torch.cumsum(nst, dim=0, out=qsl[1 : r + 1])
    qsl[r + 1 :].fill_(n)
    buffers.positions[:n].zero_()
    buffers.input_ids[:n].zero_()
    return DummyBatch(
        num_scheduled_tokens=nst,
        seq_lens=buffers.seq_lens,
        query_start_loc=qsl,
        positions=buffers.positions[:n],
        input_ids=buffers.input_ids[:n],
        idx_mapping=torch.arange(r, dtype=dtype, device=device),
        logits_indices=qsl[1 : r + 1] - 1,
        cu_num_logits=torch.arange(r + 1, dtype=dtype, device=device),
    )



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



def bind(device: str) -> Callable[[Any, Any, DummyBuffers], DummyBatch]:
    """:func:`make_dummy` with the canonical numpy signature on ``device``: the
    buffers travel to the device with their stale contents and come back."""

    def make_dummy_on_device(num_reqs: Any, num_tokens: Any, buffers: DummyBuffers) -> DummyBatch:
        return numpy_call(make_dummy, device, (num_reqs, num_tokens, buffers), writes=(2,))

    return make_dummy_on_device


def bind_graph(device: str) -> Callable[[Any, Any, DummyBuffers], DummyBatch]:
    """:func:`make_dummy_graph` with the canonical numpy signature: sizes are
    validated on the host and sent as 0-d tensors; the per-request counts land
    in a staging buffer of capacity ``max_num_reqs`` that holds garbage before
    the call; outputs are the persistent buffers, sliced here."""

    def make_dummy_graph_on_device(num_reqs: Any, num_tokens: Any, buffers: DummyBuffers) -> DummyBatch:
        r, n = check_dummy_args(num_reqs, num_tokens, buffers)
        dev = to_device(buffers, device)
        qsl = dev.query_start_loc
        nst = torch.full((buffers.max_num_reqs,), -7, dtype=qsl.dtype, device=device)  # stale on purpose
        make_dummy_graph(torch.tensor(r, device=device), torch.tensor(n, device=device), dev, nst)
        copy_back(dev, buffers)
        return DummyBatch(
            num_scheduled_tokens=to_host(nst[:r]), seq_lens=to_host(dev.seq_lens), query_start_loc=to_host(qsl),
            positions=to_host(dev.positions[:n]), input_ids=to_host(dev.input_ids[:n]),
            idx_mapping=np.arange(r), logits_indices=to_host(qsl[1 : r + 1] - 1), cu_num_logits=np.arange(r + 1),
        )

    return make_dummy_graph_on_device
