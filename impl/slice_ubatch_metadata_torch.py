"""torch implementation of contract F (per-microbatch attention metadata), CPU
and CUDA: each microbatch's rows by subtract-and-clamp on the device, as a
runner slicing persistent buffers does. ``max_query_len`` is read back to the
host (one sync per microbatch): the metadata carries it as an int."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from batchfuzz._host import to_host
from batchfuzz.reference.slice_ubatch_metadata import UbatchMetadata, check_slice_args


def slice_ubatch_metadata(num_scheduled_tokens: Any, num_computed_tokens: Any, positions: Any, block_table: Any,
                          num_tokens_padded: int, num_reqs_padded: int, ubatch_slices: Any,
                          device: str | torch.device = "cpu") -> list[UbatchMetadata]:
    """Contract F; int64 tensors on ``device``."""
    step = check_slice_args(num_scheduled_tokens, num_computed_tokens, positions, block_table,
                            num_tokens_padded, num_reqs_padded, ubatch_slices)
    rp, r = step.num_reqs_padded, step.num_reqs
    nst = torch.zeros(rp, dtype=torch.int64, device=device)
    nst[:r] = torch.tensor(step.nst, dtype=torch.int64, device=device)
    qsl = torch.zeros(rp + 1, dtype=torch.int64, device=device)
    torch.cumsum(nst, 0, out=qsl[1:])
    computed = torch.zeros(rp, dtype=torch.int64, device=device)
    computed[:r] = torch.tensor(step.computed, dtype=torch.int64, device=device)
    seq = computed + nst
    pos = torch.tensor(step.positions, dtype=torch.int64, device=device)
    table = torch.tensor(step.block_table, dtype=torch.int64, device=device).reshape(rp, -1)
    out = []
    for (rs, re), (ts, te) in step.slices:
        begin, end = qsl[rs:re], qsl[rs + 1: re + 1]
        local = (qsl[rs: re + 1] - ts).clamp_(0, te - ts)
        before = (torch.minimum(end, torch.full_like(end, ts)) - begin).clamp_(min=0)
        after = (end - torch.maximum(begin, torch.full_like(begin, te))).clamp_(min=0)
        out.append(UbatchMetadata(query_start_loc=local, seq_lens=seq[rs:re] - after,
                                  num_computed_tokens=computed[rs:re] + before, positions=pos[ts:te].clone(),
                                  block_table=table[rs:re].clone(), max_query_len=int((local[1:] - local[:-1]).max().item())))
    return out


def bind(device: str) -> Callable[..., list[UbatchMetadata]]:
    """The canonical signature on ``device``: numpy in, host arrays out."""

    def slice_on_device(num_scheduled_tokens: Any, num_computed_tokens: Any, positions: Any, block_table: Any,
                        num_tokens_padded: int, num_reqs_padded: int, ubatch_slices: Any) -> list[UbatchMetadata]:
        out = slice_ubatch_metadata(num_scheduled_tokens, num_computed_tokens, positions, block_table, num_tokens_padded,
                                    num_reqs_padded, ubatch_slices, device=device)
        return [UbatchMetadata(**{name: (value if isinstance(value, int) else np.asarray(to_host(value)))
                                  for name, value in vars(md).items()}) for md in out]

    return slice_on_device
