"""Torch-side helpers of tests/test_exact_microbatch.py and
tests/test_query_start_loc_stateful.py: torch-function modes that fail on a
host read, and buggy torch checkers that the properties must catch. Here, not
in the test modules, because defining them imports torch: the test modules
import this module when a test first uses it (tests/_lazy.py)."""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from batchfuzz.impl import allow_microbatching_torch as exact_torch
from batchfuzz.impl import find_conflicts_torch


class ForbidHostReads(TorchFunctionMode):
    """Fails on every torch call that reads a tensor's value on the host."""

    FORBIDDEN = frozenset({
        "item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__",
        "nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount", "any", "all",
        "equal", "allclose", "repeat_interleave", "_local_scalar_dense",
    })

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", str(func))
        if name in self.FORBIDDEN:
            raise AssertionError(f"host read of a tensor value: {name}")
        return func(*args, **(kwargs or {}))


class ForbidHostReadsOrMasks(TorchFunctionMode):
    """Fails on every torch call that reads a tensor value on the host, and on
    indexing with a boolean tensor (a hidden ``nonzero``: a data-dependent shape)."""

    FORBIDDEN = frozenset({
        "item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "nonzero", "argwhere",
        "masked_select", "unique", "unique_consecutive", "bincount", "equal", "allclose", "repeat_interleave",
        "_local_scalar_dense",
    })

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", str(func))
        if name in self.FORBIDDEN:
            raise AssertionError(f"host read of a tensor value: {name}")
        if name in ("__getitem__", "__setitem__") and _has_bool_index(args[1] if len(args) > 1 else None):
            raise AssertionError(f"boolean-mask indexing (data-dependent shape) in {name}")
        return func(*args, **(kwargs or {}))


def _has_bool_index(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


class HostReading(exact_torch.ExactMicrobatchCheckTorch):
    """Buggy: returns early (a host read) when no request has a token."""

    def __call__(self, num_reqs: int, c: torch.Tensor, q: torch.Tensor, tables: Any, num_tokens: int | None = None) -> torch.Tensor:
        if int(q[:num_reqs].sum().item()) == 0:
            return torch.ones((), dtype=torch.bool)
        return super().__call__(num_reqs, c, q, tables, num_tokens)


class CapacityBlind(find_conflicts_torch.ExactConflictsTorch):
    """Buggy: reports the pairs it enumerated rather than the pairs there are,
    so an overflow goes unnoticed."""

    def find_conflicts(self, *args: Any, **kwargs: Any) -> Any:
        found = super().find_conflicts(*args, **kwargs)
        return found._replace(num_pairs=torch.clamp(found.num_pairs, max=self.max_pairs))


class OwnPairsKept(find_conflicts_torch.ExactConflictsTorch):
    """Buggy: forgets that a request is in no conflict with itself."""

    def find_conflicts(self, num_reqs: int, c: Any, q: Any, tables: Any, num_tokens: int | None = None) -> Any:
        found = super().find_conflicts(num_reqs, c, q, tables, num_tokens)
        own = torch.full((1, 4), 0, dtype=torch.int64)
        return found._replace(rows=torch.cat([own, found.rows[:-1]]), num_conflicts=found.num_conflicts + 1)
