"""Small models of the engine code that *reads* batch metadata.

A metadata bug matters because of what its consumers do with it, so some
properties run the metadata through a consumer written the way engine code
is written:

- :func:`token_map_numpy` and :func:`token_map_torch`: the token-to-request
  map ``repeat(arange(P), diff(query_start_loc))`` that attention backends,
  conv1d metadata and chunked-local attention build (a negative count makes
  both raise: the padded ``query_start_loc`` crash of contract C);
- :func:`gather_block_ids`: an attention-like gather that reads
  ``block_table[req, pos // block_size]`` for every token of a dummy batch,
  with no bounds check (a request longer than ``max_model_len`` reads past
  its row: on CUDA an illegal memory access, on the CPU an IndexError; the
  dummy-split crash of contract A).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


def token_map_numpy(slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``np.repeat(slots, counts)``: raises ValueError on a negative count."""
    return np.repeat(slots, counts)


def token_map_torch(slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``torch.repeat_interleave(slots, counts)`` on the CPU: raises
    RuntimeError on a negative count."""
    import torch

    # Single-threaded: on a loaded 2-core CI machine torch's CPU thread pool costs
    # milliseconds per call here, for arrays this small.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return torch.repeat_interleave(torch.from_numpy(slots), torch.from_numpy(counts)).numpy()
    finally:
        torch.set_num_threads(threads)


def gather_block_ids(num_scheduled_tokens: torch.Tensor, block_table: torch.Tensor, block_size: int) -> torch.Tensor:
    """Block id read by every token of the batch, shape ``(sum(nst),)``."""
    import torch

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
    import torch

    width = -(-max_model_len // block_size)
    return (1 + torch.arange(num_reqs * width, device=device, dtype=torch.int32)).reshape(num_reqs, width)
