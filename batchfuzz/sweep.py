"""Exhaustive sweep of contract A over a whole domain, properties vectorised.

For every ``1 <= R <= max_reqs`` and every ``R <= N <= max_tokens`` the split
is computed by a batched implementation (one call per R, all N at once, in
int32 when the counts fit) and every property of contract A
(docs/contracts.md) is checked on the whole block: ``sum == N``,
``max == ceil(N/R)``, ``min == N // R``, non-decreasing, every entry ``>= 1``,
``max <= L`` for the tightest ``L = ceil(N / R)`` (which implies it for every
larger ``L``), and the closed form.

The closed form is not recomputed here (the implementation computes exactly
that expression: comparing with it would check the code against itself). It
is checked through what characterises it: a row equals the closed form iff it
is non-decreasing, its minimum is ``N // R``, its maximum ``ceil(N / R)``, and
``ceil(N / R)`` occurs ``N % R`` times (``R`` times when ``R`` divides ``N``):
every entry then lies in ``{N // R, ceil(N / R)}`` and the larger ones come last.
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
    dtype = torch.int32 if max_tokens < 2**31 else torch.int64
    all_n = torch.arange(0, max_tokens + 1, device=device, dtype=dtype)
    for r in range(1, max_reqs + 1):
        n_vals = all_n[r:]
        n = split(r, n_vals)
        floor = torch.div(n_vals, r, rounding_mode="floor")
        rem = n_vals - floor * r
        ceil = floor + (rem > 0).to(dtype)
        lo, hi = torch.aminmax(n, dim=1)
        decreasing = (n[:, 1:] < n[:, :-1]).any(dim=1) if r > 1 else torch.zeros_like(n_vals, dtype=torch.bool)
        ceil_count = (n == ceil.unsqueeze(1)).sum(dim=1)
        bad = {
            "matches_oracle": decreasing | (lo != floor) | (hi != ceil) | (ceil_count != torch.where(rem > 0, rem, r)),
            "sum_is_num_tokens": n.sum(dim=1) != n_vals,
            "max_is_ceil": hi != ceil,
            "min_is_floor": lo != floor,
            "non_decreasing": decreasing,
            "every_request_has_a_token": lo < 1,
            "within_max_model_len": hi > ceil,
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
