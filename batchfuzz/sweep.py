"""Exhaustive sweep of contract A over a whole domain, properties vectorised.

For every ``1 <= R <= max_reqs`` and every ``R <= N <= max_tokens`` the split
is computed by a batched implementation (one call per R, all N at once) and
every property of contract A (docs/contracts.md) is checked on the whole block:
the closed form, ``sum == N``, ``max == ceil(N/R)``, ``min == N // R``,
non-decreasing, every entry ``>= 1``, and ``max <= L`` for the tightest
``L = ceil(N / R)`` (which implies it for every larger ``L``).
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


def sweep_split(split: BatchedSplit, *, max_reqs: int, max_tokens: int, device: str = "cpu",
                on_progress: Callable[[SweepResult, int], None] | None = None) -> SweepResult:
    """Every ``(R, N)`` with ``1 <= R <= max_reqs``, ``R <= N <= max_tokens``,
    one ``R`` at a time; ``on_progress(result so far, R)`` after each."""
    if max_reqs < 1 or max_tokens < max_reqs:
        raise ValueError(f"need 1 <= max_reqs <= max_tokens, got max_reqs={max_reqs}, max_tokens={max_tokens}")
    res = SweepResult(max_reqs, max_tokens, device)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    # Failure flags stay on the device; one host read per R keeps the loop honest
    # without a sync per property.
    all_n = torch.arange(0, max_tokens + 1, device=device, dtype=torch.int64)
    for r in range(1, max_reqs + 1):
        n_vals = all_n[r:]
        n = split(r, n_vals).to(torch.int64)
        col = n_vals.unsqueeze(1)
        req = torch.arange(r, device=device, dtype=torch.int64).unsqueeze(0)
        floor = torch.div(n_vals, r, rounding_mode="floor")
        ceil = torch.div(n_vals + r - 1, r, rounding_mode="floor")
        closed = torch.div(col, r, rounding_mode="floor") + (req >= r - torch.remainder(col, r)).to(torch.int64)
        bad = {
            "matches_oracle": (n != closed).any(dim=1),
            "sum_is_num_tokens": n.sum(dim=1) != n_vals,
            "max_is_ceil": n.max(dim=1).values != ceil,
            "min_is_floor": n.min(dim=1).values != floor,
            "non_decreasing": (n[:, 1:] < n[:, :-1]).any(dim=1) if r > 1 else torch.zeros_like(n_vals, dtype=torch.bool),
            "every_request_has_a_token": (n < 1).any(dim=1),
            "within_max_model_len": n.max(dim=1).values > ceil,
        }
        flags = torch.stack([b.any() for b in bad.values()]).cpu()
        if bool(flags.any()):
            for (name, b), hit in zip(bad.items(), flags.tolist(), strict=True):
                if hit and name not in res.failures:
                    first = int(torch.nonzero(b)[0, 0].item())
                    res.failures[name] = (r, int(n_vals[first].item()))
        res.pairs += int(n_vals.numel())
        res.elements += int(n_vals.numel()) * r
        if on_progress is not None:
            res.seconds = time.perf_counter() - start
            on_progress(res, r)
    if device == "cuda":
        torch.cuda.synchronize()
    res.seconds = time.perf_counter() - start
    return res
