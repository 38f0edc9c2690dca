"""SGLang 0.5.23's decode CUDA-graph runner (``DecodeCudaGraphRunner.load_batch``) bound to contract K: the
configuration it reads (an environment switch, the process's parallel state) given, and said in the cell.
The wheel is downloaded at test time into the cache (skipped, with the reason, when the registry cannot be
reached); verdicts are driven by example counts, not time."""

from __future__ import annotations

import pytest

from batchfuzz import engines, matrix
from batchfuzz.engines import SourceError, sglang
from batchfuzz.strategies.pad_graph_replay import case_of

DECODE = f"{sglang.DECODE_RUNNER}:DecodeCudaGraphRunner.load_batch"
STALE = tuple(case_of([2, 4], [5], stale=100).args.values())


def test_sglang_0_5_23_decode_runner_binds_with_its_assumed_values() -> None:
    """0.5.23's load_batch reads envs.SGLANG_OPT_CUDA_GRAPH_FILL_FAST_PATH and the registry's
    INDEX_SEMANTIC_BUFFERS (taken from the release's text): it binds, the cell states the values given, pads to
    the smallest captured size, fills the padded seq_lens and zeroes the padded position; its cell passes."""
    try:
        wheel = engines.fetch_wheel("sglang", "0.5.23", timeout_s=120)
    except SourceError as exc:
        pytest.skip(f"the package registry cannot be reached or has no sglang 0.5.23: {exc}")
    row = next(b for b in sglang.bindings(sglang.ReleaseSource.from_wheel(wheel)) if b.function == DECODE)
    assert row.status == "bound", row.reason
    assert row.assumed and row.assumed[0].startswith("SGLANG_OPT_CUDA_GRAPH_FILL_FAST_PATH=False"), row.assumed
    bs, lens, pos, loc = row.target(*STALE)
    assert (bs, lens.tolist(), pos.tolist()) == (2, [5, 1], [0, 0])
    assert loc.tolist()[1] == 0
    cell = matrix.run_cell(row, budget_s=120, timeout_s=120, seed=1, isolate=False, max_examples=40)
    assert cell.verdict == "pass", cell
    assert "SGLANG_OPT_CUDA_GRAPH_FILL_FAST_PATH=False" in " ".join(cell.assumed), cell
