"""torch implementation of contract I as the engine is built: a rank
function (``batchfuzz.impl._dp``) that writes its own column of a
``(6, R)`` int32 table, all-reduces it, and decides from the reduced table
alone. :data:`coordinate_dp` runs its ranks in this process (the all-reduce a
sum over the ranks' tables); ``batchfuzz.distributed`` runs the same function
as real processes (``ranks_target(RANK_FUNCTION, "processes")``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from batchfuzz.impl._dp import Config, RankStep, ranks_target
from batchfuzz.reference.coordinate_dp import FULL, NONE, RankDecision

RANK_FUNCTION = "batchfuzz.impl.coordinate_dp_torch:coordinate_rank"


def coordinate_rank(rank: int, world: int, all_reduce: Callable[[torch.Tensor], None], step: RankStep,
                    config: Config) -> RankDecision:
    """One rank's decision (contract I)."""
    n, (decode_thr, prefill_thr), _sizes, ubatch_sizes = config
    table = torch.zeros(6, world, dtype=torch.int32, device="cpu")
    table[:, rank] = torch.tensor(step, dtype=torch.int32)
    all_reduce(table)
    t = table.cpu()
    tokens, padded, votes, modes, uniform = t[0], t[1], t[2], t[3], t[4]
    fewest, most, most_padded = int(tokens.min()), int(tokens.max()), int(padded.max())
    mode = int(modes.min())
    if ubatch_sizes is None:
        thresholds = torch.where(uniform > 0, decode_thr, prefill_thr)
        vote = bool(torch.all((votes == 1) & (tokens >= thresholds)))
    else:
        decode = bool(uniform[0] > 0) and bool(torch.all(uniform == uniform[0]))
        vote = bool(torch.all(votes == 1)) and fewest >= (decode_thr if decode else prefill_thr)
    split = vote and (most_padded // n) * (n - 1) < fewest
    if split:
        run = most_padded
        if ubatch_sizes is not None:
            graph = next((s for s in ubatch_sizes if s >= most_padded), None)
            if mode == FULL and graph is not None and (graph // n) * (n - 1) < fewest:
                run = graph
            else:
                run, mode = most, NONE
        return RankDecision(True, (run,) * world, mode, run)
    if mode != NONE:
        return RankDecision(False, (most_padded,) * world, mode, most_padded)
    own = (tokens if ubatch_sizes is not None else padded).tolist()
    return RankDecision(False, tuple(own), NONE, own[rank])


# The canonical-signature form: every rank in this process.
coordinate_dp: Callable[..., Any] = ranks_target(RANK_FUNCTION, "in_process")
