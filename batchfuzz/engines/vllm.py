"""vLLM's own batch-layout functions as batchfuzz targets.

Each binding cuts one function (or the statements of a method that do one
job) out of a vLLM release's source text with ``batchfuzz.bind`` and runs it
unchanged over stand-ins of the engine objects it reads, on a machine with no
GPU and none of vLLM's dependencies (only numpy and torch on the CPU). A
release comes from a wheel (read as a zip), a source checkout or the
installed distribution (``ReleaseSource``). docs/vllm-code.md describes the
functions release by release.

The bindings (paths inside the release, under ``vllm/v1/worker/``):

- ``gpu/input_batch.py:InputBatch.make_dummy`` (MRV2) as ``split_dummy_tokens``
  (its ``num_scheduled_tokens``) and as ``make_dummy`` (stale ``DummyBuffers``
  copied into the engine's own ``InputBuffers``, built by its ``__init__``,
  and back);
- ``gpu/model_runner.py:GPUModelRunner._dummy_run`` (MRV2) as
  ``split_dummy_tokens``: the statements writing ``num_tokens_per_request``;
- ``gpu/lora_utils.py:create_lora_capture_hook`` as ``split_dummy_tokens``: the
  counts its hook passes to ``runner.maybe_select_dummy_loras``;
- ``gpu_model_runner.py:GPUModelRunner._dummy_run`` (v1) as
  ``split_dummy_tokens`` (the statements writing ``num_scheduled_tokens_list``),
  as ``make_dummy`` (the whole dummy layout up to the attention metadata: the
  statements writing ``attn_metadata``, ``logit_indices`` and
  ``num_sampled_tokens``, over a stand-in model runner's persistent buffers) and as
  ``pad_query_start_loc`` (the statements writing ``self.query_start_loc``,
  whose ``.np`` is the contract's ``out``);
- ``ubatch_utils.py:maybe_create_ubatch_slices`` as ``split_ubatches``, after
  the refusal its caller applies (``dp_utils.py:_post_process_ubatch`` on one
  data-parallel rank's votes);
- ``gpu_model_runner.py:GPUModelRunner._allow_microbatching`` (v1, 0.28.0 and
  later) as ``allow_microbatching``, on a stand-in input batch and block tables;
- ``ubatch_utils.py:split_attn_metadata`` (v1) as ``slice_ubatch_metadata``,
  over the release's own ``CommonAttentionMetadata`` built from the step;
- ``gpu/ubatch_utils.py:UBatchRunner.prepare`` (MRV2, 0.33.0) as
  ``slice_ubatch_metadata``: ``create_ubatch_slices`` and
  ``_slice_input_batch`` over the release's own ``InputBatch``, with
  ``DefaultModelState.prepare_attn``; the result is what it passes to
  ``build_attn_metadata``;
- ``vllm/v1/attention/backends/utils.py:reorder_batch_to_split_decodes_and_prefills``,
  ``split_decodes_and_prefills``, ``split_decodes_prefills_and_extends`` and
  ``gpu_model_runner.py:GPUModelRunner.calculate_reorder_batch_threshold`` as
  ``batch_order``, each inside batchfuzz's pipeline for the step (the other
  three jobs batchfuzz's own), on a stand-in input batch and attention metadata;
- ``gpu_model_runner.py:GPUModelRunner._get_cumsum_and_arange`` and
  ``_calc_spec_decode_metadata`` as ``spec_decode_metadata``, on a stand-in
  model runner with ``arange_np`` sized as the model runner sizes it;
- ``dp_utils.py:coordinate_batch_across_dp`` (v1) and
  ``gpu/dp_utils.py:sync_cudagraph_and_dp_padding`` (the new model runner) as
  ``coordinate_dp``: rank functions (``rank_function(ref)``) run as one process
  per rank by ``batchfuzz.distributed``, their all-reduce on the real process
  group, the new model runner's CUDA-graph manager stood in by one built from the
  case's capture sizes (docs/dp-coordination.md).

Then every copy of the split that ``split_search`` finds in the release, as
``split_dummy_tokens`` (docs/split-copies.md).

A function a release lacks is "absent"; one whose code no longer fits its
binding (a name no one provides, a signature or attribute that changed, a
fragment that is not there) is "unbindable" with the reason. ``bindings``
lists all of them for a release; ``resolve(ref)`` rebuilds one in a fresh
process. Every binding is checked under its contract's ``engine`` domain
(docs/contracts.md): the inputs the engine's callers really produce (the v1
query_start_loc fill only ever sees R >= 1 and a buffer whose [0] is 0).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from batchfuzz import bind, distributed
from batchfuzz import engines as _engines
from batchfuzz.bind import Record, Recorder, Stub
from batchfuzz.engines import Bound, SourceError, _vllm_graphs, split_search
from batchfuzz.impl import batch_order_numpy, spec_decode_metadata_numpy
from batchfuzz.impl._dp import per_rank_args, ranks_target
from batchfuzz.preconditions import assumes, domain
from batchfuzz.reference import split_ubatches as ubatch_oracle
from batchfuzz.reference import split_uniform_ubatches as uniform_oracle
from batchfuzz.reference.coordinate_dp import RankDecision
from batchfuzz.reference.make_dummy import DummyBatch, DummyBuffers
from batchfuzz.reference.slice_ubatch_metadata import UbatchMetadata
from batchfuzz.reference.spec_decode_metadata import SpecDecodeIndices, check_spec_args
from batchfuzz.strategies.slice_ubatch_metadata import every_microbatch_has_a_real_token

ENGINE = "vllm"
# The releases of the published matrix (docs/vllm-matrix.json; batchfuzz engine vllm --all-releases).
RELEASES = ("0.22.0", "0.23.0", "0.26.0", "0.27.0", "0.28.0", "0.33.0", "0.34.0")

INPUT_BATCH = "vllm/v1/worker/gpu/input_batch.py"
MRV2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
LORA_UTILS = "vllm/v1/worker/gpu/lora_utils.py"
V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
UBATCH_UTILS = "vllm/v1/worker/ubatch_utils.py"
ATTN_UTILS = "vllm/v1/attention/backends/utils.py"
DP_UTILS = "vllm/v1/worker/dp_utils.py"
MRV2_DP_UTILS = "vllm/v1/worker/gpu/dp_utils.py"
MRV2_CG_UTILS = "vllm/v1/worker/gpu/cudagraph_utils.py"


class ReleaseSource(_engines.ReleaseSource):
    """A vLLM release's files: ``from_wheel``, ``from_dir``, ``installed``, ``from_ref``."""

    distribution = "vllm"
    package = "vllm"


# Names the cut-outs read that no file of theirs defines in a form that can
# be cut out (a logger made at import time).
_STAND_INS: dict[str, Any] = {"logger": logging.getLogger("batchfuzz.engines.vllm")}


# What a binding's builder gives: the target and what was cut out, and optionally the configuration values it assumed.
_Built = tuple[Callable[..., Any], str] | tuple[Callable[..., Any], str, tuple[str, ...]]


class _Release:
    """One release: its source and the files parsed so far (shared by every binding)."""

    def __init__(self, source: _engines.ReleaseSource) -> None:
        self.source = source
        self.files: dict[str, bind.SourceFile] = {}

    def loader(self, **stand_ins: Any) -> bind.Loader:
        """A loader of this release's files; ``stand_ins`` add to the module's own."""
        return bind.Loader(self.source, "vllm", stand_ins={**_STAND_INS, **stand_ins}, files=self.files)


# ---------------------------------------------------------------- MRV2 InputBatch.make_dummy (A, B)


def _make_dummy_parts(rel: _Release) -> tuple[Callable[..., Any], Callable[..., Any], str]:
    loader = rel.loader()
    f = loader.file(INPUT_BATCH)
    piece = f.piece("InputBatch.make_dummy")
    if piece.kind != "classmethod":
        raise bind.Unbindable(f"{piece.label} is no longer a classmethod")
    init_piece = f.piece("InputBuffers.__init__")
    detail = f"{piece.label}; buffers from {init_piece.label} on the CPU; cls = a Record of its keyword arguments"
    return loader.load(piece), loader.load(init_piece), detail


def _input_buffers(init: Callable[..., Any], max_num_reqs: int, max_num_tokens: int) -> Stub:
    """The engine's own InputBuffers, built by its ``__init__`` on the CPU."""
    buffers = Stub("InputBuffers")
    init(buffers, max_num_reqs=max_num_reqs, max_num_tokens=max_num_tokens, device=torch.device("cpu"))
    return buffers


def _split_args(num_reqs: Any, num_tokens: Any) -> tuple[int, int]:
    r = bind.count("num_reqs", num_reqs, 1)
    n = bind.count("num_tokens", num_tokens, 1)
    if r > n:
        raise ValueError(f"num_reqs must be <= num_tokens, got num_reqs={r}, num_tokens={n}")
    return r, n


def _bind_make_dummy_split(rel: _Release) -> tuple[Callable[..., Any], str]:
    make_dummy, init, detail = _make_dummy_parts(rel)

    def split_dummy_tokens(num_reqs: Any, num_tokens: Any) -> np.ndarray:
        r, n = _split_args(num_reqs, num_tokens)
        batch = make_dummy(Record, r, n, _input_buffers(init, r, n))
        return np.asarray(batch.num_scheduled_tokens).copy()

    return split_dummy_tokens, detail + "; result: its num_scheduled_tokens"


_BUFFER_FIELDS = ("seq_lens", "query_start_loc", "positions", "input_ids")


def _bind_make_dummy_layout(rel: _Release) -> tuple[Callable[..., Any], str]:
    make_dummy, init, detail = _make_dummy_parts(rel)

    def make_dummy_layout(num_reqs: Any, num_tokens: Any, buffers: DummyBuffers) -> DummyBatch:
        r, n = _split_args(num_reqs, num_tokens)
        if not isinstance(buffers, DummyBuffers):
            raise TypeError(f"buffers must be a DummyBuffers, got {type(buffers).__name__}")
        if r > buffers.max_num_reqs or n > buffers.max_num_tokens:
            raise ValueError(f"buffers of capacity max_num_reqs={buffers.max_num_reqs}, max_num_tokens={buffers.max_num_tokens} "
                             f"cannot hold num_reqs={r}, num_tokens={n}")
        engine = _input_buffers(init, buffers.max_num_reqs, buffers.max_num_tokens)
        for name in _BUFFER_FIELDS:  # the stale contents, in the engine's own dtypes
            theirs, ours = getattr(engine, name), bind.int_array(f"buffers.{name}", getattr(buffers, name), minimum=None)
            if tuple(theirs.shape) != ours.shape:
                raise bind.Unbindable(f"the engine's InputBuffers.{name} has shape {tuple(theirs.shape)}, buffers.{name} {ours.shape}")
            theirs.copy_(torch.from_numpy(bind.cast_exact(f"buffers.{name}", ours, bind.to_numpy(theirs).dtype)))
        batch = make_dummy(Record, r, n, engine)
        for name in _BUFFER_FIELDS:  # and back: the caller's buffers are the persistent ones
            getattr(buffers, name)[...] = bind.to_numpy(getattr(engine, name))
        return DummyBatch(
            num_scheduled_tokens=np.asarray(batch.num_scheduled_tokens).copy(),
            seq_lens=bind.to_numpy(engine.seq_lens).copy(), query_start_loc=bind.to_numpy(engine.query_start_loc).copy(),
            positions=bind.to_numpy(batch.positions).copy(), input_ids=bind.to_numpy(batch.input_ids).copy(),
            idx_mapping=bind.to_numpy(batch.idx_mapping).copy(), logits_indices=bind.to_numpy(batch.logits_indices).copy(),
            cu_num_logits=bind.to_numpy(batch.cu_num_logits).copy(),
        )

    return make_dummy_layout, detail + "; seq_lens and query_start_loc: the whole buffers"


# ---------------------------------------------------------------- the two _dummy_run splits and the LoRA hook (A)


def _bind_mrv2_dummy_run(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(MRV2_RUNNER).fragment("GPUModelRunner._dummy_run", bind.Writes("num_tokens_per_request"), ("self", "num_tokens"))
    run = loader.load(piece)

    def split_dummy_tokens(num_reqs: Any, num_tokens: Any) -> np.ndarray:
        r, n = _split_args(num_reqs, num_tokens)
        model_runner = Stub("GPUModelRunner", max_num_reqs=r, speculator=None)
        return np.asarray(run(model_runner, n)["num_tokens_per_request"])

    return split_dummy_tokens, f"{piece.label}; self.max_num_reqs = num_reqs (so R = min(N, max_num_reqs) = R), no speculator"


def _bind_lora_hook(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(LORA_UTILS).piece("create_lora_capture_hook")
    create = loader.load(piece)

    def split_dummy_tokens(num_reqs: Any, num_tokens: Any) -> np.ndarray:
        r, n = _split_args(num_reqs, num_tokens)
        select = Recorder("runner.maybe_select_dummy_loras")
        hook = create(Stub("lora_config", max_loras=1), Stub("runner", maybe_select_dummy_loras=select))
        if hook is None:
            raise bind.Unbindable("create_lora_capture_hook returned no hook for a LoRA config")
        hook(num_active_loras=1, num_reqs=r, num_tokens=n)
        return np.asarray(select.last.arg(1, "num_scheduled_tokens")).copy()

    return split_dummy_tokens, f"{piece.label}; the counts the hook passes to runner.maybe_select_dummy_loras"


def _bind_v1_dummy_run(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(V1_RUNNER).fragment("GPUModelRunner._dummy_run", bind.Writes("num_scheduled_tokens_list"), ("self", "num_tokens"))
    run = loader.load(piece)

    def split_dummy_tokens(num_reqs: Any, num_tokens: Any) -> np.ndarray:
        r, n = _split_args(num_reqs, num_tokens)
        model_runner = Stub("GPUModelRunner", uniform_decode_query_len=1, scheduler_config=Stub("scheduler_config", max_num_seqs=r))
        return np.asarray(run(model_runner, n)["num_scheduled_tokens_list"])

    return split_dummy_tokens, (f"{piece.label}; scheduler_config.max_num_seqs = num_reqs, a mixed (not uniform-decode, "
                                "not create_mixed_batch) dummy run")


# ---------------------------------------------------------------- the v1 dummy run as a whole (B)

# The mixed-batch branch's locals, read (per the flow analysis) by the
# seq_lens statements but only on that branch: the binding runs a mixed dummy
# run without create_mixed_batch, so neither is ever evaluated.
_V1_DUMMY_STAND_INS: dict[str, Any] = {
    "num_decode_tokens": bind.unreachable("num_decode_tokens (create_mixed_batch is False)"),
    "num_prefill_tokens": bind.unreachable("num_prefill_tokens (create_mixed_batch is False)"),
}


@dataclass
class _V1DummyRun:
    """The cut-out statements of the v1 ``_dummy_run`` up to its attention
    metadata and its logits indices, and the enum value of a FULL graph."""

    layout: Callable[..., Any]
    logits: Callable[..., Any]
    sampled: Callable[..., Any]
    full: Any
    cumsum_and_arange: Callable[..., Any]
    label: str


def _v1_dummy_run_parts(rel: _Release) -> _V1DummyRun:
    loader = bind.Loader(rel.source, "vllm", stand_ins={**_STAND_INS, **_V1_DUMMY_STAND_INS}, files=rel.files)
    f = loader.file(V1_RUNNER)
    layout = f.fragment("GPUModelRunner._dummy_run", bind.Writes("attn_metadata"), ("self", "num_tokens", "cudagraph_runtime_mode"))
    logits = f.fragment("GPUModelRunner._dummy_run", bind.Writes("logit_indices"), ("self", "num_tokens"))
    sampled = f.fragment("GPUModelRunner._dummy_run", bind.Writes("num_sampled_tokens"), ("self", "num_tokens"))
    run, last, ones = loader.load(layout), loader.load(logits), loader.load(sampled)
    mode = loader.namespace(V1_RUNNER).get("CUDAGraphMode")
    if mode is None or not hasattr(mode, "FULL"):
        raise bind.Unbindable(f"{layout.label} does not read CUDAGraphMode.FULL (the FULL-graph branch changed)")
    helper = loader.load(f.piece("GPUModelRunner._get_cumsum_and_arange"))
    return _V1DummyRun(run, last, ones, mode.FULL, helper, f"{layout.label}, {logits.label} and {sampled.label}")


def _torch_copy(name: str, values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A torch CPU tensor of the engine's dtype holding ``values`` exactly."""
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    return torch.from_numpy(bind.cast_exact(name, bind.int_array(name, values, minimum=None), np_dtype).copy())


def _bind_v1_dummy_layout(rel: _Release) -> tuple[Callable[..., Any], str]:
    parts = _v1_dummy_run_parts(rel)

    def make_dummy_layout(num_reqs: Any, num_tokens: Any, buffers: DummyBuffers) -> DummyBatch:
        r, n = _split_args(num_reqs, num_tokens)
        if not isinstance(buffers, DummyBuffers):
            raise TypeError(f"buffers must be a DummyBuffers, got {type(buffers).__name__}")
        cap_r, cap_n = buffers.max_num_reqs, buffers.max_num_tokens
        if r > cap_r or n > cap_n:
            raise ValueError(f"buffers of capacity max_num_reqs={cap_r}, max_num_tokens={cap_n} "
                             f"cannot hold num_reqs={r}, num_tokens={n}")
        # The model runner's persistent buffers, in the dtypes its __init__ gives
        # them, holding the caller's stale values.
        qsl = bind.cast_exact("buffers.query_start_loc", bind.int_array("buffers.query_start_loc", buffers.query_start_loc,
                                                                          minimum=None), np.int32).copy()
        seq_cpu = _torch_copy("buffers.seq_lens", buffers.seq_lens, torch.int32)
        input_ids = bind.cpu_gpu_buffer(bind.cast_exact("buffers.input_ids", bind.int_array(
            "buffers.input_ids", buffers.input_ids, minimum=None), np.int32).copy())
        positions = _torch_copy("buffers.positions", buffers.positions, torch.int64)
        commit = Recorder("input_batch.block_table.commit_block_table")
        build = Recorder("_build_attention_metadata", returns=(None, None))
        # One FULL graph of exactly N tokens whose request count is padded to
        # the whole buffer: every slot past R is a padded request.
        desc = Stub("BatchDescriptor", num_tokens=n, num_reqs=cap_r)
        model_runner = Stub(
            "GPUModelRunner", uniform_decode_query_len=1, max_num_tokens=cap_n,
            scheduler_config=Stub("scheduler_config", max_num_seqs=r),
            dcp_world_size=1, parallel_config=Stub("parallel_config", cp_kv_cache_interleave_size=1),
            vllm_config=Stub("vllm_config", parallel_config=Stub("parallel_config", num_ubatches=2)),
            optimistic_seq_lens_cpu=seq_cpu, seq_lens=seq_cpu.clone(), query_start_loc=bind.cpu_gpu_buffer(qsl),
            query_pos=bind.cpu_gpu_buffer(np.zeros(cap_n, dtype=np.int64)), arange_np=np.arange(cap_n + 1, dtype=np.int64),
            input_ids=input_ids, positions=positions, speculative_config=None,
            input_batch=Stub("InputBatch", block_table=Stub("MultiGroupBlockTable", commit_block_table=commit)),
            _build_attention_metadata=build,
            methods={
                "_determine_batch_execution_and_padding": lambda self, **kw: (parts.full, desc, False, None, None),
                "_get_slot_mappings": lambda self, **kw: (None, None),
                "synchronize_input_prep": lambda self: contextlib.nullcontext(),
                "_get_cumsum_and_arange": parts.cumsum_and_arange,
            })
        local = parts.layout(model_runner, n, parts.full)
        logit_indices = parts.logits(model_runner, n)["logit_indices"]
        nst = np.asarray(local["num_scheduled_tokens"]).copy()
        built = build.last
        p = int(built.kwargs.get("num_reqs", -1))
        if commit.calls and int(commit.last.arg(0, "num_reqs")) != p:
            raise bind.Unbindable(f"the dummy run commits {commit.last.arg(0, 'num_reqs')} block-table rows but builds "
                                  f"attention metadata over {p} requests")
        seq_lens = bind.to_numpy(model_runner.seq_lens).copy()  # what the attention metadata reads (the device copy)
        buffers.seq_lens[...] = seq_lens
        buffers.query_start_loc[...] = qsl
        buffers.positions[...] = bind.to_numpy(positions)
        buffers.input_ids[...] = input_ids.np
        # The tokens the model runs on: the persistent buffers' first N entries.
        mql = built.kwargs.get("max_query_len")
        return DummyBatch(
            num_scheduled_tokens=nst, seq_lens=seq_lens, query_start_loc=qsl.copy(),
            positions=bind.to_numpy(positions)[:n].copy(), input_ids=input_ids.np[:n].copy(),
            # v1 has no index mapping: dummy request i is input-batch row i.
            idx_mapping=np.arange(nst.size), logits_indices=np.asarray(logit_indices).copy(),
            # One sampled token per request: the run's own num_sampled_tokens.
            cu_num_logits=np.concatenate([[0], np.cumsum(parts.sampled(model_runner, n)["num_sampled_tokens"])]),
            max_query_len=None if mql is None else int(mql),
        )

    return make_dummy_layout, (f"{parts.label}; a mixed dummy run (not uniform decode, not create_mixed_batch) with "
                               "scheduler_config.max_num_seqs = R and cudagraph_runtime_mode FULL; the dispatcher "
                               "(stand-in) pads the request count to the whole buffer and no tokens; no DCP, no "
                               "microbatching; seq_lens: the device copy over the whole buffer; query_start_loc: the "
                               "whole buffer; positions/input_ids: the persistent buffers the model reads; idx_mapping: "
                               "rows 0..R-1; cu_num_logits: the running sum of its num_sampled_tokens; max_query_len: "
                               "what _build_attention_metadata is given")


# ---------------------------------------------------------------- the v1 dummy run's query_start_loc fill (C)


def _bind_v1_query_start_loc(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    f = loader.file(V1_RUNNER)
    piece = f.fragment("GPUModelRunner._dummy_run", bind.Writes("self.query_start_loc"),
                       ("self", "num_reqs", "num_reqs_padded", "num_scheduled_tokens"))
    run = loader.load(piece)
    methods = {}
    if f.has("GPUModelRunner._get_cumsum_and_arange"):
        methods["_get_cumsum_and_arange"] = loader.load(f.piece("GPUModelRunner._get_cumsum_and_arange"))

    def pad_query_start_loc(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
        nst = bind.int_array("num_scheduled_tokens", num_scheduled_tokens)
        r, p = nst.size, bind.count("num_reqs_padded", num_reqs_padded)
        if p < r:
            raise ValueError(f"num_reqs_padded must be >= len(num_scheduled_tokens) = {r}, got {p}")
        if out is None:
            buf = np.zeros(p + 1, dtype=np.int32)  # a fresh persistent buffer (int32, as the engine's)
        else:
            buf = bind.int_array("out", out, minimum=None)
            if buf.size < p + 1:
                raise ValueError(f"out has {buf.size} entries, needs at least num_reqs_padded + 1 = {p + 1}")
        total = int(nst.sum())
        model_runner = Stub("GPUModelRunner", query_start_loc=bind.cpu_gpu_buffer(buf),
                      query_pos=bind.cpu_gpu_buffer(np.zeros(max(total, 1), dtype=np.int64)),
                      arange_np=np.arange(max(total, 1) + 1, dtype=np.int64), methods=methods)
        run(model_runner, r, p, nst)
        return buf[: p + 1]

    helpers = " and GPUModelRunner._get_cumsum_and_arange" if methods else ""
    return pad_query_start_loc, (f"{piece.label}{helpers}; num_reqs = len(nst), num_reqs_padded = P, "
                                 "self.query_start_loc.np = out; result: out[:P+1]")


def _bind_mrv2_query_start_loc(rel: _Release) -> _Built:
    """The new runner's ``prepare_inputs`` fill of ``query_start_loc_np``: the
    real offsets, every later slot the step's token count, cut to the padded
    request count ``batch_desc.num_reqs`` (a FULL graph's, from the CUDA-graph
    manager's dispatch; ``None`` for PIECEWISE/eager, then ``num_reqs``)."""
    loader = rel.loader()
    piece = loader.file(MRV2_RUNNER).fragment(
        "GPUModelRunner.prepare_inputs", bind.Writes("query_start_loc_np"),
        ("self", "num_reqs", "num_tokens", "num_scheduled_tokens_np", "num_scheduled_tokens", "batch_desc"))
    run = loader.load(piece)

    def pad_query_start_loc(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
        nst = bind.int_array("num_scheduled_tokens", num_scheduled_tokens)
        r, p = nst.size, bind.count("num_reqs_padded", num_reqs_padded)
        if p < r:
            raise ValueError(f"num_reqs_padded must be >= len(num_scheduled_tokens) = {r}, got {p}")
        buf = None if out is None else bind.int_array("out", out, minimum=None)
        if buf is not None and buf.size < p + 1:
            raise ValueError(f"out has {buf.size} entries, needs at least num_reqs_padded + 1 = {p + 1}")
        # The engine sizes its host array by max_num_reqs: the buffer's capacity.
        capacity = p if buf is None else buf.size - 1
        model_runner = Stub("GPUModelRunner", max_num_reqs=capacity)
        desc = Stub("BatchExecutionDescriptor", num_reqs=p)
        counts = nst.astype(np.int32)  # named num_scheduled_tokens up to 0.27.0, num_scheduled_tokens_np later
        result = np.asarray(run(model_runner, r, int(nst.sum()), counts, counts, desc)["query_start_loc_np"])
        if buf is None:
            return result
        buf[: result.size] = result  # the engine fills a fresh host array; its copy lands in the persistent buffer
        return buf[: p + 1]

    return pad_query_start_loc, (f"{piece.label}; num_reqs = len(nst), num_tokens = sum(nst) (the scheduler's "
                                 "total), batch_desc.num_reqs = P, self.max_num_reqs = P or len(out) - 1; "
                                 "with out, the engine's array is copied into out[:P+1]")


# ---------------------------------------------------------------- ubatch split with the DP refusal (D)


def _bind_ubatch_slices(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(UBATCH_UTILS).piece("maybe_create_ubatch_slices")
    refusal = loader.file(DP_UTILS).piece("_post_process_ubatch")
    create, vote = loader.load(piece), loader.load(refusal)

    def split_ubatches(num_scheduled_tokens: Any, num_tokens_padded: Any, num_reqs_padded: Any, num_ubatches: Any
                       ) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
        nst = bind.int_array("num_scheduled_tokens", num_scheduled_tokens, minimum=1)
        n_padded = bind.count("num_tokens_padded", num_tokens_padded, 1)
        r_padded = bind.count("num_reqs_padded", num_reqs_padded, 1)
        n = bind.count("num_ubatches", num_ubatches, 2)
        total = int(nst.sum())
        if nst.size == 0 or n_padded < total or n_padded < n or r_padded < nst.size:
            raise ValueError(f"need len(num_scheduled_tokens) >= 1, num_tokens_padded >= sum = {total} and >= num_ubatches = {n}, "
                             f"num_reqs_padded >= {nst.size}; got num_tokens_padded={n_padded}, num_reqs_padded={r_padded}")
        # One data-parallel rank's all-reduced votes: tokens, padded tokens, wants to split, graph mode.
        votes = torch.tensor([[total], [n_padded], [1], [0]], dtype=torch.int32)
        should_ubatch = vote(votes, n)
        _, padded = create(should_ubatch, nst, n_padded, r_padded, n)
        return bind.slice_pairs(padded)

    return split_ubatches, (f"{piece.label}, should_ubatch from {refusal.label} on one rank's votes; result: the padded "
                            "UBatchSlices as ((rs, re), (ts, te))")


def _split_not_refused(num_scheduled_tokens: Any, num_tokens_padded: Any, num_reqs_padded: Any, num_ubatches: Any) -> bool:
    """The steps contract D does not refuse: the new model runner has no refusal of its own (its DP sync decided the
    split; an empty microbatch runs as a dummy), so it is compared with D where D splits."""
    total = int(np.sum(np.asarray(num_scheduled_tokens)))
    return not ubatch_oracle.refuses(total, int(num_tokens_padded), int(num_ubatches))


def _bind_mrv2_ubatch_slices(rel: _Release) -> _Built:
    loader = rel.loader(UBatchSlices=list)
    piece = loader.file(MRV2_UBATCH_UTILS).piece("create_ubatch_slices")
    create = loader.load(piece)
    uniform = "uniform_token_count" in inspect.signature(create).parameters

    def split_ubatches(num_scheduled_tokens: Any, num_tokens_padded: Any, num_reqs_padded: Any, num_ubatches: Any
                       ) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
        nst = bind.int_array("num_scheduled_tokens", num_scheduled_tokens, minimum=1)
        n_padded = bind.count("num_tokens_padded", num_tokens_padded, 1)
        r_padded = bind.count("num_reqs_padded", num_reqs_padded, 1)
        n = bind.count("num_ubatches", num_ubatches, 2)
        if nst.size == 0 or n_padded < int(nst.sum()) or r_padded < nst.size:
            raise ValueError(f"need len(num_scheduled_tokens) >= 1, num_tokens_padded >= sum = {int(nst.sum())}, "
                             f"num_reqs_padded >= {nst.size}; got num_tokens_padded={n_padded}, num_reqs_padded={r_padded}")
        batch = Stub("InputBatch", num_scheduled_tokens=bind.cast_exact("num_scheduled_tokens", nst, np.int32),
                     num_tokens_after_padding=n_padded, num_reqs_after_padding=r_padded, num_reqs=int(nst.size))
        return bind.slice_pairs(create(batch, n, None) if uniform else create(batch, n))

    target = assumes(_split_not_refused)(split_ubatches)
    assumed = ("uniform_token_count=None",) if uniform else ()
    return target, (f"{piece.label} with maybe_create_ubatch_slices over a stand-in InputBatch (num_scheduled_tokens, "
                    "num_tokens_after_padding = Np, num_reqs_after_padding = Rp); checked on the steps contract D does not "
                    "refuse (the new runner splits whatever its DP sync agreed to split)"
                    + ("; uniform_token_count None: the request-boundary cut of a uniform spec-decode batch is not contract "
                       "D's split and is not checked here" if uniform else "")), assumed


def _bind_mrv2_uniform_slices(rel: _Release) -> _Built:
    """``create_ubatch_slices`` given a uniform spec-decode batch: every request
    ``q`` tokens and ``uniform_token_count = q``, the count the DP sync agreed."""
    loader = rel.loader(UBatchSlices=list)
    piece = loader.file(MRV2_UBATCH_UTILS).piece("create_ubatch_slices")
    create = loader.load(piece)
    if "uniform_token_count" not in inspect.signature(create).parameters:
        raise bind.Absent(f"{piece.label} takes no uniform_token_count: this release cuts every batch at the token "
                          "midpoint (contract D's row)")

    def split_uniform_ubatches(num_reqs: Any, query_len: Any, num_tokens_padded: Any, num_reqs_padded: Any,
                               num_ubatches: Any) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
        r, q, n_padded, r_padded, n = uniform_oracle.check_args(num_reqs, query_len, num_tokens_padded, num_reqs_padded,
                                                                num_ubatches)
        batch = Stub("InputBatch", num_scheduled_tokens=np.full(r, q, dtype=np.int32), num_tokens_after_padding=n_padded,
                     num_reqs_after_padding=r_padded, num_reqs=r)
        return bind.slice_pairs(create(batch, n, q))

    return split_uniform_ubatches, (f"{piece.label} with maybe_create_ubatch_slices over a stand-in InputBatch of R "
                                    "requests of q tokens (num_tokens_after_padding = Np, num_reqs_after_padding = Rp), "
                                    "uniform_token_count = q"), ("uniform_token_count=query_len",)


# ---------------------------------------------------------------- per-microbatch attention metadata (F)

ATTN_BACKEND = "vllm/v1/attention/backend.py"
MRV2_UBATCH_UTILS = "vllm/v1/worker/gpu/ubatch_utils.py"
MRV2_DEFAULT_STATE = "vllm/v1/worker/gpu/model_states/default.py"


def _identity_decorator(*args: Any, **kwargs: Any) -> Callable[[Any], Any]:
    """``typing_extensions.deprecated(message)`` as a stand-in: marks nothing."""
    return lambda f: f


class _Step:
    """A contract F step as the engine's tensors: int32 query_start_loc and
    seq_lens over the padded requests (padded requests start at sum(nst) and
    have seq_len 0), int64 positions, the int32 block table."""

    def __init__(self, nst: Any, c: Any, positions: Any, block_table: Any, padded: Any, padded_reqs: Any, slices: Any) -> None:
        self.nst = bind.int_array("num_scheduled_tokens", nst, minimum=1)
        self.c = bind.int_array("num_computed_tokens", c)
        self.padded = bind.count("num_tokens_padded", padded, 1)
        self.padded_reqs = bind.count("num_reqs_padded", padded_reqs, 1)
        self.positions = bind.int_array("positions", positions)
        self.table = bind.table("block_table", block_table, self.padded_reqs)
        r = self.num_reqs = int(self.nst.size)
        if r == 0 or self.c.size != r or self.padded < int(self.nst.sum()) or self.padded_reqs < r \
                or self.positions.size != self.padded or self.table.shape[0] != self.padded_reqs:
            raise ValueError(f"not a step: R = {r}, {self.c.size} computed counts, Np = {self.padded} (sum(nst) = "
                             f"{int(self.nst.sum())}), Rp = {self.padded_reqs}, {self.positions.size} positions, block table "
                             f"{self.table.shape}")
        self.slices = [((int(rs), int(re)), (int(ts), int(te))) for (rs, re), (ts, te) in slices]
        qsl = np.zeros(self.padded_reqs + 1, dtype=np.int32)
        np.cumsum(self.nst, out=qsl[1: r + 1])
        qsl[r + 1:] = qsl[r]
        self.qsl = qsl
        self.computed = np.zeros(self.padded_reqs, dtype=np.int32)
        self.computed[:r] = self.c
        self.seq_lens = self.computed + np.diff(qsl).astype(np.int32)

    def tensor(self, array: np.ndarray, dtype: torch.dtype = torch.int32) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(dtype).clone()


def _metadata(query_start_loc: Any, seq_lens: Any, num_computed_tokens: Any, positions: Any, block_table: Any,
              max_query_len: Any) -> UbatchMetadata:
    return UbatchMetadata(query_start_loc=bind.to_numpy(query_start_loc).copy(), seq_lens=bind.to_numpy(seq_lens).copy(),
                          num_computed_tokens=bind.to_numpy(num_computed_tokens).copy(),
                          positions=None if positions is None else bind.to_numpy(positions).copy(),
                          block_table=bind.to_numpy(block_table).copy(), max_query_len=int(max_query_len))


def _bind_split_attn_metadata(rel: _Release) -> tuple[Callable[..., Any], str]:
    # 0.26.0 and 0.27.0: a method of the dataclass pins host memory (np_to_pinned_tensor reads PIN_MEMORY).
    scope = rel.loader(deprecated=_identity_decorator, PIN_MEMORY=False)
    f = scope.file(UBATCH_UTILS)
    piece = f.piece("split_attn_metadata")
    split, ubatch_slice = scope.load(piece), scope.load(f.piece("UBatchSlice"))
    cam_piece = scope.file(ATTN_BACKEND).piece("CommonAttentionMetadata")
    cam: Any = scope.load(cam_piece)
    names = {fl.name for fl in dataclasses.fields(cam)}
    # Up to 0.28.0 the class caches CPU copies of seq_lens and the computed counts, which the model runner sets.
    cached = "_num_computed_tokens_cpu" in names
    computed_from = "its num_computed_tokens_cpu (the cached CPU counts)" if cached else "its compute_num_computed_tokens()"

    def slice_ubatch_metadata(nst: Any, c: Any, positions: Any, block_table: Any, padded: Any, padded_reqs: Any,
                              slices: Any) -> list[UbatchMetadata]:
        s = _Step(nst, c, positions, block_table, padded, padded_reqs, slices)
        fields: dict[str, Any] = dict(
            query_start_loc=s.tensor(s.qsl), query_start_loc_cpu=s.tensor(s.qsl), seq_lens=s.tensor(s.seq_lens),
            num_reqs=s.padded_reqs, num_actual_tokens=s.padded, max_query_len=int(s.nst.max()), max_seq_len=int(s.seq_lens.max()),
            block_table_tensor=s.tensor(s.table), slot_mapping=torch.arange(s.padded, dtype=torch.int64),
            positions=s.tensor(s.positions, torch.int64), seq_lens_cpu_upper_bound=s.tensor(s.seq_lens))
        if cached:
            fields.update(_seq_lens_cpu=s.tensor(s.seq_lens), _num_computed_tokens_cpu=s.tensor(s.computed))
        common = cam(**{k: v for k, v in fields.items() if k in names})
        out = split([ubatch_slice(slice(rs, re), slice(ts, te)) for (rs, re), (ts, te) in s.slices], common)
        return [_metadata(md.query_start_loc, md.seq_lens,
                          md.num_computed_tokens_cpu if cached else md.compute_num_computed_tokens(),
                          md.positions, md.block_table_tensor, md.max_query_len) for md in out]

    # Its caller splits only when no microbatch is empty (dp_utils._post_process_ubatch: is_last_ubatch_empty).
    target = assumes(every_microbatch_has_a_real_token)(slice_ubatch_metadata)
    return target, (f"{piece.label} over the release's own {cam_piece.label} built from the step as the v1 model runner builds it "
                    f"(CPU tensors; padded requests at sum(nst) with seq_len 0); num_computed_tokens: {computed_from}; "
                    "assumes every microbatch holds a real token (the caller refuses other splits)")


def _bind_mrv2_ubatch_prepare(rel: _Release) -> _Built:
    graph_mode = Stub("CUDAGraphMode", NONE="NONE", PIECEWISE="PIECEWISE", FULL="FULL")
    scope = rel.loader(
        UBatchSlices=list, CUDAGraphMode=graph_mode,
        build_slot_mappings_by_layer=lambda slot_mappings, kv_cache_config: {},
        prepare_dcp_local_seq_lens=bind.unreachable("prepare_dcp_local_seq_lens"),
        compute_mm_prefix_ranges=bind.unreachable("compute_mm_prefix_ranges"),
        # What attention gets: the keyword arguments DefaultModelState.prepare_attn passes on.
        build_attn_metadata=lambda **kwargs: kwargs)
    piece = scope.file(MRV2_UBATCH_UTILS).piece("UBatchRunner.prepare")
    prepare = scope.load(piece)
    attn_piece = scope.file(MRV2_DEFAULT_STATE).piece("DefaultModelState.prepare_attn")
    prepare_attn = scope.load(attn_piece)
    # 0.34.0: prepare(..., batch_desc, dp_sync_state) instead of prepare(..., cg_mode); a FULL descriptor with no
    # uniform token count (contract F's steps are not uniform spec-decode batches) and no DP agreement.
    by_descriptor = "batch_desc" in inspect.signature(prepare).parameters
    mode_arg: Any = (Stub("BatchExecutionDescriptor", cg_mode=graph_mode.FULL, uniform_token_count=None)
                     if by_descriptor else graph_mode.FULL)
    batch_piece = scope.file(INPUT_BATCH).piece("InputBatch")
    input_batch_cls: Any = scope.load(batch_piece)
    if not (isinstance(input_batch_cls, type) and dataclasses.is_dataclass(input_batch_cls)):
        raise bind.Unbindable(f"{batch_piece.label} is no longer a dataclass")

    def slice_ubatch_metadata(nst: Any, c: Any, positions: Any, block_table: Any, padded: Any, padded_reqs: Any,
                              slices: Any) -> list[UbatchMetadata]:
        s = _Step(nst, c, positions, block_table, padded, padded_reqs, slices)
        n, rp, r = len(s.slices), s.padded_reqs, s.num_reqs
        given = dict(
            req_ids=[f"req-{i}" for i in range(r)], num_reqs=r, num_reqs_after_padding=rp,
            idx_mapping=torch.arange(rp, dtype=torch.int32), idx_mapping_np=np.arange(rp, dtype=np.int32),
            num_scheduled_tokens=s.nst.astype(np.int32), num_tokens=int(s.nst.sum()), num_tokens_after_padding=s.padded,
            query_start_loc=s.tensor(s.qsl), query_start_loc_np=s.qsl.copy(), seq_lens=s.tensor(s.seq_lens),
            seq_lens_cpu_upper_bound=s.tensor(s.seq_lens), dcp_local_seq_lens=None, num_computed_tokens_np=s.computed.copy(),
            prefill_len_np=np.zeros(rp, dtype=np.int32), num_computed_prefill_tokens_np=np.zeros(rp, dtype=np.int32),
            is_prefilling_np=np.zeros(rp, dtype=bool), input_ids=torch.zeros(s.padded, dtype=torch.int32),
            positions=s.tensor(s.positions, torch.int64), is_padding=torch.zeros(s.padded, dtype=torch.bool),
            prompt_lens=None, prefill_runs_as_decode_np=None, max_query_len=None)
        fields = dataclasses.fields(input_batch_cls)
        # Fields the slicing does not read (logits, drafts, flags) are None.
        batch = input_batch_cls(**{fl.name: given.get(fl.name) for fl in fields
                                   if fl.name in given or fl.default is dataclasses.MISSING})
        state = Stub("DefaultModelState", supports_mm_inputs=False, encoder_cache=None, max_model_len=int(s.seq_lens.max()),
                     model_config=Stub("model_config", is_mm_prefix_lm=False), methods={"prepare_attn": prepare_attn})
        contexts = Recorder("UBatchRunner._make_forward_contexts", returns=[])
        ubatch_runner = Stub("UBatchRunner", num_ubatches=n, dcp_size=1, dcp_rank=0, cp_interleave=1, model_state=state,
                      ubatch_query_start_loc=[torch.zeros(rp + 1, dtype=torch.int32) for _ in range(n)],
                      ubatch_seq_lens=[torch.zeros(rp, dtype=torch.int32) for _ in range(n)],
                      ubatch_dcp_local_seq_lens=[None] * n, attn_groups=[[]], kv_cache_config=None,
                      methods={"_make_forward_contexts": lambda self, *a: contexts(*a)})
        prepare(ubatch_runner, batch, (s.tensor(s.table),), torch.arange(s.padded, dtype=torch.int64).reshape(1, -1),
                mode_arg)
        out = []
        for meta in contexts.last.arg(1, "attn_metadata"):
            num_reqs = meta["num_reqs"]
            qsl, seq = meta["query_start_loc_gpu"], meta["seq_lens"][:num_reqs]  # build_attn_metadata's first slice
            out.append(_metadata(qsl, seq, seq - (qsl[1:] - qsl[:-1]), meta["positions"], meta["block_tables"][0],
                                 meta["max_query_len"]))
        return out

    assumed: tuple[str, ...] = ("batch_desc=FULL with uniform_token_count=None", "dp_sync_state=None") if by_descriptor else ()
    return slice_ubatch_metadata, (f"{piece.label} (create_ubatch_slices, _slice_input_batch, _slice_query_start_loc, "
                                   f"_slice_seq_lens) with num_ubatches = len(ubatch_slices), its model state's "
                                   f"{attn_piece.label} in FULL graph mode"
                                   f"{' (batch_desc: FULL, uniform_token_count None; dp_sync_state None)' if by_descriptor else ''}"
                                   f" over the release's own {batch_piece.label}; result: "
                                   "what it passes to build_attn_metadata (seq_lens[:num_reqs]; num_computed_tokens = "
                                   "seq_lens - query lengths, as CommonAttentionMetadata.compute_num_computed_tokens)"), assumed


# ---------------------------------------------------------------- the v1 microbatch veto (E)


def _input_batch(num_computed_tokens: np.ndarray, block_tables: list[Stub]) -> Stub:
    """The v1 persistent input batch as ``_allow_microbatching`` reads it: the
    computed-token counts per batch row and ``block_table.block_tables``, one
    ``bind.block_table`` per KV-cache group."""
    return Stub("InputBatch", num_computed_tokens_cpu=num_computed_tokens,
                block_table=Stub("MultiGroupBlockTable", block_tables=block_tables))


def _bind_allow_microbatching(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(V1_RUNNER).piece("GPUModelRunner._allow_microbatching")
    allow = loader.load(piece)

    def allow_microbatching(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> Any:
        c = bind.int_array("num_computed_tokens", num_computed_tokens)
        q = bind.int_array("num_scheduled_tokens", num_scheduled_tokens)
        if c.size != q.size:
            raise ValueError(f"num_computed_tokens has {c.size} entries, num_scheduled_tokens {q.size}")
        if not isinstance(block_tables, list | tuple) or not isinstance(block_sizes, list | tuple) or len(block_tables) != len(block_sizes):
            raise TypeError("block_tables and block_sizes must be lists of the same length (one per KV-cache group)")
        groups = []
        for g, (table, size) in enumerate(zip(block_tables, block_sizes, strict=True)):
            t = bind.table(f"block_tables[{g}]", table, q.size)
            groups.append(bind.block_table(bind.count(f"block_sizes[{g}]", size, 1), bind.cast_exact(f"block_tables[{g}]", t, np.int32)))
        model_runner = Stub("GPUModelRunner", parallel_config=Stub("parallel_config", use_ubatching=True), reorder_batch_threshold=1,
                      input_batch=_input_batch(bind.cast_exact("num_computed_tokens", c, np.int32), groups))
        return allow(model_runner, int(q.size), bind.cast_exact("num_scheduled_tokens", q, np.int32))

    return allow_microbatching, (f"{piece.label}; ubatching on, reorder_batch_threshold = 1, int32 persistent arrays with "
                                 "one row per request")


# The new model runner has no veto of its own: its step is split when every DP rank votes allow_ubatching (it has a
# UBatchRunner and the step is not a dummy run) and the smallest rank's token count reaches the DBO threshold
# (sync_cudagraph_and_dp_padding, ubatch_utils.check_ubatch_thresholds; docs/vllm-code.md).
_MRV2_ALLOW_ASSUMED = ("allow_ubatching=True (a UBatchRunner, not a dummy run)",
                       "data_parallel_size=2, the other rank's step the same as this one",
                       "dbo_decode_token_threshold=1", "dbo_prefill_token_threshold=1", "num_ubatches=2",
                       "cudagraph_manager=None (eager)", "parallel_config.enable_fault_tolerance=False")


def _bind_mrv2_allow_microbatching(rel: _Release) -> _Built:
    # should_skip_dp_coordination() True: the sync copies this rank's column to every rank's (the other rank's step
    # is this one), so the decision is the step's own, with no collective.
    loader = _dp_loader(rel, _Collective(), should_skip_dp_coordination=lambda: True)
    f = loader.file(MRV2_DP_UTILS)
    piece = f.piece("dispatch_cg_and_sync_dp")
    dispatch = loader.load(piece)
    if "allow_ubatching" not in inspect.signature(dispatch).parameters:
        raise bind.Absent(f"{piece.label} takes no allow_ubatching: this release's new model runner does not microbatch")
    config = (2, (1, 1), (), None)

    def allow_microbatching(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> Any:
        q = bind.int_array("num_scheduled_tokens", num_scheduled_tokens)
        c = bind.int_array("num_computed_tokens", num_computed_tokens)
        if c.size != q.size:
            raise ValueError(f"num_computed_tokens has {c.size} entries, num_scheduled_tokens {q.size}")
        uniform = int(q[0]) if q.size and bool((q == q[0]).all()) else None
        desc, _state = dispatch(None, int(q.size), int(q.sum()), uniform, 2, 0, need_eager=True,
                                parallel_config=_parallel_config(2, 0, config), allow_ubatching=True,
                                uniform_decode=uniform == 1)
        return int(getattr(desc, "num_ubatches", 1)) > 1

    return allow_microbatching, (f"{piece.label} and the sync_cudagraph_and_dp_padding it calls on rank 0 of 2, the "
                                 "vote allow_ubatching=True as the model runner casts it for a real step; result: the "
                                 "descriptor's num_ubatches > 1 (the step is split); the step's KV-cache state (computed "
                                 "counts, block tables) is not read"), _MRV2_ALLOW_ASSUMED


def allow_microbatching_on_steps(source: _engines.ReleaseSource) -> Callable[..., Callable[[], bool]]:
    """The release's own ``GPUModelRunner._allow_microbatching`` (v1, 0.28.0
    and later) for timing it (``batchfuzz bench --vllm-wheel``):
    returns ``prepare(num_reqs, c, q, tables, block_sizes,
    reorder_batch_threshold)``, which builds the stand-in model runner (int32
    persistent arrays, ubatching on) once and returns a zero-argument callable
    running the engine's function unchanged on it. Raises ``bind.Absent`` or
    ``bind.Unbindable`` as the bindings do."""
    loader = _Release(source).loader()
    allow = loader.load(loader.file(V1_RUNNER).piece("GPUModelRunner._allow_microbatching"))

    def prepare(num_reqs: int, c: np.ndarray, q: np.ndarray, tables: list[np.ndarray], block_sizes: list[int],
                reorder_batch_threshold: int = 1) -> Callable[[], bool]:
        groups = [bind.block_table(int(b), np.ascontiguousarray(t, dtype=np.int32)) for t, b in zip(tables, block_sizes, strict=True)]
        model_runner = Stub("GPUModelRunner", parallel_config=Stub("parallel_config", use_ubatching=True),
                      reorder_batch_threshold=int(reorder_batch_threshold),
                      input_batch=_input_batch(np.ascontiguousarray(c, dtype=np.int32), groups))
        return functools.partial(allow, model_runner, int(num_reqs), np.ascontiguousarray(q, dtype=np.int32))

    return prepare


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


# ---------------------------------------------------------------- data-parallel coordination (F)


class _Collective:
    """The DP group's collective as the cut-out code reaches it: ``dist.all_reduce(tensor, group=...)`` and
    ``get_dp_group()`` (``cpu_all_reduce_``, ``all_reduce``, its groups), all calling the all-reduce of the rank
    function running now (``batchfuzz.distributed``: the real process group, or the in-process sum)."""

    def __init__(self) -> None:
        self.current: Callable[[torch.Tensor], None] | None = None

    def all_reduce(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        if self.current is None:
            raise RuntimeError("the DP all-reduce was called outside a rank function")
        self.current(tensor)

    def dp_group(self) -> Stub:
        def reduce_(tensor: torch.Tensor) -> torch.Tensor:
            self.all_reduce(tensor)
            return tensor

        # No rank has failed (dead_dp_ranks: the fault-tolerance path's record of failed ranks).
        return Stub("dp_group", device=torch.device("cpu"), device_group="dp-device-group", cpu_group="dp-cpu-group",
                    cpu_all_reduce_=reduce_, all_reduce=reduce_, dead_dp_ranks=set())


class _OnceLogger(logging.LoggerAdapter):
    """vLLM's logger as the coordination code calls it (``info_once``, ``debug_once``, ``warning_once``)."""

    def info_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.debug(msg, *args)

    debug_once = info_once
    warning_once = info_once


def _dp_loader(rel: _Release, collective: _Collective, **extra: Any) -> bind.Loader:
    stand_ins = dict(_STAND_INS)
    stand_ins["logger"] = _OnceLogger(logging.getLogger("batchfuzz.engines.vllm"), {})
    # The collective, the context switch that skips it (never set here), the host-sync guard and pinned memory: the
    # engine's runtime, not its decision.
    # One TP rank: the fault-tolerance barrier over its CPU group has no one to wait for.
    stand_ins.update(dist=Stub("torch.distributed", all_reduce=collective.all_reduce, barrier=_no_barrier),
                     get_dp_group=collective.dp_group, get_tp_group=_tp_group,
                     should_skip_dp_coordination=lambda: False, gpu_sync_allowed=contextlib.nullcontext, PIN_MEMORY=False)
    stand_ins.update(extra)
    return bind.Loader(rel.source, "vllm", stand_ins=stand_ins, files=rel.files)


def _no_barrier(*args: Any, **kwargs: Any) -> None:
    return None


def _tp_group() -> Stub:
    return Stub("tp_group", cpu_group="tp-cpu-group", world_size=1)


def _parallel_config(world: int, rank: int, config: Any, fault_tolerance: bool = False) -> Stub:
    n, (decode, prefill), _sizes, _ubatch = config
    return Stub("parallel_config", data_parallel_size=world, data_parallel_rank=rank, num_ubatches=n, ubatch_size=n,
                use_ubatching=True, enable_dbo=n == 2, dbo_decode_token_threshold=decode, dbo_prefill_token_threshold=prefill,
                disable_nccl_for_dp_synchronization=True, enable_fault_tolerance=fault_tolerance, tensor_parallel_size=1)


# A rank function, what was cut out, the steps it is checked on, the configuration values it assumed.
_RankBuilt = tuple[Callable[..., Any], str, Callable[..., bool], tuple[str, ...]]


def _v1_steps(*args: Any) -> bool:
    """v1's coordinator leaves graphs to its caller: the cases without microbatched graph sizes."""
    return args[9] is None


def _dispatching_steps(*args: Any) -> bool:
    """The new model runner's coordinator dispatches graphs itself: the cases with microbatched graph sizes."""
    return args[9] is not None


def _dispatching_steps_no_microbatching(*args: Any) -> bool:
    """A new model runner that never microbatches: dispatching cases where some rank does not allow it (the contract's
    answer then splits nothing either)."""
    return args[9] is not None and not np.asarray(args[2]).all()


def _rank_v1_coordinate(rel: _Release) -> _RankBuilt:
    collective = _Collective()
    loader = _dp_loader(rel, collective)
    piece = loader.file(DP_UTILS).piece("coordinate_batch_across_dp")
    coordinate = loader.load(piece)

    def rank(rank: int, world: int, all_reduce: Callable[[torch.Tensor], None], step: Any, config: Any) -> RankDecision:
        tokens, padded, allow, mode, uniform, _reqs = step
        collective.current = all_reduce
        try:
            should, across, synced = coordinate(num_tokens_unpadded=tokens, allow_microbatching=bool(allow),
                                                parallel_config=_parallel_config(world, rank, config),
                                                num_tokens_padded=padded, uniform_decode=uniform > 0, cudagraph_mode=mode)
        finally:
            collective.current = None
        counts = tuple(int(x) for x in bind.to_numpy(across).tolist())
        return RankDecision(bool(should), counts, int(synced), counts[rank])

    return rank, (f"{piece.label} with _synchronize_dp_ranks, _run_ar and the _post_process_* helpers it calls; "
                  "parallel_config: this rank of data_parallel_size ranks, ubatching on, the case's thresholds and "
                  "num_ubatches, CPU synchronisation (gloo); dist.all_reduce and get_dp_group() on the real process group; "
                  "should_skip_dp_coordination() False; result: (should_ubatch, num_tokens_after_padding, synced mode), "
                  "the descriptor's count num_tokens_after_padding[rank]"), _v1_steps, ()


class _GraphManager:
    """``CudaGraphManager.dispatch`` stood in by capture sizes: FULL graphs of uniform decodes and PIECEWISE graphs of
    any step at every capture size (the FULL_AND_PIECEWISE configuration), FULL microbatched graphs at the
    microbatched capture sizes; the smallest size that fits, else an eager descriptor of the count asked for."""

    def __init__(self, descriptor: Any, modes: Any, sizes: tuple[int, ...], ubatch_sizes: tuple[int, ...]) -> None:
        import dataclasses

        self.descriptor = descriptor
        self.modes = modes
        self.sizes = sizes
        self.ubatch_sizes = ubatch_sizes
        self.fields = {f.name for f in dataclasses.fields(descriptor)}

    def make(self, **kwargs: Any) -> Any:
        return self.descriptor(**{k: v for k, v in kwargs.items() if k in self.fields})

    def dispatch(self, num_reqs: int, num_tokens: int, uniform_token_count: int | None, num_active_loras: int = 0,
                 max_query_len: int | None = None, num_ubatches: int = 1) -> Any:
        if num_ubatches > 1:
            fit = next((s for s in self.ubatch_sizes if s >= num_tokens), None)
            if fit is not None:
                return self.make(cg_mode=self.modes.FULL, num_tokens=fit, num_reqs=num_reqs,
                                 uniform_token_count=uniform_token_count, num_active_loras=num_active_loras,
                                 num_ubatches=num_ubatches)
        else:
            fit = next((s for s in self.sizes if s >= num_tokens), None)
            if fit is not None:
                full = uniform_token_count is not None
                return self.make(cg_mode=self.modes.FULL if full else self.modes.PIECEWISE, num_tokens=fit,
                                 num_reqs=num_reqs if full else None, uniform_token_count=uniform_token_count,
                                 num_active_loras=num_active_loras)
        return self.make(cg_mode=self.modes.NONE, num_tokens=num_tokens, num_reqs=num_reqs,
                         num_active_loras=num_active_loras, num_ubatches=num_ubatches)


def _rank_mrv2_sync(rel: _Release) -> _RankBuilt:
    collective = _Collective()
    loader = _dp_loader(rel, collective)
    f = loader.file(MRV2_DP_UTILS)
    piece = f.piece("sync_cudagraph_and_dp_padding")
    sync = loader.load(piece)
    cg = loader.file(MRV2_CG_UTILS)
    descriptor = loader.load(cg.piece("BatchExecutionDescriptor"))
    modes = sync.__globals__.get("CUDAGraphMode")
    if modes is None:
        raise bind.Unbindable(f"{piece.label} no longer reads CUDAGraphMode")
    params = set(inspect.signature(sync).parameters)
    microbatching = {"parallel_config", "allow_ubatching", "uniform_decode"} <= params
    # 0.34.0 reads parallel_config.enable_fault_tolerance: every step is run with it off and on (no rank dead, one
    # TP rank), and the two decisions must agree (raised otherwise: a `raises` counterexample naming both).
    both_ft = microbatching and "enable_fault_tolerance" in f.text

    def once(rank: int, world: int, step: Any, config: Any, fault_tolerance: bool) -> RankDecision:
        tokens, padded, allow, mode, uniform, reqs = step
        _n, _thr, sizes, ubatch_sizes = config
        manager = _GraphManager(descriptor, modes, tuple(sizes), tuple(ubatch_sizes or ()))
        desired = manager.make(cg_mode=modes(mode), num_tokens=padded, num_reqs=reqs if mode == 2 else None,
                               uniform_token_count=uniform or None)
        kwargs: dict[str, Any] = {"max_query_len": None, "num_active_loras": 0}
        if microbatching:
            kwargs.update(parallel_config=_parallel_config(world, rank, config, fault_tolerance),
                          allow_ubatching=bool(allow), uniform_decode=uniform > 0)
        desc, state = sync(manager, desired, tokens, reqs, uniform or None, world, rank,
                           **{k: v for k, v in kwargs.items() if k in params})
        across = getattr(state, "num_tokens_across_dp", state)
        counts = tuple(int(x) for x in bind.to_numpy(across).tolist())
        return RankDecision(getattr(desc, "num_ubatches", 1) > 1, counts, int(desc.cg_mode.value), int(desc.num_tokens))

    def rank(rank: int, world: int, all_reduce: Callable[[torch.Tensor], None], step: Any, config: Any) -> RankDecision:
        collective.current = all_reduce
        try:
            off = once(rank, world, step, config, False)
            on = once(rank, world, step, config, True) if both_ft else off
        finally:
            collective.current = None
        if on != off:
            raise AssertionError(f"rank {rank}: parallel_config.enable_fault_tolerance=True (no rank dead) decided {on}, "
                                 f"False decided {off}")
        return off

    assumption = ("" if microbatching else "; this release's new model runner never microbatches: checked on steps where "
                  "some rank does not allow it")
    if both_ft:
        assumption += ("; every step run with parallel_config.enable_fault_tolerance False and True (no dead DP rank, "
                       "tensor_parallel_size 1: its TP barrier a no-op), the two decisions compared")
    return rank, (f"{piece.label}; the CUDA-graph manager stood in by one dispatching from the case's capture sizes "
                  f"(FULL for uniform decodes, PIECEWISE otherwise; FULL microbatched graphs at ubatch_capture_sizes); "
                  f"desired_batch_desc from this rank's padded count and mode; get_dp_group().cpu_all_reduce_ / "
                  f"dist.all_reduce on the real process group; max_query_len None; result: the descriptor (split = "
                  f"num_ubatches > 1, its cg_mode and num_tokens) and num_tokens_across_dp{assumption}"), \
        (_dispatching_steps if microbatching else _dispatching_steps_no_microbatching), \
        (("parallel_config.enable_fault_tolerance=False and =True",) if both_ft else ())


_RANK_BUILDERS: dict[str, Callable[[_Release], _RankBuilt]] = {
    f"{DP_UTILS}:coordinate_batch_across_dp": _rank_v1_coordinate,
    f"{MRV2_DP_UTILS}:sync_cudagraph_and_dp_padding": _rank_mrv2_sync,
}


def _bind_dp(function: str) -> Callable[[_Release], _Built]:
    def build(rel: _Release) -> _Built:
        rank, detail, steps, assumed = _RANK_BUILDERS[function](rel)  # cut out here: an absent or unbindable release says so now
        _probe_ranks(rank, function)
        target = assumes(steps)(ranks_target(f"{ENGINE}::{rel.source.ref}::{function}::coordinate_dp", "processes"))
        return target, detail + "; every rank a process of a gloo group (batchfuzz.distributed)", assumed

    return build


def _probe_ranks(rank: Callable[..., Any], function: str) -> None:
    """Dry-run the rank function in this process on two ranks (a split FULL step and a vetoed eager one): a name
    or attribute the stand-ins lack is Unbindable now (the rank's own exception, not the RankFailure around it)."""
    for args in (([4, 4], [4, 4], [1, 1], [2, 2], [1, 1], [4, 4], 2, (2, 2), [2, 4, 8], [4, 8]),
                 ([3, 4], [3, 4], [1, 0], [0, 0], [0, 0], [3, 4], 2, (2, 2), [2, 4, 8], None)):
        try:
            distributed.run_in_process(rank, per_rank_args(*args))
        except distributed.RankFailure as exc:
            cause = exc.__cause__
            if cause is None or bind.raised_in_engine(cause):
                continue  # the engine's own behaviour: the properties judge it
            if isinstance(cause, (AttributeError, NameError, TypeError, ImportError, KeyError, LookupError, bind.StandInReached)):
                raise bind.Unbindable(f"dry run of {function} as coordinate_dp failed: {type(cause).__name__}: {cause}") from exc


@functools.lru_cache(maxsize=64)
def _rank_function(source_ref: str, function: str) -> Callable[..., Any]:
    return _RANK_BUILDERS[function](_release(source_ref))[0]


def rank_function(ref: str) -> Callable[..., Any]:
    """The rank function (``batchfuzz.distributed``) of a coordination binding's ``Bound.ref``: one rank's call of
    the engine's own function, cut out of the release in the process that runs the rank."""
    parts = ref.split("::") if isinstance(ref, str) else []
    if len(parts) != 4 or parts[0] != ENGINE or parts[2] not in _RANK_BUILDERS:
        raise ValueError(f"ref must name a coordination binding 'vllm::SOURCE::FUNCTION::coordinate_dp', got {ref!r}")
    try:
        return _rank_function(parts[1], parts[2])
    except SourceError as exc:
        raise LookupError(f"cannot open the release of {ref!r}: {exc}") from exc


def _bind_graph_dispatch(rel: _Release, tokens: bool = False) -> _Built:
    return _vllm_graphs.bind_graph_dispatch(rel.loader(get_offloader=bind.unreachable("get_offloader"),
                                                      build_dynamic_sd_schedule_lookup=bind.unreachable("dynamic SD")),
                                            tokens)


# ---------------------------------------------------------------- the table of bindings


@dataclass(frozen=True)
class _Spec:
    function: str
    contract: str
    build: Callable[[_Release], _Built]
    probe: tuple[Any, ...]
    assumed: tuple[str, ...] = ()  # configuration the engine reads and the stand-ins give, as NAME=VALUE


def _probe_buffers() -> DummyBuffers:
    return DummyBuffers.zeros(4, 6)


# A step with every region and two groups of different thresholds (no speculative tokens).
_ORDER_PROBE = ([1, 0, 2, 3], [1, 3, 2, 1], [1, 4, 4, 5], [1, 2, None], 0)

SPECS: tuple[_Spec, ...] = (
    _Spec(f"{INPUT_BATCH}:InputBatch.make_dummy", "split_dummy_tokens", _bind_make_dummy_split, (3, 5)),
    _Spec(f"{INPUT_BATCH}:InputBatch.make_dummy", "make_dummy", _bind_make_dummy_layout, (3, 5, "buffers")),
    _Spec(f"{MRV2_RUNNER}:GPUModelRunner._dummy_run", "split_dummy_tokens", _bind_mrv2_dummy_run, (3, 5)),
    _Spec(f"{LORA_UTILS}:create_lora_capture_hook", "split_dummy_tokens", _bind_lora_hook, (3, 5)),
    _Spec(f"{V1_RUNNER}:GPUModelRunner._dummy_run", "split_dummy_tokens", _bind_v1_dummy_run, (3, 5)),
    _Spec(f"{V1_RUNNER}:GPUModelRunner._dummy_run", "make_dummy", _bind_v1_dummy_layout, (3, 5, "buffers")),
    _Spec(f"{V1_RUNNER}:GPUModelRunner._dummy_run", "pad_query_start_loc", _bind_v1_query_start_loc,
          (np.array([2, 1], dtype=np.int32), 3, "out")),
    _Spec(f"{MRV2_RUNNER}:GPUModelRunner.prepare_inputs", "pad_query_start_loc", _bind_mrv2_query_start_loc,
          (np.array([2, 1], dtype=np.int32), 3, "out")),
    _Spec(f"{UBATCH_UTILS}:maybe_create_ubatch_slices", "split_ubatches", _bind_ubatch_slices,
          (np.array([3, 2], dtype=np.int32), 6, 3, 2)),
    _Spec(f"{V1_RUNNER}:GPUModelRunner._allow_microbatching", "allow_microbatching", _bind_allow_microbatching,
          (np.array([0, 2]), np.array([3, 2]), [np.array([[1, 2], [1, 3]])], [2])),
    _Spec(f"{MRV2_UBATCH_UTILS}:create_ubatch_slices", "split_ubatches", _bind_mrv2_ubatch_slices,
          (np.array([3, 2], dtype=np.int32), 6, 3, 2)),
    _Spec(f"{MRV2_UBATCH_UTILS}:create_ubatch_slices", "split_uniform_ubatches", _bind_mrv2_uniform_slices,
          (4, 3, 12, 4, 2)),
    _Spec(f"{MRV2_DP_UTILS}:dispatch_cg_and_sync_dp", "allow_microbatching", _bind_mrv2_allow_microbatching,
          (np.array([0, 2]), np.array([3, 2]), [np.array([[1, 2], [1, 3]])], [2])),
    _Spec(f"{UBATCH_UTILS}:split_attn_metadata", "slice_ubatch_metadata", _bind_split_attn_metadata,
          (np.array([5, 11]), np.array([3, 0]), np.arange(16), np.arange(6).reshape(3, 2), 16, 3,
           [((0, 2), (0, 8)), ((1, 3), (8, 16))])),
    _Spec(f"{MRV2_UBATCH_UTILS}:UBatchRunner.prepare", "slice_ubatch_metadata", _bind_mrv2_ubatch_prepare,
          (np.array([5, 11]), np.array([3, 0]), np.arange(16), np.arange(6).reshape(3, 2), 16, 3,
           [((0, 2), (0, 8)), ((1, 3), (8, 16))])),
    _Spec(f"{ATTN_UTILS}:reorder_batch_to_split_decodes_and_prefills", "batch_order", _bind_reorder, _ORDER_PROBE),
    _Spec(f"{ATTN_UTILS}:split_decodes_and_prefills", "batch_order", _bind_split, _ORDER_PROBE),
    _Spec(f"{ATTN_UTILS}:split_decodes_prefills_and_extends", "batch_order", _bind_extends, _ORDER_PROBE),
    _Spec(f"{V1_RUNNER}:GPUModelRunner.calculate_reorder_batch_threshold", "batch_order", _bind_reorder_threshold,
          _ORDER_PROBE),
    _Spec(f"{V1_RUNNER}:GPUModelRunner._get_cumsum_and_arange", "spec_decode_metadata", _bind_cumsum_and_arange,
          ([2, 0, 1], [3, 4, 2])),
    _Spec(f"{V1_RUNNER}:GPUModelRunner._calc_spec_decode_metadata", "spec_decode_metadata", _bind_spec_decode_metadata,
          ([2, 0, 1], [3, 4, 2])),
    _Spec(f"{INPUT_BATCH}:combine_sampled_and_draft_tokens", "spec_decode_metadata", _bind_mrv2_spec_logits,
          ([2, 0, 1], [3, 4, 2])),
    _Spec(f"{_vllm_graphs.CG_UTILS}:CudaGraphManager.dispatch", "pad_graph_replay", _bind_graph_dispatch,
          tuple(np.asarray(v) if isinstance(v, list) else v for v in ([2, 4], [5], [3], [7], 1, 1, [9] * 4, [9] * 4, [9] * 4)),
          _vllm_graphs.ASSUMED),
    _Spec(f"{_vllm_graphs.CG_UTILS}:CudaGraphManager._init_candidates", "pad_graph_replay",
          functools.partial(_bind_graph_dispatch, tokens=True),
          tuple(np.asarray(v) if isinstance(v, list) else v for v in ([2, 4], [5], [3], [7], 1, 1, [9] * 4, [9] * 4, [9] * 4)),
          _vllm_graphs.TOKEN_ASSUMED),
    _Spec(f"{DP_UTILS}:coordinate_batch_across_dp", "coordinate_dp", _bind_dp(f"{DP_UTILS}:coordinate_batch_across_dp"),
          ([3, 4], [4, 4], [1, 1], [1, 1], [0, 0], [3, 4], 2, (2, 2), [2, 4, 8], None)),
    _Spec(f"{MRV2_DP_UTILS}:sync_cudagraph_and_dp_padding", "coordinate_dp",
          _bind_dp(f"{MRV2_DP_UTILS}:sync_cudagraph_and_dp_padding"),
          ([3, 4], [4, 4], [0, 0], [1, 1], [0, 0], [3, 4], 2, (2, 2), [2, 4, 8], [4, 8])),
)


# Where the behaviour of a v1 model-runner binding went once that runner was deleted (0.34.0): said in the absent
# cell, read from the release's own new runner (vllm/v1/worker/gpu/; docs/vllm-code.md, 0.34.0).
_DUMMY_MOVED = "its dummy batch is built by the new runner's GPUModelRunner._dummy_run and InputBatch.make_dummy (their rows)"
_MOVED: dict[str, str] = {
    f"{V1_RUNNER}:GPUModelRunner._dummy_run": _DUMMY_MOVED,
    f"{V1_RUNNER}:GPUModelRunner._allow_microbatching": (
        "the new runner has no such veto: a step is split when every DP rank votes allow_ubatching and the DBO "
        "threshold is met (gpu/dp_utils.py:dispatch_cg_and_sync_dp, its row)"),
    f"{UBATCH_UTILS}:split_attn_metadata": "the new runner slices per-microbatch metadata in UBatchRunner.prepare (its row)",
    f"{V1_RUNNER}:GPUModelRunner.calculate_reorder_batch_threshold": (
        "the new runner does not reorder its input batch (nothing under vllm/v1/worker/gpu/ reads a reorder threshold)"),
    f"{ATTN_UTILS}:reorder_batch_to_split_decodes_and_prefills": (
        "the new runner does not reorder its input batch, and the v1 runner that called this is gone"),
    f"{V1_RUNNER}:GPUModelRunner._get_cumsum_and_arange": (
        "the new runner computes logits indices in a Triton kernel (gpu/input_batch.py:combine_sampled_and_draft_tokens, "
        "its row), target and bonus indices in the rejection sampler's kernels"),
}
_MOVED[f"{V1_RUNNER}:GPUModelRunner._calc_spec_decode_metadata"] = _MOVED[f"{V1_RUNNER}:GPUModelRunner._get_cumsum_and_arange"]


# The short clause an absent cell's reason starts with (the Markdown matrix shows it): the function or its file is
# not in the release, or they are but what the contract checks is not (the binding's own words say which).
_NOT_DEFINED = ("is not in this source tree", "has no class or function", "has no attribute")


def _absent_reason(rel: _Release, spec: _Spec, exc: bind.Absent) -> str:
    """Why ``spec`` is absent, starting with a short clause (``v1 model runner deleted``, ``not defined in this
    release``, ``not in this release``): the binding's own words, and where the behaviour went when the release has
    the new model runner but no v1 one."""
    moved = _MOVED.get(spec.function)
    if moved is not None and rel.source.read(V1_RUNNER) is None and rel.source.read(MRV2_RUNNER) is not None:
        return f"v1 model runner deleted: {moved} ({exc})"
    if any(words in str(exc) for words in _NOT_DEFINED):
        return f"not defined in this release: {exc}"
    return f"not in this release: {exc}"


def _probe_args(spec: _Spec) -> tuple[Any, ...]:
    fresh = {"buffers": _probe_buffers, "out": lambda: np.zeros(5, dtype=np.int32)}
    return tuple(fresh[a]() if isinstance(a, str) else a for a in spec.probe)


def _ref(source: _engines.ReleaseSource, spec: _Spec) -> str:
    return f"{ENGINE}::{source.ref}::{spec.function}::{spec.contract}"


def _bind_one(rel: _Release, spec: _Spec, probe: bool = True) -> Bound:
    """One spec bound in ``rel``, dry-run on its probe input (``bind.probe``)
    unless ``probe`` is False: a worker rebuilding a target the matrix bound
    (``resolve``) calls the engine's code only in the properties' calls."""
    release = f"vllm {rel.source.version}"
    raised = ""
    try:
        built = spec.build(rel)
        target, detail, assumed = built[0], built[1], (*spec.assumed, *(built[2] if len(built) > 2 else ()))
        if probe:
            raised = bind.probe(target, *_probe_args(spec), what=f"{spec.function} as {spec.contract}")
    except bind.Absent as exc:
        return Bound(release, spec.function, spec.contract, "absent", reason=_absent_reason(rel, spec, exc))
    except bind.Unbindable as exc:
        return Bound(release, spec.function, spec.contract, "unbindable", reason=str(exc), assumed=spec.assumed)
    target.__name__ = spec.contract
    target.__qualname__ = f"vllm_{rel.source.version.replace('.', '_')}.{spec.function.split(':')[-1]}[{spec.contract}]"
    # The engine's code is checked on the inputs the engine's callers produce.
    target = domain("engine")(target)
    return Bound(release, spec.function, spec.contract, "bound", target=target, ref=_ref(rel.source, spec), detail=detail,
                 assumed=assumed, probe_raised=raised, probe_args=_probe_args(spec) if raised else ())


def _bind_site(rel: _Release, site: split_search.SplitSite, probe: bool = True) -> Bound:
    """A copy of the split the search found, as contract A's target; a site
    whose dividend counts no tokens is ``not-split`` (``split_search.not_a_token_split``)."""
    release = f"vllm {rel.source.version}"
    detail = f"found by the split search (batchfuzz.engines.split_search): {site.describe()}"
    other = split_search.not_a_token_split(site)
    if other:
        return Bound(release, site.function, split_search.CONTRACT, "not-split", reason=other, detail=detail)
    raised = ""
    try:
        target = split_search.bind_site(site, rel.loader())
        if probe:
            raised = bind.probe(target, *split_search.PROBE, what=site.function)
    except (bind.Absent, bind.Unbindable) as exc:
        return Bound(release, site.function, split_search.CONTRACT, "unbindable", reason=str(exc), detail=detail)
    target.__qualname__ = f"vllm_{rel.source.version.replace('.', '_')}.{site.function.split(':')[-1]}[{split_search.CONTRACT}]"
    target = domain("engine")(target)
    ref = f"{ENGINE}::{rel.source.ref}::{site.function}::{split_search.CONTRACT}"
    return Bound(release, site.function, split_search.CONTRACT, "bound", target=target, ref=ref, detail=detail,
                 probe_raised=raised, probe_args=split_search.PROBE if raised else ())


@dataclass(frozen=True)
class Planned:
    """One binding of a release before it is made: its row's function and
    contract, and ``bind()`` giving its Bound (cutting out, loading and
    probing the release's code: what ``matrix`` runs in a worker process)."""

    function: str
    contract: str
    bind: Callable[[], Bound]


def binding_plan(source: _engines.ReleaseSource, *, search: bool = True) -> list[Planned]:
    """The bindings of one release, not yet made: SPECS in order, then
    (``search``) each copy of the split ``split_search`` finds, in path and
    line order. Finding them reads the source text only."""
    if not isinstance(source, _engines.ReleaseSource):
        raise TypeError(f"source must be a ReleaseSource, got {type(source).__name__}")
    rel = _Release(source)
    plan = [Planned(spec.function, spec.contract, functools.partial(_bind_one, rel, spec)) for spec in SPECS]
    if search:
        plan += [Planned(site.function, split_search.CONTRACT, functools.partial(_bind_site, rel, site))
                 for site in split_search.search(source)]
    return plan


def bindings(source: _engines.ReleaseSource, *, search: bool = True) -> list[Bound]:
    """Every binding of this module for one release (``binding_plan``), made in this process."""
    return [p.bind() for p in binding_plan(source, search=search)]


@functools.lru_cache(maxsize=16)
def _release(source_ref: str) -> _Release:
    return _Release(ReleaseSource.from_ref(source_ref))


@functools.lru_cache(maxsize=256)
def _resolved(source_ref: str, function: str, contract: str) -> Bound:
    spec = next((s for s in SPECS if s.function == function and s.contract == contract), None)
    if spec is None and contract == split_search.CONTRACT and "#" in function:
        rel = _release(source_ref)
        return _bind_site(rel, split_search.find(rel.source, function), probe=False)
    if spec is None:
        raise LookupError(f"batchfuzz.engines.vllm has no binding of {function} to {contract}")
    return _bind_one(_release(source_ref), spec, probe=False)


def resolve(ref: str) -> Callable[..., Any]:
    """The target of a ``Bound.ref``; the release's files and compiled
    bindings are cached per process. LookupError when it is not bound."""
    return _engines.resolve_bound(ref, ENGINE, _resolved)
