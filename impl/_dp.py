"""Contract I's arguments cut into what each data-parallel rank brings, and
a rank function made a canonical-signature target (its ranks run through
``batchfuzz.distributed``, in real processes or in this process).

A rank function of contract I is ``fn(rank, world_size, all_reduce, step,
config)``: ``step`` is this rank's ``(num_tokens, num_tokens_padded,
allow_microbatching, cudagraph_mode, uniform_decode_len, num_reqs)`` as
Python ints, ``config`` the shared ``(num_ubatches, ubatch_thresholds,
capture_sizes, ubatch_capture_sizes)``; it returns this rank's
``RankDecision``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from batchfuzz import distributed
from batchfuzz.reference.coordinate_dp import RankDecision, check_coordinate_args

ARGUMENTS = ("num_tokens", "num_tokens_padded", "allow_microbatching", "cudagraph_mode", "uniform_decode_len", "num_reqs",
             "num_ubatches", "ubatch_thresholds", "capture_sizes", "ubatch_capture_sizes")
RankStep = tuple[int, int, int, int, int, int]
Config = tuple[int, tuple[int, int], tuple[int, ...], tuple[int, ...] | None]


def per_rank_args(*args: Any) -> list[tuple[RankStep, Config]]:
    """The canonical arguments (checked as the oracle checks them) as one
    ``(step, config)`` per rank."""
    s = check_coordinate_args(*args)
    config: Config = (s.num_ubatches, (s.decode_threshold, s.prefill_threshold), tuple(s.capture_sizes),
                      None if s.ubatch_capture_sizes is None else tuple(s.ubatch_capture_sizes))
    return [((s.num_tokens[r], s.num_tokens_padded[r], int(s.allow_microbatching[r]), s.cudagraph_mode[r],
              s.uniform_decode_len[r], s.num_reqs[r]), config) for r in range(s.num_ranks)]


def ranks_target(ref: str, mode: str = "in_process", *, timeout_s: float = 20.0) -> Callable[..., list[RankDecision]]:
    """The canonical-signature target that runs the rank function ``ref``
    (``batchfuzz.distributed.rank_function``) on every rank, in ``mode``
    (``"in_process"`` or ``"processes"``), and returns every rank's answer."""
    if mode not in distributed.MODES:
        raise ValueError(f"mode must be one of {distributed.MODES}, got {mode!r}")

    def coordinate_dp(num_tokens: Any, num_tokens_padded: Any, allow_microbatching: Any, cudagraph_mode: Any,
                      uniform_decode_len: Any, num_reqs: Any, num_ubatches: Any, ubatch_thresholds: Any,
                      capture_sizes: Any, ubatch_capture_sizes: Any) -> list[RankDecision]:
        ranks = per_rank_args(num_tokens, num_tokens_padded, allow_microbatching, cudagraph_mode, uniform_decode_len,
                              num_reqs, num_ubatches, ubatch_thresholds, capture_sizes, ubatch_capture_sizes)
        return distributed.run_ranks(ref, ranks, mode=mode, timeout_s=timeout_s)

    coordinate_dp.__qualname__ = f"ranks[{ref}, {mode}]"
    return coordinate_dp
