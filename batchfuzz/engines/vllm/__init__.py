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
- ``cpu/input_batch.py:InputBatch.make_dummy`` (the CPU runner, 0.34.0) as
  ``make_dummy``, the same way;
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
  case's capture sizes (docs/dp-coordination.md);
- ``vllm/config/vllm.py:VllmConfig._set_cudagraph_sizes`` as ``capture_grid``:
  the capture sizes it resolves on a stand-in config (``graphs.py``).

Then every copy of the split that ``split_search`` finds in the release, as
``split_dummy_tokens`` (docs/split-copies.md).

The binders live by area (``dummy.py``: A, B, C; ``microbatch.py``: D, E,
F, N; ``order.py``: G; ``spec_decode.py``: H; ``dp.py``: I; ``_release.py``: the
paths and the per-release loader they share); this module holds the table
of bindings, and ``batchfuzz.engines.base.Engine`` the rest.

A function a release lacks is "absent"; one whose code no longer fits its
binding (a name no one provides, a signature or attribute that changed, a
fragment that is not there) is "unbindable" with the reason. ``bindings``
lists all of them for a release; ``resolve(ref)`` rebuilds one in a fresh
process. Every binding is checked under its contract's ``engine`` domain
(docs/contracts.md): the inputs the engine's callers really produce (the v1
query_start_loc fill only ever sees R >= 1 and a buffer whose [0] is 0).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from batchfuzz import bind
from batchfuzz.engines import Bound, split_search
from batchfuzz.engines.base import Engine, Planned, Release, Spec
from batchfuzz.engines.vllm import graphs as _graphs
from batchfuzz.engines.vllm._release import (
    ATTN_UTILS,
    DP_UTILS,
    ENGINE,
    INPUT_BATCH,
    LORA_UTILS,
    MRV2_CG_UTILS,
    MRV2_DP_UTILS,
    MRV2_RUNNER,
    UBATCH_UTILS,
    V1_RUNNER,
    ReleaseSource,
    _Release,
    _release,
)
from batchfuzz.engines.vllm.dp import _bind_dp, rank_function
from batchfuzz.engines.vllm.dummy import (
    CPU_INPUT_BATCH,
    _bind_lora_hook,
    _bind_make_dummy_layout,
    _bind_make_dummy_split,
    _bind_mrv2_dummy_run,
    _bind_mrv2_query_start_loc,
    _bind_v1_dummy_layout,
    _bind_v1_dummy_run,
    _bind_v1_query_start_loc,
)
from batchfuzz.engines.vllm.microbatch import (
    ATTN_BACKEND,
    MRV2_DEFAULT_STATE,
    MRV2_UBATCH_UTILS,
    _bind_allow_microbatching,
    _bind_mrv2_allow_microbatching,
    _bind_mrv2_ubatch_prepare,
    _bind_mrv2_ubatch_slices,
    _bind_mrv2_uniform_slices,
    _bind_split_attn_metadata,
    _bind_ubatch_slices,
    allow_microbatching_on_steps,
)
from batchfuzz.engines.vllm.order import _bind_extends, _bind_reorder, _bind_reorder_threshold, _bind_split
from batchfuzz.engines.vllm.spec_decode import _bind_cumsum_and_arange, _bind_mrv2_spec_logits, _bind_spec_decode_metadata
from batchfuzz.reference.make_dummy import DummyBuffers

__all__ = [
    "ATTN_BACKEND",
    "ATTN_UTILS",
    "DP_UTILS",
    "ENGINE",
    "INPUT_BATCH",
    "LORA_UTILS",
    "MRV2_CG_UTILS",
    "MRV2_DEFAULT_STATE",
    "MRV2_DP_UTILS",
    "MRV2_RUNNER",
    "MRV2_UBATCH_UTILS",
    "RELEASES",
    "SPECS",
    "UBATCH_UTILS",
    "V1_RUNNER",
    "Planned",
    "ReleaseSource",
    "allow_microbatching_on_steps",
    "binding_plan",
    "bindings",
    "rank_function",
    "resolve",
]

# The releases of the published matrix (docs/vllm-matrix.json; batchfuzz engine vllm --all-releases).
RELEASES = ("0.22.0", "0.23.0", "0.26.0", "0.27.0", "0.28.0", "0.33.0", "0.34.0")


# ---------------------------------------------------------------- the table of bindings


_Spec = Spec  # the rows below: the shared spec of an engine module (batchfuzz.engines.base)


def _probe_buffers() -> DummyBuffers:
    return DummyBuffers.zeros(4, 6)


# A step with every region and two groups of different thresholds (no speculative tokens).
_ORDER_PROBE = ([1, 0, 2, 3], [1, 3, 2, 1], [1, 4, 4, 5], [1, 2, None], 0)

# One step of R = 1 request of T = 1 token on graphs of 2 and 4 requests (K's rows).
_GRAPH_PROBE = tuple(np.asarray(v) if isinstance(v, list) else v for v in ([2, 4], [5], [3], [7], 1, 1, [9] * 4, [9] * 4, [9] * 4))

SPECS: tuple[_Spec, ...] = (
    _Spec(f"{INPUT_BATCH}:InputBatch.make_dummy", "split_dummy_tokens", _bind_make_dummy_split, (3, 5)),
    _Spec(f"{INPUT_BATCH}:InputBatch.make_dummy", "make_dummy", _bind_make_dummy_layout, (3, 5, "buffers")),
    _Spec(f"{CPU_INPUT_BATCH}:InputBatch.make_dummy", "make_dummy",
          functools.partial(_bind_make_dummy_layout, path=CPU_INPUT_BATCH), (3, 5, "buffers")),
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
    _Spec(f"{_graphs.CG_UTILS}:CudaGraphManager.dispatch", "pad_graph_replay", _graphs._bind_graph_dispatch,
          _GRAPH_PROBE,
          _graphs.ASSUMED),
    _Spec(f"{_graphs.CG_UTILS}:CudaGraphManager._init_candidates", "pad_graph_replay",
          functools.partial(_graphs._bind_graph_dispatch, row=_graphs.GraphRow(tokens=True)),
          _GRAPH_PROBE,
          _graphs.TOKEN_ASSUMED),
    _Spec(f"{_graphs.CG_UTILS}:CudaGraphManager._maybe_ubatch_twin", "pad_graph_replay",
          functools.partial(_graphs._bind_graph_dispatch, row=_graphs.GraphRow(ubatches=2)),
          _GRAPH_PROBE,
          _graphs.TWIN_ASSUMED),
    _Spec(f"{_graphs.CG_UTILS}:CudaGraphManager.__init__", "pad_graph_replay",
          functools.partial(_graphs._bind_graph_dispatch, row=_graphs.GraphRow(varlen=True)),
          _GRAPH_PROBE,
          _graphs.VARLEN_ASSUMED),
    _Spec(f"{_graphs.CONFIG}:VllmConfig._set_cudagraph_sizes", "capture_grid", _graphs._bind_capture_grid,
          (4, 8192, 1, 1, False), _graphs.GRID_ASSUMED),
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


class _Vllm(Engine):
    """The shared skeleton with vLLM's differences: where an absent v1 function's behaviour went, fresh mutable
    probe inputs, and the split search's copies as rows after SPECS."""

    def absent_reason(self, rel: Release, spec: Spec, exc: bind.Absent) -> str:
        """Why ``spec`` is absent, starting with a short clause (``v1 model runner deleted``, ``not defined in
        this release``, ``not in this release``): the binding's own words, and where the behaviour went when the
        release has the new model runner but no v1 one."""
        moved = _MOVED.get(spec.function)
        if moved is not None and rel.source.read(V1_RUNNER) is None and rel.source.read(MRV2_RUNNER) is not None:
            return f"v1 model runner deleted: {moved} ({exc})"
        if any(words in str(exc) for words in _NOT_DEFINED):
            return f"not defined in this release: {exc}"
        return f"not in this release: {exc}"

    def probe_args(self, spec: Spec) -> tuple[Any, ...]:
        fresh = {"buffers": _probe_buffers, "out": lambda: np.zeros(5, dtype=np.int32)}
        return tuple(fresh[a]() if isinstance(a, str) else a for a in spec.probe)

    def extra_plan(self, rel: Release) -> list[Planned]:
        """Each copy of the split ``split_search`` finds, in path and line order (reading the source text only)."""
        return [Planned(site.function, split_search.CONTRACT, functools.partial(self.bind_site, rel, site))
                for site in split_search.search(rel.source)]

    def resolve_extra(self, rel: Release, function: str, contract: str) -> Bound | None:
        if contract != split_search.CONTRACT or "#" not in function:
            return None
        return self.bind_site(rel, split_search.find(rel.source, function), probe=False)

    def bind_site(self, rel: Release, site: split_search.SplitSite, probe: bool = True) -> Bound:
        """A copy of the split the search found, as contract A's target; a site
        whose dividend counts no tokens is ``not-split`` (``split_search.not_a_token_split``)."""
        release, contract = self.label(rel), split_search.CONTRACT
        detail = f"found by the split search (batchfuzz.engines.split_search): {site.describe()}"
        other = split_search.not_a_token_split(site)
        if other:
            return Bound(release, site.function, contract, "not-split", reason=other, detail=detail)
        raised = ""
        try:
            target = split_search.bind_site(site, rel.loader())
            if probe:
                raised = bind.probe(target, *split_search.PROBE, what=site.function)
        except (bind.Absent, bind.Unbindable) as exc:
            return Bound(release, site.function, contract, "unbindable", reason=str(exc), detail=detail)
        return Bound(release, site.function, contract, "bound", target=self.finish(rel, target, site.function, contract),
                     ref=self.ref(rel.source, site.function, contract), detail=detail, probe_raised=raised,
                     probe_args=split_search.PROBE if raised else ())

    def _open(self, source_ref: str) -> Release:
        return _release(source_ref)  # one cache with the rank functions' (dp.py)


_ENGINE = _Vllm(ENGINE, ReleaseSource, SPECS, release_kind=_Release)
binding_plan = _ENGINE.binding_plan
bindings = _ENGINE.bindings
resolve = _ENGINE.resolve
