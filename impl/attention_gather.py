"""A small attention-like gather kernel: what reads a dummy batch's block table.

For every token of the batch it finds the owning request (``repeat_interleave``
over the per-request counts, as metadata consumers do) and its position in
that request, then reads ``block_table[req, pos // block_size]`` with plain
device indexing. The block table has ``ceil(max_model_len / block_size)``
columns, as the engine sizes it. A request given more than ``max_model_len``
tokens reads past its row: on CUDA that is a device-side fault which poisons
the process's CUDA context (the shipped dummy-split crash); on the CPU it is
an IndexError.
"""

from __future__ import annotations

import torch


def gather_block_ids(num_scheduled_tokens: torch.Tensor, block_table: torch.Tensor, block_size: int) -> torch.Tensor:
    """Block id read by every token of the batch, shape ``(sum(nst),)``."""
    device = block_table.device
    nst = num_scheduled_tokens.to(device=device, dtype=torch.int64)
    num_reqs = nst.shape[0]
    req_of_token = torch.repeat_interleave(torch.arange(num_reqs, device=device), nst)
    starts = torch.cumsum(nst, 0) - nst
    pos = torch.arange(req_of_token.shape[0], device=device) - starts[req_of_token]
    # No bounds check on purpose: the kernel trusts the metadata, as attention does.
    return block_table[req_of_token, torch.div(pos, block_size, rounding_mode="floor")]


def dummy_block_table(num_reqs: int, max_model_len: int, block_size: int, device: str) -> torch.Tensor:
    """A block table sized for ``max_model_len``: request i owns blocks
    ``1 + i*W .. (i+1)*W`` (block 0 is the null block)."""
    width = -(-max_model_len // block_size)
    return (1 + torch.arange(num_reqs * width, device=device, dtype=torch.int32)).reshape(num_reqs, width)
