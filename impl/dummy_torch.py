"""torch implementations of contracts A and B (same code on CPU and CUDA).

No host synchronisation and no data-dependent Python control flow: every
branch depends on Python ints (``num_reqs``, ``num_tokens``) only, so the
layout can be captured into a CUDA graph over persistent device buffers.
"""

from __future__ import annotations

import torch

from reference.dummy import check_dummy_args, check_split_args
from reference.types import DummyBatch, DummyBuffers


def split_dummy_tokens(num_reqs: int, num_tokens: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """Contract A; int64 tensor on ``device``."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = torch.full((r,), n // r, dtype=torch.int64, device=device)
    out[r - n % r :] += 1
    return out


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


def split_dummy_tokens_batched(num_reqs: int, num_tokens: torch.Tensor) -> torch.Tensor:
    """Contract A for one ``num_reqs`` and many ``num_tokens`` at once.

    ``num_tokens`` is a 1-D int64 tensor (each ``>= num_reqs``); the result has
    shape ``(len(num_tokens), num_reqs)``, row k being the split of
    ``num_tokens[k]``. Used by the exhaustive sweep; validation of the values
    is the caller's (no host synchronisation here).
    """
    r = check_split_args(num_reqs, num_reqs)[0]
    n = num_tokens.to(torch.int64).unsqueeze(1)
    req = torch.arange(r, device=num_tokens.device, dtype=torch.int64).unsqueeze(0)
    return torch.div(n, r, rounding_mode="floor") + (req >= r - torch.remainder(n, r)).to(torch.int64)
