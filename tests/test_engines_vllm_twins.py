"""The DBO twins of vLLM's decode CUDA graphs (``CudaGraphManager._maybe_ubatch_twin``, 0.33.0 on) and its varlen
decode graphs (``varlen_decode``, 0.28.0 on; the row ``CudaGraphManager.__init__``) under contract K.

The wheels are downloaded with pip into ``$BATCHFUZZ_CACHE/wheels`` once; the tests skip, saying why, when the
package registry cannot be reached. Edited copies of 0.34.0's file plant a twin dropped for the smallest graphs and
varlen graphs captured for one-token queries only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.execution import FAILED, evaluate
from tests.test_engines_vllm import bound_target, edited, hunt
from tests.test_engines_vllm_graphs import _bind, _bound, _spec

TWIN = "vllm/v1/worker/gpu/cudagraph_utils.py:CudaGraphManager._maybe_ubatch_twin"
VARLEN = "vllm/v1/worker/gpu/cudagraph_utils.py:CudaGraphManager.__init__"


def _step(sizes: list[int], r: int, t: int) -> tuple[object, ...]:
    top = sizes[-1]
    return (np.array(sizes), np.full(r, 3), np.arange(r * t), np.arange(r * t), t, 1,
            np.full(top, 9), np.full(top * t, 9), np.full(top * t, 9))


def test_a_step_split_in_two_pads_to_the_smallest_twin_holding_it() -> None:
    """0.34.0: three requests split in two microbatches take the twin of the 4-request decode graph (not eager, which
    would leave bs = 3 uncaptured), and a derandomized search of K's properties finds nothing."""
    bound, _files = _bound("0.34.0", TWIN)
    assert bound.status == "bound", bound.reason
    assert bound.assumed == _spec(TWIN).assumed
    target = bound_target(bound)
    assert target(*_step([2, 4, 8], 3, 2))[0] == 4
    assert hunt(registry.get("pad_graph_replay"), target, 40, ("size_fits", "size_smallest"), domain="engine") is None


def test_the_twins_are_absent_before_0_33_0() -> None:
    bound, _files = _bound("0.28.0", TWIN)
    assert bound.status == "absent" and "_maybe_ubatch_twin" in bound.reason


def test_a_planted_missing_twin_is_caught(tmp_path: Path) -> None:
    """0.34.0 with no twin for graphs under twice the microbatch count: a small split step pads past the smallest
    captured graph holding it (size_smallest)."""
    _bound_ok, files = _bound("0.34.0", TWIN)
    planted = edited(tmp_path, files, TWIN.split(":")[0], "if desc.num_tokens < num_ubatches:",
                     "if desc.num_tokens < 2 * num_ubatches:")
    target = bound_target(_bind(planted, TWIN))
    # Two one-token requests, split in two: the 2-request graph's twin holds them, the planted manager pads to 4.
    step = _step([2, 4, 8], 2, 1)
    assert target(*step)[0] == 4 and bound_target(_bound_ok)(*step)[0] == 2
    case = Case(dict(zip(registry.get("pad_graph_replay").arguments, step, strict=True)))
    outcome = evaluate(registry.get("pad_graph_replay"), target, "size_smallest", case)
    assert outcome.status == FAILED, outcome
    # And a search finds it (300 examples: 40 found it in 5 of 20 random seeds, 300 in 19 of 20).
    assert hunt(registry.get("pad_graph_replay"), target, 300, ("size_smallest",), domain="engine") is not None


def test_a_varlen_decode_step_pads_to_the_smallest_varlen_graph_holding_it() -> None:
    """0.34.0 built with varlen_decode: three requests of two tokens take the 8-token varlen graph (bs 4, not eager),
    and K's size properties hold under a derandomized search; 0.27.0 has no varlen graphs (absent, saying so)."""
    bound, _files = _bound("0.34.0", VARLEN)
    assert bound.status == "bound", bound.reason
    assert bound.assumed == _spec(VARLEN).assumed
    target = bound_target(bound)
    assert target(*_step([2, 4, 8], 3, 2))[0] == 4
    assert hunt(registry.get("pad_graph_replay"), target, 40, ("size_fits", "size_smallest"), domain="engine") is None
    old, _files = _bound("0.27.0", VARLEN)
    assert old.status == "absent" and "no varlen decode graphs" in old.reason


def test_planted_one_token_varlen_graphs_are_caught(tmp_path: Path) -> None:
    """0.34.0's varlen graphs captured for queries of one token: a step of longer queries finds no graph and runs
    eagerly at its own, uncaptured size (size_fits)."""
    _bound_ok, files = _bound("0.34.0", VARLEN)
    planted = edited(tmp_path, files, VARLEN.split(":")[0], "max_query_len=self.decode_query_len,", "max_query_len=1,")
    failure = hunt(registry.get("pad_graph_replay"), bound_target(_bind(planted, VARLEN)), 40, ("size_fits",),
                   domain="engine")
    assert failure is not None and int(failure.case.args["num_tokens_per_bs"]) >= 2
