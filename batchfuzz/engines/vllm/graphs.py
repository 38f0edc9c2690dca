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

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchfuzz import bind
from batchfuzz.bind import Stub
from batchfuzz.engines.vllm._release import _Built, _Release
from batchfuzz.preconditions import assumes
from batchfuzz.reference import capture_grid as grid_oracle

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
# The DBO twins (_maybe_ubatch_twin, 0.33.0 on): the same decode graphs captured again for a step split in two.
TWIN_ASSUMED = ("cudagraph_mode=FULL_DECODE_ONLY (uniform decode graphs, no mixed graphs)",
                "decode graph request sizes = capture_bs, query length num_tokens_per_bs",
                "DBO on: a UBatchRunner, parallel_config.use_ubatching=True, num_ubatches=2, "
                "dbo_decode_token_threshold=0 (every decode graph of >= 2 tokens has a twin; capture_bs[0] * T >= 2)",
                "the step split in two: dispatch(..., num_ubatches=2)", *_COMMON[:2], "no LoRA, no speculative config")
# The varlen decode graphs (adaptive verification, 0.28.0 on): FULL token-keyed graphs for decode batches of mixed
# query lengths; the case's uniform step is one such batch.
VARLEN_ASSUMED = ("cudagraph_mode=FULL_DECODE_ONLY with varlen_decode=True (adaptive verification: FULL token-keyed "
                  "decode graphs, no mixed graphs)",
                  "varlen graph token sizes = capture_bs * num_tokens_per_bs (cudagraph_capture_sizes up to 0.33.0, "
                  "get_varlen_decode_cudagraph_token_sizes from 0.34.0), query length num_tokens_per_bs",
                  "max_query_len=num_tokens_per_bs", *_COMMON)


@dataclass(frozen=True)
class GraphRow:
    """Which graphs one K row's stand-in manager captures: FULL uniform decode graphs (the default), PIECEWISE
    token-keyed graphs (``tokens``), the decode graphs with DBO twins of ``ubatches`` microbatches, or FULL varlen
    decode graphs (``varlen``, adaptive verification)."""

    tokens: bool = False
    ubatches: int = 1
    varlen: bool = False

    @property
    def token_keyed(self) -> bool:
        """Whether the step's graph is looked up by its tokens (its bs: the graph's tokens // T)."""
        return self.tokens or self.varlen


def _scaled(sizes: list[int], q: int, _query_len: int) -> list[int]:
    """The stand-in ``VllmConfig.get_varlen_decode_cudagraph_token_sizes``: ``c * q`` tokens for each size ``c``."""
    return [c * q for c in sizes]


def _manager(methods: dict[str, Callable[..., Any]], modes: Any, sizes: list[int], q: int, row: GraphRow) -> Stub:
    """A stand-in ``CudaGraphManager`` for graphs of ``sizes`` requests of ``q`` tokens (``c * q`` tokens where
    token-keyed) as ``row`` says, its tables built by the release's own ``_init_candidates`` and marked captured
    (as ``capture()`` leaves them)."""
    piecewise = row.tokens and not row.varlen
    compilation = Stub("compilation_config", cudagraph_capture_sizes=[c * q for c in sizes],
                       prefill_cudagraph_capture_token_sizes=[c * q for c in sizes] if piecewise else [],
                       decode_cudagraph_capture_request_sizes=list(sizes),
                       max_cudagraph_capture_size=sizes[-1] * q, max_decode_cudagraph_capture_tokens=None)
    dbo = Stub("parallel_config", use_ubatching=row.ubatches > 1, num_ubatches=row.ubatches, dbo_decode_token_threshold=0,
               dbo_prefill_token_threshold=0)
    config = Stub("vllm_config", speculative_config=None, uniform_decode_query_len=q,
                  cache_config=Stub("cache_config", use_kda_recoverssm=False), parallel_config=dbo,
                  get_varlen_decode_cudagraph_token_sizes=functools.partial(_scaled, sizes, q))
    manager = Stub("CudaGraphManager", methods=methods, vllm_config=config, compilation_config=compilation,
                   cudagraph_mode=modes.PIECEWISE if piecewise else modes.FULL_DECODE_ONLY, decode_request_sizes=None,
                   max_num_reqs=sizes[-1], decode_max_reqs={q: sizes[-1]}, decode_query_len=q, varlen_decode=row.varlen,
                   ubatch_runner=Stub("UBatchRunner") if row.ubatches > 1 else None,
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


def _how(row: GraphRow) -> str:
    """The row's graphs and dispatch call, in words (the binding's description)."""
    if row.varlen:
        return ("FULL varlen decode graphs (varlen_decode=True, adaptive verification) of capture_bs * T tokens, "
                "get_varlen_decode_cudagraph_token_sizes standing in with them from 0.34.0; the step: R requests of T "
                "tokens, dispatch(R, R * T, uniform_token_count=T, max_query_len=T); bs: the descriptor's "
                "num_tokens // T (R when eager)")
    if row.ubatches > 1:
        return (f"FULL decode graphs of capture_bs requests and their DBO twins of {row.ubatches} microbatches "
                f"(_maybe_ubatch_twin); the step: R requests of T tokens, dispatch(R, R * T, uniform_token_count=T, "
                f"num_ubatches={row.ubatches}); bs: the descriptor's num_reqs (R when eager); checked where every "
                "decode graph has a twin (capture_bs[0] * T >= 2)")
    if row.tokens:
        return ("PIECEWISE token-keyed graphs of capture_bs * T tokens; the step: R requests of T tokens, dispatch(R, "
                "R * T, uniform_token_count=None); bs: the descriptor's num_tokens // T (R when eager)")
    return ("FULL decode graphs of capture_bs requests; the step: R requests of T tokens, dispatch(R, R * T, "
            "uniform_token_count=T); bs: the descriptor's num_reqs (R when eager)")


def _methods(loader: bind.Loader, path: str, cls: str, names: tuple[str, ...],
             required: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
    """The methods ``names`` of class ``cls`` in ``path`` that the release has (a stand-in's ``methods``); Absent
    when one of ``required`` is missing."""
    f = loader.file(path)
    methods: dict[str, Callable[..., Any]] = {}
    for name in names:
        try:
            methods[name] = loader.load(f.piece(f"{cls}.{name}"))
        except bind.Absent:
            if name in required:
                raise
    return methods


def _load_manager(loader: bind.Loader, row: GraphRow) -> dict[str, Callable[..., Any]]:
    """The release's ``CudaGraphManager`` methods a stand-in manager needs; Absent where the row's graphs are not
    in the release."""
    required = ("_init_candidates", "dispatch", *(("_maybe_ubatch_twin",) if row.ubatches > 1 else ()))
    methods = _methods(loader, CG_UTILS, "CudaGraphManager", _METHODS, required)
    if row.varlen and "varlen_decode" not in methods["_init_candidates"].__code__.co_names:
        raise bind.Absent(f"{CG_UTILS}:CudaGraphManager._init_candidates captures no varlen decode graphs "
                          "(no varlen_decode) in this release")
    return methods


def bind_graph_dispatch(loader: bind.Loader, row: GraphRow = GraphRow()) -> tuple[Callable[..., Any], str]:
    """``CudaGraphManager.dispatch`` of the release ``loader`` reads, as contract K's target, on the graphs ``row``
    names: uniform decode steps of R requests of T tokens, padded to the graph dispatch picks."""
    methods = _load_manager(loader, row)
    modes = methods["dispatch"].__globals__.get("CUDAGraphMode")
    if modes is None or not hasattr(modes, "FULL_DECODE_ONLY"):
        raise bind.Unbindable(f"{CG_UTILS}:CudaGraphManager.dispatch no longer reads CUDAGraphMode.FULL_DECODE_ONLY")
    # Up to 0.23.0 dispatch takes no num_active_loras (no LoRA graphs).
    loras = (0,) if "num_active_loras" in inspect.signature(methods["dispatch"]).parameters else ()
    extra = {"num_ubatches": row.ubatches} if row.ubatches > 1 else {}

    def pad_graph_replay(capture_bs: Any, seq_lens: Any, positions: Any, out_cache_loc: Any, num_tokens_per_bs: Any,
                         seq_len_fill_value: Any, *_buffers: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        sizes = [int(x) for x in bind.int_array("capture_bs", capture_bs)]
        q, r = int(num_tokens_per_bs), len(seq_lens)
        step = {**extra, **({"max_query_len": q} if row.varlen else {})}
        desc = _manager(methods, modes, sizes, q, row).dispatch(r, r * q, None if row.tokens else q, *loras, **step)
        if row.token_keyed:
            bs = int(desc.num_tokens) // q if desc.cg_mode != modes.NONE else r
        else:
            bs = int(desc.num_reqs) if desc.num_reqs is not None else r
        return (bs, _padded(np.asarray(seq_lens), bs, int(seq_len_fill_value)), _padded(np.asarray(positions), bs * q, 0),
                _padded(np.asarray(out_cache_loc), bs * q, 0))

    if row.ubatches > 1:
        pad_graph_replay = assumes(_every_graph_has_a_twin)(pad_graph_replay)
    return pad_graph_replay, (
        f"{CG_UTILS}:CudaGraphManager.dispatch over the graphs its _init_candidates builds (the release's own, with "
        f"the compilation config's capture-size helpers it calls), on a stand-in manager: {_how(row)}; the padded rows "
        "are batchfuzz's fill (vLLM fills them in prepare_inputs, contract C), on fresh arrays")


def _every_graph_has_a_twin(capture_bs: Any, seq_lens: Any, positions: Any, out_cache_loc: Any, num_tokens_per_bs: Any,
                            *_rest: Any) -> bool:
    """A decode graph of fewer tokens than microbatches has no twin (``_maybe_ubatch_twin``), and the engine splits
    no such step; checked where the twins are exactly ``capture_bs``."""
    return len(capture_bs) > 0 and int(capture_bs[0]) * int(num_tokens_per_bs) >= 2


def _bind_graph_dispatch(rel: _Release, row: GraphRow = GraphRow()) -> _Built:
    return bind_graph_dispatch(rel.loader(get_offloader=bind.unreachable("get_offloader"),
                                          build_dynamic_sd_schedule_lookup=bind.unreachable("dynamic SD")),
                               row)


# Contract O: the capture grid, derived by VllmConfig._set_cudagraph_sizes (every release) and, from 0.34.0, split into
# prefill and decode sizes by _split_cudagraph_capture_sizes with the grids of config/compilation.py.
CONFIG = "vllm/config/vllm.py"
COMPILATION = "vllm/config/compilation.py"
_CONFIG_METHODS = ("_set_cudagraph_sizes", "get_decode_cudagraph_query_lens", "_split_cudagraph_capture_sizes",
                   "update_sizes_for_sequence_parallelism", "get_draft_decode_cudagraph_request_sizes",
                   "get_varlen_decode_cudagraph_token_sizes")
GRID_ASSUMED = ("platform: not data-centre Blackwell (current_platform.is_device_capability_family(100) is False: "
                "the 512-token default ceiling)",
                "no capture sizes configured (cudagraph_capture_sizes, max_cudagraph_capture_size and 0.34.0's "
                "prefill/decode size fields all None)",
                "cudagraph_mode=FULL_AND_PIECEWISE, enforce_eager=False, performance_mode=balanced",
                "speculative decoding (q > 1): num_speculative_tokens=q-1, method=ngram, static (no dynamic schedule), "
                "no adaptive verification")


def _config(methods: dict[str, Callable[..., Any]], post_init: Callable[..., Any], modes: Any,
            args: tuple[int, int, int, int, bool]) -> Stub:
    """A stand-in ``VllmConfig`` for the case ``(S, B, q, tp, sp)``, its compilation config's sizes unset."""
    s, b, q, t, sp = args
    compilation = Stub("compilation_config", methods={"post_init_cudagraph_sizes": post_init},
                       cudagraph_mode=modes.FULL_AND_PIECEWISE, cudagraph_capture_sizes=None,
                       max_cudagraph_capture_size=None, compile_sizes=None, pass_config=Stub("pass_config", enable_sp=sp),
                       prefill_cudagraph_capture_token_sizes=None, max_prefill_cudagraph_capture_tokens=None,
                       decode_cudagraph_capture_request_sizes=None, max_decode_cudagraph_capture_requests=None,
                       max_decode_cudagraph_capture_tokens=None)
    speculative = None if q == 1 else Stub(
        "speculative_config", num_speculative_tokens=q - 1, method="ngram", enable_adaptive_verification=False,
        uses_dynamic_speculative_decoding=lambda: False)
    return Stub("VllmConfig", methods=methods, compilation_config=compilation, model_config=Stub("model_config", enforce_eager=False),
                scheduler_config=Stub("scheduler_config", max_num_seqs=s, max_num_batched_tokens=b),
                parallel_config=Stub("parallel_config", tensor_parallel_size=t), speculative_config=speculative,
                num_speculative_tokens=q - 1, uniform_decode_query_len=q, performance_mode="balanced")


def _no_sequence_parallel(max_num_seqs: Any, max_num_batched_tokens: Any, decode_query_len: Any, tp_size: Any,
                          sequence_parallel: Any) -> bool:
    return not sequence_parallel


def bind_capture_grid(loader: bind.Loader) -> tuple[Callable[..., Any], str]:
    """``VllmConfig._set_cudagraph_sizes`` of the release ``loader`` reads, as contract O's target: the compilation
    config's ``cudagraph_capture_sizes`` it resolves for the case's limits, on a stand-in config."""
    methods = _methods(loader, CONFIG, "VllmConfig", _CONFIG_METHODS, ("_set_cudagraph_sizes",))
    post_init = loader.load(loader.file(COMPILATION).piece("CompilationConfig.post_init_cudagraph_sizes"))
    modes = methods["_set_cudagraph_sizes"].__globals__.get("CUDAGraphMode")
    if modes is None or not hasattr(modes, "FULL_AND_PIECEWISE"):
        raise bind.Unbindable(f"{CONFIG}:VllmConfig._set_cudagraph_sizes no longer reads CUDAGraphMode.FULL_AND_PIECEWISE")
    sp_filter = "update_sizes_for_sequence_parallelism" in methods

    def capture_grid(max_num_seqs: Any, max_num_batched_tokens: Any, decode_query_len: Any, tp_size: Any,
                     sequence_parallel: Any) -> list[int]:
        args = grid_oracle.check_args(max_num_seqs, max_num_batched_tokens, decode_query_len, tp_size, sequence_parallel)
        config = _config(methods, post_init, modes, args)
        config._set_cudagraph_sizes()
        return [int(x) for x in config.compilation_config.cudagraph_capture_sizes]

    if not sp_filter:
        # No sequence-parallel size filter (0.33.0 on): the release has no such pass, so SP cases are not its inputs.
        capture_grid = assumes(_no_sequence_parallel)(capture_grid)
    return capture_grid, (
        f"{CONFIG}:VllmConfig._set_cudagraph_sizes (with the VllmConfig methods it calls and "
        f"{COMPILATION}:CompilationConfig.post_init_cudagraph_sizes, the release's own) on a stand-in config: "
        "max_num_seqs, max_num_batched_tokens, num_speculative_tokens = q - 1, tensor_parallel_size and "
        "pass_config.enable_sp from the case; the result is compilation_config.cudagraph_capture_sizes"
        + ("" if sp_filter else "; this release has no sequence-parallel size filter, so it assumes "
           "sequence_parallel=False"))


def _bind_capture_grid(rel: _Release) -> _Built:
    loader = rel.loader(current_platform=Stub("current_platform", is_device_capability_family=lambda family: False),
                        build_dynamic_sd_schedule_lookup=bind.unreachable("dynamic SD"))
    return bind_capture_grid(loader)
