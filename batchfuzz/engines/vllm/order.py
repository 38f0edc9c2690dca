"""vLLM's batch order and classification (contract G)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from batchfuzz.bind import Stub
from batchfuzz.engines.vllm._release import ATTN_UTILS, V1_RUNNER, _Release
from batchfuzz.impl import batch_order_numpy

# ---------------------------------------------------------------- batch order and classification (G)
#
# Contract G's target is a step's whole attention preparation: the model runner's
# threshold, the reorder, each group's two splits. Each binding runs one of
# the engine's four functions in that pipeline and our implementation
# (``batchfuzz.impl.batch_order_numpy``) for the other three, so a failure
# names the function.


def _bind_reorder(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(ATTN_UTILS).piece("reorder_batch_to_split_decodes_and_prefills")
    run = loader.load(piece)

    def reorder(batch: batch_order_numpy.RowBatch, scheduled: dict[str, int], threshold: int) -> None:
        run(batch, Stub("SchedulerOutput", num_scheduled_tokens=scheduled), decode_threshold=threshold)

    return batch_order_numpy.pipeline(reorder=reorder), (
        f"{piece.label} on a stand-in InputBatch (req_ids, num_computed_tokens_cpu, num_prompt_tokens; swap_states moves "
        "every per-request array); threshold, splits: batchfuzz's own")


def _attention_metadata(q: np.ndarray, c: np.ndarray, p: np.ndarray) -> Stub:
    """The CommonAttentionMetadata fields the splits read, as the model runner fills
    them: host query_start_loc, seq_lens (c + q) as the upper bound, and
    is_prefilling = c < p."""
    qsl = torch.zeros(q.size + 1, dtype=torch.int32)
    qsl[1:] = torch.from_numpy(np.cumsum(q).astype(np.int32))
    return Stub("CommonAttentionMetadata", max_query_len=int(q.max()), num_reqs=int(q.size), num_actual_tokens=int(q.sum()),
                query_start_loc_cpu=qsl, seq_lens_cpu_upper_bound=torch.from_numpy((c + q).astype(np.int32)),
                is_prefilling=torch.from_numpy(c < p))


def _bind_split(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(ATTN_UTILS).piece("split_decodes_and_prefills")
    run = loader.load(piece)

    def split(q: np.ndarray, c: np.ndarray, p: np.ndarray, b: int, require_uniform: bool, treat_short: bool) -> Any:
        return run(_attention_metadata(q, c, p), decode_threshold=b, require_uniform=require_uniform,
                   treat_short_extends_as_decodes=treat_short)

    return batch_order_numpy.pipeline(split=split), (
        f"{piece.label} with each group's own threshold (as its builder calls it) on a stand-in CommonAttentionMetadata; "
        "threshold, reorder, extends split: batchfuzz's own")


def _bind_extends(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(ATTN_UTILS).piece("split_decodes_prefills_and_extends")
    run = loader.load(piece)

    def extends(q: np.ndarray, c: np.ndarray, p: np.ndarray, b: int) -> Any:
        return run(_attention_metadata(q, c, p), decode_threshold=b)

    return batch_order_numpy.pipeline(extends=extends), (
        f"{piece.label} with each group's own threshold on a stand-in CommonAttentionMetadata; threshold, reorder, "
        "decode/prefill split: batchfuzz's own")


def _bind_reorder_threshold(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    f = loader.file(V1_RUNNER)
    piece = f.piece("GPUModelRunner.calculate_reorder_batch_threshold")
    run = loader.load(piece)
    iterate = loader.load(f.piece("GPUModelRunner._attn_group_iterator"))

    def aggregate(thresholds: list[int | None], num_speculative_tokens: int) -> int | None:
        def group(b: int | None) -> Stub:
            builder = Stub("AttentionMetadataBuilder", reorder_batch_threshold=b)
            return Stub("AttentionGroup", methods={"get_metadata_builder": lambda self, *args, **kwargs: builder})

        # One attention group per KV-cache group.
        model_runner = Stub("GPUModelRunner", attn_groups=[[group(b)] for b in thresholds], reorder_batch_threshold=None,
                      methods={"_attn_group_iterator": iterate})
        run(model_runner)
        return model_runner.reorder_batch_threshold

    return batch_order_numpy.pipeline(aggregate=aggregate), (
        f"{piece.label} over one attention group per KV-cache group, each builder's reorder_batch_threshold the group's "
        "threshold; reorder and splits: batchfuzz's own")
