"""numpy implementation of contract A, and two of the engine's three code
paths that produce a dummy token split (docs/contracts.md, contract A).

The dummy input-batch builder, the model runner's dummy run and the LoRA
capture hook are three implementations of one contract and must agree element
for element. The two host-side ones are written here in the style of the
place they model (our own code), with the fix applied; the LoRA hook, which
builds a tensor, is in ``split_dummy_tokens_torch``.
"""

from __future__ import annotations

import numpy as np

from batchfuzz.reference.split_dummy_tokens import check_split_args


def split_dummy_tokens(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Contract A; int64 result of length ``num_reqs``, no per-request loop."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = np.full(r, n // r, dtype=np.int64)
    out[r - n % r :] += 1
    return out


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

