"""An absent cell says why: vLLM's absent rows start with a short clause (the v1 model runner deleted, not
defined in this release, not in this release) and the Markdown matrix shows it in the cell. The releases are
downloaded at test time into the cache (skipped, with the reason, when the registry cannot be reached)."""

from __future__ import annotations

import pytest

from batchfuzz import engines, matrix
from tests._lazy import LazyModule

vllm = LazyModule("batchfuzz.engines.vllm")  # imports torch: when a test first uses it


def _cell(verdict: str, reason: str = "") -> matrix.Cell:
    return matrix.Cell(release="1.0", function="pkg/mod.py:f", contract="split_dummy_tokens", domain="engine",
                       verdict=verdict, reason=reason)


def test_the_markdown_cell_of_an_absent_row_carries_its_short_reason() -> None:
    rows = [_cell("absent", "not defined in this release: pkg/mod.py has no class or function 'f'")]
    assert "| absent (not defined in this release) |" in matrix.to_markdown(rows)
    # A reason without a short clause (a path first, or none) leaves the verdict alone.
    for reason in ("pkg/mod.py is not in this source tree", ""):
        assert matrix.to_markdown([_cell("absent", reason)]).splitlines()[2].endswith("| absent |")
    assert matrix.to_markdown([_cell("unbindable", "x: y")]).splitlines()[2].endswith("| unbindable |")


def _absent(version: str, function: str, contract: str) -> str:
    try:
        wheel = engines.fetch_wheel("vllm", version)
    except engines.SourceError as exc:
        pytest.skip(f"cannot download vllm=={version} from the package registry: {exc}")
    spec = next(s for s in vllm.SPECS if s.function == function and s.contract == contract)
    bound = vllm._ENGINE.bind_one(vllm._Release(vllm.ReleaseSource.from_wheel(wheel)), spec, probe=False)
    assert bound.status == "absent", bound
    return bound.reason


def test_vllm_absent_rows_start_with_why() -> None:
    """0.22.0 has no LoRA capture hook yet (not defined); 0.26.0's dispatch_cg_and_sync_dp exists but takes no
    allow_ubatching (not in this release); 0.34.0 deleted the v1 runner (where the behaviour went)."""
    assert _absent("0.22.0", f"{vllm.LORA_UTILS}:create_lora_capture_hook", "split_dummy_tokens").startswith(
        "not defined in this release: ")
    assert _absent("0.26.0", f"{vllm.MRV2_DP_UTILS}:dispatch_cg_and_sync_dp", "allow_microbatching").startswith(
        "not in this release: ")
    assert _absent("0.34.0", f"{vllm.V1_RUNNER}:GPUModelRunner._allow_microbatching", "allow_microbatching").startswith(
        "v1 model runner deleted: ")
