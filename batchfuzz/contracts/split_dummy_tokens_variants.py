"""Known buggy variants of contract A, the dummy token split: the shipped bug,
once per engine code path that had it, and planted mutants."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

from batchfuzz.reference.split_dummy_tokens import check_split_args
from batchfuzz.registry import Variant

# ---------------------------------------------------------------- the shipped bug


def remainder_to_last_input_batch(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Input-batch builder before the fix: the whole remainder on the last request."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = np.full(r, n // r, dtype=np.int32)
    out[-1] += n % r
    return out


def remainder_to_last_dummy_run(num_reqs: int, num_tokens: int) -> list[int]:
    """Dummy run before the fix (and the v1 model runner as of vLLM 0.33.0)."""
    r, n = check_split_args(num_reqs, num_tokens)
    per_req = [n // r] * r
    per_req[-1] += n % r
    return per_req


def remainder_to_last_lora_hook(num_reqs: int, num_tokens: int) -> torch.Tensor:
    """LoRA capture hook before the fix."""
    import torch

    r, n = check_split_args(num_reqs, num_tokens)
    out = torch.full((r,), n // r, dtype=torch.int64)
    out[r - 1] = n - (n // r) * (r - 1)
    return out


def remainder_to_last_v1_runner(num_reqs: int, num_tokens: int) -> list[int]:
    """v1 GPU model runner's dummy run: ``[N // R] * R`` then ``[-1] += N % R``."""
    r, n = check_split_args(num_reqs, num_tokens)
    min_tokens = n // r
    nst = [min_tokens] * r
    nst[-1] += n % r
    return nst



# ---------------------------------------------------------------- planted mutants


def remainder_to_first(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Extras on the first N % R requests instead of the last (wrong end)."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = np.full(r, n // r, dtype=np.int64)
    out[: n % r] += 1
    return out


def drop_remainder(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Forgets the remainder: N // R each, sum falls short."""
    r, n = check_split_args(num_reqs, num_tokens)
    return np.full(r, n // r, dtype=np.int64)


def tail_off_by_one(num_reqs: int, num_tokens: int) -> np.ndarray:
    """``i > R - N % R`` instead of ``>=``: one extra token lost."""
    r, n = check_split_args(num_reqs, num_tokens)
    idx = np.arange(r)
    return (n // r + (idx > r - n % r)).astype(np.int64)


def ceil_then_trim_last(num_reqs: int, num_tokens: int) -> list[int]:
    """Everyone gets ceil(N / R), the last takes what is left (maybe 0 or less)."""
    r, n = check_split_args(num_reqs, num_tokens)
    c = -(-n // r)
    out = [c] * r
    out[-1] = n - c * (r - 1)
    return out


def int16_counts(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Counts kept as int16: wraps once one request has over 32767 tokens."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = np.full(r, n // r, dtype=np.int64)
    out[r - n % r :] += 1
    return out.astype(np.int16)


def uneven_spread(num_reqs: int, num_tokens: int) -> np.ndarray:
    """Extras on every other request from the tail: right total, not sorted."""
    r, n = check_split_args(num_reqs, num_tokens)
    out = np.full(r, n // r, dtype=np.int64)
    rem = n % r
    # positions r-1, r-3, ... then fill the rest from the tail
    order = list(range(r - 1, -1, -2)) + list(range(r - 2, -1, -2))
    for i in order[:rem]:
        out[i] += 1
    return out



_SHIPPED = ("max_is_ceil", "within_max_model_len", "matches_oracle", "dummy_attention_in_bounds")


VARIANTS = (
    Variant("remainder_to_last.input_batch", "input-batch builder puts the whole remainder on the last request (shipped)",
            remainder_to_last_input_batch, "shipped", _SHIPPED, {"num_reqs": 3, "num_tokens": 5}),
    Variant("remainder_to_last.dummy_run", "model runner dummy run puts the whole remainder on the last request (shipped)",
            remainder_to_last_dummy_run, "shipped", _SHIPPED, {"num_reqs": 3, "num_tokens": 5}),
    Variant("remainder_to_last.lora_hook", "LoRA capture hook puts the whole remainder on the last request (shipped)",
            remainder_to_last_lora_hook, "shipped", _SHIPPED, {"num_reqs": 3, "num_tokens": 5}),
    Variant("remainder_to_last.v1_runner", "v1 model runner's dummy run, still remainder-to-last as of vLLM 0.33.0 (shipped)",
            remainder_to_last_v1_runner, "shipped", _SHIPPED, {"num_reqs": 3, "num_tokens": 5}),
    Variant("remainder_to_first", "extras on the first N % R requests (wrong end)",
            remainder_to_first, "mutant", ("non_decreasing", "matches_oracle"), {"num_reqs": 2, "num_tokens": 3}),
    Variant("drop_remainder", "forgets the remainder: sum falls short of N",
            drop_remainder, "mutant", ("sum_is_num_tokens", "max_is_ceil", "matches_oracle"), {"num_reqs": 2, "num_tokens": 3}),
    Variant("tail_off_by_one", "i > R - N % R instead of >=: one extra token lost",
            tail_off_by_one, "mutant", ("sum_is_num_tokens", "matches_oracle"), {"num_reqs": 2, "num_tokens": 3}),
    Variant("ceil_then_trim_last", "everyone gets ceil(N/R) and the last takes what is left (can be 0)",
            ceil_then_trim_last, "mutant", ("min_is_floor", "every_request_has_a_token", "non_decreasing", "matches_oracle"),
            {"num_reqs": 3, "num_tokens": 4}),
    Variant("int16_counts", "per-request counts stored as int16: wrap past 32767 tokens",
            int16_counts, "mutant", ("sum_is_num_tokens", "matches_oracle"), {"num_reqs": 1, "num_tokens": 32768}),
    Variant("uneven_spread", "extras spread over every other request: right total, not sorted",
            uneven_spread, "mutant", ("non_decreasing", "matches_oracle"), {"num_reqs": 3, "num_tokens": 5}),
)

