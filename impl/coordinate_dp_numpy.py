"""numpy implementation of contract I (data-parallel coordination): the
exchanged table as one (6, R) array, reduced column-wise, as an all-reduce
leaves it on every rank."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference.coordinate_dp import FULL, NONE, RankDecision, check_coordinate_args


def coordinate_dp(num_tokens: Any, num_tokens_padded: Any, allow_microbatching: Any, cudagraph_mode: Any,
                  uniform_decode_len: Any, num_reqs: Any, num_ubatches: Any, ubatch_thresholds: Any,
                  capture_sizes: Any, ubatch_capture_sizes: Any) -> list[RankDecision]:
    """Contract I; one decision per rank."""
    step = check_coordinate_args(num_tokens, num_tokens_padded, allow_microbatching, cudagraph_mode, uniform_decode_len,
                                 num_reqs, num_ubatches, ubatch_thresholds, capture_sizes, ubatch_capture_sizes)
    table = np.array([step.num_tokens, step.num_tokens_padded, step.allow_microbatching, step.cudagraph_mode,
                      step.uniform_decode_len, step.num_reqs], dtype=np.int64)
    tokens, padded, votes, modes, uniform = table[0], table[1], table[2], table[3], table[4]
    n, r = step.num_ubatches, table.shape[1]
    fewest, most, most_padded = int(tokens.min()), int(tokens.max()), int(padded.max())
    mode = int(modes.min())
    thresholds = np.where(uniform > 0, step.decode_threshold, step.prefill_threshold)
    sizes = step.ubatch_capture_sizes
    if sizes is None:
        vote = bool(np.all((votes == 1) & (tokens >= thresholds)))
    else:
        decode = bool(uniform[0] > 0 and np.all(uniform == uniform[0]))
        vote = bool(np.all(votes == 1)) and fewest >= (step.decode_threshold if decode else step.prefill_threshold)
    split = vote and (most_padded // n) * (n - 1) < fewest
    if split:
        run = most_padded
        if sizes is not None:
            arr = np.asarray(sizes, dtype=np.int64)
            i = int(np.searchsorted(arr, most_padded, side="left"))
            graph = int(arr[i]) if i < arr.size else None
            if mode == FULL and graph is not None and (graph // n) * (n - 1) < fewest:
                run = graph
            else:
                run, mode = most, NONE
        return [RankDecision(True, (run,) * r, mode, run)] * r
    if mode != NONE:
        return [RankDecision(False, (most_padded,) * r, mode, most_padded)] * r
    own = tokens if sizes is not None else padded
    across = tuple(int(v) for v in own)
    return [RankDecision(False, across, NONE, across[k]) for k in range(r)]
