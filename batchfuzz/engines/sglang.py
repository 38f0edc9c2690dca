"""SGLang's own functions bound to batchfuzz's contracts (an engine module
in the shape ``batchfuzz.plugins.EngineModule`` declares).

Read from a release's files (a wheel, a source checkout, the installed
distribution) without importing SGLang or its dependencies:

- the two-batch-overlap split (contract J, ``tbo_split``):
  ``compute_split_seq_index`` then ``compute_split_token_index``, and
  whether the child preparer takes the two-chunk mode (the statement of
  ``TboForwardBatchPreparer.prepare_raw`` that writes ``is_enable_two_chunk``), as
  ``TboForwardBatchPreparer`` and ``TboDPAttentionPreparer`` call them, with
  the helpers they read (``_split_extend_seqs``,
  ``_is_two_chunk_split_enabled``, ``_split_array_by_balanced_sum``,
  ``_split_array_by_cum_less_than_half``, or the older
  ``_split_array_by_half_sum``) and the release's own ``ForwardMode`` cut out
  of the same tree. The module lives in ``sglang/srt/two_batch_overlap.py``
  up to 0.5.3 and in ``sglang/srt/batch_overlap/two_batch_overlap.py`` from
  0.5.8: one spec per path, so a release has one of the two bound and the
  other absent;
- the CUDA-graph replay padding (contract K, ``pad_graph_replay``): the
  model runner's ``CudaGraphRunner.replay_prepare`` (with
  ``GraphInputBuffers.populate_from_forward_batch`` from 0.5.8) and the
  EAGLE draft runner's ``EAGLEDraftCudaGraphRunner.replay``, whole, over a
  stand-in runner whose persistent buffers hold the case's stale values
  (``_Replay``; each binding's detail states its assumptions). Both runners
  moved in 0.5.14 (``model_executor/runner/``): absent there. The rebuilt
  decode runner's ``DecodeCudaGraphRunner.load_batch`` from 0.5.14; the EAGLE
  draft-extend runner's ``replay`` (up to 0.5.8) and the draft and
  draft-extend runners' ``execute`` (from 0.5.14), the multi-layer
  draft-extend runner's per-step ``replay``/``execute`` (0.5.8, 0.5.14,
  after the worker's ``reset_buffers``) and 0.5.23's multi-step ``prepare``
  (over the release's torch fill, the NPU path); the prefill (piecewise)
  runners are found and ``unbindable``: they pad tokens, not requests;
- the children's real tokens (contract L, ``tbo_children_tokens``):
  ``TboForwardBatchPreparer.compute_tbo_children_num_token_non_padded_raw``
  (with ``_split_num_token_non_padded`` in 0.5.23), one spec per module path.
- the data-parallel agreement on two-batch overlap (contract M,
  ``tbo_dp_agree``): ``TboDPAttentionPreparer.compute_output`` with its
  ``_compute_global_forward_mode``, called once per rank on the gathered
  flags and forward modes; the gathered tensor is 3-D (a row per attention
  TP rank) in the old module, 2-D in the new one, one spec per path.

Stand-ins for contract J: ``get_tbo_token_distribution_threshold`` (a server argument read
from global state) returns the case's ``threshold``. The number of tokens
per sequence is what ``get_token_num_per_seq`` gives (1 for decode, the
draft token count for target-verify, 0 for idle, None for extend), and
``extend_lens`` is the step's per-request lengths for extend and None
otherwise, as the callers pass them.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from batchfuzz import bind
from batchfuzz import engines as _engines
from batchfuzz.engines.base import Built, Engine, Release, Spec
from batchfuzz.reference.pad_graph_replay import check_args as check_replay_args
from batchfuzz.reference.tbo_children_tokens import check_args as check_children_args
from batchfuzz.reference.tbo_dp_agree import check_args as check_dp_args
from batchfuzz.reference.tbo_split import check_args

ENGINE = "sglang"
# The releases of the published matrix (docs/sglang-matrix.json; batchfuzz engine sglang --all-releases):
# two before the move of two_batch_overlap.py into batch_overlap/ (0.5.8), three after.
RELEASES = ("0.4.9", "0.5.3", "0.5.8", "0.5.14", "0.5.23")

TBO_OLD = "sglang/srt/two_batch_overlap.py"
TBO_NEW = "sglang/srt/batch_overlap/two_batch_overlap.py"
FORWARD_BATCH_INFO = "sglang/srt/model_executor/forward_batch_info.py"


class ReleaseSource(_engines.ReleaseSource):
    """An SGLang release's files: ``from_wheel``, ``from_dir``, ``installed``, ``from_ref``."""

    distribution = "sglang"
    package = "sglang"


def _bind_tbo_split(rel: Release, path: str) -> tuple[Callable[..., Any], str]:
    threshold = [0.48]  # what the stand-in for the server argument returns; set per call
    loader = rel.loader(get_tbo_token_distribution_threshold=lambda: threshold[0])
    tbo = loader.file(path)
    seq_index = loader.load(tbo.piece("compute_split_seq_index"))
    token_index = loader.load(tbo.piece("compute_split_token_index"))
    forward_mode_cls: Any = loader.load(loader.file(FORWARD_BATCH_INFO).piece("ForwardMode"))
    try:  # a release before the two-chunk mode (0.4.9) has no _is_two_chunk_split_enabled
        tbo.piece("_is_two_chunk_split_enabled")
    except bind.Absent:
        two_chunk_of = None
    else:  # the child preparer's own decision
        two_chunk_of = loader.load(tbo.fragment("TboForwardBatchPreparer.prepare_raw", bind.Writes("is_enable_two_chunk"),
                                                given=("batch",)))
    modes = {"extend": forward_mode_cls.EXTEND, "decode": forward_mode_cls.DECODE,
             "target_verify": forward_mode_cls.TARGET_VERIFY, "idle": forward_mode_cls.IDLE}

    def tbo_split(forward_mode: Any, seq_lens: Any, thr: Any) -> tuple[Any, Any, bool]:
        mode, lens, threshold[0] = check_args(forward_mode, seq_lens, thr)
        per_seq = {"extend": None, "decode": 1, "target_verify": lens[0] if lens else 1, "idle": 0}[mode]
        extend_lens = list(lens) if mode == "extend" else None
        fm = modes[mode]
        s = seq_index(forward_mode=fm, num_tokens=sum(lens), extend_lens=extend_lens, token_num_per_seq=per_seq)
        t = token_index(split_seq_index=s, forward_mode=fm, extend_seq_lens=extend_lens, token_num_per_seq=per_seq)
        if two_chunk_of is None:
            return s, t, False
        batch = bind.Stub("ForwardBatch", forward_mode=fm, extend_seq_lens_cpu=extend_lens)
        return s, t, bool(two_chunk_of(batch)["is_enable_two_chunk"])

    detail = (f"{path}: compute_split_seq_index then compute_split_token_index over the release's ForwardMode "
              f"({FORWARD_BATCH_INFO}); two_chunk from the statement of TboForwardBatchPreparer.prepare_raw that writes "
              "is_enable_two_chunk" + (" (absent: this release has no two-chunk mode, False)" if two_chunk_of is None else "")
              + "; get_tbo_token_distribution_threshold stood in by the case's threshold; token_num_per_seq as "
              "get_token_num_per_seq gives it")
    return tbo_split, detail


CUDA_GRAPH_RUNNER = "sglang/srt/model_executor/cuda_graph_runner.py"
INPUT_BUFFERS = "sglang/srt/model_executor/input_buffers.py"
EAGLE_DRAFT_RUNNER = "sglang/srt/speculative/eagle_draft_cuda_graph_runner.py"


class _Replay:
    """The stand-ins of one padded replay, built from contract K's arguments:
    the runner's persistent buffers (torch CPU tensors in the engine's dtypes:
    ``seq_lens`` int32, ``positions`` and ``out_cache_loc`` int64) holding
    the case's stale values, and the step's ``ForwardBatch``."""

    def __init__(self, args: tuple[Any, ...]) -> None:
        import torch

        sizes, lens, pos, loc, t, fill = check_replay_args(*args)
        self.sizes, self.r, self.t, self.fill = sizes, len(lens), t, fill
        max_bs = sizes[-1]

        def buf(name: str, value: Any, rows: int, dtype: Any) -> Any:
            return torch.from_numpy(bind.cast_exact(name, bind.int_array(name, value, minimum=None)[:rows].copy(), dtype))

        self.seq_lens = buf("seq_lens_buf", args[6], max_bs, np.int32)
        self.seq_lens_cpu = self.seq_lens.clone()
        self.positions = buf("positions_buf", args[7], max_bs * t, np.int64)
        self.out_cache_loc = buf("out_cache_loc_buf", args[8], max_bs * t, np.int64)
        self.step_lens = torch.tensor(lens, dtype=torch.int32)
        self.batch = bind.Stub(
            "ForwardBatch", batch_size=self.r, input_ids=torch.zeros(self.r * t, dtype=torch.int64),
            req_pool_indices=torch.arange(self.r, dtype=torch.int32), seq_lens=self.step_lens, seq_lens_cpu=self.step_lens.clone(),
            out_cache_loc=torch.tensor(loc, dtype=torch.int64), positions=torch.tensor(pos, dtype=torch.int64),
            seq_lens_sum=sum(lens), mrope_positions=None, encoder_lens=None, spec_info=None, mamba_track_indices=None,
            mamba_track_mask=None, num_token_non_padded=torch.tensor(self.r * t, dtype=torch.int32),
            forward_mode=bind.Stub("ForwardMode", methods={"is_idle": lambda self: False}))

    def common(self) -> dict[str, Any]:
        """What every runner reads from ``self`` in a plain replay: no DP/TP gather, no overlap, no pipeline stage."""
        import torch

        max_bs = self.sizes[-1]
        return dict(capture_bs=list(self.sizes), num_tokens_per_bs=self.t, seq_len_fill_value=self.fill,
                    require_mlp_tp_gather=False, require_gathered_buffer=False, seq_lens=self.seq_lens,
                    seq_lens_cpu=self.seq_lens_cpu, positions=self.positions, out_cache_loc=self.out_cache_loc,
                    req_pool_indices=torch.zeros(max_bs, dtype=torch.int32),
                    input_ids=torch.zeros(max_bs * self.t, dtype=torch.int64))

    def result(self, bs: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        return (int(bs), bind.to_numpy(self.seq_lens[:bs]), bind.to_numpy(self.positions[: bs * self.t]),
                bind.to_numpy(self.out_cache_loc[: bs * self.t]))


def _bind_model_runner(rel: Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader(enable_num_token_non_padded=lambda server_args: False)
    replay_prepare = loader.load(loader.file(CUDA_GRAPH_RUNNER).piece("CudaGraphRunner.replay_prepare"))
    try:  # from 0.5.8 the buffers and their fill live in GraphInputBuffers
        populate = loader.load(loader.file(INPUT_BUFFERS).piece("GraphInputBuffers.populate_from_forward_batch"))
    except bind.Absent:
        populate = None

    def pad_graph_replay(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        import torch

        rp = _Replay(args)
        attn = bind.Recorder("init_forward_metadata_replay_cuda_graph")
        fields = rp.common()
        state = {k: fields.pop(k) for k in ("seq_lens", "seq_lens_cpu", "positions", "out_cache_loc", "req_pool_indices",
                                            "input_ids")}
        extra = dict(mamba_track_indices=None, mamba_track_mask=None, encoder_lens=None, pp_proxy_tensors=None,
                     mrope_positions=torch.zeros((3, len(state["positions"])), dtype=torch.int64),
                     num_token_non_padded=torch.zeros(1, dtype=torch.int32), custom_mask=None)
        if populate is not None:
            fields["buffers"] = bind.Stub("GraphInputBuffers", methods={"populate_from_forward_batch": populate}, **state, **extra)
        else:
            fields.update(state, **extra)
        runner = bind.Stub(
            "CudaGraphRunner", methods={"recapture_if_needed": lambda self, fb: None}, **fields,
            model_runner=bind.Stub("ModelRunner", server_args=None, attn_backend=bind.Stub(
                "AttnBackend", init_forward_metadata_replay_cuda_graph=attn)),
            enable_two_batch_overlap=False, is_encoder_decoder=False, enable_pdmux=False, nsa_enable_prefill_cp=False,
            capture_forward_mode=None, attn_tp_size=1, attn_tp_rank=0)
        replay_prepare(runner, rp.batch)
        bs = attn.last.arg(0, "bs")
        require_same = runner.bs == bs and attn.last.arg(2, "seq_lens").data_ptr() == rp.seq_lens.data_ptr()
        if not require_same:
            raise AssertionError(f"replay_prepare stored bs = {runner.bs} but built the attention metadata over {bs} rows "
                                 "of another seq_lens")
        return rp.result(bs)

    where = f"{CUDA_GRAPH_RUNNER}:CudaGraphRunner.replay_prepare" + (
        f" with {INPUT_BUFFERS}:GraphInputBuffers.populate_from_forward_batch" if populate is not None else "")
    detail = (f"{where}, whole, on a stand-in runner: no DP/TP gather, no two-batch overlap, no PD multiplexing, no "
              "pipeline stage, no encoder, num_token_non_padded off; the persistent buffers hold the case's stale values "
              "(seq_lens int32, positions/out_cache_loc int64); bs and seq_lens as the attention backend's replay "
              "metadata call receives them, positions/out_cache_loc the buffers' first bs * T rows")
    return pad_graph_replay, detail


def _bind_eagle_draft(rel: Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    replay = loader.load(loader.file(EAGLE_DRAFT_RUNNER).piece("EAGLEDraftCudaGraphRunner.replay"))

    def pad_graph_replay(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        import torch

        rp = _Replay(args)
        attn = bind.Recorder("init_forward_metadata_replay_cuda_graph")
        max_bs = rp.sizes[-1]
        rp.batch.spec_info = bind.Stub("EagleDraftInput", topk_p=torch.zeros((rp.r, 1)), topk_index=torch.zeros((rp.r, 1)),
                                       hidden_states=torch.zeros((rp.r, 1)))
        outputs: dict[int, Any] = {b: ("output", b) for b in rp.sizes}
        runner = bind.Stub(
            "EAGLEDraftCudaGraphRunner", methods={"_replay": lambda self, fb: None,
                                                 "_postprocess_output_to_raw_bs": lambda self, out, raw_bs: out},
            **rp.common(), speculative_num_steps=1, topk_p=torch.zeros((max_bs, 1)), topk_index=torch.zeros((max_bs, 1)),
            hidden_states=torch.zeros((max_bs, 1)), output_buffers=outputs, graphs={b: bind.Stub("CUDAGraph", methods={
                "replay": lambda self: None}) for b in rp.sizes},
            model_runner=bind.Stub("ModelRunner", draft_attn_backend=bind.Stub(
                "DraftAttnBackend", init_forward_metadata_replay_cuda_graph=attn)),
            deepep_adapter=bind.Stub("DeepEPAdapter", methods={"replay": lambda self: None}))
        replay(runner, rp.batch)
        bs = attn.last.arg(1, "bs")
        return rp.result(bs)

    detail = (f"{EAGLE_DRAFT_RUNNER}:EAGLEDraftCudaGraphRunner.replay, whole, on a stand-in runner: one speculative step "
              "(out_cache_loc of R * T rows), no DP/TP gather; the graph replay, the draft attention backend and the output "
              "post-processing stood in (a recorder gives bs); the persistent buffers hold the case's stale values")
    return pad_graph_replay, detail


DECODE_RUNNER = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
BASE_GRAPH_RUNNER = "sglang/srt/model_executor/runner/base_cuda_graph_runner.py"
BUFFER_REGISTRY = "sglang/srt/model_executor/cuda_graph_buffer_registry.py"


def _stale_registry(build: Callable[..., Any], rp: _Replay) -> Any:
    """The release's decode buffer registry, its slots holding the case's stale values."""
    import torch

    max_bs = rp.sizes[-1]
    reg = build(device=torch.device("cpu"), max_bs=max_bs, max_num_token=max_bs * rp.t, seq_len_fill_value=rp.fill,
                cache_loc_dtype=torch.int64, share_pool=False, register_global_num_tokens=False)
    for name, stale in (("seq_lens", rp.seq_lens), ("seq_lens_cpu", rp.seq_lens), ("positions", rp.positions),
                        ("out_cache_loc", rp.out_cache_loc)):
        reg.get_slot(name).buffer.copy_(stale)
    return reg


def _frozenset_constant(rel: Release, path: str, name: str) -> frozenset[Any]:
    """The module constant ``name = frozenset({...literals...})`` of ``path`` as the release writes it (the loader
    does not run calls made at import time); an empty set when the release has no such constant (nothing reads it)."""
    text = rel.source.read(path) or ""
    for node in ast.parse(text).body if text else ():
        if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]
                and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "frozenset"
                and len(node.value.args) == 1):
            try:
                return frozenset(ast.literal_eval(node.value.args[0]))
            except ValueError as exc:
                raise bind.Unbindable(f"{path}:{name} is no longer a frozenset of literals: {exc}") from exc
    return frozenset()


_RUNTIME_GETTERS = ("get_flags", "get_spec", "get_exec", "get_lora", "get_model", "mamba_cache_chunk_size")
# The DecodeCudaGraphRunner methods 0.5.23's load_batch reaches the attention backend through (taken from the
# release when it has them), and the stand-ins for the rest: no hidden-state check, no glue graph, no early
# verify-metadata staging, no attention-graph variant, no draft-glue log.
_DECODE_HELPERS = ("_capture_graph_size", "_resolve_attention_variant", "_set_dp_real_num_tokens",
                   "_init_replay_attn_metadata", "_init_replay_attn_metadata_from_view", "_global_num_tokens_for_graph")
_DECODE_STAND_INS: dict[str, Callable[..., Any]] = {
    "recapture_if_needed": lambda self, fb: None, "_resolve_lora_variant": lambda self, fb: None,
    "_make_graph_key": lambda self, *a: None, "_validate_capture_hidden_mode": lambda self, fb: None,
    "_glue_key": lambda self, *a: None, "_take_early_verify_metadata": lambda self, fb, **kw: False,
    "_replay_attn_backend": lambda self: self.attn_backend, "_maybe_log_draft_glue": lambda self: None,
    "_prep_attention_variant": lambda self, variant: contextlib.nullcontext()}


def _decode_runner(rp: _Replay, reg: Any, slot: dict[str, Any], attn: bind.Recorder, pad: Callable[..., Any],
                   own: dict[str, Callable[..., Any]]) -> bind.Stub:
    """The stand-in ``DecodeCudaGraphRunner`` whose ``load_batch`` replays ``rp`` (the attributes 0.5.14 and
    0.5.23 read; those 0.5.14 does not read are never looked at)."""
    methods = {**_DECODE_STAND_INS, "_pad_to_bucket": lambda self, size, buckets: pad(size, buckets), **own}
    model_runner = bind.Stub("ModelRunner", hisparse_coordinator=None, lora_manager=None, is_draft_worker=False,
                             spec_algorithm=bind.Stub("SpeculativeAlgorithm", methods={
                                 "is_dflash": lambda self: False, "is_dflash_family": lambda self: False}))
    return bind.Stub(
        "DecodeCudaGraphRunner", methods=methods,
        capture_bs=list(rp.sizes), num_tokens_per_bs=rp.t, captured_req_width=rp.t, seq_len_fill_value=rp.fill,
        require_mlp_tp_gather=False, require_attn_tp_gather=False, buffer_registry=reg,
        buffers=bind.Stub("DecodeInputBuffers", encoder_lens=None, custom_mask=None, num_token_non_padded=None,
                          mamba_track_indices=None, **slot),
        deepep_adapter=bind.Stub("DeepEPAdapter", methods={"replay": lambda self: None}),
        enable_two_batch_overlap=False, enable_pdmux=False,
        attn_backend=bind.Stub("AttnBackend", init_forward_metadata_out_graph=attn), capture_forward_mode=None,
        is_encoder_decoder=False, model_runner=model_runner, dllm_uses_input_embeds=False, dllm_input_preparation=None,
        ragged_verify_mode=False, _skips_prefilled_inputs=False, _draft_metadata_glue=False,
        _target_metadata_glue=False, attention_graph_variants=None, _metadata_glue=None, _early_verify_metadata=None)


# What 0.5.23's load_batch reads of its configuration and process, given here (each stand-in says why).
_DECODE_ASSUMED = ("SGLANG_OPT_CUDA_GRAPH_FILL_FAST_PATH=False (its default in sglang/srt/environ.py)",
                   "get_parallel(): one rank, attention DP off", "no early verify-metadata staging, no metadata glue "
                   "graph, no attention-graph variant, no ragged verify")


def _bind_decode_runner(rel: Release) -> Built:
    """0.5.14's rebuilt runner: ``DecodeCudaGraphRunner.load_batch`` pads the
    batch size with ``_pad_to_bucket`` and fills the buffers through the
    release's ``build_decode_registry`` (its per-slot padding policy)."""
    # 0.5.23's registry reads one switch from sglang.srt.environ's envs (an object built at import time): given its
    # default, off (the fill then resets every padded region, as before the switch).
    fast_path = bind.Stub("EnvBool", methods={"get": lambda self: False})
    loader = rel.loader(ForwardBatch=object, PPProxyTensors=object, share_input_buffer=lambda name, buffer: buffer,
                        _has_foreach_copy=False, envs=bind.Stub("envs", SGLANG_OPT_CUDA_GRAPH_FILL_FAST_PATH=fast_path),
                        INDEX_SEMANTIC_BUFFERS=_frozenset_constant(rel, INPUT_BUFFERS, "INDEX_SEMANTIC_BUFFERS"),
                        # 0.5.23: the slots early verify-metadata staging fills itself; no staging here (the runner
                        # stand-in takes none), so the fill skips no slot and this set is never read.
                        STAGED_SLOTS=frozenset(),
                        # Read only with a num_token_non_padded buffer (DP/TP MoE), which the stand-in runner has not.
                        _dp_tp_moe_masks_pad_rows=bind.unreachable("_dp_tp_moe_masks_pad_rows"),
                        logger=logging.getLogger("batchfuzz.engines.sglang"),
                        # 0.5.23's process-wide parallel state: one rank, no attention DP (no DP/TP gather, as above).
                        get_parallel=lambda: bind.Stub("ParallelContext", attn_dp_enabled=False, tp_rank=0,
                                                       num_dp_ranks=1),
                        # The rest of runtime_context's getters (built at import time): not read on this path.
                        **{name: bind.unreachable(name) for name in _RUNTIME_GETTERS},
                        # 0.5.23's replay view names the DP padding mode; one rank: no DP padding to choose.
                        DpPaddingMode=bind.Stub("DpPaddingMode", methods={
                            "get_default_mode_in_cuda_graph": lambda self, global_num_tokens=None: "one rank"}))
    build = loader.load(loader.file(BUFFER_REGISTRY).piece("build_decode_registry"))
    pad = loader.load(loader.file(BASE_GRAPH_RUNNER).piece("BaseCudaGraphRunner._pad_to_bucket"))
    runner_file = loader.file(DECODE_RUNNER)
    load_batch = loader.load(runner_file.piece("DecodeCudaGraphRunner.load_batch"))
    own = {}  # 0.5.23's helpers load_batch calls on the way to the attention backend, the release's own
    for name in _DECODE_HELPERS:
        with contextlib.suppress(bind.Absent):
            own[name] = loader.load(runner_file.piece(f"DecodeCudaGraphRunner.{name}"))

    def pad_graph_replay(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        rp = _Replay(args)
        reg = _stale_registry(build, rp)
        slot = {n: reg.get_slot(n).buffer for n in ("seq_lens", "seq_lens_cpu", "positions", "out_cache_loc",
                                                   "req_pool_indices", "input_ids")}
        attn = bind.Recorder("init_forward_metadata_out_graph")
        rp.batch.needs_forward_metadata_init = lambda: True
        rp.batch.input_embeds = None
        # What 0.5.23's replay view copies from the step unchanged: no KV-location plan, no LoRA, no override.
        vars(rp.batch).update(max_seq_len_host=int(rp.step_lens.max()), out_cache_loc_virtual=None, kv_loc_plan=None,
                              kv_loc_cols=None, max_seq_len_override=None, lora_ids=None, can_run_decode_cuda_graph=True)
        runner = _decode_runner(rp, reg, slot, attn, pad, own)
        load_batch(runner, rp.batch)
        view = attn.last.arg(0, "forward_batch")
        bs = int(view.batch_size)
        return (bs, bind.to_numpy(view.seq_lens), bind.to_numpy(slot["positions"][: bs * rp.t]),
                bind.to_numpy(slot["out_cache_loc"][: bs * rp.t]))

    detail = (f"{DECODE_RUNNER}:DecodeCudaGraphRunner.load_batch with {BASE_GRAPH_RUNNER}:BaseCudaGraphRunner._pad_to_bucket "
              f"and {BUFFER_REGISTRY}:build_decode_registry (the release's own buffers and padding policy), on a stand-in "
              "runner: no DP/TP gather, no two-batch overlap, no PD multiplexing, no LoRA, no encoder, no global token "
              "counts; the registry's slots hold the case's stale values (int64); bs and seq_lens as the attention "
              "backend's init_forward_metadata_out_graph receives them, positions/out_cache_loc the slots' first bs * T rows")
    assumed = _DECODE_ASSUMED if "SGLANG_OPT_CUDA_GRAPH_FILL_FAST_PATH" in (rel.source.read(BUFFER_REGISTRY) or "") else ()
    return pad_graph_replay, detail, assumed


EAGLE_DRAFT_EXTEND_RUNNER = "sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py"
MULTI_LAYER_RUNNER = "sglang/srt/speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py"
# What the multi-layer worker (multi_layer_eagle_worker_v2.py, reset_cuda_graph_buffers) calls before the step runners.
_MULTI_STEP_RESET = "MultiLayerEagleMultiStepDraftExtendCudaGraphRunner.reset_buffers"


class _AttentionSeen:
    """The draft attention backend's replay-metadata call, as the EAGLE runners make it: keyword ``bs`` and
    ``seq_lens`` up to 0.5.8, one batch (or view of it) from 0.5.14. Keeps the batch size and a copy of the
    ``seq_lens`` rows it was given: the runners restore the batch's own rows after the replay."""

    def __init__(self) -> None:
        self.seen: tuple[int, np.ndarray] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if "bs" in kwargs:
            bs, lens = kwargs["bs"], kwargs["seq_lens"]
        else:
            bs, lens = args[0].batch_size, args[0].seq_lens
        self.seen = (int(bs), bind.to_numpy(lens[:bs]).copy())

    def rows(self) -> tuple[int, np.ndarray]:
        if self.seen is None:
            raise AssertionError("the runner replayed without building the draft attention metadata")
        return self.seen


def _spec_buffers(rp: _Replay) -> dict[str, Any]:
    """The persistent buffers of the EAGLE draft and draft-extend runners: the case's stale ``seq_lens``,
    ``positions`` and ``out_cache_loc``; the rest (draft tokens, hidden states, accept lengths) zeros of one
    column, and the optional ones (request ids, DSA seeds, Mamba tracks, draft probabilities) off."""
    import torch

    max_bs, tokens = rp.sizes[-1], rp.sizes[-1] * rp.t
    fields = {k: v for k, v in rp.common().items() if isinstance(v, torch.Tensor)}
    rows = {name: torch.zeros(max_bs, dtype=torch.int32) for name in (
        "extend_seq_lens", "extend_start_loc", "accept_length", "num_correct_drafts", "num_accept_tokens")}
    return dict(fields, **rows, topk_p=torch.zeros((max_bs, 1)), topk_index=torch.zeros((max_bs, 1), dtype=torch.int64),
                hidden_states=torch.zeros((tokens, 1)), mrope_positions=torch.zeros((3, tokens), dtype=torch.int64),
                select_index=torch.zeros(max_bs, dtype=torch.int64), swa_out_cache_loc=torch.zeros(tokens, dtype=torch.int64),
                rids_int=None, bootstrap_room_ids_int=None,
                draft_probs=None, dsa_seed_topk=None, mamba_track_indices=None)


def _spec_runner(rp: _Replay, attn: _AttentionSeen, methods: dict[str, Callable[..., Any]], mode: Any) -> bind.Stub:
    """A stand-in EAGLE runner with the attributes its replay reads in any release: the buffers on ``self`` (up to
    0.5.8) and in ``self.buffers`` (from 0.5.14), one speculative step, no DP/TP gather, no rejection sampling."""
    import torch

    buffers = _spec_buffers(rp)
    backend = bind.Stub("DraftAttnBackend", init_forward_metadata_replay_cuda_graph=attn,
                        init_forward_metadata_out_graph=attn, methods={"shared_read_ends": lambda self, mode: None})
    output = bind.Stub("LogitsProcessorOutput", None, **{k: torch.zeros((rp.sizes[-1] * rp.t, 1)) for k in (
        "next_token_logits", "hidden_states", "topk_p", "topk_index")})
    outputs = {b: output for b in rp.sizes}
    return bind.Stub(
        "EAGLERunner", methods={"_replay": lambda self, fb: None, "_replay_graph": lambda self, key, fb: output,
                                "_make_graph_key": lambda self, *a, **kw: None, "_sampling_variant": lambda self, fb: None,
                                "_postprocess_output_to_raw_bs": lambda self, out, raw_bs: out,
                                "_publish_read_done": lambda self, **kw: None, **methods},
        **buffers, buffers=bind.Stub("EagleInputBuffers", **buffers), capture_bs=list(rp.sizes), num_tokens_per_bs=rp.t,
        captured_req_width=rp.t, seq_len_fill_value=rp.fill, require_mlp_tp_gather=False, require_gathered_buffer=False,
        speculative_num_steps=1, forward_mode=mode, extend_seq_lens_cpu=[0] * rp.sizes[-1],
        output_buffers=outputs, graphs={b: bind.Stub("CUDAGraph", methods={"replay": lambda self: None}) for b in rp.sizes},
        deepep_adapter=bind.Stub("DeepEPAdapter", methods={"replay": lambda self: None}),
        device_module=bind.Stub("DeviceModule", Event=lambda: bind.Stub("Event", methods={"record": lambda self: None})),
        draft_attn_backend=backend, draft_extend_attn_backend=backend,
        eagle_worker=bind.Stub("EagleWorker", draft_extend_attn_backend=backend, draft_extend_attn_backend_list=[backend]),
        step=0,
        model_runner=bind.Stub("ModelRunner", device_timer=None, model_config=bind.Stub(
            "ModelConfig", vocab_size=1 << 20, model_is_mrope=False), server_args=bind.Stub(
            "ServerArgs", speculative_use_rejection_sampling=False)))


def _spec_batch(rp: _Replay, hidden_rows: int) -> Any:
    """The step's ``ForwardBatch`` with its EAGLE ``spec_info``: no accept lengths given (every request extends
    ``T`` tokens), hidden states of ``hidden_rows`` rows."""
    import torch

    rp.batch.spec_info = bind.Stub(
        "EagleDraftInput", topk_p=torch.zeros((rp.r, 1)), topk_index=torch.zeros((rp.r, 1), dtype=torch.int64),
        hidden_states=torch.zeros((hidden_rows, 1)), accept_length=None, num_correct_drafts=None,
        num_accept_tokens=None, draft_probs=None, dsa_topk_indices=None)
    vars(rp.batch).update(extend_seq_lens=None, extend_seq_lens_cpu=None, rids_int=None, bootstrap_room_ids_int=None,
                          sampling_info=None, out_cache_loc_virtual=None, kv_loc_plan=None, kv_loc_cols=None)
    return rp.batch


# What the EAGLE runners' replay reads of the process and the model, given here.
_SPEC_ASSUMED = ("one speculative step (out_cache_loc of R * T rows)", "no DP/TP gather, no rejection sampling, "
                 "no M-RoPE, no request ids, no DSA seeds, no Mamba tracks", "the NaN/out-of-range probes off")


def _bind_spec_runner(rel: Release, path: str, method: str, *, extend: bool, helpers: tuple[str, ...] = (),
                      reset: str | None = None) -> Built:
    """``method`` of an EAGLE draft (``extend`` False) or draft-extend runner, whole, over ``_spec_runner``: the
    replay preparation that pads the batch up the captured sizes. From 0.5.14 the runners subclass the decode
    runner and pad with ``BaseCudaGraphRunner._pad_to_bucket``, the release's own. ``helpers``: the methods of
    the same class it calls, cut out of the release too; ``reset``: the function of the same file the worker
    calls on the runners' shared buffers before the replay (the multi-layer runners'), run first."""
    import inspect

    probes = {"maybe_detect_nan": lambda *a, **kw: None, "maybe_detect_oob": lambda *a, **kw: None}
    loader = rel.loader(LogitsProcessorOutput=bind.Record, _has_foreach_copy=False,
                        get_spec=lambda: bind.Stub("SpecArgs", speculative_use_rejection_sampling=False),
                        device_timer_ctx=lambda timer, name: contextlib.nullcontext(), **probes)
    replay = loader.load(loader.file(path).piece(method))
    own: dict[str, Callable[..., Any]] = {}
    with contextlib.suppress(bind.Absent):  # from 0.5.14: the decode runner's bucket padding (a static method)
        pad = loader.load(loader.file(BASE_GRAPH_RUNNER).piece("BaseCudaGraphRunner._pad_to_bucket"))
        own["_pad_to_bucket"] = lambda self, size, buckets: pad(size, buckets)
    for name in helpers:
        try:
            own[name] = loader.load(loader.file(path).piece(f"{method.split('.')[0]}.{name}"))
        except bind.Absent as exc:
            raise bind.Absent(f"{path}:{method} no longer fills the buffers itself: {exc}") from exc
    reset_buffers = None if reset is None else loader.load(loader.file(path).piece(reset))
    forward_mode: Any = loader.load(loader.file(FORWARD_BATCH_INFO).piece("ForwardMode"))
    # the v1 worker's mode where the release has it, else the v2 worker's (the only one from 0.5.14)
    mode_name = "DECODE" if not extend else "DRAFT_EXTEND" if hasattr(forward_mode, "DRAFT_EXTEND") else "DRAFT_EXTEND_V2"
    mode = getattr(forward_mode, mode_name)
    takes_select = "select_index" in inspect.signature(replay).parameters

    def pad_graph_replay(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        import torch

        rp = _Replay(args)
        attn = _AttentionSeen()
        batch = _spec_batch(rp, rp.r * rp.t if extend else rp.r)
        runner = _spec_runner(rp, attn, own, mode)
        if reset_buffers is not None:  # the step's accept lengths: every request extends T tokens
            reset_buffers(bind.Stub("MultiStepRunner", cuda_graph_buffers=vars(runner.buffers),
                                    seq_len_fill_value=rp.fill), batch,
                          bind.Stub("GenerationBatchResult", accept_lens=torch.full((rp.r,), rp.t, dtype=torch.int32)))
        replay(runner, batch, *((torch.arange(rp.r),) if takes_select else ()))
        bs, lens = attn.rows()
        return bs, lens, bind.to_numpy(rp.positions[: bs * rp.t]), bind.to_numpy(rp.out_cache_loc[: bs * rp.t])

    pads = (f" after {reset} (the worker resets the shared buffers first)" if reset else "") + "".join(
        f" with {name}" for name in helpers) + (
        " with BaseCudaGraphRunner._pad_to_bucket" if "_pad_to_bucket" in own else "")
    detail = (f"{path}:{method}{pads}, whole, on a stand-in runner in {mode_name} mode: "
              "every request " + ("extends T tokens (no accept lengths given)" if extend else "drafts T tokens")
              + "; the graph replay and output post-processing stood in; bs and seq_lens as the draft attention "
              "backend's replay metadata call receives them, positions/out_cache_loc the buffers' first bs * T rows; "
              "the persistent buffers hold the case's stale values")
    return pad_graph_replay, detail, _SPEC_ASSUMED


NATIVE_FILL = "sglang/kernels/ops/speculative/multi_layer_eagle.py"
# What 0.5.23's multi-step draft-extend preparation reads, given here.
_MULTI_STEP_ASSUMED = ("fill_draft_extend_prepare_buffers = the release's fill_draft_extend_prepare_buffers_native "
                       "(the NPU path; the CUDA path's Triton kernel does not run here)",
                       "not staged (prepare(forward_batch), as the worker calls it when metadata staging does not apply)",
                       "every request accepts all T tokens (num_correct_drafts = T - 1)", *_SPEC_ASSUMED[1:])


def _bind_multi_step_prepare(rel: Release) -> Built:
    """0.5.23's ``MultiLayerEagleMultiStepDraftExtendCudaGraphRunner.prepare``: one shared buffer set padded once
    for every step's graph (the per-step runners' ``execute`` of 0.5.14 is gone). On CUDA its fill is a Triton
    kernel, which cannot run here: the release's torch twin (the NPU path) runs, and the cell says so."""
    import torch

    owner = "MultiLayerEagleMultiStepDraftExtendCudaGraphRunner"
    rel.loader().file(MULTI_LAYER_RUNNER).piece(f"{owner}.prepare")  # absent before 0.5.23
    native = rel.loader().load(rel.loader().file(NATIVE_FILL).piece("fill_draft_extend_prepare_buffers_native"))
    loader = rel.loader(fill_draft_extend_prepare_buffers=native, EagleDraftExtendInput=bind.Record)
    prepare = loader.load(loader.file(MULTI_LAYER_RUNNER).piece(f"{owner}.prepare"))
    own = {name: loader.load(loader.file(MULTI_LAYER_RUNNER).piece(f"{owner}.{name}"))
           for name in ("_stage_metadata", "_prepare_extra", "get_runner")}
    pad = loader.load(loader.file(BASE_GRAPH_RUNNER).piece("BaseCudaGraphRunner._pad_to_bucket"))

    def pad_graph_replay(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        rp = _Replay(args)
        attn = _AttentionSeen()
        batch = _spec_batch(rp, rp.r * rp.t)
        vars(batch.spec_info).update(num_correct_drafts=torch.full((rp.r,), rp.t - 1, dtype=torch.int32),
                                     num_accept_tokens=torch.full((rp.r,), rp.t, dtype=torch.int32))
        vars(batch).update(mamba_track_indices=None, input_ids=torch.zeros(rp.r * rp.t, dtype=torch.int64))
        backend = bind.Stub("DraftExtendAttnBackend", supports_draft_extend_metadata_staging=True,
                            init_forward_metadata_out_graph=attn,
                            methods={"draft_extend_metadata_captured_in_graph": lambda self: False})
        step = bind.Stub("MultiLayerEagleDraftExtendCudaGraphRunner",
                         methods={"_pad_to_bucket": lambda self, size, buckets: pad(size, buckets)})
        runner = bind.Stub(
            owner, methods=own, buffers=bind.Stub("MultiLayerEagleDraftExtendInputBuffers", **_spec_buffers(rp),
                                                  temperatures=None, sampling_seed=None),
            runners=[step], capture_bs=list(rp.sizes), captured_req_width=rp.t, num_front_tokens=0,
            seq_len_fill_value=rp.fill, require_mlp_tp_gather=False, require_gathered_buffer=False,
            draft_extend_attn_backend_list=[backend])
        prepare(runner, batch)
        bs, lens = attn.rows()
        if bs != runner.bs:
            raise AssertionError(f"prepare stored bs = {runner.bs} but staged the attention metadata for {bs} rows")
        return bs, lens, bind.to_numpy(rp.positions[: bs * rp.t]), bind.to_numpy(rp.out_cache_loc[: bs * rp.t])

    detail = (f"{MULTI_LAYER_RUNNER}:{owner}.prepare with its _stage_metadata and {BASE_GRAPH_RUNNER}:"
              f"BaseCudaGraphRunner._pad_to_bucket, the fill {NATIVE_FILL}:fill_draft_extend_prepare_buffers_native, on a "
              "stand-in runner in DRAFT_EXTEND_V2 mode: every request extends T tokens; bs and seq_lens as the staged "
              "draft-extend attention metadata receives them, positions/out_cache_loc the shared buffers' first bs * T "
              "rows; the persistent buffers hold the case's stale values")
    return pad_graph_replay, detail, _MULTI_STEP_ASSUMED


PIECEWISE_RUNNER = "sglang/srt/model_executor/piecewise_cuda_graph_runner.py"
PREFILL_RUNNER = "sglang/srt/model_executor/runner/prefill_cuda_graph_runner.py"


def _bind_token_keyed(rel: Release, path: str, method: str) -> Built:
    """The prefill (piecewise) CUDA-graph runner's replay preparation: found, and reported ``unbindable`` with
    what does not fit contract K, while it still pads by captured token counts (absent where it is not)."""
    piece = rel.loader().file(path).piece(method)
    if "capture_num_tokens" not in ast.unparse(piece.nodes[0]):
        raise bind.Unbindable(f"{path}:{method} no longer reads capture_num_tokens: how it pads is not known here")
    raise bind.Unbindable(
        f"{path}:{method} pads the step's token count up the captured token counts (capture_num_tokens) and keeps "
        "the step's R request rows unpadded (seq_lens and req_pool_indices are the step's own; attention runs "
        "outside the piecewise graph): contract K's padded batch size bs and its seq_lens[R:bs] rows have no "
        "counterpart here; its token padding (positions and out_cache_loc past the step's tokens) fits no contract yet")


def _bind_children_tokens(rel: Release, path: str) -> tuple[Callable[..., Any], str]:
    device = bind.Stub("ServerArgs", device="cpu")
    loader = rel.loader(global_server_args_dict={"device": "cpu"}, get_global_server_args=lambda: device,
                        get_device=lambda: device)
    tbo = loader.file(path)
    raw = loader.load(tbo.piece("TboForwardBatchPreparer.compute_tbo_children_num_token_non_padded_raw"))
    try:  # 0.5.23 moved the arithmetic into a static helper
        helper: Any = loader.load(tbo.piece("TboForwardBatchPreparer._split_num_token_non_padded"))
    except bind.Absent:
        helper = None
    cls = bind.Stub("TboForwardBatchPreparer", **({} if helper is None else {"_split_num_token_non_padded": helper}))

    def tbo_children_tokens(t: Any, m: Any, n: Any) -> tuple[int, int]:
        t, m, _n = check_children_args(t, m, n)
        a, b = (int(x) for x in bind.to_numpy(raw(cls, t, m)))
        return a, b

    detail = (f"{path}: TboForwardBatchPreparer.compute_tbo_children_num_token_non_padded_raw"
              + (" with its helper _split_num_token_non_padded" if helper is not None else "")
              + ", called with the case's t and M (the device the result moves to stood in by the CPU); N is not "
              "an argument of SGLang's: the padding is whatever lies past M")
    return tbo_children_tokens, detail


def _bind_dp_agree(rel: Release, path: str, *, per_tp_rank: bool) -> tuple[Callable[..., Any], str]:
    """``TboDPAttentionPreparer.compute_output`` once per rank over the gathered
    tensor, in the release's layout: ``(dp, attn_tp, 2)`` up to 0.5.3
    (``per_tp_rank``: the scheduler passes ``global_info[:, :, 4:6]``), ``(dp, 2)``
    from 0.5.8 (the flag and mode columns of ``MLPSyncBatchInfo``'s gathered rows)."""
    import torch

    is_all_same = rel.loader().load(rel.loader().file(path).piece("TboDPAttentionPreparer._is_all_same"))
    # the class's own name, as the static mode helper reads it, stood in by the piece it calls
    loader = rel.loader(TboDPAttentionPreparer=bind.Stub("TboDPAttentionPreparer", _is_all_same=is_all_same))
    tbo = loader.file(path)
    output = loader.load(tbo.piece("TboDPAttentionPreparer.compute_output"))
    global_mode = loader.load(tbo.piece("TboDPAttentionPreparer._compute_global_forward_mode"))
    forward_mode_cls: Any = loader.load(loader.file(FORWARD_BATCH_INFO).piece("ForwardMode"))
    names = {"extend": forward_mode_cls.EXTEND, "decode": forward_mode_cls.DECODE,
             "target_verify": forward_mode_cls.TARGET_VERIFY, "idle": forward_mode_cls.IDLE}
    back = {v: k for k, v in names.items()}

    def tbo_dp_agree(can_run_tbo: Any, forward_modes: Any, split_seq_index: Any,
                     enable_two_batch_overlap: Any) -> list[tuple[int | None, str | None]]:
        can, modes, idx, enabled = check_dp_args(can_run_tbo, forward_modes, split_seq_index, enable_two_batch_overlap)
        rows = torch.tensor([[int(c), int(names[m].value)] for c, m in zip(can, modes, strict=True)], dtype=torch.int64)
        gathered = rows[:, None, :] if per_tp_rank else rows
        out = []
        for r in range(len(can)):  # every rank calls it on the same gathered tensor, with its own split index
            preparer = bind.Stub("TboDPAttentionPreparer", enable_two_batch_overlap=enabled,
                                 local_tbo_split_seq_index=idx[r], _compute_global_forward_mode=global_mode)
            split, mode = output(preparer, gathered.clone())
            if mode is not None and mode not in back:
                raise AssertionError(f"compute_output gave rank {r} the mode {mode!r}, none of the case's modes")
            out.append((split, None if mode is None else back[mode]))
        return out

    layout = "(dp, attn_tp = 1, 2)" if per_tp_rank else "(dp, 2)"
    detail = (f"{path}: TboDPAttentionPreparer.compute_output with its _compute_global_forward_mode and _is_all_same, "
              f"called once per rank on one int64 tensor of layout {layout} (each rank's flag and the release's "
              "ForwardMode value), over a stand-in preparer holding the rank's split index and the enable switch; "
              "the release's ForwardMode cut out of the same tree; the mode it returns mapped back to the case's names")
    return tbo_dp_agree, detail


_TBO_PROBE = ("extend", np.array([3, 1], dtype=np.int32), 0.48)
_DP_PROBE = ([True, True], ["decode", "idle"], [1, 0], True)
_REPLAY_PROBE = tuple(np.asarray(v) if isinstance(v, list) else v for v in (
    [2, 4], [5], [3], [7], 1, 1, [9] * 4, [9] * 4, [9] * 4))

SPECS = (
    Spec(f"{TBO_OLD}:compute_split_token_index", "tbo_split", functools.partial(_bind_tbo_split, path=TBO_OLD), _TBO_PROBE),
    Spec(f"{TBO_NEW}:compute_split_token_index", "tbo_split", functools.partial(_bind_tbo_split, path=TBO_NEW), _TBO_PROBE),
    Spec(f"{TBO_OLD}:TboForwardBatchPreparer.compute_tbo_children_num_token_non_padded_raw", "tbo_children_tokens",
         functools.partial(_bind_children_tokens, path=TBO_OLD), (3, 5, 8)),
    Spec(f"{TBO_NEW}:TboForwardBatchPreparer.compute_tbo_children_num_token_non_padded_raw", "tbo_children_tokens",
         functools.partial(_bind_children_tokens, path=TBO_NEW), (3, 5, 8)),
    Spec(f"{TBO_OLD}:TboDPAttentionPreparer.compute_output", "tbo_dp_agree",
         functools.partial(_bind_dp_agree, path=TBO_OLD, per_tp_rank=True), _DP_PROBE),
    Spec(f"{TBO_NEW}:TboDPAttentionPreparer.compute_output", "tbo_dp_agree",
         functools.partial(_bind_dp_agree, path=TBO_NEW, per_tp_rank=False), _DP_PROBE),
    Spec(f"{CUDA_GRAPH_RUNNER}:CudaGraphRunner.replay_prepare", "pad_graph_replay", _bind_model_runner, _REPLAY_PROBE),
    Spec(f"{EAGLE_DRAFT_RUNNER}:EAGLEDraftCudaGraphRunner.replay", "pad_graph_replay", _bind_eagle_draft, _REPLAY_PROBE),
    Spec(f"{DECODE_RUNNER}:DecodeCudaGraphRunner.load_batch", "pad_graph_replay", _bind_decode_runner, _REPLAY_PROBE),
    Spec(f"{EAGLE_DRAFT_RUNNER}:EAGLEDraftCudaGraphRunner.execute", "pad_graph_replay",
         functools.partial(_bind_spec_runner, path=EAGLE_DRAFT_RUNNER, method="EAGLEDraftCudaGraphRunner.execute",
                           extend=False), _REPLAY_PROBE),
    Spec(f"{EAGLE_DRAFT_EXTEND_RUNNER}:EAGLEDraftExtendCudaGraphRunner.replay", "pad_graph_replay",
         functools.partial(_bind_spec_runner, path=EAGLE_DRAFT_EXTEND_RUNNER,
                           method="EAGLEDraftExtendCudaGraphRunner.replay", extend=True), _REPLAY_PROBE),
    Spec(f"{EAGLE_DRAFT_EXTEND_RUNNER}:EAGLEDraftExtendCudaGraphRunner.execute", "pad_graph_replay",
         functools.partial(_bind_spec_runner, path=EAGLE_DRAFT_EXTEND_RUNNER,
                           method="EAGLEDraftExtendCudaGraphRunner.execute", extend=True), _REPLAY_PROBE),
    Spec(f"{MULTI_LAYER_RUNNER}:MultiLayerEagleDraftExtendCudaGraphRunner.replay", "pad_graph_replay",
         functools.partial(_bind_spec_runner, path=MULTI_LAYER_RUNNER, method="MultiLayerEagleDraftExtendCudaGraphRunner.replay",
                           extend=True, helpers=("init_replay_state",), reset=_MULTI_STEP_RESET), _REPLAY_PROBE),
    Spec(f"{MULTI_LAYER_RUNNER}:MultiLayerEagleDraftExtendCudaGraphRunner.execute", "pad_graph_replay",
         functools.partial(_bind_spec_runner, path=MULTI_LAYER_RUNNER, method="MultiLayerEagleDraftExtendCudaGraphRunner.execute",
                           extend=True, helpers=("init_replay_state",), reset=_MULTI_STEP_RESET), _REPLAY_PROBE),
    Spec(f"{MULTI_LAYER_RUNNER}:MultiLayerEagleMultiStepDraftExtendCudaGraphRunner.prepare", "pad_graph_replay",
         _bind_multi_step_prepare, _REPLAY_PROBE),
    Spec(f"{PIECEWISE_RUNNER}:PiecewiseCudaGraphRunner.replay_prepare", "pad_graph_replay",
         functools.partial(_bind_token_keyed, path=PIECEWISE_RUNNER, method="PiecewiseCudaGraphRunner.replay_prepare"),
         _REPLAY_PROBE),
    Spec(f"{PREFILL_RUNNER}:PrefillCudaGraphRunner.load_batch", "pad_graph_replay",
         functools.partial(_bind_token_keyed, path=PREFILL_RUNNER, method="PrefillCudaGraphRunner.load_batch"),
         _REPLAY_PROBE),
)


_ENGINE = Engine(ENGINE, ReleaseSource, SPECS)
binding_plan = _ENGINE.binding_plan
bindings = _ENGINE.bindings
resolve = _ENGINE.resolve
