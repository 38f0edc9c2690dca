"""Contract E on CUDA through padded buckets (``batchfuzz.impl._resident``) and
the registered CUDA-graph replay (``impl._cuda_graph``, implementation
``torch.cudagraph``).

The padding argument (a padded step has the same answer) is checked on the
CPU, where CI runs it: the staged eager path against the oracles. The
``gpu`` tests (skipped without CUDA, conftest.py) check the replay against
the oracles over many steps that share buckets, so most answers come from a
replayed graph, not from the eager first call of a bucket.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from batchfuzz import registry
from batchfuzz.reference import allow_microbatching as decision_oracle
from batchfuzz.reference import find_conflicts as conflicts_oracle
from batchfuzz.reference._step import STEP_ARGUMENTS
from tests._lazy import LazyModule

_resident = LazyModule("batchfuzz.impl._resident")

EXAMPLES = settings(max_examples=60, database=None, deadline=None, suppress_health_check=list(HealthCheck))


def _args(case: object) -> tuple:
    return tuple(case.args[k] for k in STEP_ARGUMENTS)  # type: ignore[attr-defined]


def _rows(conflicts: object) -> list[tuple[int, ...]]:
    return sorted(tuple(int(x) for x in row) for row in conflicts)  # type: ignore[attr-defined]


def test_bucket_rounds_up_to_a_power_of_two_times_the_floor() -> None:
    assert [_resident.bucket(n, 8) for n in (0, 1, 8, 9, 16, 17)] == [8, 8, 8, 16, 16, 32]


@EXAMPLES
@given(case=registry.get("allow_microbatching").domain("spec").cases())
def test_padded_decision_matches_the_oracle_on_cpu(case: object) -> None:
    decide = _decide_cpu()
    assert decide(*_args(case)) == decision_oracle.allow_microbatching(*_args(case))


@EXAMPLES
@given(case=registry.get("find_conflicts").domain("spec").cases())
def test_padded_conflicts_match_the_oracle_on_cpu(case: object) -> None:
    assert _rows(_find_cpu()(*_args(case))) == _rows(conflicts_oracle.find_conflicts(*_args(case)))


@functools.cache
def _decide_cpu() -> Any:
    """One binding for every test (bound when first used: no torch at collection)."""
    return _resident.bind_decision("cpu", graph=False)


@functools.cache
def _find_cpu() -> Any:
    return _resident.bind_conflicts("cpu", graph=False)


def test_overflowing_pairs_retry_in_a_bucket_with_room() -> None:
    # Eight requests all reading block 1, which request 0 writes: more than FIRST_PAIRS candidate pairs with two groups.
    n = 40
    c = np.full(n, 4, dtype=np.int64)
    c[0] = 0
    q = np.ones(n, dtype=np.int64)
    table = np.ones((n, 2), dtype=np.int64)
    args = (c, q, [table, table.copy()], [4, 4])
    found = _find_cpu()(*args)
    assert _rows(found) == _rows(conflicts_oracle.find_conflicts(*args))
    assert any(k.max_pairs > _resident.FIRST_PAIRS for k in _find_cpu().steps._staged)  # type: ignore[attr-defined]


def test_least_recently_used_buckets_are_dropped() -> None:
    steps = _resident.ResidentSteps(lambda key, dev: object(), "cpu", capacity=2)
    from batchfuzz.reference._step import check_step

    for w in (1, 17, 33, 1):
        steps.stage(check_step([0], [1], [np.ones((1, w), dtype=np.int64)], [16]))
    assert len(steps) == 2
    assert [k.widths for k in steps._staged] == [(64,), (16,)]


# ---------------------------------------------------------------- on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("contract", ["allow_microbatching", "find_conflicts"])
def test_cuda_graph_replay_matches_the_oracle(contract: str) -> None:
    c = registry.get(contract)
    target = c.implementation("torch.cudagraph").for_device("cuda")
    oracle = c.oracle
    same = (lambda a, b: a == b) if contract == "allow_microbatching" else (lambda a, b: _rows(a) == _rows(b))
    seen: list[object] = []

    @settings(EXAMPLES, max_examples=150)
    @given(case=c.domain("spec").cases())
    def collect(case: object) -> None:
        seen.append(case)

    collect()
    # Twice over the same steps: the second pass replays a graph for every bucket of the first.
    for case in seen + seen:
        assert same(target(*_args(case)), oracle(*_args(case))), _args(case)
    steps = target.steps  # type: ignore[attr-defined]
    captured = sum(s.checker.captures for s in steps._staged.values())
    assert captured >= len(steps) - 1  # every bucket still held was captured (the last may have been seen once)
    assert captured > 0


@pytest.mark.gpu
def test_cuda_graph_replay_reads_each_step_not_the_captured_one() -> None:
    decide = _resident.bind_decision("cuda")
    # One bucket: a safe step and an unsafe one (request 0 reads block 1 that request 1 writes later), alternated.
    safe = (np.array([0, 0]), np.array([1, 1]), [np.array([[1, 0], [2, 0]])], [1])
    unsafe = (np.array([1, 0]), np.array([1, 1]), [np.array([[1, 2], [1, 0]])], [1])
    answers = [decide(*(safe if k % 2 == 0 else unsafe)) for k in range(6)]
    assert answers == [True, False] * 3
    assert answers == [decision_oracle.allow_microbatching(*(safe if k % 2 == 0 else unsafe)) for k in range(6)]
