"""vLLM 0.34.0's CPU model runner's dummy batch (``cpu/input_batch.py:InputBatch.make_dummy``) bound to contract B.

The wheel is downloaded with pip into ``$BATCHFUZZ_CACHE/wheels`` once; the tests skip, saying why, when the package
registry cannot be reached. An edited copy plants the padded ``query_start_loc`` slots left stale.
"""

from __future__ import annotations

from pathlib import Path

from batchfuzz import registry
from tests.test_engines_vllm import bound_target, edited, hunt
from tests.test_engines_vllm_graphs import _bind, _bound

CPU_DUMMY = "vllm/v1/worker/cpu/input_batch.py:InputBatch.make_dummy"


def test_the_cpu_runners_dummy_batch_holds_contract_b() -> None:
    """The CPU runner's own make_dummy, over its own InputBuffers holding stale values: a derandomized search of
    every property of B in the engine domain finds nothing."""
    bound, _files = _bound("0.34.0", CPU_DUMMY)
    assert bound.status == "bound", bound.reason
    assert hunt(registry.get("make_dummy"), bound_target(bound), 15, domain="engine") is None


def test_a_planted_stale_query_start_loc_tail_is_caught(tmp_path: Path) -> None:
    """Without the fill of the padded query_start_loc slots, an earlier, larger batch's offsets stay there:
    query_start_loc_layout fails."""
    _bound_ok, files = _bound("0.34.0", CPU_DUMMY)
    planted = edited(tmp_path, files, CPU_DUMMY.split(":")[0],
                     "input_buffers.query_start_loc[num_reqs + 1 :] = num_tokens", "pass")
    failure = hunt(registry.get("make_dummy"), bound_target(_bind(planted, CPU_DUMMY)), 40, ("query_start_loc_layout",),
                   domain="engine")
    assert failure is not None
