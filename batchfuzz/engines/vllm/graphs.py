"""vLLM's CUDA-graph size choice, bound to contract K (``pad_graph_replay``).

The new model runner pads a step up to a captured graph in
``CudaGraphManager.dispatch`` (``vllm/v1/worker/gpu/cudagraph_utils.py``),
over the graphs ``CudaGraphManager._init_candidates`` builds from the
compilation config's capture sizes (0.34.0: through
``config/compilation.py:decode_cudagraph_capture_shapes``). Its docstring: a
uniform decode batch "takes the smallest decode graph of its query length
that covers num_tokens ... if that graph holds its requests"; the graph's
request count is the ``batch_desc.num_reqs`` the model runner pads its
metadata to (contract C's ``P``). That is contract K's size rule (the
smallest captured size holding the step's requests), so the engine chooses
``bs`` here and batchfuzz's own fill pads the rows (vLLM fills them in
``prepare_inputs``, contract C's row). docs/vllm-0.34.md says what is assumed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from batchfuzz import bind
from batchfuzz.bind import Stub
from batchfuzz.engines.vllm._release import _Built, _Release

CG_UTILS = "vllm/v1/worker/gpu/cudagraph_utils.py"
_METHODS = ("_init_candidates", "dispatch", "_resolve_effective_loras", "_build_lora_dispatch_map", "_maybe_ubatch_twin")

_COMMON = ("max_num_seqs = capture_bs[-1]",
           "max_cudagraph_capture_size = capture_bs[-1] * num_tokens_per_bs (every size reachable)",
           "no LoRA, no speculative config, no microbatching")
ASSUMED = ("cudagraph_mode=FULL_DECODE_ONLY (uniform decode graphs, no mixed graphs)",
           "decode graph request sizes = capture_bs, query length num_tokens_per_bs", *_COMMON)
# The token-keyed path: a step that is not a uniform decode (uniform_token_count None) takes the smallest graph of
# at least its token count; capture sizes c * T tokens make its request count the case's bs.
TOKEN_ASSUMED = ("cudagraph_mode=PIECEWISE (token-keyed graphs only), torch-compiled (use_breakable_cg=False)",
                 "capture token sizes = capture_bs * num_tokens_per_bs (cudagraph_capture_sizes up to 0.33.0, "
                 "prefill_cudagraph_capture_token_sizes from 0.34.0)", "uniform_token_count=None", *_COMMON)


def _manager(methods: dict[str, Callable[..., Any]], modes: Any, sizes: list[int], q: int, tokens: bool) -> Stub:
    """A stand-in ``CudaGraphManager`` for graphs of ``sizes`` requests of ``q`` tokens (``tokens``: token-keyed
    PIECEWISE graphs of ``c * q`` tokens; else FULL uniform decode graphs), its tables built by the release's own
    ``_init_candidates`` and marked captured (as ``capture()`` leaves them)."""
    compilation = Stub("compilation_config", cudagraph_capture_sizes=[c * q for c in sizes],
                       prefill_cudagraph_capture_token_sizes=[c * q for c in sizes] if tokens else [],
                       decode_cudagraph_capture_request_sizes=list(sizes),
                       max_cudagraph_capture_size=sizes[-1] * q, max_decode_cudagraph_capture_tokens=None)
    config = Stub("vllm_config", speculative_config=None, uniform_decode_query_len=q,
                  cache_config=Stub("cache_config", use_kda_recoverssm=False))
    manager = Stub("CudaGraphManager", methods=methods, vllm_config=config, compilation_config=compilation,
                   cudagraph_mode=modes.PIECEWISE if tokens else modes.FULL_DECODE_ONLY, decode_request_sizes=None, max_num_reqs=sizes[-1],
                   decode_max_reqs={q: sizes[-1]}, decode_query_len=q, varlen_decode=False, ubatch_runner=None,
                   lora_capture_cases=[0], _candidates={}, _decode_descs={}, _capture_descs={}, _graphs_captured=False,
                   _lora_dispatch_map={}, _max_lora_case=0, use_breakable_cg=False)
    manager._init_candidates()
    manager._graphs_captured = True
    return manager


def _padded(rows: np.ndarray, length: int, fill: int) -> np.ndarray:
    """``rows`` cut or padded with ``fill`` to ``length`` (batchfuzz's fill, not the engine's)."""
    out = np.full(max(length, 0), fill, dtype=np.int64)
    n = min(len(rows), len(out))
    out[:n] = rows[:n]
    return out


def bind_graph_dispatch(loader: bind.Loader, tokens: bool = False) -> tuple[Callable[..., Any], str]:
    """``CudaGraphManager.dispatch`` of the release ``loader`` reads, as contract K's target: uniform decode steps
    on FULL decode graphs, or (``tokens``) any step on token-keyed graphs, its bs the graph's tokens // T."""
    f = loader.file(CG_UTILS)
    methods: dict[str, Callable[..., Any]] = {}
    for name in _METHODS:
        try:
            methods[name] = loader.load(f.piece(f"CudaGraphManager.{name}"))
        except bind.Absent:
            if name in ("_init_candidates", "dispatch"):
                raise
    modes = methods["dispatch"].__globals__.get("CUDAGraphMode")
    if modes is None or not hasattr(modes, "FULL_DECODE_ONLY"):
        raise bind.Unbindable(f"{CG_UTILS}:CudaGraphManager.dispatch no longer reads CUDAGraphMode.FULL_DECODE_ONLY")
    # Up to 0.23.0 dispatch takes no num_active_loras (no LoRA graphs).
    loras = (0,) if "num_active_loras" in inspect.signature(methods["dispatch"]).parameters else ()

    def pad_graph_replay(capture_bs: Any, seq_lens: Any, positions: Any, out_cache_loc: Any, num_tokens_per_bs: Any,
                         seq_len_fill_value: Any, *_buffers: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        sizes = [int(x) for x in bind.int_array("capture_bs", capture_bs)]
        q, r = int(num_tokens_per_bs), len(seq_lens)
        desc = _manager(methods, modes, sizes, q, tokens).dispatch(r, r * q, None if tokens else q, *loras)
        if tokens:
            bs = int(desc.num_tokens) // q if desc.cg_mode != modes.NONE else r
        else:
            bs = int(desc.num_reqs) if desc.num_reqs is not None else r
        return (bs, _padded(np.asarray(seq_lens), bs, int(seq_len_fill_value)), _padded(np.asarray(positions), bs * q, 0),
                _padded(np.asarray(out_cache_loc), bs * q, 0))

    how = ("PIECEWISE token-keyed graphs of capture_bs * T tokens; the step: R requests of T tokens, dispatch(R, R * T, "
           "uniform_token_count=None); bs: the descriptor's num_tokens // T (R when eager)" if tokens else
           "FULL decode graphs of capture_bs requests; the step: R requests of T tokens, dispatch(R, R * T, "
           "uniform_token_count=T); bs: the descriptor's num_reqs (R when eager)")
    return pad_graph_replay, (
        f"{CG_UTILS}:CudaGraphManager.dispatch over the graphs its _init_candidates builds (the release's own, with "
        f"the compilation config's capture-size helpers it calls), on a stand-in manager: {how}; the padded rows are "
        "batchfuzz's fill (vLLM fills them in prepare_inputs, contract C), on fresh arrays")


def _bind_graph_dispatch(rel: _Release, tokens: bool = False) -> _Built:
    return bind_graph_dispatch(rel.loader(get_offloader=bind.unreachable("get_offloader"),
                                          build_dynamic_sd_schedule_lookup=bind.unreachable("dynamic SD")),
                               tokens)
