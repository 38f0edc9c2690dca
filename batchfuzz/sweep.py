"""Exhaustive sweep of contract A over a whole domain, properties vectorised.

For every ``1 <= R <= max_reqs`` and ``R <= N <= max_tokens`` a batched
implementation computes the split (one call per R) and every property of
contract A is checked on the whole block, on the device. The closed form is
checked through what characterises it, not recomputed; why that suffices,
and what the sweep costs: docs/internals.md, "sweep.py".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

BatchedSplit = Callable[[int, torch.Tensor], torch.Tensor]


@dataclass
class SweepResult:
    max_reqs: int
    max_tokens: int
    device: str
    pairs: int = 0
    elements: int = 0
    seconds: float = 0.0
    failures: dict[str, tuple[int, int]] = field(default_factory=dict)  # property -> first (R, N)

    @property
    def ok(self) -> bool:
        return not self.failures


FLUSH_EVERY = 64  # request counts between host reads of the failure flags


def _violations(split: BatchedSplit, r: int, n_vals: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per property, a bool per ``N`` of ``n_vals``: does the split of ``N``
    over ``r`` requests violate it?"""
    n = split(r, n_vals)
    floor = torch.div(n_vals, r, rounding_mode="floor")
    ceil = floor + (n_vals - floor * r > 0)
    lo, hi = torch.aminmax(n, dim=1)
    decreasing = (n[:, 1:] < n[:, :-1]).any(dim=1) if r > 1 else torch.zeros_like(n_vals, dtype=torch.bool)
    wrong_sum = n.sum(dim=1) != n_vals
    return {
        "matches_oracle": decreasing | (lo != floor) | (hi != ceil) | wrong_sum,
        "sum_is_num_tokens": wrong_sum,
        "max_is_ceil": hi != ceil,
        "min_is_floor": lo != floor,
        "non_decreasing": decreasing,
        "every_request_has_a_token": lo < 1,
        "within_max_model_len": hi > ceil,
    }


def sweep_split(split: BatchedSplit, *, max_reqs: int, max_tokens: int, device: str = "cpu",
                on_progress: Callable[[SweepResult, int], None] | None = None) -> SweepResult:
    """Every ``(R, N)`` with ``1 <= R <= max_reqs``, ``R <= N <= max_tokens``,
    one ``R`` at a time; ``on_progress(result so far, R)`` after each (its
    ``failures`` as of the last host read of the flags)."""
    if max_reqs < 1 or max_tokens < max_reqs:
        raise ValueError(f"need 1 <= max_reqs <= max_tokens, got max_reqs={max_reqs}, max_tokens={max_tokens}")
    res = SweepResult(max_reqs, max_tokens, device)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    dtype = torch.int32 if max_tokens < 2**31 else torch.int64
    all_n = torch.arange(0, max_tokens + 1, device=device, dtype=dtype)
    names: list[str] = []
    pending: list[tuple[int, torch.Tensor]] = []  # (R, one flag per property), not yet read by the host

    def flush() -> None:
        if not pending:
            return
        flags = torch.stack([f for _, f in pending]).cpu()
        for (r, _), row in zip(pending, flags.tolist(), strict=True):
            new = [name for name, hit in zip(names, row, strict=True) if hit and name not in res.failures]
            if new:
                bad = _violations(split, r, all_n[r:])
                for name in new:
                    res.failures[name] = (r, r + int(torch.nonzero(bad[name])[0, 0].item()))
        pending.clear()

    for r in range(1, max_reqs + 1):
        bad = _violations(split, r, all_n[r:])
        names = list(bad)
        pending.append((r, torch.stack([b.any() for b in bad.values()])))
        if len(pending) >= FLUSH_EVERY or r == max_reqs:
            flush()
        count = max_tokens - r + 1
        res.pairs += count
        res.elements += count * r
        if on_progress is not None:
            res.seconds = time.perf_counter() - start
            on_progress(res, r)
    if device == "cuda":
        torch.cuda.synchronize()
    res.seconds = time.perf_counter() - start
    return res
