"""What the contract properties cannot see in impl/: result dtypes and
shapes (the properties compare values, not dtypes: docs/contracts.md, common
rules, "Decision: result dtypes"), the device a torch form works on (the
properties run on the CPU, the default device: the meta device shows a tensor
made on the CPU instead), the torch forms' own argument errors and their
returned views (the properties reach them through the registry's numpy
bindings, which check the arguments on the host and slice the result
themselves), exact arithmetic past 2**53, strided buffers, and the adapter
between the two (impl/_adapter.py) on the structures no binding passes it.
Each test here kills a mutant that survived the properties (docs/mutation.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from batchfuzz.impl import make_dummy_numpy, split_dummy_tokens_numpy
from batchfuzz.reference import make_dummy as make_dummy_oracle
from batchfuzz.reference import pad_query_start_loc as pad_oracle
from batchfuzz.reference.make_dummy import DUMMY_BATCH_FIELDS, DummyBatch, DummyBuffers
from tests._lazy import LazyModule

torch = LazyModule("torch")
_adapter = LazyModule("batchfuzz.impl._adapter")
_cuda_graph = LazyModule("batchfuzz.impl._cuda_graph")
make_dummy_torch = LazyModule("batchfuzz.impl.make_dummy_torch")
pad_query_start_loc_torch = LazyModule("batchfuzz.impl.pad_query_start_loc_torch")
split_dummy_tokens_torch = LazyModule("batchfuzz.impl.split_dummy_tokens_torch")


@pytest.mark.parametrize(("num_reqs", "num_tokens"), [(1, 1), (3, 5), (4, 8), (256, 496)])
def test_input_batch_builder_is_int32(num_reqs: int, num_tokens: int) -> None:
    """The engine's dummy input-batch builder fills an int32 array (the dtype
    of the engine's persistent ``num_scheduled_tokens``), not numpy's default int."""
    out = split_dummy_tokens_numpy.input_batch_builder(num_reqs, num_tokens)
    assert out.dtype == np.int32, out.dtype
    assert int(out.sum()) == num_tokens


def test_input_batch_builder_is_exact_with_many_requests() -> None:
    """The int32 builder's counts are exact wherever they fit int32. With
    R > 2**23 requests N / R can lie closer to the next integer than half a
    double's spacing there, so a float quotient rounds up to it: here every
    request would get one token too many."""
    r = 2**23 + 8
    k = 2**31 - 1 - 2**9  # k = N // R + 1 fits int32
    out = split_dummy_tokens_numpy.input_batch_builder(r, k * r - 1)  # N // R = k - 1, N % R = R - 1
    assert out.dtype == np.int32 and out.shape == (r,)
    assert int(out[0]) == k - 1 and bool((out[1:] == k).all())


@pytest.mark.parametrize(("counts", "num_reqs_padded", "capacity"), [([3], 1, 8), ([2, 0, 5], 4, 6), ([], 2, 3)])
def test_query_start_loc_graph_returns_p_plus_one_entries(counts: list[int], num_reqs_padded: int, capacity: int) -> None:
    """The CUDA-graph form returns ``out[:P+1]`` of a persistent ``out`` larger
    than that (the binding returns its own slice, so the properties never see
    the returned view), and leaves the rest of ``out`` as it was."""
    p = num_reqs_padded
    staging = torch.full((p,), 987654, dtype=torch.int64)  # stale past R
    staging[: len(counts)] = torch.tensor(counts, dtype=torch.int64)
    out = torch.full((capacity,), -1, dtype=torch.int32)
    q = pad_query_start_loc_torch.pad_query_start_loc_graph(staging, torch.tensor(len(counts)), p, out)
    total = sum(counts)
    expected = [0, *np.cumsum(counts).tolist(), *[total] * (p - len(counts))]
    assert q.tolist() == expected
    assert out[p + 1 :].tolist() == [-1] * (capacity - p - 1)


# Contract A, exact integers: a split through a float division (``N / R`` for ``N // R``) is right for every
# N below 2**53 and wrong above it, where a double no longer holds every integer.
_CONTRACT_A = {
    "numpy": (split_dummy_tokens_numpy, "split_dummy_tokens"),
    "dummy_run": (split_dummy_tokens_numpy, "dummy_run"),
    "torch": (split_dummy_tokens_torch, "split_dummy_tokens"),
    "lora_capture_hook": (split_dummy_tokens_torch, "lora_capture_hook"),
}


@pytest.mark.parametrize("impl", sorted(_CONTRACT_A))
@pytest.mark.parametrize(
    ("num_reqs", "num_tokens"),
    [
        (1, 2**53 + 1),  # float(N / R) rounds to 2**53: one token lost
        (3, 3 * 2**53 + 5),  # N // R = 2**53 + 1 and N % R = 2; the float quotient rounds to 2**53 + 2
        (2, 2**62 + 3),  # near the top of int64
    ],
)
def test_contract_a_is_exact_for_large_num_tokens(impl: str, num_reqs: int, num_tokens: int) -> None:
    """Contract A for any ``1 <= R <= N`` whose counts fit the int64 result:
    ``n[i] = N // R + (1 if i >= R - N % R else 0)``, computed exactly."""
    module, name = _CONTRACT_A[impl]
    got = [int(v) for v in getattr(module, name)(num_reqs, num_tokens)]
    base, extra = divmod(num_tokens, num_reqs)
    assert got == [base + (1 if i >= num_reqs - extra else 0) for i in range(num_reqs)]
    assert sum(got) == num_tokens


def test_torch_split_dummy_tokens_device() -> None:
    """``split_dummy_tokens(R, N, device="cpu")``: an int64 tensor on ``device``,
    the CPU when none is given (a wrong default breaks every call without it)."""
    default = split_dummy_tokens_torch.split_dummy_tokens(3, 5)
    assert default.device == torch.device("cpu") and default.dtype == torch.int64
    assert default.tolist() == [1, 2, 2]
    # meta: a device that is not the CPU, on a CPU-only machine (no values, only placement)
    meta = split_dummy_tokens_torch.split_dummy_tokens(3, 5, device="meta")
    assert meta.device.type == "meta" and meta.dtype == torch.int64 and meta.shape == (3,)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_make_dummy_numpy_small_outputs_have_the_buffers_dtype(dtype: type) -> None:
    """``write_layout``: "small outputs use ``query_start_loc``'s dtype" (the
    counts, ``idx_mapping``, ``logits_indices``, ``cu_num_logits``), not numpy's default int64."""
    buffers = DummyBuffers.zeros(4, 8, dtype=dtype)
    batch = make_dummy_numpy.make_dummy(3, 5, buffers)
    for name in ("num_scheduled_tokens", "idx_mapping", "logits_indices", "cu_num_logits"):
        value = getattr(batch, name)
        assert value.dtype == np.dtype(dtype), (name, value.dtype)
    assert batch.idx_mapping.tolist() == [0, 1, 2] and batch.cu_num_logits.tolist() == [0, 1, 2, 3]


def _meta_buffers(max_num_reqs: int, max_num_tokens: int) -> DummyBuffers:
    def empty(n: int) -> torch.Tensor:
        return torch.empty(n, dtype=torch.int32, device="meta")

    return DummyBuffers(empty(max_num_reqs), empty(max_num_reqs + 1), empty(max_num_tokens), empty(max_num_tokens))


def test_make_dummy_torch_stays_on_the_buffers_device() -> None:
    """``make_dummy`` over torch buffers "all on one device": every output is
    on that device. On the meta device (no values) a tensor made on the CPU instead shows."""
    batch = make_dummy_torch.make_dummy(3, 5, _meta_buffers(4, 8))
    for name in ("num_scheduled_tokens", "seq_lens", "query_start_loc", "positions", "input_ids",
                 "idx_mapping", "logits_indices", "cu_num_logits"):
        value = getattr(batch, name)
        assert value.device.type == "meta", (name, value.device)


def test_graph_forms_run_on_meta_tensors() -> None:
    """The CUDA-graph forms read no device value on the host and make every
    tensor on their buffers' device: they run with every input on the meta
    device (where a value read raises, and so does mixing in a CPU tensor)."""
    nst = torch.empty(4, dtype=torch.int32, device="meta")
    make_dummy_torch.make_dummy_graph(torch.empty((), dtype=torch.int64, device="meta"),
                                      torch.empty((), dtype=torch.int64, device="meta"), _meta_buffers(4, 8), nst)
    out = torch.empty(6, dtype=torch.int64, device="meta")
    staging = torch.empty(4, dtype=torch.int64, device="meta")
    q = pad_query_start_loc_torch.pad_query_start_loc_graph(staging, torch.empty((), dtype=torch.int64, device="meta"), 4, out)
    assert q.shape == (5,) and q.device.type == "meta"


def torch_zeros(*args: Any, **kwargs: Any) -> Any:
    return torch.zeros(*args, **kwargs)


def torch_empty(*args: Any, **kwargs: Any) -> Any:
    return torch.empty(*args, **kwargs)


@dataclass(frozen=True)
class _Int32:
    """An int32 tensor made when the test runs: collecting imports no torch."""

    make: Callable[..., Any]
    shape: tuple[int, ...]
    device: str = "cpu"

    def __call__(self) -> Any:
        return self.make(self.shape, dtype=torch.int32, device=self.device)


@pytest.mark.parametrize(
    ("nst", "num_reqs_padded", "out", "error", "message"),
    [
        # a 2-D count array: the shape is named
        (_Int32(torch_zeros, (2, 2)), 2, None, ValueError, r"num_scheduled_tokens must be 1-D, got shape \(2, 2\)"),
        # P < 0 is refused as such, even with no request (not as "P < R")
        (_Int32(torch_zeros, (0,)), -1, None, ValueError, r"num_reqs_padded must be >= 0, got -1"),
        (_Int32(torch_zeros, (2,)), -1, None, ValueError, r"num_reqs_padded must be >= 0, got -1"),
        (_Int32(torch_zeros, (2,)), 2.0, None, TypeError, r"num_reqs_padded must be an int, got float 2\.0"),
        # out on another device than the counts: both devices named
        (_Int32(torch_zeros, (2,)), 2, _Int32(torch_empty, (3,), "meta"), ValueError,
         r"out is on meta but num_scheduled_tokens is on cpu"),
    ],
)
def test_torch_pad_query_start_loc_errors(nst: _Int32, num_reqs_padded: Any, out: _Int32 | None,
                                          error: type[Exception], message: str) -> None:
    """The torch form is called directly by engine code (not only through the
    host-checking binding): bad metadata gets an error naming the argument and value."""
    with pytest.raises(error, match=f"^{message}$"):
        pad_query_start_loc_torch.pad_query_start_loc(nst(), num_reqs_padded, None if out is None else out())


@pytest.mark.parametrize(("counts", "num_reqs_padded"), [([3], 1), ([3], 3), ([2, 0, 5], 3), ([2, 0, 5], 5), ([4, 1, 1, 2], 6)])
def test_torch_writes_through_a_strided_out(counts: list[int], num_reqs_padded: int) -> None:
    """``out`` may be any 1-D buffer, a strided view too (a column of a 2-D
    persistent tensor): ``out[:P+1]`` gets the offsets and nothing else of the
    storage changes. An ``out=`` slice of the wrong length is resized by torch
    (deprecated), which drops its strides: the sums land in the wrong slots."""
    p = num_reqs_padded
    storage = torch.full((p + 3, 2), -1, dtype=torch.int64)
    out = storage[:, 0]  # stride 2
    q = pad_query_start_loc_torch.pad_query_start_loc(torch.tensor(counts, dtype=torch.int32), p, out)
    assert q.tolist() == pad_oracle.pad_query_start_loc(np.array(counts, dtype=np.int32), p).tolist()
    assert storage[p + 1 :, 0].tolist() == [-1, -1] and storage[:, 1].tolist() == [-1] * (p + 3)


@pytest.mark.parametrize(("num_reqs", "num_tokens"), [(1, 3), (2, 5), (3, 5), (4, 8)])
def test_make_dummy_torch_writes_through_strided_buffers(num_reqs: int, num_tokens: int) -> None:
    """Contract B over buffers that are strided views (columns of 2-D
    persistent tensors): the layout lands in the buffers' own slots."""
    max_num_reqs, max_num_tokens = 5, 8
    reqs = torch.full((max_num_reqs + 1, 2), -3, dtype=torch.int32)
    toks = torch.full((max_num_tokens, 2), -3, dtype=torch.int32)
    buffers = DummyBuffers(reqs[:max_num_reqs, 0], reqs[:, 1], toks[:, 0], toks[:, 1])
    batch = make_dummy_torch.make_dummy(num_reqs, num_tokens, buffers)
    expected = make_dummy_oracle.make_dummy(num_reqs, num_tokens, DummyBuffers.zeros(max_num_reqs, max_num_tokens))
    assert batch.query_start_loc.tolist() == expected.query_start_loc.tolist()
    assert batch.seq_lens.tolist() == expected.seq_lens.tolist()
    assert batch.logits_indices.tolist() == list(expected.logits_indices)
    assert buffers.positions[:num_tokens].tolist() == [0] * num_tokens
    assert reqs[max_num_reqs, 0].item() == -3  # not a buffer entry


def test_to_device_converts_member_by_member() -> None:
    """``_adapter.to_device``: numpy int32/int64 arrays become tensors on the
    device with the same dtype and contents, inside lists, tuples and
    dataclasses too (whose types are kept); anything else comes back as it is.
    On the meta device a member left on the CPU shows."""
    a32, a64, floats = np.array([3, 1, 2], dtype=np.int32), np.array([7], dtype=np.int64), np.array([0.5])
    value = [a32, (a64, 5, None), floats]
    on = _adapter.to_device(value, "cpu")
    assert type(on) is list and type(on[1]) is tuple and len(on) == 3 and len(on[1]) == 3
    assert on[0].dtype == torch.int32 and on[0].tolist() == [3, 1, 2]
    assert on[1][0].dtype == torch.int64 and on[1][0].tolist() == [7]
    assert on[1][1] == 5 and on[1][2] is None and on[2] is floats
    assert _adapter.to_device(a32, "meta").device.type == "meta"
    meta = _adapter.to_device(value, "meta")
    assert meta[0].device.type == "meta" and meta[1][0].device.type == "meta"
    buffers = DummyBuffers.zeros(2, 3, dtype=np.int64)
    buffers.query_start_loc[:] = [4, 5, 6]
    dev = _adapter.to_device(buffers, "cpu")
    assert isinstance(dev, DummyBuffers) and dev.query_start_loc.tolist() == [4, 5, 6]
    assert dev.query_start_loc.dtype == torch.int64 and dev.positions.shape == (3,)
    assert all(getattr(_adapter.to_device(buffers, "meta"), name).device.type == "meta"
               for name in ("seq_lens", "query_start_loc", "positions", "input_ids"))


def test_copy_back_writes_the_callers_arrays_member_by_member() -> None:
    """``_adapter.copy_back`` writes what the device values hold into the
    caller's numpy arrays, in place, through lists, tuples and dataclasses."""
    a32, a64 = np.array([3, 1, 2], dtype=np.int32), np.array([7], dtype=np.int64)
    host = [a32, (a64, 5)]
    _adapter.copy_back([torch.tensor([9, 8, 7], dtype=torch.int32), (torch.tensor([0]), 5)], host)
    assert host[0] is a32 and a32.tolist() == [9, 8, 7] and a64.tolist() == [0]
    # members that to_device leaves on the host as they are (other arrays, ints, None): nothing to copy
    floats = np.array([0.5])
    _adapter.copy_back([floats, 5, None], [floats, 5, None])
    assert floats.tolist() == [0.5]
    buffers = DummyBuffers.zeros(2, 3)
    dev = _adapter.to_device(buffers, "cpu")
    dev.seq_lens.fill_(4)
    dev.input_ids.copy_(torch.tensor([1, 2, 3]))
    _adapter.copy_back(dev, buffers)
    assert buffers.seq_lens.tolist() == [4, 4] and buffers.input_ids.tolist() == [1, 2, 3]
    assert buffers.seq_lens.dtype == np.int32


def test_numpy_call_copies_back_what_it_writes_and_returns_numpy() -> None:
    """``_adapter.numpy_call``: the arguments at ``writes`` come back into the
    caller's arrays, the others are left alone, and the result (a dataclass
    member by member) is on the host as numpy."""

    def fn(a: torch.Tensor, b: torch.Tensor, k: int) -> DummyBatch:
        a.add_(k)
        b.add_(k)
        return DummyBatch(*([a + 1] * 8))

    a, b = np.array([1, 2], dtype=np.int32), np.array([5], dtype=np.int64)
    batch = _adapter.numpy_call(fn, "cpu", (a, b, 10), writes=(0,))
    assert a.tolist() == [11, 12] and b.tolist() == [5]
    assert isinstance(batch, DummyBatch)
    assert all(isinstance(getattr(batch, f), np.ndarray) for f in DUMMY_BATCH_FIELDS) and batch.max_query_len is None
    assert batch.seq_lens.tolist() == [12, 13]
    assert _adapter.numpy_call(lambda x: x * 2, "cpu", (b,)).tolist() == [10]
    assert isinstance(_adapter.numpy_call(lambda x: x * 2, "cpu", (b,)), np.ndarray)
    # fn sees its arguments on the device (meta: not the CPU; fn returns a host value, the device's name)
    assert _adapter.numpy_call(lambda x: x.device.type, "meta", (b,)) == "meta"


def test_captured_step_refuses_what_it_cannot_capture() -> None:
    """``CapturedStep`` captures CUDA tensors only: anything else is refused up
    front with the input's index, type and device (the replay itself needs a
    GPU: tests/test_exact_microbatch.py, ``-m gpu``)."""
    with pytest.raises(TypeError, match=r"^fn must be callable, got 3$"):
        _cuda_graph.CapturedStep(3)
    step = _cuda_graph.CapturedStep(lambda *args: None)
    c, q = torch.zeros(2, dtype=torch.int32), torch.ones(2, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^input 0 must be a CUDA tensor, got Tensor cpu$"):
        step(2, c, q, [torch.zeros((2, 3), dtype=torch.int32)], 2)
    with pytest.raises(ValueError, match=r"^input 0 must be a CUDA tensor, got list $"):
        step(2, [0, 0], q, [torch.zeros((2, 3), dtype=torch.int32)], 2)
