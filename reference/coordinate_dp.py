"""Oracle for contract I: data-parallel coordination of a step (docs/contracts.md, contract I).

Every data-parallel rank brings its own step (real and padded token counts,
whether it allows microbatching, its CUDA-graph mode, its uniform-decode
length, its request count); the ranks exchange them (an all-reduce) and each
computes, from the same exchanged table, the same decision: whether every
rank splits its step into ``num_ubatches`` microbatches, the token count
every rank runs, and the graph mode and token count of the descriptor it
runs with.

``coordinate_dp(...)`` returns one decision per rank, each a
``RankDecision``. Written as plain loops over ranks, one line per sentence of
the contract; the rank loop at the end computes each rank's decision from the
shared table alone, as every rank does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchfuzz.reference._args import check_count_array, check_int

NONE, PIECEWISE, FULL = 0, 1, 2
MODES = (NONE, PIECEWISE, FULL)
MAX_RANKS = 8


@dataclass(frozen=True)
class RankDecision:
    """What one rank decided: ``split`` (it runs ``num_ubatches``
    microbatches), ``num_tokens_across_dp`` (the token count of every rank,
    as this rank sees it), ``cg_mode`` (the graph mode it runs with: 0 none,
    1 piecewise, 2 full) and ``num_tokens`` (its descriptor's token count:
    what it runs)."""

    split: bool
    num_tokens_across_dp: tuple[int, ...]
    cg_mode: int
    num_tokens: int


@dataclass(frozen=True)
class Step:
    """The checked arguments of one call (one entry per rank in the lists)."""

    num_tokens: list[int]
    num_tokens_padded: list[int]
    allow_microbatching: list[bool]
    cudagraph_mode: list[int]
    uniform_decode_len: list[int]
    num_reqs: list[int]
    num_ubatches: int
    decode_threshold: int
    prefill_threshold: int
    capture_sizes: list[int]
    ubatch_capture_sizes: list[int] | None

    @property
    def num_ranks(self) -> int:
        return len(self.num_tokens)


def _sizes(name: str, value: Any) -> list[int]:
    sizes = [int(v) for v in check_count_array(name, value, minimum=1).tolist()]
    if sizes != sorted(set(sizes)):
        raise ValueError(f"{name} must be strictly increasing, got {sizes}")
    return sizes


def check_coordinate_args(num_tokens: Any, num_tokens_padded: Any, allow_microbatching: Any, cudagraph_mode: Any,
                          uniform_decode_len: Any, num_reqs: Any, num_ubatches: Any, ubatch_thresholds: Any,
                          capture_sizes: Any, ubatch_capture_sizes: Any) -> Step:
    """Preconditions of contract I; returns the arguments as a :class:`Step`.

    ``2 <= R <= 8`` ranks, every per-rank array of length ``R``; real counts
    ``>= 1`` (an idle rank runs a one-token dummy step), padded counts at least
    the real ones; votes 0 or 1; modes 0, 1 or 2; ``num_ubatches >= 2``;
    ``ubatch_thresholds = (decode, prefill)``, each ``>= num_ubatches``;
    capture sizes strictly increasing and ``>= 1``; ``ubatch_capture_sizes``
    None or such a list.
    """
    tokens = [int(v) for v in check_count_array("num_tokens", num_tokens, minimum=1).tolist()]
    r = len(tokens)
    if not 2 <= r <= MAX_RANKS:
        raise ValueError(f"num_tokens must have one entry per rank, 2 <= ranks <= {MAX_RANKS}, got {r} ranks")

    def per_rank(name: str, value: Any, minimum: int = 0) -> list[int]:
        arr = [int(v) for v in check_count_array(name, value, minimum=minimum).tolist()]
        if len(arr) != r:
            raise ValueError(f"{name} must have one entry per rank ({r}), got {len(arr)}")
        return arr

    padded = per_rank("num_tokens_padded", num_tokens_padded, 1)
    for k, (a, b) in enumerate(zip(tokens, padded, strict=True)):
        if b < a:
            raise ValueError(f"num_tokens_padded[{k}] must be >= num_tokens[{k}] = {a}, got {b}")
    votes = per_rank("allow_microbatching", allow_microbatching)
    for k, v in enumerate(votes):
        if v > 1:
            raise ValueError(f"allow_microbatching[{k}] must be 0 or 1, got {v}")
    modes = per_rank("cudagraph_mode", cudagraph_mode)
    for k, m in enumerate(modes):
        if m not in MODES:
            raise ValueError(f"cudagraph_mode[{k}] must be 0 (none), 1 (piecewise) or 2 (full), got {m}")
    uniform = per_rank("uniform_decode_len", uniform_decode_len)
    reqs = per_rank("num_reqs", num_reqs, 1)
    n = check_int("num_ubatches", num_ubatches, minimum=2)
    if not isinstance(ubatch_thresholds, (tuple, list)) or len(ubatch_thresholds) != 2:
        raise TypeError(f"ubatch_thresholds must be a pair (decode, prefill), got {ubatch_thresholds!r}")
    decode = check_int("ubatch_thresholds[0]", ubatch_thresholds[0], minimum=n)
    prefill = check_int("ubatch_thresholds[1]", ubatch_thresholds[1], minimum=n)
    sizes = _sizes("capture_sizes", capture_sizes)
    ubatch_sizes = None if ubatch_capture_sizes is None else _sizes("ubatch_capture_sizes", ubatch_capture_sizes)
    return Step(tokens, padded, [bool(v) for v in votes], modes, uniform, reqs, n, decode, prefill, sizes, ubatch_sizes)


def passes_threshold(step: Step, num_tokens: int, uniform_decode: bool) -> bool:
    """A step of ``num_tokens`` tokens is large enough to microbatch: at least
    the decode threshold for a uniform decode, the prefill threshold otherwise."""
    return num_tokens >= (step.decode_threshold if uniform_decode else step.prefill_threshold)


def last_microbatch_empty(num_real_tokens: int, num_tokens_run: int, num_ubatches: int) -> bool:
    """Cut at ``k * (T // n)``, the last microbatch of a rank with ``num_real_tokens``
    real tokens run at ``T`` tokens starts at ``(n - 1) * (T // n)``: it holds no
    real token (and, the cuts being in order, it is the only one that can be
    empty) when that is at least ``num_real_tokens``."""
    return (num_tokens_run // num_ubatches) * (num_ubatches - 1) >= num_real_tokens


def smallest_fitting(sizes: list[int], num_tokens: int) -> int | None:
    """The smallest size ``>= num_tokens``, or None."""
    for s in sizes:
        if s >= num_tokens:
            return s
    return None


def coordinate_dp(num_tokens: Any, num_tokens_padded: Any, allow_microbatching: Any, cudagraph_mode: Any,
                  uniform_decode_len: Any, num_reqs: Any, num_ubatches: Any, ubatch_thresholds: Any,
                  capture_sizes: Any, ubatch_capture_sizes: Any) -> list[RankDecision]:
    """Contract I: one :class:`RankDecision` per rank."""
    step = check_coordinate_args(num_tokens, num_tokens_padded, allow_microbatching, cudagraph_mode, uniform_decode_len,
                                 num_reqs, num_ubatches, ubatch_thresholds, capture_sizes, ubatch_capture_sizes)
    n = step.num_ubatches
    dispatching = step.ubatch_capture_sizes is not None
    # The exchanged table: every rank's real count, padded count and mode.
    fewest_real = min(step.num_tokens)
    most_real = max(step.num_tokens)
    most_padded = max(step.num_tokens_padded)
    # The agreed mode is the smallest mode of any rank.
    agreed_mode = FULL
    for m in step.cudagraph_mode:
        agreed_mode = min(agreed_mode, m)
    # The votes. A coordinator that leaves graphs to its caller (v1) holds every
    # rank to its own threshold, by its own kind of step; one that dispatches the
    # microbatched graph itself holds the rank with the fewest tokens to the
    # threshold, as a uniform decode only when every rank decodes the same length.
    all_vote = True
    if dispatching:
        for allow in step.allow_microbatching:
            all_vote = all_vote and allow
        same_decode = step.uniform_decode_len[0] > 0
        for u in step.uniform_decode_len:
            same_decode = same_decode and u == step.uniform_decode_len[0]
        all_vote = all_vote and passes_threshold(step, fewest_real, same_decode)
    else:
        for allow, tokens, u in zip(step.allow_microbatching, step.num_tokens, step.uniform_decode_len, strict=True):
            all_vote = all_vote and allow and passes_threshold(step, tokens, u > 0)
    # Split only if every rank votes yes and, padded to the largest padded count,
    # no rank's last microbatch would be without a real token.
    split = all_vote and not last_microbatch_empty(fewest_real, most_padded, n)
    # Padding: when split or when the agreed mode is not NONE, every rank runs
    # the largest padded count.
    if split:
        run = most_padded
        mode = agreed_mode
        if dispatching:
            # The coordinator picks the smallest microbatched FULL graph that fits,
            # and only when every rank can run FULL and no microbatch of any rank
            # is without a real token at the graph's size; otherwise eager, at the
            # largest real count.
            graph = smallest_fitting(step.ubatch_capture_sizes or [], most_padded)
            if agreed_mode == FULL and graph is not None and not last_microbatch_empty(fewest_real, graph, n):
                run, mode = graph, FULL
            else:
                run, mode = most_real, NONE
        across = tuple(run for _ in range(step.num_ranks))
        return [RankDecision(True, across, mode, run) for _ in range(step.num_ranks)]
    if agreed_mode != NONE:
        across = tuple(most_padded for _ in range(step.num_ranks))
        return [RankDecision(False, across, agreed_mode, most_padded) for _ in range(step.num_ranks)]
    # Not padded: every rank runs its own count, eagerly: its padded count, or
    # (a dispatching coordinator) its count before graph padding.
    own = step.num_tokens if dispatching else step.num_tokens_padded
    across = tuple(own)
    return [RankDecision(False, across, NONE, own[r]) for r in range(step.num_ranks)]
