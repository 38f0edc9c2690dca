"""The three engine code paths that produce a dummy token split (contract A).

SPEC.md: the dummy input-batch builder, the model runner's dummy run and the
LoRA capture hook are three implementations of one contract and must agree
element for element. Each is written here in the style of the place it models
(our own code), with the fix applied: the last ``N % R`` requests get one
extra token each.
"""

from __future__ import annotations

import numpy as np
import torch

from reference.dummy import check_split_args


def input_batch_builder(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Dummy input-batch builder: an int32 array, extras added from the tail."""
    r, n = check_split_args(num_reqs, num_tokens)
    num_scheduled_tokens = np.full(r, n // r, dtype=np.int32)
    extra = n % r
    if extra:
        num_scheduled_tokens[-extra:] += 1
    return num_scheduled_tokens


def dummy_run(num_reqs: int, num_tokens: int) -> list[int]:
    """Model runner dummy run: a per-request Python list."""
    r, n = check_split_args(num_reqs, num_tokens)
    min_tokens_per_req, extra = divmod(n, r)
    return [min_tokens_per_req] * (r - extra) + [min_tokens_per_req + 1] * extra


def lora_capture_hook(num_reqs: int, num_tokens: int) -> torch.Tensor:
    """LoRA capture hook: per-request counts as a tensor, from an index compare."""
    r, n = check_split_args(num_reqs, num_tokens)
    req_idx = torch.arange(r, dtype=torch.int64)
    return (n // r) + (req_idx >= r - n % r).to(torch.int64)
