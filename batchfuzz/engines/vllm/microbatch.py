"""vLLM's microbatching (contracts D, E, F, N): the ubatch splits, the microbatch veto, per-microbatch metadata."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from batchfuzz import bind
from batchfuzz import engines as _engines
from batchfuzz.bind import Recorder, Stub
from batchfuzz.engines.vllm._release import DP_UTILS, INPUT_BATCH, MRV2_DP_UTILS, UBATCH_UTILS, V1_RUNNER, _Built, _Release
from batchfuzz.engines.vllm.dp import _Collective, _dp_loader, _parallel_config
from batchfuzz.preconditions import assumes
from batchfuzz.reference import split_ubatches as ubatch_oracle
from batchfuzz.reference import split_uniform_ubatches as uniform_oracle
from batchfuzz.reference.slice_ubatch_metadata import UbatchMetadata
from batchfuzz.strategies.slice_ubatch_metadata import every_microbatch_has_a_real_token

# ---------------------------------------------------------------- ubatch split with the DP refusal (D)


def _split_args(num_scheduled_tokens: Any, num_tokens_padded: Any, num_reqs_padded: Any, num_ubatches: Any, *,
                padded_holds_ubatches: bool) -> tuple[np.ndarray, int, int, int]:
    """Contract D's arguments checked as both split bindings take them; the v1 split also needs at least one
    padded token per microbatch (``padded_holds_ubatches``)."""
    nst = bind.int_array("num_scheduled_tokens", num_scheduled_tokens, minimum=1)
    n_padded = bind.count("num_tokens_padded", num_tokens_padded, 1)
    r_padded = bind.count("num_reqs_padded", num_reqs_padded, 1)
    n = bind.count("num_ubatches", num_ubatches, 2)
    total = int(nst.sum())
    if nst.size == 0 or n_padded < total or (padded_holds_ubatches and n_padded < n) or r_padded < nst.size:
        also = f" and >= num_ubatches = {n}" if padded_holds_ubatches else ""
        raise ValueError(f"need len(num_scheduled_tokens) >= 1, num_tokens_padded >= sum = {total}{also}, "
                         f"num_reqs_padded >= {nst.size}; got num_tokens_padded={n_padded}, num_reqs_padded={r_padded}")
    return nst, n_padded, r_padded, n


def _bind_ubatch_slices(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(UBATCH_UTILS).piece("maybe_create_ubatch_slices")
    refusal = loader.file(DP_UTILS).piece("_post_process_ubatch")
    create, vote = loader.load(piece), loader.load(refusal)

    def split_ubatches(num_scheduled_tokens: Any, num_tokens_padded: Any, num_reqs_padded: Any, num_ubatches: Any
                       ) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
        nst, n_padded, r_padded, n = _split_args(num_scheduled_tokens, num_tokens_padded, num_reqs_padded, num_ubatches,
                                                 padded_holds_ubatches=True)
        total = int(nst.sum())
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
        nst, n_padded, r_padded, n = _split_args(num_scheduled_tokens, num_tokens_padded, num_reqs_padded, num_ubatches,
                                                 padded_holds_ubatches=False)
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


def _mrv2_input_batch(input_batch_cls: Any, s: _Step) -> Any:
    """The release's own ``InputBatch`` holding the step; the fields the slicing does not read (logits, drafts,
    flags) are None."""
    rp, r = s.padded_reqs, s.num_reqs
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
    return input_batch_cls(**{fl.name: given.get(fl.name) for fl in fields
                              if fl.name in given or fl.default is dataclasses.MISSING})


def _mrv2_ubatch_runner(s: _Step, prepare_attn: Any, contexts: Recorder) -> Stub:
    """A stand-in ``UBatchRunner`` with one microbatch per slice of the step, its model state's ``prepare_attn``
    the release's, and ``_make_forward_contexts`` recorded (it receives the per-microbatch attention metadata)."""
    n, rp = len(s.slices), s.padded_reqs
    state = Stub("DefaultModelState", supports_mm_inputs=False, encoder_cache=None, max_model_len=int(s.seq_lens.max()),
                 model_config=Stub("model_config", is_mm_prefix_lm=False), methods={"prepare_attn": prepare_attn})
    return Stub("UBatchRunner", num_ubatches=n, dcp_size=1, dcp_rank=0, cp_interleave=1, model_state=state,
                ubatch_query_start_loc=[torch.zeros(rp + 1, dtype=torch.int32) for _ in range(n)],
                ubatch_seq_lens=[torch.zeros(rp, dtype=torch.int32) for _ in range(n)],
                ubatch_dcp_local_seq_lens=[None] * n, attn_groups=[[]], kv_cache_config=None,
                methods={"_make_forward_contexts": lambda self, *a: contexts(*a)})


def _metadata_built(contexts: Recorder) -> list[UbatchMetadata]:
    """What ``prepare`` passed on for each microbatch (build_attn_metadata's first slice of seq_lens; the computed
    counts as CommonAttentionMetadata.compute_num_computed_tokens gives them)."""
    out = []
    for meta in contexts.last.arg(1, "attn_metadata"):
        num_reqs = meta["num_reqs"]
        qsl, seq = meta["query_start_loc_gpu"], meta["seq_lens"][:num_reqs]
        out.append(_metadata(qsl, seq, seq - (qsl[1:] - qsl[:-1]), meta["positions"], meta["block_tables"][0],
                             meta["max_query_len"]))
    return out


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
        batch = _mrv2_input_batch(input_batch_cls, s)
        contexts = Recorder("UBatchRunner._make_forward_contexts", returns=[])
        prepare(_mrv2_ubatch_runner(s, prepare_attn, contexts), batch, (s.tensor(s.table),),
                torch.arange(s.padded, dtype=torch.int64).reshape(1, -1), mode_arg)
        return _metadata_built(contexts)

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
