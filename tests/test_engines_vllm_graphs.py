"""vLLM's CUDA-graph size choice (``CudaGraphManager.dispatch``) bound to contract K, on 0.22.0, 0.26.0, 0.34.0.

The wheels are downloaded with pip into ``$BATCHFUZZ_CACHE/wheels`` once; the tests skip, saying why, when the
package registry cannot be reached. An edited copy of 0.34.0's file plants a dispatch one graph too large.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from batchfuzz import engines, registry
from batchfuzz.reference.pad_graph_replay import graph_size
from tests._lazy import LazyModule
from tests.test_engines_vllm import _recording, bound_target, edited, hunt

vllm = LazyModule("batchfuzz.engines.vllm")  # imports torch: when a test first uses it
DISPATCH = "vllm/v1/worker/gpu/cudagraph_utils.py:CudaGraphManager.dispatch"
TOKENS = "vllm/v1/worker/gpu/cudagraph_utils.py:CudaGraphManager._init_candidates"


def _spec(function: str) -> Any:
    return next(s for s in vllm.SPECS if s.function == function)


def _bind(source: Any, function: str) -> engines.Bound:
    return vllm._ENGINE.bind_one(vllm._Release(source), _spec(function))


def _bound(version: str, function: str = DISPATCH) -> tuple[engines.Bound, dict[str, str]]:
    try:
        wheel = engines.fetch_wheel("vllm", version)
    except engines.SourceError as exc:
        pytest.skip(f"cannot download vllm=={version} from the package registry: {exc}")
    source = _recording(wheel)
    bound = _bind(source, function)
    return bound, {p: source.read(p) or "" for p in sorted(source.seen)}


def _args(sizes: list[int], seq_lens: list[int], t: int) -> tuple[object, ...]:
    r, top = len(seq_lens), sizes[-1]
    return (np.array(sizes), np.array(seq_lens), np.arange(r * t), np.arange(r * t) + 10, t, 1,
            np.full(top, 9), np.full(top * t, 9), np.full(top * t, 9))


@pytest.mark.parametrize("version", ["0.34.0", "0.26.0", "0.22.0"])
@pytest.mark.parametrize("function", [DISPATCH, TOKENS], ids=["decode graphs", "token-keyed graphs"])
def test_dispatch_pads_a_step_to_the_smallest_graph_holding_it(version: str, function: str) -> None:
    """The release's dispatch gives R requests of T tokens the smallest captured request count >= R (contract K's
    size rule), on FULL decode graphs and on token-keyed graphs: in the first release with the new runner, the
    first whose manager reads use_breakable_cg (0.26.0), and the newest."""
    bound, _files = _bound(version, function)
    assert bound.status == "bound", bound.reason
    assert bound.assumed == _spec(function).assumed
    target = bound_target(bound)
    assert target(*_args([1, 2, 4, 8], [3, 3, 3], 2))[0] == 4
    assert target(*_args([2, 4], [5], 3))[0] == 2
    assert hunt(registry.get("pad_graph_replay"), target, 40, ("size_fits", "size_smallest"), domain="engine") is None


def test_a_planted_dispatch_one_graph_too_large_is_caught(tmp_path: Path) -> None:
    """0.34.0's dispatch taking the largest decode graph of the step's query length instead of the smallest that
    holds it pads to a larger graph than needed: contract K's size_smallest fails on it."""
    _bound_ok, files = _bound("0.34.0")
    planted = edited(tmp_path, files, DISPATCH.split(":")[0], "candidates = [decode_descs[n], *candidates]",
                     "candidates = [decode_descs[-1], *candidates]")
    bound = _bind(planted, DISPATCH)
    failure = hunt(registry.get("pad_graph_replay"), bound_target(bound), 40, ("size_smallest",), domain="engine")
    assert failure is not None
    sizes, r = [int(x) for x in failure.case.args["capture_bs"]], len(failure.case.args["seq_lens"])
    assert graph_size(sizes, r) < sizes[-1]  # a smaller graph holds the step; the planted lookup takes the largest
