"""Contract D and E implementations beyond the registry's properties:
exact agreement with the oracles on every step (ill-formed ones included),
dtype independence, and, on CUDA, ``allow_microbatching`` without a host
synchronisation before its result is read."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from batchfuzz.case import Case
from batchfuzz.contracts.find_conflicts import conflict_set
from batchfuzz.impl import (
    allow_microbatching_numpy,
    find_conflicts_numpy,
    split_ubatches_numpy,
)
from batchfuzz.reference import allow_microbatching as ref_decision
from batchfuzz.reference import find_conflicts as ref_conflicts
from batchfuzz.reference import split_ubatches as ubatch_oracle
from batchfuzz.reference._step import STEP_ARGUMENTS
from batchfuzz.strategies import find_conflicts as conflict_cases
from batchfuzz.strategies import split_ubatches as ubatch_cases
from tests._lazy import LazyModule

torch = LazyModule("torch")
allow_microbatching_torch = LazyModule("batchfuzz.impl.allow_microbatching_torch")
find_conflicts_torch = LazyModule("batchfuzz.impl.find_conflicts_torch")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _args(case: Case) -> tuple[object, ...]:
    return tuple(case.args[k] for k in STEP_ARGUMENTS)


def _retyped(args: tuple[object, ...], dtype: type) -> tuple[object, ...]:
    c, q, tables, sizes = args
    return (np.asarray(c).astype(dtype), np.asarray(q).astype(dtype), [np.asarray(t).astype(dtype) for t in tables],  # type: ignore[attr-defined]
            sizes)


@pytest.mark.parametrize("device", DEVICES)
def test_allow_microbatching_equals_the_exact_oracle(device: str) -> None:
    """The implementations are exact, not just sound: equal to the oracle on
    every step, ill-formed ones (self-overlap, slots written twice) included."""
    torch_allow = allow_microbatching_torch.bind(device)

    @given(case=conflict_cases.cases())
    def run(case: Case) -> None:
        expected = ref_decision.allow_microbatching(*_args(case))
        assert allow_microbatching_numpy.allow_microbatching(*_args(case)) is expected
        assert torch_allow(*_args(case)) is expected

    run()


@pytest.mark.parametrize("device", DEVICES)
def test_int32_and_int64_agree(device: str) -> None:
    torch_find = find_conflicts_torch.bind(device)

    @given(case=conflict_cases.cases())
    def run(case: Case) -> None:
        a32, a64 = _retyped(_args(case), np.int32), _retyped(_args(case), np.int64)
        for find in (ref_conflicts.find_conflicts, find_conflicts_numpy.find_conflicts, torch_find):
            assert conflict_set(find(*a32)) == conflict_set(find(*a64))
        assert allow_microbatching_numpy.allow_microbatching(*a32) == allow_microbatching_numpy.allow_microbatching(*a64)

    run()


@given(case=ubatch_cases.cases())
def test_split_ubatches_int32_and_int64_agree(case: Case) -> None:
    a = case.args
    for dtype in (np.int32, np.int64):
        nst = np.asarray(a["num_scheduled_tokens"]).astype(dtype)
        args = (nst, a["num_tokens_padded"], a["num_reqs_padded"], a["num_ubatches"])
        assert split_ubatches_numpy.split_ubatches(*args) == ubatch_oracle.split_ubatches(*args)


def test_find_conflicts_numpy_returns_sorted_unique_rows() -> None:
    out = find_conflicts_numpy.find_conflicts(np.array([1, 1, 0]), np.array([1, 1, 2]),
                                         [np.array([[1, 5], [1, 6], [1, 7]])], [1])
    assert out.dtype == np.int64 and out.shape == (2, 4)
    assert [tuple(r) for r in out.tolist()] == sorted({tuple(r) for r in out.tolist()})
    assert conflict_set(out) == {(0, 0, 2, 1), (0, 1, 2, 1)}


def test_torch_allow_is_a_device_bool_tensor() -> None:
    c, q = torch.tensor([2, 0]), torch.tensor([1, 3])
    check = allow_microbatching_torch.ExactMicrobatchCheckTorch(2, [2], [2], 4, 4, "cpu")
    out = check(2, c, q, [torch.tensor([[1, 3], [1, 2]])])
    assert out.dtype == torch.bool and out.shape == () and out.device == c.device
    assert bool(out) is False


@pytest.mark.gpu
def test_torch_allow_does_not_synchronise_on_cuda() -> None:
    """The decision stays on the device until it is read: no host sync inside."""
    dev = torch.device("cuda")
    c, q = torch.tensor([2, 0, 5], device=dev), torch.tensor([1, 3, 2], device=dev)
    tables = [torch.tensor([[1, 3, 0, 0], [1, 2, 0, 0], [4, 5, 6, 7]], device=dev),
              torch.tensor([[9, 0], [9, 8], [10, 11]], device=dev)]
    check = allow_microbatching_torch.ExactMicrobatchCheckTorch(3, [4, 2], [2, 4], 12, 6, dev)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = check(3, c, q, tables)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.device.type == "cuda" and bool(out) is False
