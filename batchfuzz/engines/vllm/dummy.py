"""vLLM's dummy batch (contracts A, B, C): make_dummy, the dummy runs, the LoRA hook, the query_start_loc fill."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from batchfuzz import bind
from batchfuzz.bind import Record, Recorder, Stub
from batchfuzz.engines.vllm._release import _STAND_INS, INPUT_BATCH, LORA_UTILS, MRV2_RUNNER, V1_RUNNER, _Built, _Release
from batchfuzz.reference.make_dummy import DummyBatch, DummyBuffers

# ---------------------------------------------------------------- MRV2 InputBatch.make_dummy (A, B)


# The CPU model runner's own input batch (0.34.0): a copy of the new runner's InputBatch.make_dummy and InputBuffers.
CPU_INPUT_BATCH = "vllm/v1/worker/cpu/input_batch.py"


def _make_dummy_parts(rel: _Release, path: str = INPUT_BATCH) -> tuple[Callable[..., Any], Callable[..., Any], str]:
    loader = rel.loader()
    f = loader.file(path)
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


def _layout_args(num_reqs: Any, num_tokens: Any, buffers: Any) -> tuple[int, int]:
    """R and N of a make_dummy call, checked to fit ``buffers``."""
    r, n = _split_args(num_reqs, num_tokens)
    if not isinstance(buffers, DummyBuffers):
        raise TypeError(f"buffers must be a DummyBuffers, got {type(buffers).__name__}")
    cap_r, cap_n = buffers.max_num_reqs, buffers.max_num_tokens
    if r > cap_r or n > cap_n:
        raise ValueError(f"buffers of capacity max_num_reqs={cap_r}, max_num_tokens={cap_n} "
                         f"cannot hold num_reqs={r}, num_tokens={n}")
    return r, n


_BUFFER_FIELDS = ("seq_lens", "query_start_loc", "positions", "input_ids")


def _bind_make_dummy_layout(rel: _Release, path: str = INPUT_BATCH) -> tuple[Callable[..., Any], str]:
    make_dummy, init, detail = _make_dummy_parts(rel, path)

    def make_dummy_layout(num_reqs: Any, num_tokens: Any, buffers: DummyBuffers) -> DummyBatch:
        r, n = _layout_args(num_reqs, num_tokens, buffers)
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


class _V1DummyCall:
    """One call of the v1 make_dummy binding: the model runner's persistent buffers, in the dtypes its __init__
    gives them, holding the caller's stale values; the stand-in model runner; the dummy run's result read back."""

    def __init__(self, parts: _V1DummyRun, r: int, n: int, buffers: DummyBuffers) -> None:
        self.parts, self.r, self.n, self.buffers = parts, r, n, buffers
        self.qsl = bind.cast_exact("buffers.query_start_loc", bind.int_array(
            "buffers.query_start_loc", buffers.query_start_loc, minimum=None), np.int32).copy()
        self.seq_cpu = _torch_copy("buffers.seq_lens", buffers.seq_lens, torch.int32)
        self.input_ids = bind.cpu_gpu_buffer(bind.cast_exact("buffers.input_ids", bind.int_array(
            "buffers.input_ids", buffers.input_ids, minimum=None), np.int32).copy())
        self.positions = _torch_copy("buffers.positions", buffers.positions, torch.int64)
        self.commit = Recorder("input_batch.block_table.commit_block_table")
        self.build = Recorder("_build_attention_metadata", returns=(None, None))
        self.model_runner = self._model_runner()

    def _model_runner(self) -> Stub:
        """One FULL graph of exactly N tokens whose request count is padded to the whole buffer: every slot past
        R is a padded request."""
        cap_r, cap_n, full = self.buffers.max_num_reqs, self.buffers.max_num_tokens, self.parts.full
        desc = Stub("BatchDescriptor", num_tokens=self.n, num_reqs=cap_r)
        return Stub(
            "GPUModelRunner", uniform_decode_query_len=1, max_num_tokens=cap_n,
            scheduler_config=Stub("scheduler_config", max_num_seqs=self.r),
            dcp_world_size=1, parallel_config=Stub("parallel_config", cp_kv_cache_interleave_size=1),
            vllm_config=Stub("vllm_config", parallel_config=Stub("parallel_config", num_ubatches=2)),
            optimistic_seq_lens_cpu=self.seq_cpu, seq_lens=self.seq_cpu.clone(), query_start_loc=bind.cpu_gpu_buffer(self.qsl),
            query_pos=bind.cpu_gpu_buffer(np.zeros(cap_n, dtype=np.int64)), arange_np=np.arange(cap_n + 1, dtype=np.int64),
            input_ids=self.input_ids, positions=self.positions, speculative_config=None,
            input_batch=Stub("InputBatch", block_table=Stub("MultiGroupBlockTable", commit_block_table=self.commit)),
            _build_attention_metadata=self.build,
            methods={
                "_determine_batch_execution_and_padding": lambda self, **kw: (full, desc, False, None, None),
                "_get_slot_mappings": lambda self, **kw: (None, None),
                "synchronize_input_prep": lambda self: contextlib.nullcontext(),
                "_get_cumsum_and_arange": self.parts.cumsum_and_arange,
            })

    def run(self) -> DummyBatch:
        """The dummy run's statements on the stand-in; the buffers written back; the batch the model runs on."""
        parts, n, model_runner, positions, input_ids = self.parts, self.n, self.model_runner, self.positions, self.input_ids
        local = parts.layout(model_runner, n, parts.full)
        logit_indices = parts.logits(model_runner, n)["logit_indices"]
        nst = np.asarray(local["num_scheduled_tokens"]).copy()
        built = self.build.last
        p = int(built.kwargs.get("num_reqs", -1))
        if self.commit.calls and int(self.commit.last.arg(0, "num_reqs")) != p:
            raise bind.Unbindable(f"the dummy run commits {self.commit.last.arg(0, 'num_reqs')} block-table rows but builds "
                                  f"attention metadata over {p} requests")
        seq_lens = bind.to_numpy(model_runner.seq_lens).copy()  # what the attention metadata reads (the device copy)
        self.buffers.seq_lens[...] = seq_lens
        self.buffers.query_start_loc[...] = self.qsl
        self.buffers.positions[...] = bind.to_numpy(positions)
        self.buffers.input_ids[...] = input_ids.np
        # The tokens the model runs on: the persistent buffers' first N entries.
        mql = built.kwargs.get("max_query_len")
        return DummyBatch(
            num_scheduled_tokens=nst, seq_lens=seq_lens, query_start_loc=self.qsl.copy(),
            positions=bind.to_numpy(positions)[:n].copy(), input_ids=input_ids.np[:n].copy(),
            # v1 has no index mapping: dummy request i is input-batch row i.
            idx_mapping=np.arange(nst.size), logits_indices=np.asarray(logit_indices).copy(),
            # One sampled token per request: the run's own num_sampled_tokens.
            cu_num_logits=np.concatenate([[0], np.cumsum(parts.sampled(model_runner, n)["num_sampled_tokens"])]),
            max_query_len=None if mql is None else int(mql),
        )


def _bind_v1_dummy_layout(rel: _Release) -> tuple[Callable[..., Any], str]:
    parts = _v1_dummy_run_parts(rel)

    def make_dummy_layout(num_reqs: Any, num_tokens: Any, buffers: DummyBuffers) -> DummyBatch:
        r, n = _layout_args(num_reqs, num_tokens, buffers)
        return _V1DummyCall(parts, r, n, buffers).run()

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
