"""vLLM's speculative-decoding metadata (contract H)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from batchfuzz import bind
from batchfuzz.bind import Stub
from batchfuzz.engines.vllm._release import INPUT_BATCH, V1_RUNNER, _Built, _Release
from batchfuzz.impl import spec_decode_metadata_numpy
from batchfuzz.preconditions import assumes
from batchfuzz.reference.spec_decode_metadata import SpecDecodeIndices, check_spec_args

# ---------------------------------------------------------------- speculative-decoding metadata (G)


def _spec_runner(total_tokens: int, num_reqs: int, **attrs: Any) -> Stub:
    """The GPUModelRunner parts both methods read: ``arange_np`` and the
    scratch sized as the model runner sizes them (``max(max_num_reqs + 1,
    max_num_tokens)``), the device, a CPU input_ids buffer."""
    size = max(num_reqs + 1, total_tokens)
    return Stub("GPUModelRunner", arange_np=np.arange(size, dtype=np.int64), _arange_scratch=np.empty(size, dtype=np.int64),
                device=torch.device("cpu"), **attrs)


def _bind_cumsum_and_arange(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(V1_RUNNER).piece("GPUModelRunner._get_cumsum_and_arange")
    run = loader.load(piece)

    def calc(num_draft_tokens: Any, num_scheduled_tokens: Any) -> Any:
        total = int(np.sum(np.asarray(num_scheduled_tokens, dtype=np.int64)))
        model_runner = _spec_runner(total, len(num_scheduled_tokens))

        def part(counts: np.ndarray, arange_out: np.ndarray) -> np.ndarray:
            return np.asarray(run(model_runner, counts.astype(np.int32), arange_out, cumsum_dtype=np.int32))

        return spec_decode_metadata_numpy.calc_from(part)(num_draft_tokens, num_scheduled_tokens)

    return calc, (f"{piece.label} (cumsum_dtype int32, as _calc_spec_decode_metadata calls it) on counts d + 1 and d, "
                  "self.arange_np as the model runner sizes it; the indices around it: batchfuzz's own")


def _bind_spec_decode_metadata(rel: _Release) -> tuple[Callable[..., Any], str]:
    # async_tensor_h2d (0.26.0 on) reads PIN_MEMORY, computed at import time: no pinned memory on the CPU.
    loader = rel.loader(PIN_MEMORY=False)
    f = loader.file(V1_RUNNER)
    piece = f.piece("GPUModelRunner._calc_spec_decode_metadata")
    run = loader.load(piece)
    helper = loader.load(f.piece("GPUModelRunner._get_cumsum_and_arange"))

    def spec_decode_metadata(num_draft_tokens: Any, num_scheduled_tokens: Any) -> Any:
        d_list, q_list = check_spec_args(num_draft_tokens, num_scheduled_tokens)
        d, q = np.asarray(d_list, dtype=np.int64), np.asarray(q_list, dtype=np.int64)
        total = int(q.sum())
        # Token ids = positions, so the draft token ids it gathers are the drafts' positions.
        model_runner = _spec_runner(total, int(d.size), input_ids=bind.cpu_gpu_buffer(np.arange(total, dtype=np.int32)),
                              methods={"_get_cumsum_and_arange": helper})
        m = run(model_runner, d.astype(np.int32), np.cumsum(q))
        return SpecDecodeIndices(
            *(bind.to_numpy(getattr(m, name)).tolist() for name in (
                "logits_indices", "target_logits_indices", "bonus_logits_indices", "cu_num_draft_tokens",
                "cu_num_sampled_tokens", "draft_token_ids")))

    return spec_decode_metadata, (f"{piece.label} with its _get_cumsum_and_arange, self.arange_np and scratch as the model runner "
                                  "sizes them, input_ids = positions (draft_token_ids are then the drafts' positions)")
def _interpreted_kernel(loader: bind.Loader, piece: bind.Piece) -> Any:
    """A Triton kernel cut out of the release, run by Triton's interpreter on CPU tensors (its ``@triton.jit`` is
    not applied by the loader; the interpreter takes its place). Unbindable without Triton."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError as exc:
        raise bind.Unbindable(f"{piece.label} is a Triton kernel, and Triton is not importable here: {exc}") from None
    return InterpretedFunction(loader.load(piece))


# Triton's interpreter runs the kernel's programs (one per request) one after another in Python: milliseconds each
# on an idle machine, so a step of hundreds of requests could outlast the per-call timeout, a timeout that would be
# the interpreter's, not the engine's. The binding is checked on steps of at most this many requests.
_INTERPRETED_MAX_REQS = 16


def _interpretable_step(num_draft_tokens: Any, num_scheduled_tokens: Any) -> bool:
    """A step small enough for the interpreted kernel (``_INTERPRETED_MAX_REQS``)."""
    return len(num_draft_tokens) <= _INTERPRETED_MAX_REQS


def _bind_mrv2_spec_logits(rel: _Release) -> _Built:
    try:
        import triton
        import triton.language as tl
    except ImportError as exc:
        raise bind.Unbindable(f"the new runner computes logits indices in a Triton kernel; Triton is not importable: {exc}") from None
    f = rel.loader(tl=tl, triton=triton).file(INPUT_BATCH)
    kernel_piece = f.piece("_combine_sampled_and_draft_tokens_kernel")
    kernel = _interpreted_kernel(rel.loader(tl=tl, triton=triton), kernel_piece)
    scope = rel.loader(tl=tl, triton=triton, _combine_sampled_and_draft_tokens_kernel=kernel)
    piece = scope.file(INPUT_BATCH).piece("combine_sampled_and_draft_tokens")
    combine = scope.load(piece)
    ours = spec_decode_metadata_numpy.calc_from()

    def spec_decode_metadata(num_draft_tokens: Any, num_scheduled_tokens: Any) -> Any:
        d_list, q_list = check_spec_args(num_draft_tokens, num_scheduled_tokens)
        d, q = np.asarray(d_list, dtype=np.int64), np.asarray(q_list, dtype=np.int64)
        r, total = int(d.size), int(q.sum())
        qsl = torch.zeros(r + 1, dtype=torch.int32)
        qsl[1:] = torch.from_numpy(np.cumsum(q).astype(np.int32))
        cu_sampled = np.concatenate([[0], np.cumsum(d + 1)])  # the model runner's cu_num_logits (one bonus token)
        # Draft j of request i is token id 1 + (its index among all drafts): where the kernel writes it is its position.
        width = max(1, int(d.max()))
        drafts = torch.zeros(r, width, dtype=torch.int32)
        cu_draft = np.concatenate([[0], np.cumsum(d)])
        for i in range(r):
            drafts[i, : int(d[i])] = torch.arange(int(cu_draft[i]) + 1, int(cu_draft[i + 1]) + 1, dtype=torch.int32)
        input_ids = torch.zeros(total, dtype=torch.int32)
        prefill_len = torch.ones(r, dtype=torch.int32)  # every request past its prompt: seq_len = 1 + q > prefill_len
        logits = combine(input_ids, torch.arange(r, dtype=torch.int32), torch.zeros(r, dtype=torch.int32), qsl,
                         (prefill_len + torch.from_numpy(q.astype(np.int32))), prefill_len, drafts,
                         torch.from_numpy(cu_sampled.astype(np.int32)), int(cu_sampled[-1]))
        ids = bind.to_numpy(input_ids)
        positions = [int(np.flatnonzero(ids == k)[0]) if (ids == k).any() else -1 for k in range(1, int(cu_draft[-1]) + 1)]
        own = ours(d_list, q_list)
        return SpecDecodeIndices(bind.to_numpy(logits).tolist(), own.target_logits_indices, own.bonus_logits_indices,
                                 own.cu_num_draft_tokens, cu_sampled[1:].tolist(), positions)

    assumed = ("num_new_sampled_tokens=1 (one bonus token)", "every request past its prompt (seq_len > prefill_len)",
               f"steps of at most {_INTERPRETED_MAX_REQS} requests (Triton's interpreter is slow)")
    target = assumes(_interpretable_step)(spec_decode_metadata)
    return target, (f"{piece.label} and its {kernel_piece.label}, run by Triton's interpreter on CPU tensors: "
                    "logits_indices, and draft_token_positions where the kernel writes each draft into input_ids; "
                    "cu_num_sampled_tokens the model runner's cu_num_logits (cumsum of d + 1); target and bonus indices "
                    "and cu_num_draft_tokens: batchfuzz's own (the new runner computes them in its rejection sampler's "
                    "kernels)"), assumed
