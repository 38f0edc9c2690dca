"""torch implementation of contract A (CPU and CUDA), the batched form the
exhaustive sweep uses, and the engine's LoRA capture hook split.

No host synchronisation: every branch depends on Python ints only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from batchfuzz._host import to_host
from batchfuzz.reference._args import check_int, check_int_meta
from batchfuzz.reference.split_dummy_tokens import check_split_args


def split_dummy_tokens(num_reqs: int, num_tokens: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """Contract A; int64 tensor on ``device``."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = torch.full((r,), n // r, dtype=torch.int64, device=device)
    out[r - n % r :] += 1
    return out


def split_dummy_tokens_batched(num_reqs: int, num_tokens: torch.Tensor) -> torch.Tensor:
    """Contract A for one ``num_reqs`` and many ``num_tokens`` at once.

    ``num_tokens`` is a 1-D int32 or int64 tensor (each ``>= num_reqs``); the
    result has its dtype and shape ``(len(num_tokens), num_reqs)``, row k being
    the split of ``num_tokens[k]``. Used by the exhaustive sweep; validation of
    the values is the caller's (no host synchronisation here).
    """
    r = check_int("num_reqs", num_reqs, minimum=1)
    if not isinstance(num_tokens, torch.Tensor):
        raise TypeError(f"num_tokens must be a torch.Tensor, got {type(num_tokens).__name__}")
    check_int_meta("num_tokens", num_tokens.dtype, tuple(num_tokens.shape))  # metadata only: no host synchronisation
    dtype = num_tokens.dtype
    n = num_tokens.unsqueeze(1)
    req = torch.arange(r, device=num_tokens.device, dtype=dtype).unsqueeze(0)
    # int + bool adds in the int dtype: one pass over the (len, r) result, no bool-to-int copy
    return torch.div(n, r, rounding_mode="floor") + (req >= r - torch.remainder(n, r))



def lora_capture_hook(num_reqs: int, num_tokens: int) -> torch.Tensor:
    """LoRA capture hook: per-request counts as a tensor, from an index compare."""
    r, n = check_split_args(num_reqs, num_tokens)
    req_idx = torch.arange(r, dtype=torch.int64)
    return (n // r) + (req_idx >= r - n % r).to(torch.int64)



def bind(device: str) -> Callable[[Any, Any], np.ndarray]:
    """The canonical signature on ``device``: ints in, a host int64 array out."""

    def split_on_device(num_reqs: Any, num_tokens: Any) -> np.ndarray:
        return np.asarray(to_host(split_dummy_tokens(num_reqs, num_tokens, device=device)))

    return split_on_device
