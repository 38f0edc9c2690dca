"""A validated contract-E step staged on a device in a padded shape, with the
sync-free checker for that shape kept between calls.

Built per call, an ``ExactMicrobatchCheckTorch`` (or ``ExactConflictsTorch``)
costs some twenty small host-to-device copies of its constants and every
input travels on its own: on CUDA that is most of a fuzz example's time. Here
a step is padded up to a *bucket* (each size rounded up to a power of two
from a floor): requests to ``rows`` (padded requests have ``c = q = 0``: they
read and write nothing), each group's columns to ``widths[g]`` (padded
columns hold the null block 0, never written or read), block ids to
``num_blocks`` and tokens to ``num_tokens`` (tokens past ``sum(q)`` are
capacity, never the step's). The answer of either checker is the same on
the padded step as on the step itself: padding adds no reader, no writer and
no written slot. The block sizes are part of the bucket as they are.

Per bucket, one checker and one int64 staging buffer on the device; a call
fills a host copy of that buffer and sends it in one copy. Fuzzed steps fall
into a few hundred buckets (the block sizes vary most), so the least
recently used buckets past ``capacity`` are dropped.

The bindings at the end are what contract E's records register: ``torch``
(:func:`decision`, :func:`conflicts`: on CUDA the staged checker, eager) and
``torch.cudagraph`` (:func:`decision_graph`, :func:`conflicts_graph`: the
bucket's checker replayed from a CUDA graph, ``impl._cuda_graph.CapturedStep``,
captured on the staging buffer at a bucket's second step; CUDA only).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from batchfuzz.impl import allow_microbatching_torch, find_conflicts_torch
from batchfuzz.impl._cuda_graph import CapturedStep
from batchfuzz.impl.allow_microbatching_torch import ExactMicrobatchCheckTorch
from batchfuzz.impl.find_conflicts_torch import ExactConflictsTorch
from batchfuzz.reference._args import check_int
from batchfuzz.reference._step import Step, check_step

# Floors of the buckets: the fuzzed steps' sizes (up to 8 requests, 128 columns, a few hundred block ids and
# ~100 tokens) fall into a few buckets each; the device work at these sizes is a few microseconds whatever the bucket.
MIN_ROWS, MIN_WIDTH, MIN_BLOCKS, MIN_TOKENS = 8, 16, 64, 64
DEFAULT_CAPACITY = 256


def bucket(size: int, floor: int) -> int:
    """The smallest power of two times ``floor`` that is ``>= size``."""
    out = floor
    while out < size:
        out *= 2
    return out


@dataclass(frozen=True)
class Bucket:
    """The padded shape of a step: what a checker is built for."""

    block_sizes: tuple[int, ...]
    rows: int
    widths: tuple[int, ...]
    num_blocks: int
    num_tokens: int
    max_pairs: int = 0  # the conflict set's capacity (ExactConflictsTorch); 0 for the decision

    @classmethod
    def of(cls, step: Step, max_pairs: int = 0) -> Bucket:
        top = max((int(t.max(initial=0)) for t in step.block_tables), default=0)
        return cls(tuple(step.block_sizes), bucket(step.num_reqs, MIN_ROWS),
                   tuple(bucket(int(t.shape[1]), MIN_WIDTH) for t in step.block_tables),
                   bucket(top + 1, MIN_BLOCKS), bucket(int(step.num_scheduled_tokens.sum()), MIN_TOKENS), max_pairs)


class Staged:
    """One bucket on one device: its checker (``make(bucket)``), the staging
    buffer and its views, which :meth:`stage` fills with a step."""

    def __init__(self, key: Bucket, checker: Any, device: torch.device) -> None:
        self.bucket, self.checker = key, checker
        r, widths = key.rows, key.widths
        self._host = np.zeros(2 * r + r * sum(widths), dtype=np.int64)
        self._device = torch.zeros(self._host.shape[0], dtype=torch.int64, device=device)
        self._bounds = np.cumsum([0, r, r, *(r * w for w in widths)]).tolist()
        views = [self._device[a:b] for a, b in zip(self._bounds[:-1], self._bounds[1:], strict=True)]
        self.num_computed_tokens, self.num_scheduled_tokens = views[0], views[1]
        self.block_tables = [v.view(r, w) for v, w in zip(views[2:], widths, strict=True)]

    @property
    def args(self) -> tuple[int, torch.Tensor, torch.Tensor, list[torch.Tensor], int]:
        """The checker's arguments for the staged step: ``(rows, c, q, tables, num_tokens)``."""
        return (self.bucket.rows, self.num_computed_tokens, self.num_scheduled_tokens, self.block_tables,
                self.bucket.num_tokens)

    def stage(self, step: Step) -> None:
        """Write ``step``, padded, into the device buffer (one copy)."""
        n, host, b = step.num_reqs, self._host, self._bounds
        host.fill(0)
        host[b[0]:b[0] + n] = step.num_computed_tokens
        host[b[1]:b[1] + n] = step.num_scheduled_tokens
        for g, (t, w) in enumerate(zip(step.block_tables, self.bucket.widths, strict=True)):
            host[b[2 + g]:b[3 + g]].reshape(self.bucket.rows, w)[:n, :t.shape[1]] = t
        self._device.copy_(torch.from_numpy(host))


class ResidentSteps:
    """``ResidentSteps(make, device)``; ``steps.stage(step)`` returns the
    :class:`Staged` bucket of a validated step with the step written into it,
    building its checker with ``make(bucket, device)`` the first time.
    Nothing touches the device before the first ``stage`` (binding an
    implementation on a machine without CUDA must not fail)."""

    def __init__(self, make: Callable[[Bucket, torch.device], Any], device: str | torch.device,
                 capacity: int = DEFAULT_CAPACITY) -> None:
        self.make = make
        self.device = torch.device(device)
        self.capacity = check_int("capacity", capacity, minimum=1)
        self._staged: OrderedDict[Bucket, Staged] = OrderedDict()

    def stage(self, step: Step, key: Bucket | None = None) -> Staged:
        key = key or Bucket.of(step)
        staged = self._staged.get(key)
        if staged is None:
            if self.device.type == "cuda" and self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())  # as tensors report it
            staged = self._staged[key] = Staged(key, self.make(key, self.device), self.device)
            while len(self._staged) > self.capacity:
                self._staged.popitem(last=False)
        else:
            self._staged.move_to_end(key)
        staged.stage(step)
        return staged

    def __len__(self) -> int:
        return len(self._staged)


def checker_args(key: Bucket) -> tuple[int, Sequence[int], Sequence[int], int, int]:
    """The constructor arguments of ``ExactMicrobatchCheckTorch`` for a bucket (device and capacity aside)."""
    return key.rows, list(key.widths), list(key.block_sizes), key.num_blocks, key.num_tokens


# ---------------------------------------------------------------- contract E's torch implementations, bound

# The conflict set's first capacity: small, so that the retry with room for every pair is exercised.
FIRST_PAIRS = 64


def bind_decision(device: str = "cuda", graph: bool = True) -> Callable[..., bool]:
    """Contract E2's canonical signature (numpy in, bool out) on ``device``:
    host validation, the step staged in its bucket, the decision of
    ``ExactMicrobatchCheckTorch`` replayed from a CUDA graph (``graph=False``:
    run eagerly), one value read back."""
    def make(key: Bucket, dev: torch.device) -> Any:
        check = ExactMicrobatchCheckTorch(*checker_args(key), dev)
        return CapturedStep(check, eager_calls=1, warmup=1, resident=True) if graph else check

    steps = ResidentSteps(make, device)

    def allow_microbatching(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any,
                            block_sizes: Any) -> bool:
        staged = steps.stage(check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes))
        return bool(staged.checker(*staged.args))

    allow_microbatching.steps = steps  # type: ignore[attr-defined]
    return allow_microbatching


def bind_conflicts(device: str = "cuda", graph: bool = True) -> Callable[..., np.ndarray]:
    """Contract E1's canonical signature (numpy in, sorted unique ``(K, 4)``
    int64 rows out) on ``device``: as :func:`bind_decision`, with the conflict
    set of ``ExactConflictsTorch`` packed into one tensor (pairs, count,
    rows) so that one copy brings it back; when the pairs overflow the
    bucket's capacity, once more in a bucket with room for all of them."""
    def make(key: Bucket, dev: torch.device) -> Any:
        finder = ExactConflictsTorch(*checker_args(key), dev, key.max_pairs)

        def packed(*args: Any) -> torch.Tensor:
            found = finder.find_conflicts(*args)
            return torch.cat([found.num_pairs.reshape(1), found.num_conflicts.reshape(1), found.rows.reshape(-1)])

        return CapturedStep(packed, eager_calls=1, warmup=1, resident=True) if graph else packed

    steps = ResidentSteps(make, device)

    def find_conflicts(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any,
                       block_sizes: Any) -> np.ndarray:
        step = check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)
        key = Bucket.of(step, FIRST_PAIRS)
        while True:
            staged = steps.stage(step, key)
            out = staged.checker(*staged.args).cpu().numpy()
            pairs, count = int(out[0]), int(out[1])
            if pairs <= key.max_pairs:
                return out[2:].reshape(-1, 4)[:count].copy()
            key = dataclasses.replace(key, max_pairs=bucket(pairs, FIRST_PAIRS))

    find_conflicts.steps = steps  # type: ignore[attr-defined]
    return find_conflicts


def decision(device: str) -> Callable[..., bool]:
    """Implementation ``torch`` of contract E2: on the CPU the per-step
    binding of ``allow_microbatching_torch``; on CUDA the staged one, eager."""
    return allow_microbatching_torch.bind(device) if torch.device(device).type == "cpu" else bind_decision(device, graph=False)


def conflicts(device: str) -> Callable[..., np.ndarray]:
    """Implementation ``torch`` of contract E1: as :func:`decision`."""
    return find_conflicts_torch.bind(device) if torch.device(device).type == "cpu" else bind_conflicts(device, graph=False)


def decision_graph(device: str) -> Callable[..., bool]:
    """Implementation ``torch.cudagraph`` of contract E2 (CUDA only)."""
    return bind_decision(device, graph=True)


def conflicts_graph(device: str) -> Callable[..., np.ndarray]:
    """Implementation ``torch.cudagraph`` of contract E1 (CUDA only)."""
    return bind_conflicts(device, graph=True)
