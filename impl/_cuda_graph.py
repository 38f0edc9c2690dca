"""Replay a sync-free microbatch check from a CUDA graph.

The torch decision and conflict set of contract E
(``allow_microbatching_torch.ExactMicrobatchCheckTorch``,
``find_conflicts_torch.ExactConflictsTorch``) read nothing on the host, so
every shape they create follows from host ints and the input shapes: one
capture per ``(num_reqs, num_tokens, input shapes and dtypes)`` serves every
step of that shape. An engine captures its model the same way, per padded
batch size. What a replay saves is the launch of some fifty small kernels,
which dominate a step of 256 requests on a GPU.

The same replay is registered as contract E's implementations
``torch.cudagraph`` (CUDA only) by ``batchfuzz.impl._resident``, which stages
each step in a padded bucket, so that one graph per bucket serves every step
that falls into it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from batchfuzz.reference._args import check_int

StepFunction = Callable[[int, torch.Tensor, torch.Tensor, Sequence[torch.Tensor], int], Any]


class CapturedStep:
    """``CapturedStep(fn)(num_reqs, c, q, tables, num_tokens)``: the result of
    ``fn`` with those arguments, computed by replaying a CUDA graph.

    ``fn`` must not synchronise with the host (a capture fails if it does).
    On the first call with a new shape it is run twice on a side stream (the
    warm-up torch asks for), then captured with static copies of the inputs;
    every call copies the inputs into those copies (device to device) and
    replays. The result is the graph's own output: the next call of the same
    shape overwrites it, so read or clone it before then. With
    ``eager_calls=k`` the first ``k`` calls of a shape run ``fn`` directly
    (a shape seen once is not worth a capture); ``warmup`` sets the side-stream
    runs. With ``resident=True`` the caller promises to pass the same tensors
    (a staging buffer it fills) on every call of a shape: the graph is
    captured on them and reads them in place, with no copies (tensors at
    other addresses get a graph of their own).
    """

    def __init__(self, fn: StepFunction, eager_calls: int = 0, warmup: int = 2, resident: bool = False) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        self.fn = fn
        self.eager_calls = check_int("eager_calls", eager_calls, minimum=0)
        self.warmup = check_int("warmup", warmup, minimum=0)
        self.resident = bool(resident)
        self._graphs: dict[tuple[Any, ...], tuple[torch.cuda.CUDAGraph, list[torch.Tensor], Any]] = {}
        self._seen: dict[tuple[Any, ...], int] = {}
        self.captures = 0  # graphs captured so far

    def __call__(self, num_reqs: int, num_computed_tokens: torch.Tensor, num_scheduled_tokens: torch.Tensor,
                 block_tables: Sequence[torch.Tensor], num_tokens: int) -> Any:
        inputs = [num_computed_tokens, num_scheduled_tokens, *block_tables]
        for i, t in enumerate(inputs):
            if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
                raise ValueError(f"input {i} must be a CUDA tensor, got {type(t).__name__} "
                                 f"{getattr(t, 'device', '')}")
        key = (num_reqs, num_tokens, len(block_tables), *((tuple(t.shape), t.dtype, t.device) for t in inputs))
        if self.resident:
            key += tuple(t.data_ptr() for t in inputs)
        entry = self._graphs.get(key)
        if entry is None:
            seen = self._seen[key] = self._seen.get(key, 0) + 1
            if seen <= self.eager_calls:
                return self.fn(num_reqs, num_computed_tokens, num_scheduled_tokens, block_tables, num_tokens)
            entry = self._graphs[key] = self._capture(num_reqs, inputs, len(block_tables), num_tokens)
            self.captures += 1
        graph, static, out = entry
        if not self.resident:
            for dst, src in zip(static, inputs, strict=True):
                dst.copy_(src)
        graph.replay()
        return out

    def _capture(self, num_reqs: int, inputs: list[torch.Tensor], groups: int,
                 num_tokens: int) -> tuple[torch.cuda.CUDAGraph, list[torch.Tensor], Any]:
        static = inputs if self.resident else [t.clone() for t in inputs]

        def run() -> Any:
            return self.fn(num_reqs, static[0], static[1], static[2:2 + groups], num_tokens)

        side = torch.cuda.Stream(device=static[0].device)
        side.wait_stream(torch.cuda.current_stream(static[0].device))
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                run()
        torch.cuda.current_stream(static[0].device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run()
        return graph, static, out
