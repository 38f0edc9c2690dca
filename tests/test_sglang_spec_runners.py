"""Contract K (``pad_graph_replay``) on SGLang's EAGLE draft and draft-extend CUDA-graph runners: the
draft-extend runner's ``replay`` up to 0.5.8 and both runners' ``execute`` from 0.5.14 (where they
subclass the decode runner). The wheels are downloaded at test time into the cache (skipped, with the
reason, when the registry cannot be reached); verdicts are driven by example counts, not time."""

from __future__ import annotations

from pathlib import Path

import pytest

from batchfuzz import engines, matrix
from batchfuzz.engines import SourceError, sglang
from batchfuzz.strategies.pad_graph_replay import case_of

DRAFT = f"{sglang.EAGLE_DRAFT_RUNNER}:EAGLEDraftCudaGraphRunner.execute"
EXTEND_OLD = f"{sglang.EAGLE_DRAFT_EXTEND_RUNNER}:EAGLEDraftExtendCudaGraphRunner.replay"
EXTEND = f"{sglang.EAGLE_DRAFT_EXTEND_RUNNER}:EAGLEDraftExtendCudaGraphRunner.execute"
PREFILL = f"{sglang.PREFILL_RUNNER}:PrefillCudaGraphRunner.load_batch"
MULTI_STEP = f"{sglang.MULTI_LAYER_RUNNER}:MultiLayerEagleMultiStepDraftExtendCudaGraphRunner.prepare"
# R = 1 replayed on the graph of 2 (captured 2 and 4), every stale buffer entry 100
STALE = tuple(case_of([2, 4], [5], stale=100).args.values())


def _wheel(version: str) -> Path:
    try:
        return engines.fetch_wheel("sglang", version, timeout_s=120)
    except SourceError as exc:
        pytest.skip(f"the package registry cannot be reached or has no sglang {version}: {exc}")


def _rows(source: engines.ReleaseSource) -> dict[str, engines.Bound]:
    return {b.function: b for b in sglang.bindings(source) if b.contract == "pad_graph_replay"}


def _cell(row: engines.Bound, examples: int) -> matrix.Cell:
    return matrix.run_cell(row, budget_s=120, timeout_s=120, seed=1, isolate=False, max_examples=examples)


def test_sglang_0_4_9_draft_extend_runner_keeps_stale_positions() -> None:
    """0.4.9's draft-extend replay fills the padded seq_lens and zeroes out_cache_loc but not positions (the
    bug class of SGLang#10892): the padded row keeps what an earlier replay left; the cell fails on it."""
    rows = _rows(sglang.ReleaseSource.from_wheel(_wheel("0.4.9")))
    assert rows[EXTEND].status == "absent" and "has no attribute 'execute'" in rows[EXTEND].reason
    row = rows[EXTEND_OLD]
    assert row.status == "bound", row.reason
    assert any("one speculative step" in a for a in row.assumed), row.assumed
    bs, lens, pos, loc = row.target(*STALE)
    assert (bs, lens.tolist(), pos.tolist(), loc.tolist()) == (2, [5, 1], [0, 100], [100, 0])
    cell = _cell(row, 60)
    assert (cell.verdict, cell.property) == ("fail", "padded_positions_zeroed"), (cell.message, cell.reason)


def _planted(wheel: Path, root: Path) -> sglang.ReleaseSource:
    """SGLang 0.5.23 with the draft-extend runner's reset of the padded positions taken out: a source tree
    (so the cell's worker can load it by reference) of the files binding that row reads."""
    real = sglang.ReleaseSource.from_wheel(wheel)
    read: list[str] = []

    def reader(relpath: str) -> str | None:
        read.append(relpath)
        return real.read(relpath)

    tracked = sglang.ReleaseSource(real.ref, real.version, reader)
    assert _rows(tracked)[EXTEND].status == "bound"
    reset = "            buffers.positions.zero_()\n"
    for relpath in {*read, "sglang/__init__.py", "sglang/_version.py"}:
        text = real.read(relpath)
        if text is None:
            continue
        if relpath == sglang.EAGLE_DRAFT_EXTEND_RUNNER:
            assert text.count(reset) == 1, "the planted bug no longer fits 0.5.23's text"
            text = text.replace(reset, "")
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_text(text)
    return sglang.ReleaseSource.from_dir(root)


def test_sglang_0_5_23_eagle_runners_bind_pass_and_a_planted_stale_position_fails(tmp_path: Path) -> None:
    """0.5.23's draft and draft-extend ``execute`` bind with their assumed values stated and pad as the
    contract asks; the draft-extend runner with its positions reset removed fails padded_positions_zeroed. The
    prefill runner is found and unbindable, naming what does not fit (it pads tokens, never request rows)."""
    wheel = _wheel("0.5.23")
    rows = _rows(sglang.ReleaseSource.from_wheel(wheel))
    assert rows[EXTEND_OLD].status == "absent"
    assert rows[PREFILL].status == "unbindable" and "seq_lens[R:bs] rows have no counterpart" in rows[PREFILL].reason
    for name in (DRAFT, EXTEND):
        assert rows[name].status == "bound", rows[name].reason
        assert "_pad_to_bucket" in rows[name].detail, rows[name].detail
        bs, lens, pos, loc = rows[name].target(*STALE)
        assert (bs, lens.tolist(), pos.tolist(), loc.tolist()) == (2, [5, 1], [0, 0], [100, 0]), name
    cell = _cell(rows[EXTEND], 40)
    assert cell.verdict == "pass", cell
    assert any("NaN/out-of-range probes off" in a for a in cell.assumed), cell
    planted = _rows(_planted(wheel, tmp_path))[EXTEND]
    assert planted.status == "bound", planted.reason
    assert planted.target(*STALE)[2].tolist() == [0, 100]
    cell = _cell(planted, 60)
    assert (cell.verdict, cell.property) == ("fail", "padded_positions_zeroed"), (cell.message, cell.reason)


def test_sglang_0_5_23_multi_step_prepare_on_the_npu_fill_keeps_stale_token_rows() -> None:
    """0.5.23's multi-layer draft-extend pads once in ``prepare``; with the release's torch fill (the NPU path;
    the CUDA path is a Triton kernel) the padded positions and out_cache_loc keep an earlier replay's values,
    and the cell says which fill ran."""
    row = _rows(sglang.ReleaseSource.from_wheel(_wheel("0.5.23")))[MULTI_STEP]
    assert row.status == "bound", row.reason
    assert row.assumed[0].startswith("fill_draft_extend_prepare_buffers = the release's "
                                     "fill_draft_extend_prepare_buffers_native"), row.assumed
    bs, lens, pos, loc = row.target(*STALE)
    assert (bs, lens.tolist(), pos.tolist(), loc.tolist()) == (2, [5, 1], [0, 100], [100, 100])
    cell = _cell(row, 40)
    assert (cell.verdict, cell.property) == ("fail", "padded_out_cache_loc_zeroed"), (cell.message, cell.reason)
