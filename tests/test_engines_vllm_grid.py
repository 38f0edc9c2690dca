"""vLLM's capture grid (``VllmConfig._set_cudagraph_sizes``) bound to contract O, on 0.22.0 and 0.34.0.

The wheels are downloaded with pip into ``$BATCHFUZZ_CACHE/wheels`` once; the tests skip, saying why, when the
package registry cannot be reached. An edited copy of 0.34.0's config plants a grid not clipped at the token budget.
"""

from __future__ import annotations

from pathlib import Path

from batchfuzz import registry
from tests.test_engines_vllm import bound_target, edited, hunt
from tests.test_engines_vllm_graphs import _bind, _bound, _spec

GRID = "vllm/config/vllm.py:VllmConfig._set_cudagraph_sizes"


def test_the_newest_grid_holds_every_property() -> None:
    """0.34.0's grid for the defaults' shape (a small max_num_seqs; q = 17 where the decode sizes are appended off
    the 16-token stride) and a derandomized search of every property in the engine domain find nothing."""
    bound, _files = _bound("0.34.0", GRID)
    assert bound.assumed == _spec(GRID).assumed and "sequence_parallel=False" in bound.detail
    target = bound_target(bound)
    assert target(4, 8192, 1, 1, False) == [1, 2, 4, 8]
    assert 510 in target(30, 8192, 17, 1, False)  # 30 decode requests of 17 tokens, captured exactly
    assert hunt(registry.get("capture_grid"), target, 30, domain="engine") is None


def test_sequence_parallelism_can_empty_the_grid_of_0_22_0() -> None:
    """0.22.0 caps the grid at min(2 S q, 512, B) and then drops sizes that are not multiples of tp_size: with one
    request and TP 4 nothing is left though a 4-token graph fits (non_empty, a documented choice: eager is safe)."""
    bound, _files = _bound("0.22.0", GRID)
    target = bound_target(bound)
    assert target(1, 4, 1, 4, True) == []
    assert target(1, 4, 1, 2, True) == [2]
    failure = hunt(registry.get("capture_grid"), target, 300, ("non_empty",), domain="engine")  # 60: 15 of 20 seeds
    assert failure is not None and failure.case.args["sequence_parallel"]


def test_a_planted_grid_past_the_token_budget_is_caught(tmp_path: Path) -> None:
    """0.34.0 with the cap no longer clipped at max_num_batched_tokens captures graphs larger than any step (and the
    runner's token buffers): within_token_budget fails."""
    _bound_ok, files = _bound("0.34.0", GRID)
    planted = edited(tmp_path, files, GRID.split(":")[0],
                     "max_cudagraph_capture_size = min(max_num_tokens, max_cudagraph_capture_size)",
                     "max_cudagraph_capture_size = max(max_num_tokens, max_cudagraph_capture_size)")
    target = bound_target(_bind(planted, GRID))
    failure = hunt(registry.get("capture_grid"), target, 60, ("within_token_budget",), domain="engine")
    assert failure is not None
    args = failure.case.args
    assert max(target(*args.values())) > args["max_num_batched_tokens"]
