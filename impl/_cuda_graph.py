"""Replay a sync-free microbatch check from a CUDA graph.

The torch decision and conflict set of contract E
(``allow_microbatching_torch.ExactMicrobatchCheckTorch``,
``find_conflicts_torch.ExactConflictsTorch``) read nothing on the host, so
every shape they create follows from host ints and the input shapes: one
capture per ``(num_reqs, num_tokens, input shapes and dtypes)`` serves every
step of that shape. An engine captures its model the same way, per padded
batch size. What a replay saves is the launch of some fifty small kernels,
which dominate a step of 256 requests on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

StepFunction = Callable[[int, torch.Tensor, torch.Tensor, Sequence[torch.Tensor], int], Any]


class CapturedStep:
    """``CapturedStep(fn)(num_reqs, c, q, tables, num_tokens)``: the result of
    ``fn`` with those arguments, computed by replaying a CUDA graph.

    ``fn`` must not synchronise with the host (a capture fails if it does).
    On the first call with a new shape it is run twice on a side stream (the
    warm-up torch asks for), then captured with static copies of the inputs;
    every call copies the inputs into those copies (device to device) and
    replays. The result is the graph's own output: the next call of the same
    shape overwrites it, so read or clone it before then.
    """

    def __init__(self, fn: StepFunction) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        self.fn = fn
        self._graphs: dict[tuple[Any, ...], tuple[torch.cuda.CUDAGraph, list[torch.Tensor], Any]] = {}

    def __call__(self, num_reqs: int, num_computed_tokens: torch.Tensor, num_scheduled_tokens: torch.Tensor,
                 block_tables: Sequence[torch.Tensor], num_tokens: int) -> Any:
        inputs = [num_computed_tokens, num_scheduled_tokens, *block_tables]
        for i, t in enumerate(inputs):
            if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
                raise ValueError(f"input {i} must be a CUDA tensor, got {type(t).__name__} "
                                 f"{getattr(t, 'device', '')}")
        key = (num_reqs, num_tokens, len(block_tables), *((tuple(t.shape), t.dtype, t.device) for t in inputs))
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._graphs[key] = self._capture(num_reqs, inputs, len(block_tables), num_tokens)
        graph, static, out = entry
        for dst, src in zip(static, inputs, strict=True):
            dst.copy_(src)
        graph.replay()
        return out

    def _capture(self, num_reqs: int, inputs: list[torch.Tensor], groups: int,
                 num_tokens: int) -> tuple[torch.cuda.CUDAGraph, list[torch.Tensor], Any]:
        static = [t.clone() for t in inputs]

        def run() -> Any:
            return self.fn(num_reqs, static[0], static[1], static[2:2 + groups], num_tokens)

        side = torch.cuda.Stream(device=static[0].device)
        side.wait_stream(torch.cuda.current_stream(static[0].device))
        with torch.cuda.stream(side):
            for _ in range(2):
                run()
        torch.cuda.current_stream(static[0].device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run()
        return graph, static, out
