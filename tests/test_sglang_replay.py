"""Contracts K (``pad_graph_replay``) and L (``tbo_children_tokens``) bound to SGLang: K
on a tiny model runner in SGLang's layout written here (whose padding zeroes
``positions`` or not), and on SGLang 0.5.8 downloaded at test time into the
cache (skipped, with the reason, when the registry cannot be reached); L on
SGLang 0.5.8's split of the padding between the two children.
Verdicts are driven by example counts, not time."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from batchfuzz import engines, matrix
from batchfuzz.engines import SourceError, sglang
from batchfuzz.strategies.pad_graph_replay import case_of

# A CUDA-graph runner in SGLang's shape, written for this test; ZERO is the padding of positions.
RUNNER = '''
    import bisect

    from sglang.srt.utils import enable_num_token_non_padded


    class CudaGraphRunner:
        def replay_prepare(self, forward_batch, pp_proxy_tensors=None):
            self.recapture_if_needed(forward_batch)
            raw_bs = forward_batch.batch_size
            raw_num_token = raw_bs * self.num_tokens_per_bs
            bs = self.capture_bs[bisect.bisect_left(self.capture_bs, raw_bs)]
            if bs != raw_bs:
                self.seq_lens.fill_(self.seq_len_fill_value)
                self.out_cache_loc.zero_()
                ZERO
            self.seq_lens[:raw_bs].copy_(forward_batch.seq_lens)
            self.out_cache_loc[:raw_num_token].copy_(forward_batch.out_cache_loc)
            self.positions[:raw_num_token].copy_(forward_batch.positions)
            self.model_runner.attn_backend.init_forward_metadata_replay_cuda_graph(
                bs, self.req_pool_indices[:bs], self.seq_lens[:bs], forward_batch.seq_lens_sum, None, None, None)
            self.bs = bs
    '''


def _tree(root: Path, zero: str) -> Path:
    files = {"sglang/__init__.py": "", "sglang/_version.py": '__version__ = version = "9.0.0"\n',
             sglang.CUDA_GRAPH_RUNNER: RUNNER.replace("ZERO", zero)}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip())
    return root


def _replay_rows(source: engines.ReleaseSource) -> dict[str, engines.Bound]:
    return {b.function: b for b in sglang.bindings(source) if b.contract == "pad_graph_replay"}


MODEL_RUNNER = f"{sglang.CUDA_GRAPH_RUNNER}:CudaGraphRunner.replay_prepare"
EAGLE = f"{sglang.EAGLE_DRAFT_RUNNER}:EAGLEDraftCudaGraphRunner.replay"
DECODE = f"{sglang.DECODE_RUNNER}:DecodeCudaGraphRunner.load_batch"
# R = 1 replayed on the graph of 2, every stale buffer entry 7
STALE = tuple(case_of([2], [5], stale=7).args.values())


def test_the_tiny_runner_binds_and_its_padding_is_judged(tmp_path: Path) -> None:
    rows = _replay_rows(sglang.ReleaseSource.from_dir(_tree(tmp_path / "zeroes", "self.positions.zero_()")))
    assert rows[EAGLE].status == "absent" and "is not in this source tree" in rows[EAGLE].reason
    bound = rows[MODEL_RUNNER]
    assert bound.status == "bound", bound.reason
    bs, lens, pos, loc = bound.target(*STALE)
    assert (bs, lens.tolist(), pos.tolist(), loc.tolist()) == (2, [5, 1], [0, 0], [100, 0])
    assert engines.resolve(bound.ref)(*STALE)[0] == 2
    with pytest.raises(ValueError, match="capture_bs must be strictly increasing"):
        bound.target(np.array([2, 1]), *STALE[1:])
    cell = matrix.run_cell(bound, budget_s=120, timeout_s=120, seed=1, isolate=False, max_examples=40)
    assert cell.verdict == "pass", cell
    stale = _replay_rows(sglang.ReleaseSource.from_dir(_tree(tmp_path / "stale", "pass")))[MODEL_RUNNER]
    cell = matrix.run_cell(stale, budget_s=120, timeout_s=120, seed=1, isolate=False, max_examples=60)
    assert (cell.verdict, cell.property) == ("fail", "padded_positions_zeroed"), cell


def test_sglang_0_5_8_runners() -> None:
    try:
        wheel = engines.fetch_wheel("sglang", "0.5.8", timeout_s=120)
    except SourceError as exc:
        pytest.skip(f"the package registry cannot be reached or has no sglang 0.5.8: {exc}")
    rows = _replay_rows(sglang.ReleaseSource.from_wheel(wheel))
    assert {f: rows[f].status for f in (MODEL_RUNNER, EAGLE, DECODE)} == {MODEL_RUNNER: "bound", EAGLE: "bound", DECODE: "absent"}, rows
    # the model runner (through GraphInputBuffers) leaves the padded position stale; the EAGLE draft runner zeroes it
    assert rows[MODEL_RUNNER].target(*STALE)[2].tolist() == [0, 7]
    assert rows[EAGLE].target(*STALE)[2].tolist() == [0, 0]
    cell = matrix.run_cell(rows[MODEL_RUNNER], budget_s=120, timeout_s=120, seed=1, isolate=False, max_examples=40)
    assert (cell.verdict, cell.property) == ("fail", "padded_positions_zeroed"), cell


def test_sglang_0_5_14_rebuilt_decode_runner() -> None:
    """0.5.14 moved the CUDA-graph runners to model_executor/runner/: the decode runner's load_batch, with the
    release's own buffer registry, is bound to K and zeroes the padded position; the old two rows are absent."""
    try:
        wheel = engines.fetch_wheel("sglang", "0.5.14", timeout_s=120)
    except SourceError as exc:
        pytest.skip(f"the package registry cannot be reached or has no sglang 0.5.14: {exc}")
    rows = _replay_rows(sglang.ReleaseSource.from_wheel(wheel))
    assert {f: rows[f].status for f in (MODEL_RUNNER, EAGLE, DECODE)} == {MODEL_RUNNER: "absent", EAGLE: "absent", DECODE: "bound"}, rows
    bs, lens, pos, loc = rows[DECODE].target(*STALE)
    assert (bs, lens.tolist(), pos.tolist(), loc.tolist()) == (2, [5, 1], [0, 0], [100, 0])
    cell = matrix.run_cell(rows[DECODE], budget_s=120, timeout_s=120, seed=1, isolate=False, max_examples=40)
    assert cell.verdict == "pass", cell


def test_sglang_0_5_8_children_tokens() -> None:
    """Contract L on SGLang 0.5.8's padding split of the two children: it passes (child B takes all padding)."""
    try:
        wheel = engines.fetch_wheel("sglang", "0.5.8", timeout_s=120)
    except SourceError as exc:
        pytest.skip(f"the package registry cannot be reached or has no sglang 0.5.8: {exc}")
    bound = next(b for b in sglang.bindings(sglang.ReleaseSource.from_wheel(wheel))
                 if b.contract == "tbo_children_tokens" and b.status == "bound")
    assert bound.function.startswith(sglang.TBO_NEW)
    assert bound.target(3, 5, 8) == (3, 2) and bound.target(6, 5, 8) == (5, 0)
    with pytest.raises(ValueError, match=r"split_token_index must be <= num_tokens \(8\), got 9"):
        bound.target(9, 5, 8)
    cell = matrix.run_cell(bound, budget_s=120, timeout_s=120, seed=1, isolate=False, max_examples=40)
    assert cell.verdict == "pass", cell
